"""JSON Schema's numbers between bounds (`minimum`, `maximum`, `exclusiveMinimum`,
`exclusiveMaximum`), as patterns: exactly the texts whose value lies within.

An integer: the decimal texts of low..high, digit by digit (the construction of llguidance's
rx_int_range and XGrammar's range regex). Texts of one length d between a and b:

    same(a, b) = a                                    if a == b
               = a[0] same(a[1:], b[1:])              if they share the first digit
               = a[0] same(a[1:], 99..9) | [a0+1 - b0-1][0-9]{d-1} | b[0] same(00..0, b[1:])
                 (a first digit whose every tail is in range joins the middle class)

and low..high is the union over the lengths in between, a minus sign before the negative
part. The bounds may be any JSON numbers: n >= 2.5 is n >= 3 for an integer, exactly.

A number with bounds: v = I + f (or -(I + f)), I an integer's digits, f a fraction of at
most FRACTION_DIGITS digits, no exponent. For whole bounds lo and hi, and v >= 0:

    v >= lo  <=>  I >= lo                  v <= hi  <=>  I < hi, or I = hi and f = 0
    v >  lo  <=>  I > lo, or I = lo, f > 0   v <  hi  <=>  I < hi

and a negative v is "-" u, u = -v >= 0 under the bounds mirrored (u <= -lo, u >= -hi).
Validators (jsonschema among them) compare the parsed double, not the decimal: a bound
below MAX_NUMBER_BOUND is a double exactly, and a decimal within 1 of it has at most 15
significant digits (nine before the point, six after), which a double tells apart in the
same order; so the decimal comparison is the validator's. A bound that is not whole, or is
past MAX_NUMBER_BOUND, is refused by name (llguidance and XGrammar write any decimal bound).
"""
from __future__ import annotations

import math

INTEGER = r"-?(?:0|[1-9][0-9]*)"
NUMBER = INTEGER + r"(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
FRACTION_DIGITS = 6  # digits after the point, in a number with bounds
MAX_NUMBER_BOUND = 10 ** 9  # a number's bounds are read below this, in size
FRACTION = rf"(?:\.[0-9]{{1,{FRACTION_DIGITS}}})?"  # any f, or none
ZERO_FRACTION = rf"(?:\.0{{1,{FRACTION_DIGITS}}})?"  # f = 0
NONZERO_FRACTION = r"\.(?:" + "|".join(  # f > 0: k zeros, then a digit not 0, then any
    f"{'0' * k}[1-9][0-9]{{0,{FRACTION_DIGITS - 1 - k}}}" for k in range(FRACTION_DIGITS)) + ")"
LOWER, UPPER = ("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")


def integer_bounds(schema: dict):
    """(low, high) of the integers the four bound keywords allow (None: no bound)."""
    low = high = None
    for name, x in bound_keywords(schema):
        if name in LOWER:
            bound = math.ceil(x) if name == "minimum" else math.floor(x) + 1
            low = bound if low is None else max(low, bound)
        else:
            bound = math.floor(x) if name == "maximum" else math.ceil(x) - 1
            high = bound if high is None else min(high, bound)
    if low is not None and high is not None and low > high:
        raise ValueError(f"json_schema: no integer lies within the bounds (from {low} to "
                         f"{high}): an empty language")
    return low, high


def number_bounds(schema: dict):
    """(low, low_open, high, high_open) of the four bound keywords on a number, the
    tighter of two on one side (None: no bound); whole bounds below MAX_NUMBER_BOUND."""
    low = high = None
    low_open = high_open = False
    for name, x in bound_keywords(schema):
        if x != int(x) or abs(x) >= MAX_NUMBER_BOUND:
            raise ValueError(f"json_schema: {name} {x!r} on a number is not read (only "
                             f"whole bounds below {MAX_NUMBER_BOUND} are kept exactly)")
        x, is_open = int(x), name.startswith("exclusive")
        if name in LOWER and (low is None or (x, is_open) > (low, low_open)):
            low, low_open = x, is_open
        if name in UPPER and (high is None or (x, not is_open) < (high, not high_open)):
            high, high_open = x, is_open
    if low is not None and high is not None and (low > high or low == high and (
            low_open or high_open)):
        raise ValueError(f"json_schema: no number lies within the bounds (from {low} to "
                         f"{high}): an empty language")
    return low, low_open, high, high_open


def bound_keywords(schema: dict):
    """(name, value) of each bound keyword the schema gives, each checked to be a number."""
    found = [(name, schema[name]) for name in LOWER + UPPER if name in schema]
    for name, x in found:
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
            raise ValueError(f"json_schema: {name} must be a finite number, got {x!r}")
    return found


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


def number_range(low, low_open: bool, high, high_open: bool) -> str:
    """The texts, without exponent, of the numbers within the bounds (number_bounds')."""
    parts = []
    if low is None or low < 0:  # v = -u, u >= 0 with the bounds mirrored
        negative = unsigned(None if high is None else -high, high_open,
                            None if low is None else -low, low_open)
        parts += [] if negative is None else ["-" + negative]
    positive = unsigned(low, low_open, high, high_open)
    parts += [] if positive is None else [positive]
    return either(parts)


def unsigned(low, low_open: bool, high, high_open: bool):
    """The texts I.f of the numbers u >= 0 within the bounds, as the formula above (None:
    there are none)."""
    if low is not None and (low < 0 or (low == 0 and not low_open)):
        low = None  # u >= 0 is all the bound says
    first = 0 if low is None else low + 1 if low_open else low  # I from first with any f
    last = None if high is None else high - 1  # to last (I < hi)
    parts = []
    if last is None or first <= last:
        parts.append(naturals(first, last) + FRACTION)
    if low is not None and low_open and (high is None or low < high):
        parts.append(str(low) + NONZERO_FRACTION)  # I = lo, f > 0
    if high is not None and not high_open and high >= first:
        parts.append(str(high) + ZERO_FRACTION)  # I = hi, f = 0
    return either(parts) if parts else None


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


