"""Text into tokens without holding up the other requests: a bound checked before tokenizing,
and a pool of threads of its own for the long texts.

A token stands for at most `longest` bytes of text (the longest token of the vocabulary), so a
text of b UTF-8 bytes is at least b / longest tokens, and more than the context can hold when
b > longest x context: refused before it is tokenized. A tokenizer that normalizes its text
(NFKC, lowercasing) may shrink it up to threefold first (a fullwidth "Ａ", three bytes, is
"A"), so for those the bound is three times as many bytes. Byte-level BPE merges in
O(n log n) (text/bpe.py), so a text within the bound takes a bounded time.

A body whose texts are short is checked and tokenized on the event loop (it takes less time
than a thread switch); a longer one on TOKENIZER_THREADS threads of their own, so that it
waits behind other long texts only, never the other way round, and the asyncio pool that the
rest of the server uses stays free.
"""
from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from .errors import bad_shape, bad_value

INLINE_BYTES = 4096  # texts of a body up to this size are tokenized on the event loop
TOKENIZER_THREADS = 2


def longest_token_bytes(tokenizer) -> int:
    """The most bytes one token stands for (3x for a tokenizer that normalizes its text)."""
    longest = max(len(tokenizer.token_bytes(i)) for i in range(len(tokenizer)))
    return longest * (3 if getattr(tokenizer, "_normalizes", False) else 1)


def text_bytes(value) -> int:
    """The UTF-8 bytes of every string within a JSON value (without recursion)."""
    total, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item.encode("utf-8", "surrogatepass"))
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return total


class Tokenizing:
    """Where a body's texts are checked and tokenized: inline when short, else on the pool."""

    def __init__(self, threads: int = TOKENIZER_THREADS):
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="minillm-tokenize")

    async def run(self, fn, body, *args):
        """fn(body, *args), on the event loop or on the pool by the size of body's texts."""
        if text_bytes(body) <= INLINE_BYTES:
            return fn(body, *args)
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, body, *args)


# -- POST /tokenize and /detokenize, as llama-server answers them ------------------------------

def tokenize(body, tokenizer) -> dict:
    """{content, add_special (false), with_pieces (false)} -> {"tokens": [id, ...]}, or with
    pieces [{"id", "piece"}]: the piece a string, or its bytes where they are not UTF-8."""
    body = checked(body, {"content": str, "add_special": bool, "with_pieces": bool},
                   "content")
    special = body.get("add_special", False)
    ids = [int(t) for t in tokenizer.encode(body["content"], add_special_tokens=special)]
    if not body.get("with_pieces"):
        return {"tokens": ids}
    return {"tokens": [{"id": t, "piece": piece(tokenizer.token_bytes(t))} for t in ids]}


def piece(data: bytes):
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return list(data)


def detokenize(body, tokenizer, vocab: int) -> dict:
    """{tokens: [id, ...]} -> {"content": their text} (special tokens' text included)."""
    tokens = checked(body, {"tokens": list}, "tokens")["tokens"]
    if not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < len(tokenizer)
               for t in tokens):
        raise bad_value("tokens", f"must be token ids in [0, {len(tokenizer)})")
    return {"content": tokenizer.decode(tokens)}


def checked(body, kinds: dict, required: str) -> dict:
    """The body's fields, each of its kind (422 else), `required` present."""
    if not isinstance(body, dict):
        raise bad_shape(None, f"the body must be a JSON object, got {type(body).__name__}")
    for name, value in body.items():
        if name not in kinds:
            raise bad_shape(name, f"unknown field; the fields are {', '.join(kinds)}")
        if value is not None and (not isinstance(value, kinds[name])
                                  or isinstance(value, bool) != (kinds[name] is bool)):
            raise bad_shape(name, f"must be {kinds[name].__name__}")
    if body.get(required) is None:
        raise bad_shape(required, "missing")
    return {name: value for name, value in body.items() if value is not None}
