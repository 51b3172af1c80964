"""How much a check tries: a profile of drawn cases, and the seeded cases that cross the sizes
where paged caches change block.

A paged KV cache (vLLM's blocks of 16, llama.cpp's and SGLang's pages, a kernel's tile of 32 or
64) is most often wrong where a text passes from one block to the next: the first cell of a new
page written to the wrong block, a page table one entry short, a rollback that frees a page it
still needs. Drawn texts of up to 16 tokens never get there. So, after the drawn cases, each
check runs seeded cases (uniform ids over the whole vocabulary) whose texts cross every size of
the profile's `boundaries` that the engine's context can hold, in three ways: one token a call
across the edge, a long chunk spanning it, and (for rollback) a truncation on either side of it.

    profile    drawn cases  drawn texts  crosses              window check: examples, text
    "quick"    10           <= 16        16                   5, passes 16
    "default"  25           <= 16        16, 32, 64           10, passes 64
    "long"     100          <= 32        16, 32, 64, 128, 256 25, passes 256

An explicit max_examples or max_length replaces the profile's (the boundaries stay).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np


@dataclass(frozen=True)
class Profile:
    """max_examples: drawn cases per property; max_length: the longest drawn text; boundaries:
    the text lengths the seeded cases cross; window_examples: the window check's drawn
    prompts."""

    name: str
    max_examples: int
    max_length: int
    boundaries: tuple
    window_examples: int


PROFILES = {
    "quick": Profile("quick", 10, 16, (16,), 5),
    "default": Profile("default", 25, 16, (16, 32, 64), 10),
    "long": Profile("long", 100, 32, (16, 32, 64, 128, 256), 25),
}


def profile_of(profile: str, max_length=None, max_examples=None) -> Profile:
    """The named profile with an explicit max_length or max_examples in place of its own."""
    if profile not in PROFILES:
        raise ValueError(f"profile: one of {sorted(PROFILES)}, got {profile!r}")
    chosen = PROFILES[profile]
    if max_length is not None:
        chosen = replace(chosen, max_length=max_length)
    if max_examples is not None:
        chosen = replace(chosen, max_examples=max_examples, window_examples=max_examples)
    return chosen


def crossable(boundaries, context_length: int, room: int = 2) -> list[int]:
    """The boundaries b whose crossing (a text of b + room tokens) fits the engine's context."""
    return [b for b in boundaries if b + room <= context_length]


def boundary_texts(vocab_size: int, batch: int, length: int, seed: int) -> np.ndarray:
    """(batch, length) seeded uniform ids: the seeded cases' texts."""
    return np.random.default_rng(seed).integers(0, vocab_size, (batch, length))


def chunk_crossings(b: int) -> list[tuple[int, list[int]]]:
    """(length, cuts) of the chunked cases that cross b: a prefill to just before b, then one
    token a call over the edge; and a prefill up to b - 2 followed by one chunk of four tokens
    spanning the edge (a long chunk into a filled cache, as check_cache_equivalence wants)."""
    return [(b + 2, [b - 1, b, b + 1]), (b + 2, [b - 2])]


def rollback_crossings(b: int) -> list[tuple[int, int, int]]:
    """(length cached, keep, length fed after) of the rollback cases around b: cache past the
    edge and truncate just before it (then feed across it again), or just after it."""
    return [(b + 2, b - 1, 2), (b + 2, b + 1, 1)]
