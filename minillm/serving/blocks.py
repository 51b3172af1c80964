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
        v = np.zeros(k.shape, dtype)  # not zeros_like, which writes every page at once
        return cls(k, v, list(range(num_blocks))[::-1], [0] * num_blocks)

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
    """Each row's blocks (B, n, K, block_size, d) laid end to end: (B, K, n * block_size, d)."""
    B, n, K, bs, d = blocks.shape
    return blocks.transpose(0, 2, 1, 3, 4).reshape(B, K, n * bs, d)


@dataclass(eq=False)
class PagedBatch:
    """What one forward pass of Model.forward sees as its cache: rows of requests, each
    continuing its own text. Row r has `length[r]` positions computed, in the blocks of
    `tables[r]`; the pass appends T new positions to every row, for which the tables already
    hold blocks. The Model's cache protocol: check_fits, length, pad, append, advance."""

    pool: BlockPool
    tables: list  # per row, its block ids
    length: np.ndarray  # (B,) positions computed per row: where its new tokens start (one
    # row may give a count instead: speculative.py's view of one request, which rolls back)
    pad: None = None  # rows are never padded: each has its own start instead
    where: tuple | None = None  # blocks_of_new_positions, once per pass

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
        (B, K, S, d) with S = max_r length_r + T. A row's positions past its own end hold
        whatever its table's padding points at, and the mask hides them (a start per row in
        layers.positions_and_mask): their weights are exactly 0."""
        T = k.shape[2]
        if self.where is None:  # the same blocks for every layer: found once per pass
            self.where = self.blocks_of_new_positions(T)
        blocks, offsets, tables, end = self.where
        self.pool.k[layer, blocks, :, offsets] = k.transpose(0, 2, 1, 3)  # (B, T, K, d)
        self.pool.v[layer, blocks, :, offsets] = v.transpose(0, 2, 1, 3)
        keys = gather(self.pool.k[layer, tables])[:, :, :end]  # (B, K, S, d)
        values = gather(self.pool.v[layer, tables])[:, :, :end]
        return keys, values

    def blocks_of_new_positions(self, T: int):
        """(blocks, offsets) of the T new positions of every row, (B, T) each; the rows'
        tables as one (B, n) array, each padded with its first block to the longest; S."""
        length = np.atleast_1d(self.length)
        bs, end = self.pool.block_size, int(length.max()) + T
        n = blocks_for(end, bs)
        tables = np.array([table[:n] + table[:1] * (n - len(table[:n]))
                           for table in self.tables])  # (B, n)
        new = length[:, None] + np.arange(T)  # (B, T) the new positions
        return np.take_along_axis(tables, new // bs, axis=1), new % bs, tables, end

    def advance(self, n: int) -> None:
        """Count the n positions just appended to every row as computed."""
        self.length, self.where = self.length + n, None

    def truncate(self, n: int) -> None:
        """Forget every position from n on (one row: speculative decoding's rollback); the
        blocks past it are the engine's to give back."""
        self.length, self.where = int(n), None
