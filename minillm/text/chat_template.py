"""Chat prompts: a model's chat template run as transformers runs it, or ChatML without Jinja.

A chat model's tokenizer carries a chat template, a Jinja program that turns a list of
messages ({"role": ..., "content": ...}) into the prompt text. With the optional ``jinja2``
package (the ``chat`` extra) any template renders exactly as transformers'
``apply_chat_template(..., tokenize=False)`` renders it (``render_jinja``): a sandboxed,
immutable environment with ``trim_blocks`` and ``lstrip_blocks``, the ``loopcontrols``
extension and the ``{% generation %}`` tag, the globals ``raise_exception`` and
``strftime_now``, a ``tojson`` filter that does not escape HTML and takes ``indent``,
``separators``, ``sort_keys`` and ``ensure_ascii``, and as variables the messages,
``add_generation_prompt``, ``tools``, ``documents`` and the tokenizer's ``bos_token``,
``eos_token``, ``unk_token`` and ``pad_token``. Python functions among the tools become JSON
schemas as transformers' ``get_json_schema`` writes them (tool_schema.py). A template is a
program from a model's files: it renders within bounds on time, loop steps, size and call
depth (template_limits.py), and whatever stops it, a bound, a ``raise_exception``, a Jinja
error or a Python one (a ``TypeError``), is one line: a ValueError naming the template.

Without ``jinja2``, minillm recognizes the ChatML templates, which write every message as::

    <|im_start|>{role}
    {content}<|im_end|>

(each line ending in a newline) and, when a reply is wanted, end with
``<|im_start|>assistant`` and a newline. Two are recognized, character for character: plain
ChatML, and ChatML that begins with a default system message when the conversation does not
start with one (SmolLM2's). Any other template is refused with the install hint, so a prompt
is never rendered approximately.

The prompt is encoded as it stands (``add_special_tokens=False``, as transformers does); if the
tokenizer asks for BOS and the template did not write it, BOS goes first (as llama.cpp does:
one BOS either way).
"""
from dataclasses import dataclass
from datetime import datetime
import functools
import json
import re
import traceback

from ..plumbing.optional import install_hint
from .template_limits import LimitExceeded, Limits
from .template_sandbox import bounded_sandbox, counted_loops, render
from .tool_schema import tool_schemas

# The plain ChatML template, as models ship it (the newlines are real newline characters
# inside the Jinja string literals).
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
# What SmolLM2's template adds right after the loop's start; PROMPT stands for the text.
DEFAULT_SYSTEM_BLOCK = ("{% if loop.first and messages[0]['role'] != 'system' %}"
                        "{{ '<|im_start|>system\nPROMPT<|im_end|>\n' }}{% endif %}")


def jinja2_hint() -> str:
    return f"install jinja2 ({install_hint('chat')}) to render any chat template"


# Markers of other template families, to say what was found when refusing one.
OTHER_FAMILIES = (
    ("<|start_header_id|>", "a Llama 3 template"),
    ("[INST]", "a Llama 2 / Mistral template"),
    ("<start_of_turn>", "a Gemma template"),
    ("<|im_start|>", "a ChatML template with logic (tools, thinking, other defaults)"),
)


@dataclass(frozen=True)
class ChatML:
    """A recognized ChatML template: ``default_system`` is the system message it writes when
    the conversation starts without one (None: it writes none)."""
    default_system: str | None = None


def _chatml_pattern():
    """A regex matching exactly the recognized templates; group 1 is the default system text."""
    loop_start = "{% for message in messages %}"
    before, after = DEFAULT_SYSTEM_BLOCK.split("PROMPT")
    rest = CHATML_TEMPLATE[len(loop_start):]
    # The system text is a Jinja string literal: no quote, no backslash escapes.
    return re.compile(re.escape(loop_start) + "(?:" + re.escape(before) + r"([^'\\]*)"
                      + re.escape(after) + ")?" + re.escape(rest))


def chat_format(template):
    """The ``ChatML`` a chat template is, or a ValueError naming what the template is."""
    if template is None:
        raise ValueError("the tokenizer has no chat template")
    match = _chatml_pattern().fullmatch(template)
    if match is not None:
        return ChatML(default_system=match.group(1))
    found = next((name for marker, name in OTHER_FAMILIES if marker in template),
                 "an unknown template")
    raise ValueError(f"chat template not supported without jinja2: found {found}, beginning "
                     f"{template[:80]!r}; minillm renders plain ChatML and ChatML with a "
                     f"default system message itself; {jinja2_hint()}")


def _check_messages(messages):
    for message in messages:
        if not (isinstance(message, dict) and isinstance(message.get("role"), str)):
            raise ValueError(f"a message must be a dict with a string 'role', got {message!r}")


def render_chatml(messages, chatml, add_generation_prompt=True):
    """The prompt text a recognized ChatML template makes of ``messages``."""
    for message in messages:
        if not isinstance(message.get("content"), str):
            raise ValueError(f"a message must have a string 'content' (ChatML without jinja2), "
                             f"got {message!r}")
    parts = []
    if messages and chatml.default_system is not None and messages[0]["role"] != "system":
        parts.append(f"<|im_start|>system\n{chatml.default_system}<|im_end|>\n")
    for message in messages:
        parts.append(f"<|im_start|>{message['role']}\n{message['content']}<|im_end|>\n")
    if add_generation_prompt:
        parts.append("<|im_start|>assistant\n")
    return "".join(parts)


# ---------------------------------------------------------------------- Jinja, as transformers

def _jinja():
    """The jinja2 module, or None when it is not installed."""
    try:
        import jinja2
    except ImportError:
        return None
    return jinja2


