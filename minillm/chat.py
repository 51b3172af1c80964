"""Chat prompts: the ChatML format, rendered without a template engine.

A chat model's tokenizer carries a chat template, a Jinja program that turns a list of
messages ({"role": ..., "content": ...}) into the prompt text. minillm runs no Jinja. It
recognizes the ChatML templates, which write every message as::

    <|im_start|>{role}
    {content}<|im_end|>

(each line ending in a newline) and, when a reply is wanted, end with
``<|im_start|>assistant`` and a newline. Two templates are recognized, character for
character: plain ChatML, and ChatML that begins with a default system message when the
conversation does not start with one (SmolLM2's, whose default is "You are a helpful AI
assistant named SmolLM, trained by Hugging Face"). Any other template is refused, so a prompt
is never rendered approximately.

ChatML writes no BOS token: the prompt is encoded as it stands (as transformers'
``apply_chat_template`` does, with ``add_special_tokens=False``).
"""
from dataclasses import dataclass
import re

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

# Markers of other template families, to say what was found when refusing one.
OTHER_FAMILIES = (
    ("<|start_header_id|>", "a Llama 3 template"),
    ("[INST]", "a Llama 2 / Mistral template"),
    ("<start_of_turn>", "a Gemma template"),
    ("<|im_start|>", "a ChatML template with logic minillm does not render (tools, "
                     "thinking, other defaults)"),
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
    raise ValueError(f"chat template not supported: found {found}, beginning "
                     f"{template[:80]!r}; minillm renders plain ChatML and ChatML with a "
                     "default system message (SmolLM2's)")


def render_chat(messages, template, add_generation_prompt=True, bos_token=None,
                eos_token=None):
    """The prompt text ``template`` makes of ``messages``, for ChatML templates only.

    Equal to transformers' ``apply_chat_template(messages, tokenize=False,
    add_generation_prompt=...)`` with the same template. ``bos_token`` and ``eos_token`` are
    what Jinja would be given; the ChatML templates use neither.
    """
    chatml = chat_format(template)
    for message in messages:
        if not (isinstance(message, dict) and isinstance(message.get("role"), str)
                and isinstance(message.get("content"), str)):
            raise ValueError(f"a message must be a dict with a string 'role' and 'content', "
                             f"got {message!r}")
    parts = []
    if messages and chatml.default_system is not None and messages[0]["role"] != "system":
        parts.append(f"<|im_start|>system\n{chatml.default_system}<|im_end|>\n")
    for message in messages:
        parts.append(f"<|im_start|>{message['role']}\n{message['content']}<|im_end|>\n")
    if add_generation_prompt:
        parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def chat_prompt_ids(tokenizer, messages, add_generation_prompt=True):
    """The token ids of the chat prompt, rendered with the tokenizer's own template.

    No BOS is added: the template writes every token the prompt needs.
    """
    text = render_chat(messages, tokenizer.chat_template, add_generation_prompt)
    return tokenizer.encode(text)
