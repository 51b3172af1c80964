"""Tool calls: the request's tools and tool_choice read, a call's constraint, a reply read back
as OpenAI's tool_calls.

    tool_choice "none"       the tools are ignored (not shown to the model, no call read)
                "auto"       (the default with tools) the reply is free; it is a call when it
                             reads as one in the template's syntax, as vLLM's tool parsers read
    "required", {"type": "function", "function": {"name": ...}}
                             the reply is constrained to one call, of any tool or of that one

A call is the JSON object {"name": ..., "arguments": {...}}, its schema anyOf over the tools,
each with its name as a const and its parameters' schema as the arguments'. It is written in
the template's syntax: a template that writes <tool_call> (Qwen's, SmolLM3's, Hermes') wraps
it as

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

and any other template leaves it bare. One call per reply (as parallel_tool_calls false): a
reply holding more gives its first. The tools reach the chat template (its `tools`) when the
template mentions them; a template that does not still gets constrained calls.
"""
from __future__ import annotations

import json
import re
import uuid
from typing import NamedTuple

from .errors import bad_value

OPEN, CLOSE = "<tool_call>", "</tool_call>"
WRAPPED = re.compile(re.escape(OPEN) + r"\s*(.*?)\s*(?:" + re.escape(CLOSE) + r"|\Z)",
                     re.DOTALL)


class Tools(NamedTuple):
    """A request's tools: their schemas as given, the choice ("auto", "required" or a tool's
    name) and whether the template wraps a call in <tool_call> tags."""

    schemas: list
    choice: str
    wrapped: bool

    @property
    def constrained(self) -> bool:
        return self.choice != "auto"


def tools_of(body: dict, template: str | None) -> Tools | None:
    """The Tools of a chat body (None: no tools, or tool_choice "none")."""
    tools, choice = body.get("tools"), body.get("tool_choice")
    if not tools:
        if choice not in (None, "none"):
            raise bad_value("tool_choice", "needs tools")
        return None
    names = [checked_tool(tool, i) for i, tool in enumerate(tools)]
    if len(set(names)) < len(names):
        raise bad_value("tools", "two tools have the same name")
    if choice == "none":
        return None
    if choice in (None, "auto", "required"):
        return Tools(tools, choice or "auto", OPEN in (template or ""))
    function = choice.get("function") if isinstance(choice, dict) \
        and choice.get("type") == "function" else None
    named = function.get("name") if isinstance(function, dict) else None
    if not isinstance(named, str):
        raise bad_value("tool_choice", "must be \"none\", \"auto\", \"required\" or "
                                       "{\"type\": \"function\", \"function\": {\"name\": ...}}")
    if named not in names:
        raise bad_value("tool_choice", f"no tool named {named!r} among the tools")
    return Tools(tools, named, OPEN in (template or ""))


def checked_tool(tool, i: int) -> str:
    """A tool's name, the tool checked: {"type": "function", "function": {"name", ...}}."""
    function = tool.get("function") if isinstance(tool, dict) else None
    if not (isinstance(tool, dict) and tool.get("type") == "function"
            and isinstance(function, dict) and isinstance(function.get("name"), str)
            and isinstance(function.get("parameters", {}), dict)):
        raise bad_value("tools", f"tools[{i}]: must be {{\"type\": \"function\", \"function\": "
                                 "{\"name\": str, \"parameters\": {...}}}")
    return function["name"]


def call_schema(tools: Tools) -> dict:
    """The JSON Schema of one call: anyOf over the tools (or the one named)."""
    calls = [{"type": "object", "properties": {
        "name": {"const": t["function"]["name"]},
        "arguments": t["function"].get("parameters") or {"type": "object"}},
        "required": ["name", "arguments"]}
        for t in tools.schemas if tools.choice in ("required", t["function"]["name"])]
    return calls[0] if len(calls) == 1 else {"anyOf": calls}


def call_pattern(tools: Tools, schema_pattern: str) -> str:
    """The regular expression of a call: the schema's, wrapped in the template's tags."""
    if not tools.wrapped:
        return schema_pattern
    return literal(OPEN + "\n") + schema_pattern + literal("\n" + CLOSE)


def literal(text: str) -> str:
    """`text` as a pattern (pattern.py reads a newline as itself, not escaped)."""
    return re.escape(text).replace("\\\n", "\n")


def read_call(text: str, tools: Tools):
    """(content, call) of a reply: call a tool_calls entry when the reply holds one in the
    template's syntax, naming one of the tools with arguments an object (content the text
    before it, None when there is none); else (text, None)."""
    if tools.wrapped:
        found = WRAPPED.search(text)
        if found is None:
            return text, None
        before, inner = text[:found.start()].strip(), found.group(1)
    else:
        before, inner = "", text.strip()
    try:
        call = json.loads(inner)
    except ValueError:
        return text, None
    names = {t["function"]["name"] for t in tools.schemas}
    if not (isinstance(call, dict) and call.get("name") in names
            and isinstance(call.get("arguments"), dict)):
        return text, None
    return before or None, {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                            "function": {"name": call["name"],
                                         "arguments": json.dumps(call["arguments"],
                                                                 ensure_ascii=False)}}