@functools.lru_cache(maxsize=16)
def compile_template(template):
    """A chat template compiled in transformers' environment (see the module docstring)."""
    import jinja2
    from jinja2.ext import Extension, loopcontrols

    class Generation(Extension):
        """``{% generation %}...{% endgeneration %}`` renders its body (transformers uses it to
        find the assistant's tokens; the text is the same)."""
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(
                lineno)

        def _body(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        # Jinja's own filter escapes HTML characters; transformers' does not.
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    # Jinja's immutable sandbox, counting time, loop steps, sizes and depth (template_sandbox.py)
    env = bounded_sandbox()(trim_blocks=True, lstrip_blocks=True,
                            extensions=[Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.bound_filters()
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(counted_loops(env.parse(template), jinja2, env))


def _as_transformers_passes(message):
    """A message as transformers hands it to the template: keys whose value is None dropped,
    the reasoning also under ``reasoning_content`` and ``thinking``."""
    message = {key: value for key, value in message.items() if value is not None}
    reasoning = next((message[key] for key in ("reasoning_content", "thinking", "reasoning")
                      if message.get(key) is not None), None)
    if reasoning is not None:
        message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
    return message


def render_jinja(messages, template, add_generation_prompt=True, tools=None, documents=None,
                 limits=None, template_name=None, **variables):
    """The prompt text of ``messages`` by the Jinja ``template``, as transformers renders it,
    within ``limits`` (a template_limits.Limits; its defaults when None). Whatever stops the
    render (a ``raise_exception`` in the template, a syntax error, a limit passed, a Python
    error such as a TypeError inside it) is a one-line ValueError naming the template
    (``template_name``, e.g. its file, when given)."""
    jinja2 = _jinja()
    tools = tool_schemas(tools)
    try:
        compiled = compile_template(template)
        return render(compiled, limits or Limits(),
                      dict(messages=[_as_transformers_passes(m) for m in messages],
                           tools=tools, documents=documents,
                           add_generation_prompt=add_generation_prompt, **variables))
    except Exception as error:  # noqa: BLE001 (every failure of the template is told alike)
        raise ValueError(template_error(error, template_name, jinja2)) from None


def template_error(error, template_name, jinja2):
    """``chat template[ of NAME]: [line N: ]cause``, one line: a ``raise_exception`` as its
    message says it (as transformers shows it), anything else with its kind and the
    template's line it came from."""
    where = "chat template" + (f" of {template_name}" if template_name else "")
    if type(error) is jinja2.exceptions.TemplateError:  # raise_exception(message)
        cause = str(error)
    else:
        lines = [frame.lineno for frame in traceback.extract_tb(error.__traceback__)
                 if frame.filename == "<template>"]
        line = getattr(error, "lineno", None) or (lines[-1] if lines else None)
        kind = "stopped" if isinstance(error, LimitExceeded) else type(error).__name__
        cause = (f"line {line}: " if line else "") + f"{kind}: {error}"
    cause = " ".join(cause.split("\n"))
    return f"{where}: {cause if len(cause) <= 500 else cause[:500] + '...'}"


def render_chat(messages, template, add_generation_prompt=True, bos_token=None,
                eos_token=None, tools=None, documents=None, limits=None, template_name=None,
                **variables):
    """The prompt text ``template`` makes of ``messages``.

    Equal to transformers' ``apply_chat_template(messages, tokenize=False,
    add_generation_prompt=..., tools=..., documents=...)`` with the same template and special
    tokens; ``tools`` may hold Python functions, described as transformers'
    ``get_json_schema`` describes them (tool_schema.py). A Jinja render stays within
    ``limits`` (template_limits.py) and fails as one line naming ``template_name``. Without
    jinja2, only the ChatML templates render (tools and documents are then refused).
    """
    if template is None:
        raise ValueError("the tokenizer has no chat template")
    _check_messages(messages)
    if _jinja() is not None:
        tokens = {name: value for name, value in (("bos_token", bos_token),
                                                  ("eos_token", eos_token)) if value is not None}
        return render_jinja(messages, template, add_generation_prompt, tools, documents,
                            limits, template_name, **tokens, **variables)
    chatml = chat_format(template)
    if tools is not None or documents is not None or variables:
        raise ValueError(f"tools, documents and template variables need jinja2; {jinja2_hint()}")
    return render_chatml(messages, chatml, add_generation_prompt)


def special_token_texts(tokenizer):
    """{"bos_token": text, ...}: the tokenizer's special tokens, as transformers passes them to
    a chat template (only those it has)."""
    config = tokenizer.config
    return {name: getattr(config, name) for name in ("bos_token", "eos_token", "unk_token",
                                                     "pad_token")
            if getattr(config, name) is not None}


def chat_prompt_ids(tokenizer, messages, add_generation_prompt=True, tools=None, documents=None,
                    limits=None, template_name=None, **variables):
    """The token ids of the chat prompt, rendered with the tokenizer's own template (within
    ``limits``; ``template_name`` names it in an error: render_chat).

    The rendered text is encoded as it stands; BOS goes first when the tokenizer asks for it
    and the template has not written it.
    """
    tokens = special_token_texts(tokenizer)
    text = render_chat(messages, tokenizer.chat_template, add_generation_prompt,
                       tokens.pop("bos_token", None), tokens.pop("eos_token", None), tools,
                       documents, limits, template_name,
                       **(tokens if _jinja() is not None else {}), **variables)
    ids = tokenizer.encode(text)
    bos = tokenizer.bos_token_id
    if tokenizer.add_bos_token and bos is not None and ids[:1] != [bos]:
        ids.insert(0, bos)
    return ids
