"""One typed reading of GGUF metadata: every value minillm uses, checked before it is used.

    n_layers = read(metadata, "llama.block_count", "uint32", low=1)
    merges = read(metadata, "tokenizer.ggml.merges", "array", element="string", default=None)
    fields = tokenizer_metadata(metadata)           # every tokenizer.ggml.* key, checked

A GGUF file is untrusted: its metadata ({key: value}, as `read_gguf` returns it) can hold any
type at any key. `read` states what a key must be, a GGUF type (and for an array its element
type) and a range, and answers anything else with one WeightsError

    tokenizer.ggml.bos_token_id: found array of 2 integers, expected uint32 in [0, 262]

The type is checked on the value as read, never coerced: an integer type takes a Python int
(not a bool) inside the type's range, so a count the writer stored as uint64 reads as a uint32
when it fits; a float type takes a finite Python float, never an int or a string; "bool" takes
True or False only; "string" a str; "array" a list whose every element is of `element`.
A key the file lacks is `default` when one is given, else an error.
"""
from __future__ import annotations

import math

from ..plumbing.errors import WeightsError

INTEGER_RANGES = {"uint8": (0, 2**8 - 1), "int8": (-2**7, 2**7 - 1),
                  "uint16": (0, 2**16 - 1), "int16": (-2**15, 2**15 - 1),
                  "uint32": (0, 2**32 - 1), "int32": (-2**31, 2**31 - 1),
                  "uint64": (0, 2**64 - 1), "int64": (-2**63, 2**63 - 1)}
FLOAT_MAX = {"float32": float.fromhex("0x1.fffffep127"), "float64": math.inf}  # largest finite
TYPES = (*INTEGER_RANGES, *FLOAT_MAX, "bool", "string", "array")
REQUIRED = object()  # the default of a key that must be present

# llama.cpp's llama_token_type: UNDEFINED, NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE.
TOKEN_TYPES = range(0, 7)


def read(metadata, key, type, *, element=None, low=None, high=None, default=REQUIRED):
    """The value at `key`, checked to be of GGUF `type` (for "array": every element of
    `element`), and for numbers (every number of an array) within [low, high]."""
    if type not in TYPES or (type == "array") != (element is not None) or element == "array":
        raise ValueError(f"read: bad type {type!r} / element {element!r}")
    if key not in metadata:
        if default is REQUIRED:
            raise WeightsError(f"{key}: missing, expected {_expected(type, element, low, high)}")
        return default
    value = metadata[key]
    if type != "array":
        if not _fits(value, type, low, high):
            raise WeightsError(f"{key}: found {describe(value)}, expected "
                               f"{_expected(type, None, low, high)}")
        return value
    if not isinstance(value, list):
        raise WeightsError(f"{key}: found {describe(value)}, expected "
                           f"{_expected(type, element, low, high)}")
    if not _all_fit(value, element, low, high):
        i, item = next((i, v) for i, v in enumerate(value) if not _fits(v, element, low, high))
        raise WeightsError(f"{key}[{i}]: found {describe(item)}, expected "
                           f"{_expected(element, None, low, high)}")
    return value


def _all_fit(values, type, low, high) -> bool:
    """Whether every value fits, as _fits says; strings and integers in bulk (the integers'
    range on their extremes), so that a vocabulary's 50,000 entries take milliseconds."""
    if type == "string":
        return all(isinstance(v, str) for v in values)
    if type in INTEGER_RANGES:
        return all(isinstance(v, int) and not isinstance(v, bool) for v in values) and (
            not values or _fits(min(values), type, low, high)
            and _fits(max(values), type, low, high))
    return all(_fits(v, type, low, high) for v in values)  # floats one by one: NaN has no order


def _fits(value, type, low, high) -> bool:
    """Whether a Python value read from the file is a GGUF `type` within [low, high]."""
    if type in INTEGER_RANGES:
        lo, hi = INTEGER_RANGES[type]
        ok = isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi
    elif type in FLOAT_MAX:
        ok = isinstance(value, float) and abs(value) <= FLOAT_MAX[type]  # NaN fails too
    elif type == "bool":
        return isinstance(value, bool)
    else:
        return isinstance(value, str)
    return ok and (low is None or value >= low) and (high is None or value <= high)


