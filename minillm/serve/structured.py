"""Structured output on the server: the fields that ask for a constrained reply, read as one
Spec, and the Constraint of each Spec built once (minillm.constrain).

    response_format     {"type": "text"}                       nothing asked
                        {"type": "json_object"}                any JSON object
                        {"type": "json_schema", "json_schema": {"name", "schema", "strict"}}
    structured_outputs  {"json": schema} | {"regex": pattern} | {"choice": [texts]}
                        | {"json_object": true}                (vLLM's, through extra_body)
    guided_json, guided_regex, guided_choice                   (vLLM's older names)

At most one of them: two are a 400 naming the second. A schema is turned into its regular
expression here, on reading the body (schema.py is quick), so that a keyword it cannot honour
is a 400 naming it before any work; the automaton and its index over the vocabulary take
longer (a second or more on a large vocabulary), so they are built on a thread of their own,
never on the event loop, and kept: the MAX_CONSTRAINTS last distinct ones, keyed by the
pattern's text and the tokenizer they index (the chat's, whose end-of-turn tokens end a
reply, or the model's), so that the same schema asked again is built once.
"""
from __future__ import annotations

import asyncio
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

from .errors import APIError, bad_value

MAX_CONSTRAINTS = 32  # built constraints kept, the least recently asked for dropped first
MAX_BUILDING = 4  # distinct constraints waiting to be built or building; more: 429
RETRY_AFTER = 1  # seconds a client refused for that is told to wait
MAX_PATTERN_CHARS = 1_000_000  # a schema's pattern longer than this is refused before building
VLLM_KINDS = ("json", "regex", "choice", "json_object")  # structured_outputs' read keys
OLD_NAMES = {"guided_json": "json", "guided_regex": "regex", "guided_choice": "choice"}
FIELDS = ("response_format", "structured_outputs", *OLD_NAMES)  # the fields read here


class Spec(NamedTuple):
    """A constrained reply asked for: the pattern (pattern.py's subset) or, for a choice, the
    options; `param` the field it came from, named in errors."""

    pattern: str | None
    options: tuple | None
    param: str


def spec_of(body: dict) -> Spec | None:
    """The one Spec of a body's fields (None: the reply is free)."""
    given = [name for name in FIELDS if name in body and not (
        name == "response_format" and body[name].get("type") == "text")]
    if len(given) > 1:
        raise bad_value(given[1], f"not with {given[0]}: give one way of constraining the "
                                  "reply")
    if not given:
        return None
    name = given[0]
    if name == "response_format":
        return response_format(body[name])
    if name == "structured_outputs":
        return structured_outputs(body[name])
    return spec(OLD_NAMES[name], body[name], name)


def response_format(value: dict) -> Spec:
    """OpenAI's response_format (the type "text" is no constraint, taken by spec_of)."""
    kind = value.get("type")
    if kind == "json_object":
        return spec("json", {"type": "object"}, "response_format")
    if kind != "json_schema":
        raise bad_value("response_format", f"type must be \"text\", \"json_object\" or "
                                           f"\"json_schema\", got {kind!r}")
    inner = value.get("json_schema")
    if not isinstance(inner, dict) or not isinstance(inner.get("name"), str) \
            or not isinstance(inner.get("schema"), (dict, bool)):
        raise bad_value("response_format", "json_schema must be {\"name\": str, \"schema\": "
                                           "{...}, \"strict\": bool}")
    unknown = sorted(set(inner) - {"name", "schema", "strict", "description"})
    if unknown:
        raise bad_value("response_format", f"json_schema.{unknown[0]}: not a field (name, "
                                           "schema, strict, description)")
    return spec("json", inner["schema"], "response_format")


