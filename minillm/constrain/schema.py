"""JSON Schema to a regular expression: the JSON texts a schema accepts, as a pattern that
pattern.py reads (the way of outlines-core's json_schema module).

    {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    ->  \\{[ ]?"n"[ ]?:[ ]?-?(?:0|[1-9][0-9]*)[ ]?\\}

Read: `type` (object, array, string, number, integer, boolean, null, or a list of them),
`properties`, `required`, `additionalProperties` (false, or a schema where no `properties`
are given), `enum`, `const`, `items`, `minItems`/`maxItems`, `minLength`/`maxLength`,
`pattern` (strings.py), `minimum`/`maximum`/`exclusiveMinimum`/`exclusiveMaximum`
(numbers.py), `anyOf`, `oneOf` (refs.py: where its branches are disjoint), `$ref` within
the schema (refs.py). Ignored by design: the annotations `title`, `description`,
`default`, `examples`, `$schema`, `$id`, `$comment`, OpenAPI's `discriminator` (no
validator reads it), and `$defs`/`definitions`, read through `$ref`.
Any other keyword is refused by name, never silently ignored: its text would then be
promised and not kept; so is any keyword next to `$ref`, `anyOf`, `oneOf`, `const`, `enum`
but the annotations (and `type`, which keeps the constants of that type).

Choices, each applied everywhere alike:
- properties come in the schema's order, the required ones always, the others optional;
  a missing `additionalProperties` next to `properties` reads as false (OpenAI's strict
  mode requires it; the spec's true would let any key in), and true there is refused;
- an object with no `properties` (`{"type": "object"}` alone) is any JSON object, and a
  schema with no type and no keyword of a type any JSON value, their nesting bounded by
  MAX_NESTING brackets; a schema with no type but keywords of some types (`properties`,
  `items`, `maxLength`...) is read as of those types;
- whitespace: at most one space where JSON allows whitespace between tokens ("[ ]?", as
  outlines-core), none before or after the value, one at most inside empty brackets: the
  model cannot pad forever;
- a `const` or `enum` value is written as json.dumps writes it with no spaces;
- a schema whose pattern would pass MAX_PATTERN_LENGTH characters is refused as it grows.
"""
from __future__ import annotations

import json
import re

from .numbers import (INTEGER, NUMBER, integer_bounds, integer_range, number_bounds,
                      number_range)
from .refs import Walk, entered, of_type, overlapping
from .strings import NOTHING, STRING, a_string, bounds, repeat

WS = "[ ]?"
SCALARS = {"string": STRING, "integer": INTEGER, "number": NUMBER, "boolean": "(?:true|false)",
           "null": "null"}
MAX_NESTING = 3  # brackets deep, in a value whose schema does not say what it holds
MAX_PATTERN_LENGTH = 1_000_000  # characters: a schema that writes more is refused
ANNOTATIONS = {"title", "description", "default", "examples", "$schema", "$id",
               "$comment", "discriminator", "$defs", "definitions"}
KIND_KEYWORDS = {"object": {"properties", "required", "additionalProperties"},
                 "array": {"items", "minItems", "maxItems"},
                 "string": {"minLength", "maxLength", "pattern"},
                 "number": {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}}
KEYWORDS = {"type", "enum", "const", "anyOf", "oneOf", "$ref", *set().union(
    *KIND_KEYWORDS.values())}


def schema_regex(schema) -> str:
    """The pattern of the JSON texts valid under `schema`: a dict, a bool, or its JSON text."""
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as e:
            raise ValueError(f"json_schema: not JSON text: {e}") from None
    return value(schema, Walk(schema))


def value(schema, at: Walk) -> str:
    """The pattern of one value under `schema`, at.depth brackets deep. The recursion lives
    here alone: the shapes below are given their parts' patterns."""
    if schema is True or schema == {}:
        return anything(at.depth)
    if schema is False:
        return NOTHING
    if not isinstance(schema, dict):
        raise ValueError(f"json_schema: a schema must be an object or a boolean, got "
                         f"{schema!r}")
    unknown = sorted(set(schema) - KEYWORDS - ANNOTATIONS)
    if unknown:
        raise ValueError(f"json_schema: the keyword {unknown[0]!r} is not supported (read: "
                         f"{', '.join(sorted(KEYWORDS))})")
    if "$ref" in schema:
        alone(schema, "$ref")
        target, inner = entered(schema["$ref"], at)
        return NOTHING if inner is None else value(target, inner)
    for name in ("enum", "anyOf", "oneOf"):
        if name in schema and (not isinstance(schema[name], list) or not schema[name]):
            raise ValueError(f"json_schema: {name} must be a non-empty list")
    if "const" in schema or "enum" in schema:
        return checked(constants(schema))
    for name in ("anyOf", "oneOf"):
        if name in schema:
            alone(schema, name)
            if name == "oneOf":
                overlapping(schema[name], at.root)
            return checked("(?:" + "|".join(value(s, at) for s in schema[name]) + ")")
    patterns = []
    for kind in kinds(schema):
        if kind == "object":
            properties, required = schema.get("properties") or {}, schema.get("required", [])
            if not isinstance(properties, dict) or not isinstance(required, list):
                raise ValueError("json_schema: properties must be an object and required a "
                                 "list")
            members = {name: value(sub, at.deeper()) for name, sub in properties.items()}
            extra = schema.get("additionalProperties")
            extra = None if extra in (None, True) or "properties" in schema else \
                value(extra, at.deeper())
            patterns.append(an_object(schema, members, extra, at.depth))
        elif kind == "array":
            item = value(schema["items"], at.deeper()) if "items" in schema else \
                anything(at.depth + 1)
            patterns.append(an_array(schema, item))
        elif kind == "string":
            patterns.append(a_string(schema))
        elif kind == "integer":
            patterns.append(integer_range(*integer_bounds(schema)))
        elif kind == "number" and KIND_KEYWORDS["number"] & set(schema):
            patterns.append(number_range(*number_bounds(schema)))
        elif kind in SCALARS:
            patterns.append(SCALARS[kind])
        else:
            raise ValueError(f"json_schema: unknown type {kind!r}")
    return checked("(?:" + "|".join(patterns) + ")")


