"""The messages of a chat request, checked against OpenAI's roles and fields.

    system     content                       (developer: the same, rendered as system)
    user       content
    assistant  content, or null content with tool_calls
    tool       content and tool_call_id

Content is a string or a list of text parts ({"type": "text", "text": ...}), joined; every
message may carry a `name`. Any other role or field is a 400 naming the message, its role or
its field; a role the chat template shows no sign of rendering (tool messages and tool calls to
a template that never mentions tools) is a 400 too, rather than a prompt that silently drops it.
"""
from __future__ import annotations

from .errors import bad_shape, bad_value

FIELDS = {"system": {"content"}, "developer": {"content"}, "user": {"content"},
          "assistant": {"content", "tool_calls", "refusal"},
          "tool": {"content", "tool_call_id"}}
RENDERED_AS = {"developer": "system"}


def chat_messages(messages, template: str | None) -> list[dict]:
    """The messages as the template takes them: {"role", "content"} and, where given,
    "tool_calls" and "tool_call_id"."""
    if not messages:
        raise bad_value("messages", "empty; give at least one message")
    return [message(m, i, template or "") for i, m in enumerate(messages)]


def message(m, i: int, template: str) -> dict:
    where = f"messages[{i}]"
    if not isinstance(m, dict) or not isinstance(m.get("role"), str):
        raise bad_shape("messages", f"{where}: must be an object with a string role")
    role = m["role"]
    if role not in FIELDS:
        raise bad_value("messages", f"{where}.role: {role!r} is not a role; the roles are "
                                    f"{', '.join(FIELDS)}")
    unknown = sorted(set(m) - FIELDS[role] - {"role", "name"})
    if unknown:
        raise bad_value("messages", f"{where}.{unknown[0]}: not a field of a {role} message")
    if "name" in m and not isinstance(m["name"], str):
        raise bad_shape("messages", f"{where}.name: must be a string")
    out = {"role": RENDERED_AS.get(role, role), "content": content(m.get("content"), where)}
    if m.get("tool_calls") is not None:
        out["tool_calls"] = tool_calls(m["tool_calls"], where)
    elif role == "assistant" and m.get("content") is None:
        raise bad_value("messages", f"{where}.content: null needs tool_calls")
    if role == "tool":
        if not isinstance(m.get("tool_call_id"), str):
            raise bad_value("messages", f"{where}.tool_call_id: a tool message needs the id "
                                        "(a string) of the call it answers")
        out["tool_call_id"] = m["tool_call_id"]
    if (role == "tool" or "tool_calls" in out) and "tool" not in template:
        raise bad_value("messages", f"{where}: this model's chat template does not render "
                                    f"{'tool messages' if role == 'tool' else 'tool calls'}")
    return out


def content(value, where: str) -> str:
    """A string, text parts joined, or "" for null (an assistant's tool calls)."""
    if value is None:
        return ""
    if isinstance(value, list):
        if not all(isinstance(p, dict) and p.get("type") == "text"
                   and isinstance(p.get("text"), str) for p in value):
            raise bad_value("messages", f"{where}.content: only text parts ({{\"type\": "
                                        "\"text\", \"text\": ...}) are supported")
        return "".join(p["text"] for p in value)
    if not isinstance(value, str):
        raise bad_shape("messages", f"{where}.content: must be a string or text parts")
    return value


def tool_calls(calls, where: str) -> list[dict]:
    """[{"id", "type": "function", "function": {"name", "arguments"}}] as OpenAI sends them."""
    ok = isinstance(calls, list) and all(
        isinstance(c, dict) and isinstance(c.get("id"), str) and c.get("type") == "function"
        and isinstance(c.get("function"), dict)
        and isinstance(c["function"].get("name"), str)
        and isinstance(c["function"].get("arguments"), str) for c in calls)
    if not ok:
        raise bad_value("messages", f"{where}.tool_calls: each must be {{\"id\": str, \"type\": "
                                    "\"function\", \"function\": {\"name\": str, \"arguments\": "
                                    "str}}")
    return [{"id": c["id"], "type": "function", "function": {
        "name": c["function"]["name"], "arguments": c["function"]["arguments"]}} for c in calls]