def structured_outputs(value) -> Spec:
    """vLLM's structured_outputs: exactly one of json, regex, choice, json_object."""
    if not isinstance(value, dict):
        raise bad_value("structured_outputs", "must be an object")
    unknown = sorted(set(value) - set(VLLM_KINDS))
    if unknown:
        raise bad_value("structured_outputs", f"{unknown[0]}: not supported by this server "
                                              f"(read: {', '.join(VLLM_KINDS)})")
    kinds = [k for k in VLLM_KINDS if value.get(k) not in (None, False)]
    if len(kinds) != 1:
        raise bad_value("structured_outputs", f"give exactly one of {', '.join(VLLM_KINDS)}")
    if kinds[0] == "json_object":
        return spec("json", {"type": "object"}, "structured_outputs")
    return spec(kinds[0], value[kinds[0]], "structured_outputs")


def spec(kind: str, value, param: str) -> Spec:
    """The Spec of a schema (a dict, or its JSON text), a regex or a list of choices, its
    schema read into a pattern now (a keyword it cannot honour: 400 naming it)."""
    from ..constrain.schema import schema_regex

    if kind == "choice":
        if not isinstance(value, list) or not value or not all(isinstance(v, str)
                                                               for v in value):
            raise bad_value(param, "choice must be a non-empty list of strings")
        return Spec(None, tuple(value), param)
    if kind == "regex":
        if not isinstance(value, str):
            raise bad_value(param, "regex must be a string")
        return Spec(value, None, param)
    try:
        pattern = schema_regex(value)
    except ValueError as e:  # the keyword it cannot honour, named
        raise bad_value(param, str(e)) from None
    except (TypeError, AttributeError, KeyError, RecursionError) as e:  # a keyword's value
        raise bad_value(param, f"json_schema: cannot read the schema ({type(e).__name__}: "
                               f"{e})") from None  # of the wrong kind, or nesting too deep
    # A pattern this long would take seconds to parse, and much memory to hold as a tree, for
    # an automaton past the bound of nfa.py anyway (a schema's grows with its nesting).
    if len(pattern) > MAX_PATTERN_CHARS:
        raise bad_value(param, f"json_schema: too large: its pattern has {len(pattern):,} "
                               f"characters, at most {MAX_PATTERN_CHARS:,} are built")
    return Spec(pattern, None, param)


class Constraints:
    """The built constraints, the last MAX_CONSTRAINTS asked for, each built once on the
    thread of its own (the same Spec asked again while it builds waits for that build); at
    most MAX_BUILDING new ones wait for that thread at a time, so that a client asking for
    many slow ones is told to retry (429) rather than queueing them without bound."""

    def __init__(self, size: int = MAX_CONSTRAINTS):
        self.size, self.built = size, OrderedDict()  # key -> concurrent Future
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="minillm-constrain")

    async def get(self, wanted: Spec, tokenizer):
        """The Constraint of `wanted` over `tokenizer`; one that cannot be built is a 400
        naming the field (the ValueError of minillm.constrain)."""
        key = (id(tokenizer), wanted.pattern, wanted.options)
        future = self.built.get(key)
        if future is None or future.cancelled():
            if sum(not f.done() for f in self.built.values()) >= MAX_BUILDING:
                raise APIError(429, f"{wanted.param}: {MAX_BUILDING} constraints are being "
                                    "built already; retry later", wanted.param,
                               "too_many_requests", {"Retry-After": str(RETRY_AFTER)})
            future = self.pool.submit(build, wanted, tokenizer)
            self.built[key] = future
            while len(self.built) > self.size:
                self.built.popitem(last=False)
        self.built.move_to_end(key)
        try:
            # shielded: a client gone while it waits leaves the build to finish, for others
            return await asyncio.shield(asyncio.wrap_future(future))
        except ValueError as e:  # the same Spec fails alike: kept, so it is not built again
            raise bad_value(wanted.param, str(e)) from None
        except Exception:
            self.built.pop(key, None)
            raise


def build(wanted: Spec, tokenizer):
    """The Constraint (minillm.constrain) of a Spec over a tokenizer."""
    from ..constrain import choice, regex

    if wanted.options is not None:
        return choice(list(wanted.options), tokenizer)
    return regex(wanted.pattern, tokenizer)

