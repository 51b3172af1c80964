"""Where a JSON Schema points elsewhere or chooses one branch: `$ref` unrolled to a bound,
and `oneOf` read only where its branches are disjoint.

`$ref` within the schema: "#" (the whole schema), "#/$defs/Name", "#/definitions/Name", any
JSON pointer into the document ("#/properties/a", with ~1 for "/" and ~0 for "~"); a
reference to another document refused. A regular language cannot nest without a bound, so
one $ref is followed at most MAX_RECURSION times on one path from the root (a list of
three nodes under "#/$defs/Node"; the root and three more levels under "#"); past that it
stands for nothing (no text), and the branches that need it fall away: an optional child,
an `anyOf` with null, an empty list stay. A definition that cannot stop (a required child
of its own kind) then has an empty language, refused when the automaton is built.
llguidance's and XGrammar's grammars need no bound; outlines-core bounds it too.

`oneOf` asks for exactly one branch valid. A pattern can say "this branch or that" but not
"not both", so `oneOf` is read as `anyOf` where no value can be valid under two branches,
checked as llguidance's is_verifiably_disjoint_from does it (and refused by name otherwise;
outlines-core reads every `oneOf` as `anyOf`). Two schemas are disjoint, as the JSON Schema
specification reads them (a missing additionalProperties is true there), when:

    their types differ (an integer is a number; const and enum have their values' types),
    their const/enum values differ (1 and 1.0 are one value, true and 1 two),
    both are objects with a property required by both whose schemas are disjoint
    (a discriminated union: {"kind": {"const": "cat"}} against {"kind": {"const": "dog"}}),
    or every branch of an anyOf/oneOf in one is disjoint from the other.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from urllib.parse import unquote

MAX_RECURSION = 3  # times one $ref may be followed on one path from the root
TYPES = ("object", "array", "string", "number", "boolean", "null")  # integer: a number


@dataclass(frozen=True)
class Walk:
    """Where the reading of a schema is: the whole document (for $ref), brackets deep, the
    $refs entered on the way here."""

    root: object
    depth: int = 0
    refs: tuple = ()

    def deeper(self) -> Walk:
        return replace(self, depth=self.depth + 1)


def entered(ref, at: Walk):
    """(the schema `ref` points at, the walk inside it; None once `ref` was followed
    MAX_RECURSION times on the way here)."""
    target = resolved(ref, at.root)
    if at.refs.count(ref) >= MAX_RECURSION:
        return target, None
    return target, replace(at, refs=at.refs + (ref,))


def resolved(ref, root):
    """The part of the document `root` that the local reference `ref` points at."""
    if not isinstance(ref, str) or not (ref == "#" or ref.startswith("#/")):
        raise ValueError(f"json_schema: $ref {ref!r} is not read: only references within "
                         "the schema (#, #/$defs/Name, #/definitions/Name)")
    target = root
    for part in ref[2:].split("/") if ref != "#" else []:
        part = unquote(part).replace("~1", "/").replace("~0", "~")
        if isinstance(target, dict) and part in target:
            target = target[part]
        elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
            target = target[int(part)]
        else:
            raise ValueError(f"json_schema: $ref {ref!r} points at nothing in the schema")
    return target


def overlapping(branches, root):
    """Refuse a oneOf two of whose branches may both hold (then it is not an anyOf)."""
    for i, a in enumerate(branches):
        for j in range(i + 1, len(branches)):
            if not disjoint(a, branches[j], root):
                raise ValueError(f"json_schema: oneOf is read only where no value can be "
                                 f"valid under two branches, and branches {i} and {j} may "
                                 f"overlap (write anyOf if either will do)")


def disjoint(a, b, root, depth: int = 0) -> bool:
    """Whether no JSON value is valid under both schemas (False where unsure)."""
    if depth > 4 * MAX_RECURSION:
        return False
    a, b = followed(a, root), followed(b, root)
    if a is False or b is False:
        return True
    if not isinstance(a, dict) or not isinstance(b, dict):
        return False
    for x, y in ((a, b), (b, a)):
        for name in ("anyOf", "oneOf"):
            if isinstance(x.get(name), list):
                return all(disjoint(s, y, root, depth + 1) for s in x[name])
    values_a, values_b = constants(a), constants(b)
    if values_a is not None and values_b is not None:
        return not ({canonical(v) for v in values_a} & {canonical(v) for v in values_b})
    types_a, types_b = types(a), types(b)
    if not types_a & types_b:
        return True
    if types_a == types_b == {"object"}:
        pa, pb = a.get("properties") or {}, b.get("properties") or {}
        both = set(a.get("required") or []) & set(b.get("required") or [])
        return any(k in pa and k in pb and disjoint(pa[k], pb[k], root, depth + 1)
                   for k in sorted(both))
    return False


def followed(schema, root):
    """The schema, its $ref followed (a chain of them too, to a bound)."""
    for _ in range(MAX_RECURSION + 1):
        if not (isinstance(schema, dict) and "$ref" in schema):
            break
        schema = resolved(schema["$ref"], root)
    return schema


def types(schema: dict) -> set:
    """The types a value valid under `schema` may have (integer counted as number); all
    of them where the schema does not say."""
    values = constants(schema)
    if values is not None:
        return {t for v in values for t in TYPES if of_type(v, t)}
    given = schema.get("type", list(TYPES))
    given = given if isinstance(given, list) else [given]
    return {"number" if t == "integer" else t for t in given}


def constants(schema: dict):
    """The values of a const or enum, None for a schema of neither."""
    if "const" in schema:
        return [schema["const"]]
    return schema["enum"] if isinstance(schema.get("enum"), list) else None


def of_type(v, kind: str) -> bool:
    """Whether the JSON value v is of the type `kind` (1.0 is an integer; true is not)."""
    if kind in ("number", "integer"):
        number = isinstance(v, (int, float)) and not isinstance(v, bool)
        return number and (kind == "number" or isinstance(v, int) or v.is_integer())
    python = {"null": type(None), "boolean": bool, "string": str, "array": list,
              "object": dict}.get(kind)
    return python is not None and isinstance(v, python) and (python is bool or not
                                                             isinstance(v, bool))


def canonical(v) -> str:
    """One text per JSON value: keys sorted, a number with no fraction as an integer."""
    def plain(x):
        if isinstance(x, float) and x.is_integer():
            return int(x)
        if isinstance(x, list):
            return [plain(y) for y in x]
        if isinstance(x, dict):
            return {k: plain(y) for k, y in x.items()}
        return x
    return json.dumps(plain(v), sort_keys=True)
