"""The bodies of /v1/completions and /v1/chat/completions, checked before any work.

A body is a JSON object of OpenAI's fields and three of minillm's own knobs (top_k, min_p,
repetition_penalty; and penalty_window). null stands for a field left out. A field the endpoint
does not know, a missing one or a value of the wrong type is a 422; a value out of range, a
prompt the context cannot hold or a feature not supported is a 400 (errors.py). The knobs'
ranges are the library's own (minillm.knobs, the same message as everywhere); the bounds below
are the server's, and bound the work one request can ask for.

A request becomes a Plan: the prompts as token ids, and for each of its n choices per prompt the
knobs of `Engine.add_request`; and, when the body asks for structured output (response_format,
structured_outputs, guided_*: structured.py) or a tool call (tools.py), the reply's constraint
as a Spec, which the handler builds (handlers.constrain) and every choice follows.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..knobs import generation_config
from .bodies import MAX_BODY_BYTES  # noqa: F401 (the server's bounds, all named here)
from .errors import APIError, bad_shape, bad_value
from .messages import chat_messages
from .structured import Spec, spec, spec_of
from .tools import Tools, call_pattern, call_schema, tools_of

MAX_TOKENS = 4096  # max_tokens per choice (and the prompt and they must fit the context)
MAX_CHOICES = 16  # n, times the prompts of one completions request
MAX_TOP_LOGPROBS = 20  # OpenAI's bound of top_logprobs
MAX_STOP = 4  # stop strings, as OpenAI
MAX_STOP_CHARS = 256  # the longest stop string
MAX_BIAS = 100  # a logit_bias value's bound, as OpenAI's
MAX_BIASED = 300  # tokens one logit_bias may name
COMPLETION_TOKENS = 16  # OpenAI's default max_tokens for /v1/completions

KINDS = {"integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
         "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
         "boolean": lambda v: isinstance(v, bool), "string": lambda v: isinstance(v, str),
         "object": lambda v: isinstance(v, dict), "array": lambda v: isinstance(v, list),
         "stop": lambda v: isinstance(v, (str, list)), "any": lambda v: True}
KNOBS = {"temperature": "number", "top_p": "number", "frequency_penalty": "number",
         "presence_penalty": "number", "top_k": "integer", "min_p": "number",
         "repetition_penalty": "number", "penalty_window": "integer"}
COMMON = {"model": "string", "max_tokens": "integer", "seed": "integer", "stop": "stop",
          "n": "integer", "stream": "boolean", "stream_options": "object", "user": "string",
          "logit_bias": "object", "ignore_eos": "boolean", "min_tokens": "integer",
          "response_format": "object", "structured_outputs": "any", "guided_json": "any",
          "guided_regex": "string", "guided_choice": "array", **KNOBS}
COMPLETION = {**COMMON, "prompt": "any", "echo": "boolean", "logprobs": "integer",
              "suffix": "string", "best_of": "integer"}
CHAT = {**COMMON, "messages": "array", "logprobs": "boolean", "top_logprobs": "integer",
        "max_completion_tokens": "integer", "tools": "array", "tool_choice": "any",
        "parallel_tool_calls": "boolean", "store": "boolean",
        "metadata": "object", "service_tier": "string"}
# The server's bounds of the knobs, within the library's ranges (minillm.knobs): OpenAI's for
# its own fields; top_k at most the vocabulary and penalty_window the context (None: that bound).
SERVER_BOUNDS = {"temperature": (0, 2), "top_p": (0, 1), "min_p": (0, 1),
                 "frequency_penalty": (-2, 2), "presence_penalty": (-2, 2),
                 "repetition_penalty": (0, 2), "top_k": (0, None), "penalty_window": (1, None)}
# OpenAI's fields minillm does not do: taken only at the value that asks for nothing.
UNSUPPORTED = {"suffix": lambda v: not v}
LIBRARY_NAMES = {"max_new_tokens": "max_tokens", "stop_strings": "stop"}
STREAM_OPTIONS = ("include_usage", "continuous_usage_stats")  # booleans


@dataclass
class Plan:
    """A checked request: per prompt its ids and max_tokens; per choice the engine's knobs."""

    prompts: list[list[int]]
    max_tokens: list[int]
    n: int
    knobs: dict  # the sampling knobs and stop_strings, stop_tokens, as generate takes them
    seed: int | None  # choice i of a prompt draws with seed + i; None: fresh entropy
    logprobs: int | None  # None: no log-probabilities; else how many top entries per token
    echo: bool = False
    stream: bool = False
    include_usage: bool = False
    continuous_usage: bool = False  # usage in every chunk of a stream
    logit_bias: dict = None  # {token id: added to its logit}
    min_tokens: int = 0  # the end tokens cannot come before this many new tokens
    structure: Spec | None = None  # the reply's constraint, asked for (structured.py)
    tools: Tools | None = None  # the tools a reply may call (tools.py)

    @property
    def scoring_only(self) -> bool:
        """echo with max_tokens 0: the prompt and its scores, nothing generated."""
        return max(self.max_tokens) == 0

    def choices(self):
        """(prompt index, knobs of add_request) for every choice, in the order of `index`."""
        for p, (prompt, max_tokens) in enumerate(zip(self.prompts, self.max_tokens)):
            for i in range(self.n):
                seed = None if self.seed is None else self.seed + i
                yield p, dict(self.knobs, max_new_tokens=max_tokens, seed=seed)