def _expected(type, element, low, high) -> str:
    kind = f"array of {element}" if type == "array" else type
    if low is not None and high is not None:
        return f"{kind} in [{low}, {high}]"
    if low is not None:
        return f"{kind} >= {low}"
    if high is not None:
        return f"{kind} <= {high}"
    return f"finite {kind}" if type in FLOAT_MAX else kind


def describe(value) -> str:
    """A value as the message shows it: its kind and, when short, itself."""
    if isinstance(value, bool):
        return f"bool {str(value).lower()}"
    if isinstance(value, int):
        return f"integer {value}"
    if isinstance(value, float):
        return f"float {value!r}"
    if isinstance(value, str):
        return f"string {value[:40]!r}" + ("..." if len(value) > 40 else "")
    if isinstance(value, list):
        if not value:
            return "empty array"
        kinds = sorted({describe(v).split(" ")[0] for v in value})
        return f"array of {len(value)} {'/'.join(k + 's' for k in kinds)}"
    return type(value).__name__


# ---------------------------------------------------------------------- the tokenizer's keys

TOKENIZER_SPECIAL_IDS = ("bos_token_id", "eos_token_id", "unknown_token_id", "padding_token_id",
                         "eot_token_id", "eom_token_id", "fim_pre_token_id", "fim_suf_token_id",
                         "fim_mid_token_id", "fim_pad_token_id", "fim_rep_token_id",
                         "fim_sep_token_id", "prefix_token_id", "suffix_token_id",
                         "middle_token_id")


def tokenizer_metadata(metadata) -> dict:
    """Every tokenizer key minillm reads, checked: {full key: value}, None where the file has
    no such key.

        tokenizer.ggml.model                   string (required)
        tokenizer.ggml.tokens                  array of string, at least one (required)
        tokenizer.ggml.scores                  array of float32, one per token
        tokenizer.ggml.token_type              array of int32 in [0, 6], one per token
        tokenizer.ggml.merges                  array of string, each "left right"
        tokenizer.ggml.{bos,eos,unknown,padding}_token_id   uint32, a token id
        tokenizer.ggml.{eot,eom,fim_*,prefix,suffix,middle}_token_id   uint32, a token id
        tokenizer.ggml.add_bos_token, add_eos_token, add_space_prefix   bool
        tokenizer.ggml.pre                     string
        tokenizer.chat_template                string
        general.name, general.architecture     string (llama.cpp's rules by name)
    """
    def get(name, type, **kwargs):
        return read(metadata, f"tokenizer.ggml.{name}", type, default=None, **kwargs)

    out = {"tokenizer.ggml.model": read(metadata, "tokenizer.ggml.model", "string"),
           "tokenizer.ggml.tokens": read(metadata, "tokenizer.ggml.tokens", "array",
                                         element="string")}
    n = len(out["tokenizer.ggml.tokens"])
    if n == 0:
        raise WeightsError("tokenizer.ggml.tokens: found empty array, expected at least one "
                           "token")
    for name, element, kwargs in (("scores", "float32", {}),
                                  ("token_type", "int32", {"low": TOKEN_TYPES.start,
                                                           "high": TOKEN_TYPES.stop - 1})):
        values = get(name, "array", element=element, **kwargs)
        if values is not None and len(values) != n:
            raise WeightsError(f"tokenizer.ggml.{name}: found {len(values)} values, expected "
                               f"one per token ({n})")
        out[f"tokenizer.ggml.{name}"] = values
    merges = get("merges", "array", element="string")
    for i, merge in enumerate(merges or ()):
        left, _, right = merge.partition(" ")
        if not left or not right:
            raise WeightsError(f"tokenizer.ggml.merges[{i}]: found {describe(merge)}, expected "
                               "two tokens separated by a space")
    out["tokenizer.ggml.merges"] = merges
    for name in TOKENIZER_SPECIAL_IDS:
        out[f"tokenizer.ggml.{name}"] = get(name, "uint32", low=0, high=n - 1)
    for name in ("add_bos_token", "add_eos_token", "add_space_prefix"):
        out[f"tokenizer.ggml.{name}"] = get(name, "bool")
    out["tokenizer.ggml.pre"] = get("pre", "string")
    out["tokenizer.chat_template"] = read(metadata, "tokenizer.chat_template", "string",
                                          default=None)
    for key in ("general.name", "general.architecture"):
        out[key] = read(metadata, key, "string", default=None)
    return out
