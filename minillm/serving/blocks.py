"""The paged KV cache (PagedAttention, Kwon et al. 2023): fixed-size blocks in one pool, a block
table per request.

A request's text is cut into blocks of `block_size` positions; position p of the text lives in
block table[p // block_size] at offset p % block_size:

    pool.k[layer, table[p // block_size], :, p % block_size]    the key of position p
    (n_layers, num_blocks, n_kv_heads, block_size, head_dim)     the pool's shape

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

    k: np.ndarray  # (n_layers, num_blocks, n_kv_heads, block_size, head_dim)
    v: np.ndarray
    free: list = field(default_factory=list)  # block ids, the next one given out last
    refs: list = field(default_factory=list)  # refs[b]: how many tables point at block b

    @classmethod
    def empty(cls, n_layers, num_blocks, n_kv_heads, block_size, head_dim, dtype) -> "BlockPool":
        k = np.zeros((n_layers, num_blocks, n_kv_heads, block_size, head_dim), dtype)
        return cls(k, np.zeros_like(k), list(range(num_blocks))[::-1], [0] * num_blocks)

    @property
    def block_size(self) -> int:
        return self.k.shape[3]

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


def gather(blocks: np.ndarray) -> np.ndarray:
    """A row's blocks (n, K, block_size, d) laid end to end: (K, n * block_size, d)."""
    n, K, bs, d = blocks.shape
    return blocks.transpose(1, 0, 2, 3).reshape(K, n * bs, d)


@dataclass(eq=False)
class PagedBatch:
    """What one forward pass of Model.forward sees as its cache: rows of requests, each
    continuing its own text. Row r has `length[r]` positions computed, in the blocks of
    `tables[r]`; the pass appends T new positions to every row, for which the tables already
    hold blocks. The Model's cache protocol: check_fits, length, pad, append, advance."""

    pool: BlockPool
    tables: list  # per row, its block ids
    length: np.ndarray  # (B,) positions computed per row: where its new tokens start
    pad: None = None  # rows are never padded: each has its own start instead

    def check_fits(self, shape, dtype) -> None:
        n_layers, B, heads, head_dim = shape
        pool = self.pool.k
        if (pool.shape[0], len(self.tables), pool.shape[2], pool.shape[4]) != shape \
                or pool.dtype != dtype:
            raise ValueError(f"cache: a block pool of {pool.shape} / {pool.dtype} for "
                             f"{len(self.tables)} rows does not fit this model and batch "
                             f"(expected {shape} / {dtype})")

    def append(self, layer: int, k: np.ndarray, v: np.ndarray):
        """Write the new keys and values k, v (B, K, T, d) at positions [length_r, length_r +
        T) of each row's blocks, and return each row's keys and values gathered from its table,
        (B, K, S, d) with S = max_r length_r + T; a row's positions past its own end are zeros,
        which the mask hides (layers.positions_and_mask with a start per row)."""
        B, K, T, d = k.shape
        bs = self.pool.block_size
        keys = np.zeros((B, K, int(self.length.max()) + T, d), k.dtype)
        values = np.zeros_like(keys)
        for r, table in enumerate(self.tables):
            end = int(self.length[r]) + T
            where = np.arange(end - T, end)  # the new positions of row r
            blocks, offsets = np.asarray(table)[where // bs], where % bs
            self.pool.k[layer, blocks, :, offsets] = k[r].swapaxes(0, 1)  # (T, K, d)
            self.pool.v[layer, blocks, :, offsets] = v[r].swapaxes(0, 1)
            held = table[:blocks_for(end, bs)]  # gather: (n, K, bs, d) -> (K, n bs, d)
            keys[r, :, :end] = gather(self.pool.k[layer, held])[:, :end]
            values[r, :, :end] = gather(self.pool.v[layer, held])[:, :end]
        return keys, values

    def advance(self, n: int) -> None:
        """Count the n positions just appended to every row as computed."""
        self.length = self.length + n