def completion_plan(body, model, names, longest: int) -> Plan:
    """The Plan of a /v1/completions body (`longest`: the most bytes a token stands for)."""
    body = fields(body, COMPLETION, ("model", "prompt"), names)
    prompts = completion_prompts(body["prompt"], model, longest)
    top = body.get("logprobs")
    if top is not None and not 0 <= top <= MAX_TOP_LOGPROBS:
        raise bad_value("logprobs", f"must be an integer in [0, {MAX_TOP_LOGPROBS}], got {top}")
    n = choices(body, len(prompts))
    if body.get("best_of") not in (None, n):
        raise bad_value("best_of", f"not supported (only best_of = n), got {body['best_of']}")
    checked = plan(body, model, prompts, "prompt", COMPLETION_TOKENS, top, n,
                   model.tokenizer.eos_token_ids, echo=bool(body.get("echo")))
    checked.structure = spec_of(body)
    return checked


def chat_plan(body, model, names, tokenizer, longest: int) -> Plan:
    """The Plan of a /v1/chat/completions body, the messages rendered with the chat template."""
    from ..text.chat_template import chat_prompt_ids

    body = fields(body, CHAT, ("model", "messages"), names)
    messages = chat_messages(body["messages"], tokenizer.chat_template)
    within_context(sum(len(m["content"].encode("utf-8")) for m in messages), longest, model,
                   "messages")
    if tokenizer.chat_template is None:
        raise bad_value("messages", "this model has no chat template; give the server one "
                                    "(minillm serve --template FILE), or use /v1/completions")
    tools, structure = tools_of(body, tokenizer.chat_template), spec_of(body)
    if tools is not None and tools.constrained:
        if structure is not None:
            raise bad_value(structure.param, f"not with tool_choice {body['tool_choice']!r}: "
                                             "the reply is a tool call")
        called = spec("json", call_schema(tools), "tools")
        structure = called._replace(pattern=call_pattern(tools, called.pattern))
    shown = tools.schemas if tools and "tools" in tokenizer.chat_template else None
    try:
        prompt = chat_prompt_ids(tokenizer, messages, tools=shown)
    except Exception as e:  # ValueError, or the template's own TemplateError
        raise bad_value("messages", f"the chat template cannot render them: {e}") from None
    if "max_tokens" not in body and "max_completion_tokens" in body:
        body["max_tokens"] = body["max_completion_tokens"]
    top = None
    if body.get("logprobs"):
        top = body.get("top_logprobs") or 0
        if not 0 <= top <= MAX_TOP_LOGPROBS:
            raise bad_value("top_logprobs", f"must be an integer in [0, {MAX_TOP_LOGPROBS}], "
                                            f"got {top}")
    elif body.get("top_logprobs") is not None:
        raise bad_value("top_logprobs", "needs logprobs: true")
    checked = plan(body, model, [prompt], "messages", MAX_TOKENS, top, choices(body, 1),
                   tokenizer.eos_token_ids)  # with the template's end-of-turn tokens
    checked.structure, checked.tools = structure, tools
    return checked


