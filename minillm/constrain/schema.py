"""JSON Schema to a regular expression: the JSON texts a schema accepts, as a pattern that
pattern.py reads (the way of outlines-core's json_schema module).

    {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    ->  \\{[ ]?"n"[ ]?:[ ]?-?(?:0|[1-9][0-9]*)[ ]?\\}

Read: `type` (object, array, string, number, integer, boolean, null, or a list of them),
`properties`, `required`, `additionalProperties: false`, `enum`, `const`, `items`,
`minItems`/`maxItems`, `minLength`/`maxLength`, `anyOf`; the annotations `title`,
`description`, `default`, `examples`, `$schema`, `$id`, `$comment` are ignored by design.
Any other keyword is refused by name, never silently ignored: its text would then be
promised and not kept.

Choices, each applied everywhere alike:
- properties come in the schema's order, the required ones always, the others optional;
  a missing `additionalProperties` next to `properties` reads as false (OpenAI's strict
  mode requires it; the spec's true would let any key in), and true there is refused;
- an object with no `properties` (`{"type": "object"}` alone) is any JSON object, and a
  schema with no type any JSON value, their nesting bounded by MAX_NESTING brackets;
- whitespace: at most one space where JSON allows whitespace between tokens ("[ ]?", as
  outlines-core), none before or after the value: the model cannot pad forever;
- a `const` or `enum` value is written as json.dumps writes it with no spaces.
"""
from __future__ import annotations

import json
import re

WS = "[ ]?"
STRING_CHAR = r'(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})'
STRING = f'"{STRING_CHAR}*"'
INTEGER = r"-?(?:0|[1-9][0-9]*)"
NUMBER = INTEGER + r"(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
SCALARS = {"string": STRING, "integer": INTEGER, "number": NUMBER, "boolean": "(?:true|false)",
           "null": "null"}
MAX_NESTING = 3  # brackets deep, in a value whose schema does not say what it holds
ANNOTATIONS = {"title", "description", "default", "examples", "$schema", "$id", "$comment"}
KEYWORDS = {"type", "properties", "required", "additionalProperties", "enum", "const",
            "items", "minItems", "maxItems", "minLength", "maxLength", "anyOf"}


def schema_regex(schema) -> str:
    """The pattern of the JSON texts valid under `schema`: a dict, a bool, or its JSON text."""
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as e:
            raise ValueError(f"json_schema: not JSON text: {e}") from None
    return value(schema, 0)


def value(schema, depth: int) -> str:
    """The pattern of one value under `schema`, `depth` brackets deep. The recursion lives
    here alone: the shapes below are given their parts' patterns."""
    if schema is True or schema == {}:
        return anything(depth)
    if not isinstance(schema, dict):
        raise ValueError(f"json_schema: a schema must be an object or true, got {schema!r}")
    unknown = sorted(set(schema) - KEYWORDS - ANNOTATIONS)
    if unknown:
        raise ValueError(f"json_schema: the keyword {unknown[0]!r} is not supported (read: "
                         f"{', '.join(sorted(KEYWORDS))})")
    if "const" in schema:
        return constant(schema["const"])
    for name in ("enum", "anyOf"):
        if name in schema and (not isinstance(schema[name], list) or not schema[name]):
            raise ValueError(f"json_schema: {name} must be a non-empty list")
    if "enum" in schema:
        return "(?:" + "|".join(constant(v) for v in schema["enum"]) + ")"
    if "anyOf" in schema:
        return "(?:" + "|".join(value(s, depth) for s in schema["anyOf"]) + ")"
    kinds = schema.get("type")
    if kinds is None:
        return anything(depth)
    patterns = []
    for kind in kinds if isinstance(kinds, list) else [kinds]:
        if kind == "object":
            members = {name: value(sub, depth + 1)
                       for name, sub in (schema.get("properties") or {}).items()}
            patterns.append(an_object(schema, members, depth))
        elif kind == "array":
            item = value(schema["items"], depth + 1) if "items" in schema else \
                anything(depth + 1)
            patterns.append(an_array(schema, item))
        elif kind == "string":
            patterns.append(a_string(schema))
        elif kind in SCALARS:
            patterns.append(SCALARS[kind])
        else:
            raise ValueError(f"json_schema: unknown type {kind!r}")
    return "(?:" + "|".join(patterns) + ")"