def checked(pattern: str) -> str:
    """The pattern, unless it passes MAX_PATTERN_LENGTH (checked as it grows: a schema
    that unrolls into too much fails before the rest is written)."""
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise ValueError(f"json_schema: the schema is too large: its pattern passes "
                         f"{MAX_PATTERN_LENGTH} characters")
    return pattern


def constants(schema: dict) -> str:
    """const or enum: exactly these values' texts, those of the `type` if one is given."""
    alone(schema, "const" if "const" in schema else "enum", also=("type",))
    values = [schema["const"]] if "const" in schema else schema["enum"]
    types = schema.get("type")
    types = None if types is None else types if isinstance(types, list) else [types]
    kept = [v for v in values if types is None or any(of_type(v, t) for t in types)]
    if not kept:
        raise ValueError("json_schema: no value of the const or enum has the type given: "
                         "an empty language")
    return "(?:" + "|".join(constant(v) for v in kept) + ")"


def alone(schema: dict, name: str, also=()):
    """Refuse any keyword but the annotations (and `also`) next to `name`."""
    others = sorted(set(schema) - ANNOTATIONS - {name, *also})
    if others:
        raise ValueError(f"json_schema: the keyword {others[0]!r} next to {name} is not "
                         f"read (only annotations may stand beside it)")


def kinds(schema: dict) -> list:
    """The types the schema's values may have: its `type`, else those its keywords speak
    of, else all."""
    types = schema.get("type")
    if types is None:
        types = [kind for kind, words in KIND_KEYWORDS.items() if words & set(schema)]
        types = types or ["object", "array", "string", "number", "integer", "boolean", "null"]
    types = types if isinstance(types, list) else [types]
    if "number" in types and "integer" in types:  # every integer's text is a number's
        types = [t for t in types if t != "integer"]
    return types


def an_object(schema: dict, members: dict, extra, depth: int) -> str:
    """{ members }: the properties (members: name -> the pattern of its value) in the
    schema's order, the required ones always there; with no properties, any members, each
    value under `extra` (additionalProperties' pattern; None: any value)."""
    required = schema.get("required", [])
    missing = sorted(set(required) - set(members))
    if missing:
        raise ValueError(f"json_schema: required property {missing[0]!r} is not among the "
                         "properties")
    if "properties" not in schema:
        if extra is None:
            return anything(depth, "object")
        return rf"\{{{WS}{listed(f'{STRING}{WS}:{WS}{extra}', 0, None)}\}}"
    if schema.get("additionalProperties") not in (None, False):
        raise ValueError("json_schema: additionalProperties is read only as false (or "
                         "absent, read as false) where properties are given")
    pairs = [(f"{constant(name)}{WS}:{WS}{pattern}", name in required)
             for name, pattern in members.items()]
    return rf"\{{{WS}{ordered(pairs)}\}}"


def ordered(members) -> str:
    """Members in order, each (pattern, required), separated by commas wherever some of the
    optional ones are left out: one alternative per choice of the first present member (it
    can be no later than the first required one); the space before the closing bracket
    with them (so that "{ }" has one space at most)."""
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
    body = "(?:" + "|".join(alternatives) + f"){WS}"
    return body if first_required < len(members) else f"(?:{body})?"


def an_array(schema: dict, item: str) -> str:
    """[ items ], minItems to maxItems of them (item: the pattern of one)."""
    low, high = bounds(schema, "minItems", "maxItems")
    return rf"\[{WS}{listed(item, low, high)}\]"


def anything(depth: int, kind: str = "value") -> str:
    """Any JSON value (or, kind "object", any object), its nesting bounded: past
    MAX_NESTING brackets only scalars, and {} for an object."""
    if depth >= MAX_NESTING:
        return rf"\{{{WS}\}}" if kind == "object" else "(?:" + "|".join(SCALARS.values()) + ")"
    member = f"{STRING}{WS}:{WS}{anything(depth + 1)}"
    obj = rf"\{{{WS}{listed(member, 0, None)}\}}"
    if kind == "object":
        return obj
    arr = rf"\[{WS}{listed(anything(depth + 1), 0, None)}\]"
    return "(?:" + "|".join([*SCALARS.values(), obj, arr]) + ")"


def listed(item: str, low: int, high) -> str:
    """low to high (None: any number) items, comma separated, and the space before the
    closing bracket with them."""
    if high == 0:
        return ""
    more = f"(?:{WS},{WS}{item}){repeat(max(low - 1, 0), None if high is None else high - 1)}"
    return f"{item}{more}{WS}" if low > 0 else f"(?:{item}{more}{WS})?"


def constant(v) -> str:
    """The pattern of exactly the JSON text of `v`."""
    return re.escape(json.dumps(v, separators=(",", ":"), ensure_ascii=False))
