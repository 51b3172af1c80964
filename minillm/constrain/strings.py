"""JSON Schema's strings as patterns: a length between bounds, or a `pattern` found.

A string's `pattern`, as the specification reads it: a search, so that "ab" accepts any
string containing "ab", and `^...$` for a whole match. The pattern is read by pattern.py (its
subset; \\d \\w \\s as ASCII; their negations \\D \\W \\S within ASCII too, so that every
string kept matches under Python's Unicode reading as well as the ASCII one), and written
back as a pattern over the JSON string's text: a character JSON must escape (`"`, `\\`, the
controls below U+0020) as json.dumps escapes it, any other as itself.

    pattern "a+"   ->  "STRING_CHAR*(?:a){1,}STRING_CHAR*"   (STRING_CHAR: any one character)
"""
from __future__ import annotations

import json

from .pattern import MAX_CODE_POINT, parse

STRING_CHAR = r'(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})'
STRING = f'"{STRING_CHAR}*"'
ESCAPED = [(0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C)]  # what JSON writes escaped in a string
NOTHING = r"[^\s\S]"  # the pattern no text matches


def a_string(schema: dict) -> str:
    """A JSON string of minLength to maxLength characters (an escape counts as one), or
    one whose value the `pattern` finds (string_pattern, below); not both."""
    if "pattern" in schema:
        both = sorted({"minLength", "maxLength"} & set(schema))
        if both:
            raise ValueError(f"json_schema: {both[0]} next to pattern is not read (the "
                             "texts of both are not written as one pattern here)")
        return string_pattern(schema["pattern"])
    low, high = bounds(schema, "minLength", "maxLength")
    return f'"{STRING_CHAR}{repeat(low, high)}"'


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


def string_pattern(pattern) -> str:
    """The JSON string texts whose value the pattern finds (a search; ^...$ a whole match)."""
    if not isinstance(pattern, str):
        raise ValueError(f"json_schema: pattern must be a string, got {pattern!r}")
    try:
        tree = parse(pattern, negations_within=0x7F)
    except ValueError as e:
        raise ValueError(f"json_schema: pattern: {e}") from None
    before = pattern[:-1]  # a final $ is the anchor unless a backslash escapes it
    ends = pattern.endswith("$") and (len(before) - len(before.rstrip("\\"))) % 2 == 0
    free = f"{STRING_CHAR}*"
    return (f'"{"" if pattern.startswith("^") else free}{written(tree)}'
            f'{"" if ends else free}"')


def written(node) -> str:
    """A tree of pattern.py back as a pattern over JSON string text."""
    kind = node[0]
    if kind == "chars":
        return json_chars(node[1])
    if kind == "cat":
        return "(?:" + "".join(written(part) for part in node[1]) + ")"
    if kind == "alt":
        return "(?:" + "|".join(written(part) for part in node[1]) + ")"
    _, inner, low, high = node
    return f"(?:{written(inner)}){{{low},{'' if high is None else high}}}"


def json_chars(ranges) -> str:
    """A set of characters as JSON writes each in a string: itself, or its escape."""
    plain, escaped = [], []
    for low, high in ranges:
        for e_low, e_high in ESCAPED:  # the escaped characters within the range, one by one
            escaped += [chr(c) for c in range(max(low, e_low), min(high, e_high) + 1)]
        plain += cut(low, high)
    parts = ["[" + "".join(class_range(lo, hi) for lo, hi in plain) + "]"] if plain else []
    parts += ["".join(c if c.isalnum() else "\\" + c for c in json.dumps(ch)[1:-1])
              for ch in escaped]
    return "(?:" + "|".join(parts) + ")" if parts else NOTHING


def cut(low: int, high: int):
    """The range low..high without the characters JSON escapes."""
    out = []
    for e_low, e_high in ESCAPED:
        if low < e_low:
            out.append((low, min(high, e_low - 1)))
        low = max(low, e_high + 1)
    if low <= min(high, MAX_CODE_POINT):
        out.append((low, high))
    return [(lo, hi) for lo, hi in out if lo <= hi]


def class_range(low: int, high: int) -> str:
    """lo-hi inside a class: \\uHHHH below U+10000, the character itself above."""
    def one(c):
        return f"\\u{c:04x}" if c <= 0xFFFF else chr(c)
    return one(low) if low == high else f"{one(low)}-{one(high)}"
