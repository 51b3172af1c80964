"""JSON Schema's leaves as patterns: an integer between bounds, a string matching a pattern.

Integers between bounds (`minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum`),
exactly: the decimal texts of low..high, digit by digit (the construction of llguidance's
rx_int_range and XGrammar's range regex). Texts of one length d between a and b:

    same(a, b) = a                                    if a == b
               = a[0] same(a[1:], b[1:])              if they share the first digit
               = a[0] same(a[1:], 99..9) | [a0+1 - b0-1][0-9]{d-1} | b[0] same(00..0, b[1:])
                 (a first digit whose every tail is in range joins the middle class)

and low..high is the union over the lengths in between, a minus sign before the negative
part. The bounds may be any JSON numbers: n >= 2.5 is n >= 3 for an integer, exactly.
A non-integer `number` with a bound is refused by name (schema.py): its texts (exponents,
trailing zeros) are not cut this way here.

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
import math

from .pattern import MAX_CODE_POINT, parse

STRING_CHAR = r'(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})'
STRING = f'"{STRING_CHAR}*"'
INTEGER = r"-?(?:0|[1-9][0-9]*)"
NUMBER = INTEGER + r"(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
SCALARS = {"string": STRING, "integer": INTEGER, "number": NUMBER,
           "boolean": "(?:true|false)", "null": "null"}
ESCAPED = [(0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C)]  # what JSON writes escaped in a string
NOTHING = r"[^\s\S]"  # the pattern no text matches


def integer_bounds(schema: dict):
    """(low, high) of the integers the four bound keywords allow (None: no bound)."""
    low = high = None
    for name, tighten in (("minimum", math.ceil), ("exclusiveMinimum", lambda x:
                                                   math.floor(x) + 1),
                          ("maximum", math.floor), ("exclusiveMaximum", lambda x:
                                                    math.ceil(x) - 1)):
        if name not in schema:
            continue
        x = schema[name]
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
            raise ValueError(f"json_schema: {name} must be a finite number, got {x!r}")
        bound = tighten(x)
        if name in ("minimum", "exclusiveMinimum"):
            low = bound if low is None else max(low, bound)
        else:
            high = bound if high is None else min(high, bound)
    if low is not None and high is not None and low > high:
        raise ValueError(f"json_schema: no integer lies within the bounds (from {low} to "
                         f"{high}): an empty language")
    return low, high


def integer_range(low, high) -> str:
    """The texts of the integers low..high (None: unbounded on that side), no leading
    zeros, no "-0"."""
    if low is None and high is None:
        return INTEGER
    parts = []
    if low is None or low < 0:  # -n for n from max(1, -high) to -low
        parts.append("-" + naturals(1 if high is None or high >= 0 else -high,
                                    None if low is None else -low))
    if high is None or high >= 0:
        parts.append(naturals(0 if low is None else max(low, 0), high))
    return either(parts)


def naturals(low: int, high) -> str:
    """The texts of low..high, both >= 0 (high None: unbounded), one length at a time."""
    if high is None:  # up to the last number of low's length, then any longer one
        d = len(str(low))
        return either([naturals(low, 10 ** d - 1), f"[1-9][0-9]{{{d},}}"])
    parts = []
    for d in range(len(str(low)), len(str(high)) + 1):
        a, b = max(low, 10 ** (d - 1) if d > 1 else 0), min(high, 10 ** d - 1)
        parts.append(same_length(str(a), str(b)))
    return either(parts)


def same_length(a: str, b: str) -> str:
    """The digit strings of len(a) == len(b) from a to b (a <= b), as the formula above."""
    n = len(a)
    if a == b:
        return a
    if a == "0" * n and b == "9" * n:
        return digits(n)
    if n == 1:
        return f"[{a}-{b}]"
    if a[0] == b[0]:
        return a[0] + same_length(a[1:], b[1:])
    whole_low, whole_high = a[1:] == "0" * (n - 1), b[1:] == "9" * (n - 1)
    first, last = int(a[0]) + (not whole_low), int(b[0]) - (not whole_high)
    parts = [] if whole_low else [a[0] + same_length(a[1:], "9" * (n - 1))]
    if first <= last:  # the first digits followed by any digits, as one class
        parts.append((f"[{first}-{last}]" if first < last else str(first)) + digits(n - 1))
    if not whole_high:
        parts.append(b[0] + same_length("0" * (n - 1), b[1:]))
    return either(parts)


def digits(k: int) -> str:
    """Any k digits."""
    return "[0-9]" + (f"{{{k}}}" if k > 1 else "")


def either(parts) -> str:
    """The alternatives as one group."""
    return parts[0] if len(parts) == 1 else "(?:" + "|".join(parts) + ")"


def a_string(schema: dict) -> str:
    """A JSON string of minLength to maxLength characters (an escape counts as one), or
    one whose value the `pattern` finds (scalars.py); not both."""
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