def an_object(schema: dict, members: dict, depth: int) -> str:
    """{ members }: the properties (members: name -> the pattern of its value) in the
    schema's order, the required ones always there."""
    extra = schema.get("additionalProperties")
    if "properties" not in schema and extra in (None, True):
        return anything(depth, "object")
    if extra not in (None, False):
        raise ValueError("json_schema: additionalProperties is read only as false (or "
                         "absent, read as false) where properties are given")
    required = schema.get("required", [])
    missing = sorted(set(required) - set(members))
    if missing:
        raise ValueError(f"json_schema: required property {missing[0]!r} is not among the "
                         "properties")
    pairs = [(f"{constant(name)}{WS}:{WS}{pattern}", name in required)
             for name, pattern in members.items()]
    return rf"\{{{WS}{ordered(pairs)}{WS}\}}"


def ordered(members) -> str:
    """Members in order, each (pattern, required), separated by commas wherever some of the
    optional ones are left out: one alternative per choice of the first present member (it
    can be no later than the first required one)."""
    if not members:
        return ""
    first_required = next((i for i, (_, req) in enumerate(members) if req), len(members))
    alternatives = []
    for i in range(min(first_required, len(members) - 1) + 1):
        parts = [members[i][0]]
        for pattern, req in members[i + 1:]:
            part = f"{WS},{WS}{pattern}"
            parts.append(part if req else f"(?:{part})?")
        alternatives.append("".join(parts))
    body = "(?:" + "|".join(alternatives) + ")"
    return body if first_required < len(members) else body + "?"


def an_array(schema: dict, item: str) -> str:
    """[ items ], minItems to maxItems of them (item: the pattern of one)."""
    low, high = bounds(schema, "minItems", "maxItems")
    return rf"\[{WS}{listed(item, low, high)}{WS}\]"


def a_string(schema: dict) -> str:
    """A JSON string of minLength to maxLength characters (an escape counts as one)."""
    low, high = bounds(schema, "minLength", "maxLength")
    return f'"{STRING_CHAR}{repeat(low, high)}"'


def anything(depth: int, kind: str = "value") -> str:
    """Any JSON value (or, kind "object", any object), its nesting bounded: past
    MAX_NESTING brackets only scalars, and {} for an object."""
    if depth >= MAX_NESTING:
        return rf"\{{{WS}\}}" if kind == "object" else "(?:" + "|".join(SCALARS.values()) + ")"
    member = f"{STRING}{WS}:{WS}{anything(depth + 1)}"
    obj = rf"\{{{WS}{listed(member, 0, None)}{WS}\}}"
    if kind == "object":
        return obj
    arr = rf"\[{WS}{listed(anything(depth + 1), 0, None)}{WS}\]"
    return "(?:" + "|".join([*SCALARS.values(), obj, arr]) + ")"


def listed(item: str, low: int, high) -> str:
    """low to high (None: any number) items, comma separated."""
    if high == 0:
        return ""
    more = f"(?:{WS},{WS}{item}){repeat(max(low - 1, 0), None if high is None else high - 1)}"
    return f"{item}{more}" if low > 0 else f"(?:{item}{more})?"


def bounds(schema: dict, low_name: str, high_name: str):
    """(low, high) of a pair of counting keywords, high None when absent."""
    low, high = schema.get(low_name, 0), schema.get(high_name)
    for name, n in ((low_name, low), (high_name, high)):
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 0):
            raise ValueError(f"json_schema: {name} must be an integer >= 0, got {n!r}")
    if high is not None and high < low:
        raise ValueError(f"json_schema: {high_name} {high} is below {low_name} {low}")
    return low, high


def repeat(low: int, high) -> str:
    """The quantifier for low to high (None: unbounded) repeats."""
    return f"{{{low},}}" if high is None else f"{{{low},{high}}}"


def constant(v) -> str:
    """The pattern of exactly the JSON text of `v`."""
    return re.escape(json.dumps(v, separators=(",", ":"), ensure_ascii=False))
