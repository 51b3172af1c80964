"""The desk's requests, checked before any work: every field known, typed and in range.

A request body is a JSON object. Each endpoint names its fields; a field may be left out (its
default is used), but a field the endpoint does not know, a value of the wrong type or one out
of range is refused with a RequestError naming the field. The ranges bound the work a single
request can ask for (how many tokens, how long a prompt); once the prompt is read, the widget
also bounds the work itself, in token positions times the model's parameters (MAX_WORK,
widgets.charge), since a long prompt costs the real model far more than the shipped one.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from . import PASSAGE

MAX_BODY_BYTES = 16 * 1024  # a prompt of a few thousand characters and its knobs
MAX_PROMPT_CHARS = 2000
MAX_NEW_TOKENS = 64  # per column, per continuation: a few seconds of the real model
MAX_DRAWN = 256  # tokens the sampling desk may append to its prompt
# The most work one request may ask for: token positions its forward passes compute, times the
# model's parameters (a position costs about two multiply-adds per parameter). 5e11 is about
# 3,700 positions of SmolLM2-135M (134.5M parameters), some 10 s on one core here; the shipped
# model (1.4M) never reaches it within one window.
MAX_WORK = 5 * 10**11
MAX_REQUESTS = 4  # the serving widget: prompts at once,
MAX_SERVING_TOKENS = 16  # new tokens per request,
MAX_STEPS = 200  # and the engine's steps shown (each computes at most max_batch_tokens)
MAX_SPEC_CHARS = 2000  # the mask widget's regex, choices or JSON Schema


class RequestError(ValueError):
    """A request the desk refuses: answered with `status`, the message as JSON, and `headers`
    (a 405's Allow)."""

    def __init__(self, message: str, status: int = 400, headers: dict | None = None):
        super().__init__(message)
        self.status = status
        self.headers = headers or {}


@dataclass(frozen=True)
class Field:
    """kind: "number" (a finite real), "int", "text", "ids" (a list of ints), "choice",
    "numbers" (a list of reals of a fixed length), "texts" (1 to `length` strings of at most
    `high` characters each), "bool". low, high: the inclusive range of a number (or of each
    list item); for text and ids, the largest length is `high`. none: whether null is allowed
    (a knob switched off)."""

    kind: str
    default: object = None
    low: float | None = None
    high: float | None = None
    none: bool = False
    choices: tuple = ()
    length: int | None = None


def number(low, high, default, none=False):
    return Field("number", default, low, high, none)


def integer(low, high, default, none=False):
    return Field("int", default, low, high, none)


PROMPT = Field("text", "", high=MAX_PROMPT_CHARS)
DRAWN = Field("ids", [], low=0, high=MAX_DRAWN)
NEW_TOKENS = integer(1, MAX_NEW_TOKENS, 24)
SEED = integer(0, 2**32 - 1, 0)
KNOBS = {
    "temperature": number(0.0, 5.0, 1.0),
    "top_k": integer(0, 10**6, None, none=True),
    "top_p": number(0.01, 1.0, None, none=True),
    "min_p": number(0.0, 1.0, None, none=True),
    "repetition_penalty": number(0.5, 3.0, None, none=True),
    # The library takes any finite value (< 0 encourages repeats); the desk keeps OpenAI's
    # API range for them.
    "frequency_penalty": number(-2.0, 2.0, None, none=True),
    "presence_penalty": number(-2.0, 2.0, None, none=True),
}

def serving_prompts() -> list[str]:
    """The serving widget's default prompts: three that share the held-out passage's first
    sentence (its blocks are computed once and shared), and one that does not."""
    first, rest = PASSAGE.read_text(encoding="utf-8").split(". ", 1)
    return [f"{first}. He lived as a foreigner in", f"{first}. Abraham said about Sarah his wife,",
            f"{first}. But God came to Abimelech", "Abimelech king of Gerar sent, and took"]


ENDPOINTS = {
    "/api/next": {"prompt": PROMPT, "drawn": DRAWN, **KNOBS, "top": integer(1, 40, 12)},
    "/api/draw": {"prompt": PROMPT, "drawn": DRAWN, **KNOBS, "seed": SEED},
    "/api/temperatures": {"prompt": PROMPT, "seed": SEED, "max_new_tokens": NEW_TOKENS,
                          "temperatures": Field("numbers", [0.0, 0.5, 1.0, 1.5], 0.0, 5.0,
                                                length=4)},
    "/api/repetition": {"prompt": PROMPT, "max_new_tokens": NEW_TOKENS,
                        "repetition_penalty": number(1.0, 3.0, 1.3),
                        "frequency_penalty": number(0.0, 2.0, 0.0),
                        "presence_penalty": number(0.0, 2.0, 0.0)},
    "/api/race": {"prompt": PROMPT, "max_new_tokens": NEW_TOKENS, "seed": SEED,
                  "temperature": number(0.0, 5.0, 0.8)},
    "/api/bits": {"prompt": PROMPT, "max_new_tokens": NEW_TOKENS,
                  "bits": Field("choice", 8, choices=(32, 8, 6, 5, 4, 3, 2))},
    "/api/speculative": {"prompt": PROMPT, "max_new_tokens": NEW_TOKENS, "seed": SEED,
                         "temperature": number(0.0, 5.0, 0.0),
                         "drafter": Field("choice", "ngram", choices=("model", "ngram")),
                         "k": integer(1, 8, 4)},
    "/api/serving": {"prompts": Field("texts", serving_prompts(), high=MAX_PROMPT_CHARS,
                                      length=MAX_REQUESTS),
                     "max_new_tokens": integer(1, MAX_SERVING_TOKENS, 6),
                     "block_size": integer(1, 16, 4), "num_blocks": integer(1, 64, 18),
                     "max_batch_tokens": integer(1, 64, 16),
                     "prefix_caching": Field("bool", True),
                     "temperature": number(0.0, 5.0, 0.0), "seed": SEED},
    # spec: the JSON Schema's text, the regular expression, or the choices one a line (null:
    # the kind's example, masks.DEFAULTS)
    "/api/mask": {"prompt": PROMPT,
                  "kind": Field("choice", "json_schema", choices=("json_schema", "regex",
                                                                  "choice")),
                  "spec": Field("text", None, high=MAX_SPEC_CHARS, none=True),
                  "max_new_tokens": integer(1, MAX_NEW_TOKENS, 32),
                  "temperature": number(0.0, 5.0, 0.8), "seed": SEED,
                  "top": integer(1, 20, 8)},
}


def checked(path: str, body) -> dict:
    """The request's fields with defaults filled in, or a RequestError naming the bad field."""
    fields = ENDPOINTS[path]
    if not isinstance(body, dict):
        raise RequestError(f"the body must be a JSON object, got {type(body).__name__}")
    unknown = sorted(set(body) - set(fields))
    if unknown:
        raise RequestError(f"{unknown[0]}: unknown field for {path} (known: "
                           f"{', '.join(fields)})")
    return {name: check(name, field, body.get(name, field.default))
            for name, field in fields.items()}


def check(name: str, field: Field, value):
    if value is None and field.none:
        return None
    if field.kind == "number":
        return in_range(name, field, real(name, value))
    if field.kind == "int":
        return in_range(name, field, whole(name, value))
    if field.kind == "text":
        if not isinstance(value, str):
            raise RequestError(f"{name}: must be a string")
        if len(value) > field.high:
            raise RequestError(f"{name}: at most {field.high} characters, got {len(value)}")
        return value
    if field.kind == "bool":
        if not isinstance(value, bool):
            raise RequestError(f"{name}: must be true or false, got {value!r}")
        return value
    if field.kind == "texts":
        if not isinstance(value, list) or not 1 <= len(value) <= field.length:
            raise RequestError(f"{name}: must be a list of 1 to {field.length} strings")
        return [check(f"{name}[{i}]", Field("text", high=field.high), v)
                for i, v in enumerate(value)]
    if field.kind == "choice":
        if isinstance(value, bool) or value not in field.choices:
            raise RequestError(f"{name}: must be one of {list(field.choices)}, got {value!r}")
        return value
    if field.kind in ("ids", "numbers"):
        if not isinstance(value, list):
            raise RequestError(f"{name}: must be a list")
        if field.length is not None and len(value) != field.length:
            raise RequestError(f"{name}: must hold {field.length} values, got {len(value)}")
        if field.kind == "ids":
            if len(value) > field.high:
                raise RequestError(f"{name}: at most {field.high} tokens, got {len(value)}")
            return [whole(f"{name}[{i}]", v) for i, v in enumerate(value)]  # < V: widgets.py
        item = Field("number", low=field.low, high=field.high)
        return [in_range(f"{name}[{i}]", item, real(f"{name}[{i}]", v))
                for i, v in enumerate(value)]
    raise AssertionError(field.kind)


def real(name, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value):
        raise RequestError(f"{name}: must be a number, got {value!r}")
    return float(value)


def whole(name, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(f"{name}: must be an integer, got {value!r}")
    return value


def in_range(name, field: Field, value):
    if not field.low <= value <= field.high:
        raise RequestError(f"{name}: must be in [{field.low:g}, {field.high:g}], got {value!r}")
    return value
