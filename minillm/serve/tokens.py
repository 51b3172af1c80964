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