def fields(body, table: dict, required: tuple, names) -> dict:
    """The body's fields that are not null, each known to `table` and of its kind; the
    required ones present; the model one of `names`; OpenAI's unsupported fields at no-op."""
    if not isinstance(body, dict):
        raise bad_shape(None, f"the body must be a JSON object, got {type(body).__name__}")
    unknown = sorted(set(body) - set(table))
    if unknown:
        raise bad_shape(unknown[0], f"unknown field; the fields are {', '.join(sorted(table))}")
    body = {name: value for name, value in body.items() if value is not None}
    for name, value in body.items():
        if not KINDS[table[name]](value):
            raise bad_shape(name, f"must be {table[name]}, got {type(value).__name__}")
    for name in required:
        if name not in body:
            raise bad_shape(name, "missing")
    for name, does_nothing in UNSUPPORTED.items():
        if name in body and not does_nothing(body[name]):
            raise bad_value(name, "not supported by this server")
    if body["model"] not in names:
        raise APIError(404, f"model: no model {body['model']!r} here; this server serves "
                            f"{', '.join(names)} (GET /v1/models)", "model", "model_not_found")
    return body


def choices(body: dict, prompts: int) -> int:
    n = body.get("n", 1)
    if not 1 <= n * prompts <= MAX_CHOICES:
        raise bad_value("n", f"must be at least 1, and n times the prompts at most "
                             f"{MAX_CHOICES}, got n = {n} for {prompts} prompt(s)")
    return n


def plan(body, model, prompts, param, default_tokens, top, n, end_tokens, echo=False) -> Plan:
    """The knobs checked by the library, max_tokens against the context, the stream's options;
    every choice ends at `end_tokens` (as OpenAI's servers end at the model's)."""
    context = model.config.context_length
    for prompt in prompts:
        if len(prompt) >= context:
            raise bad_value(param, f"{len(prompt)} tokens; this model's context is {context} "
                                   "tokens, and at least one new token must fit",
                            "context_length_exceeded")
    asked = body.get("max_tokens")
    if asked is not None and not int(not echo) <= asked <= MAX_TOKENS:  # 0: echo's scores only
        raise bad_value("max_tokens", f"must be an integer in [1, {MAX_TOKENS}] (0 with echo), "
                                      f"got {asked}")
    max_tokens = [min(default_tokens, context - len(p)) if asked is None else asked
                  for p in prompts]
    for prompt, tokens in zip(prompts, max_tokens):
        if len(prompt) + tokens > context:
            raise bad_value("max_tokens", f"{len(prompt)} prompt tokens and max_tokens "
                                          f"{tokens} pass this model's context of {context}",
                            "context_length_exceeded")
    seed = body.get("seed")
    if seed is not None and not 0 <= seed < 2 ** 63 - MAX_CHOICES:
        raise bad_value("seed", f"must be an integer in [0, 2**63 - {MAX_CHOICES}), got {seed}")
    options = body.get("stream_options")
    if options is not None and (not body.get("stream") or set(options) - set(STREAM_OPTIONS)
                                or not all(isinstance(v, bool) for v in options.values())):
        raise bad_value("stream_options", f"only {STREAM_OPTIONS}, with stream: true")
    knobs = {name: body[name] for name in KNOBS if name in body}
    within_bounds(knobs, model.config)
    knobs["stop_strings"] = stop_strings(body.get("stop"))
    knobs["stop_tokens"] = () if body.get("ignore_eos") else tuple(end_tokens)
    min_tokens = body.get("min_tokens", 0)
    if not 0 <= min_tokens <= min(max_tokens):
        raise bad_value("min_tokens", f"must be an integer in [0, max_tokens], got {min_tokens}")
    try:
        generation_config(None, model, max_new_tokens=max(max_tokens), seed=seed, **knobs)
    except (ValueError, OverflowError) as e:
        name, _, rest = str(e).partition(":")
        param = LIBRARY_NAMES.get(name, name)
        raise bad_value(param, rest.strip()) from None
    options = options or {}
    return Plan(prompts, max_tokens, n, knobs, seed, top, echo, bool(body.get("stream")),
                options.get("include_usage", False), options.get("continuous_usage_stats", False),
                logit_bias(body.get("logit_bias"), model.config.vocab_size), min_tokens)


