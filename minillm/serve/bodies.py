"""A request's body parsed as JSON the server can work with, or a 400/413 saying why not.

`json.loads` takes more than the server can use: numbers past a float (1e400 is inf), nesting
deep enough to exhaust Python's stack (a RecursionError), and lone surrogates ("\\ud800"),
which are valid JSON escapes but no character: text holding one cannot be encoded to UTF-8,
so neither tokenized nor written back in an error message. Each is refused here, before any
field is read, with the top-level field it was found in as `param`.
"""
from __future__ import annotations

import json
import math

from .errors import SURROGATE, APIError, plain

MAX_BODY_BYTES = 1 << 20  # 1 MiB: the longest prompt of any context and its knobs
MAX_DEPTH = 32  # arrays and objects within each other (a chat request needs about 6)


def parse(data: bytes):
    """The body's JSON value: UTF-8, no NaN or Infinity, finite numbers, at most MAX_DEPTH
    levels deep, no lone surrogate in any string or key."""
    try:
        value = json.loads(data.decode("utf-8"), parse_constant=not_a_number,
                           parse_float=finite)
    except RecursionError:
        raise invalid(None, f"nested deeper than {MAX_DEPTH} levels") from None
    except (UnicodeDecodeError, ValueError) as e:
        raise invalid(None, f"not valid JSON: {plain(str(e))}") from None
    check(value)
    return value


def check(value) -> None:
    """Walk the value without recursion: its depth, and every string and key plain text."""
    stack = [(value, 1, None)]
    while stack:
        item, depth, field = stack.pop()
        if isinstance(item, str):
            if SURROGATE.search(item):
                raise invalid(field, "a string holds a lone surrogate (\\ud800-\\udfff), "
                                     "which is no character")
            continue
        if not isinstance(item, (dict, list)):
            continue
        if depth > MAX_DEPTH:
            raise invalid(field, f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(item, dict):
            for key, inner in item.items():
                stack.append((key, depth, field or key))
                stack.append((inner, depth + 1, field or key))
        else:
            stack.extend((inner, depth + 1, field) for inner in item)


def invalid(field, message: str) -> APIError:
    if field is not None and SURROGATE.search(field):
        field = plain(field)
    where = f"{field}: " if field is not None else ""
    return APIError(400, f"the body: {where}{message}", field, "invalid_json")


def not_a_number(name):
    raise ValueError(f"{name} is not a JSON number")


def finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is past the largest number")
    return value
