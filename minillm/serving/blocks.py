"""The paged KV cache (PagedAttention, Kwon et al. 2023): fixed-size blocks in one pool, a block
table per request.

A request's text is cut into blocks of `block_size` positions; position p of the text lives in
block table[p // block_size] at offset p % block_size:

    pool.k[layer, table[p // block_size], p % block_size]    the keys of position p, (K, d)
    (n_layers, num_blocks, block_size, n_kv_heads, head_dim)  the pool's shape

so a request holds only the blocks its text fills (the last one partly), whatever the context
length, and requests that start alike can share their first blocks (prefix_cache.py). A block
is free, or held by the requests that point at it: `refs[b]` counts them, and a block returns
to the free list when its count falls to 0.

Attention reads a request's keys and values through its table: the reference gathers them into
one contiguous array per row (`PagedBatch.append`), the same numbers as a contiguous cache, in
the same order, so the logits are the contiguous cache's (tests/test_serving.py).

Gemma 3's local layers keep every position too: a block wholly before a local layer's window is
never read again by that layer, but the global layers still read it, and all layers share one
table. No block is freed early.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(eq=False)
class BlockPool:
    """Every layer's keys and values in `num_blocks` blocks, the free list and the counts."""

    k: np.ndarray  # (n_layers, num_blocks, block_size, n_kv_heads, head_dim)
    v: np.ndarray
    free: list = field(default_factory=list)  # block ids, the next one given out last
    refs: list = field(default_factory=list)  # refs[b]: how many tables point at block b

    @classmethod
    def empty(cls, n_layers, num_blocks, block_size, n_kv_heads, head_dim, dtype) -> "BlockPool":
        k = np.zeros((n_layers, num_blocks, block_size, n_kv_heads, head_dim), dtype)
        v = np.zeros(k.shape, dtype)  # not zeros_like, which writes every page at once
        return cls(k, v, list(range(num_blocks))[::-1], [0] * num_blocks)

    @property
    def block_size(self) -> int:
        return self.k.shape[2]

    @property
    def num_blocks(self) -> int:
        return self.k.shape[1]

    def allocate(self) -> int:
        """A free block, now held once."""
        block = self.free.pop()
        self.refs[block] = 1
        return block

    def hold(self, block: int) -> None:
        """One more table points at `block` (a shared prefix)."""
        self.refs[block] += 1

    def release(self, block: int) -> bool:
        """One table less points at `block`; True when nobody holds it any more."""
        self.refs[block] -= 1
        return self.refs[block] == 0


def blocks_for(n: int, block_size: int) -> int:
    """How many blocks hold n positions: ceil(n / block_size)."""
    return -(-n // block_size)