def logit_bias(bias, vocab: int) -> dict[int, float]:
    """{"token id": bias} as OpenAI writes it: ids in the vocabulary, biases in +-MAX_BIAS."""
    out = {}
    for key, value in (bias or {}).items():
        if not (key.isdigit() and int(key) < vocab) or isinstance(value, bool) \
                or not isinstance(value, (int, float)) or not -MAX_BIAS <= value <= MAX_BIAS:
            raise bad_value("logit_bias", f"{{token id in [0, {vocab}): a number in "
                                          f"[-{MAX_BIAS}, {MAX_BIAS}]}}, got {key!r}: {value!r}")
        out[int(key)] = float(value)
    if len(out) > MAX_BIASED:
        raise bad_value("logit_bias", f"at most {MAX_BIASED} tokens, got {len(out)}")
    return out


def within_bounds(knobs: dict, config) -> None:
    """Each knob within SERVER_BOUNDS (the library then checks its own range)."""
    tops = {"top_k": config.vocab_size, "penalty_window": config.context_length}
    for name, value in knobs.items():
        low, high = SERVER_BOUNDS[name]
        high = tops.get(name, high) if high is None else high
        if not low <= value <= high:
            raise bad_value(name, f"must be in [{low}, {high}] on this server, got {value}")


def stop_strings(stop) -> tuple[str, ...]:
    stops = [stop] if isinstance(stop, str) else list(stop or ())
    if len(stops) > MAX_STOP or not all(isinstance(s, str) and 0 < len(s) <= MAX_STOP_CHARS
                                        for s in stops):
        raise bad_value("stop", f"at most {MAX_STOP} non-empty strings of at most "
                                f"{MAX_STOP_CHARS} characters")
    return tuple(stops)


def within_context(text_bytes: int, longest: int, model, param: str) -> None:
    """Refuse, before tokenizing, a text of more bytes than the context's tokens can stand for
    (tokens.py: at least text_bytes / longest tokens)."""
    context = model.config.context_length
    if text_bytes > longest * context:
        raise bad_value(param, f"{text_bytes} bytes of text, so at least "
                               f"{-(-text_bytes // longest)} tokens; this model's context is "
                               f"{context} tokens", "context_length_exceeded")


def completion_prompts(prompt, model, longest: int) -> list[list[int]]:
    """A prompt as OpenAI takes it: a text, token ids, or a list of either."""
    single = isinstance(prompt, str) or (isinstance(prompt, list) and prompt
                                         and all(KINDS["integer"](t) for t in prompt))
    prompts = [prompt] if single else prompt
    if not isinstance(prompts, list) or not prompts:
        raise bad_shape("prompt", "must be a string, a list of token ids, or a non-empty list "
                                  "of either")
    out = []
    for p in prompts:
        if isinstance(p, str):
            within_context(len(p.encode("utf-8")), longest, model, "prompt")
            ids = list(model.tokenizer.encode(p, add_special_tokens=True))
        elif isinstance(p, list) and all(KINDS["integer"](t) for t in p):
            ids = p
        else:
            raise bad_shape("prompt", "must be a string, a list of token ids, or a non-empty "
                                      "list of either")
        vocab = model.config.vocab_size
        if not ids or not all(0 <= t < vocab for t in ids):
            raise bad_value("prompt", f"empty, or a token id outside [0, {vocab})")
        out.append(ids)
    return out
