"""A step's requests as Model.forward's cache (kv_cache.py says what it asks), their keys and
values read and written through their block tables (block_manager.py), in a contiguous cache's
order, so the logits are the contiguous cache's: `PagedBatch`, a row per request, all computing
as many new tokens (decodes); `PackedBatch`, chunks of different lengths end to end in one row.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, NamedTuple

import numpy as np

from ..layers import attention, positions_and_mask, sliding_window
from .block_manager import blocks_for


def check_fits(pool, rows: int, shape, dtype) -> None:
    """A pool of (n_layers, _, _, n_kv_heads, head_dim) = `shape` for `rows` rows, in `dtype`."""
    got = pool.k.shape
    if (got[0], rows, got[3], got[4]) != shape or pool.k.dtype != dtype:
        raise ValueError(f"cache: a block pool of {got} / {pool.k.dtype} for {rows} rows does "
                         f"not fit this model and batch (expected {shape} / {dtype})")


def write(pool, layer: int, blocks, offsets, k, v) -> None:
    """The new keys and values k, v (B, K, T, d) into the pool at (blocks, offsets), (B, T) each,
    copied whole first: a scattered write from a strided source copies element by element."""
    pool.k[layer, blocks, offsets] = np.ascontiguousarray(k.swapaxes(1, 2))
    pool.v[layer, blocks, offsets] = np.ascontiguousarray(v.swapaxes(1, 2))


def gather(blocks: np.ndarray) -> np.ndarray:
    """Each row's blocks (B, n, block_size, K, d) end to end, seen as (B, K, n * block_size, d):
    a row's positions are consecutive in the gathered copy, so both steps are views."""
    B, n, bs, K, d = blocks.shape
    return blocks.reshape(B, n * bs, K, d).swapaxes(1, 2)


@dataclass(eq=False)
class PagedBatch:
    """Rows of requests, each continuing its text by the same T new tokens: row r has
    `length[r]` positions computed in the blocks of `tables[r]` (with room for T more). The
    positions past a row's end that the longest row adds are masked: they weigh exactly 0."""

    pool: object  # .k, .v: (n_layers, num_blocks, block_size, n_kv_heads, head_dim)
    tables: list  # per row, its block ids
    length: np.ndarray  # (B,) positions computed per row: where its new tokens start
    attend: Callable = field(default=attention, repr=False)  # the model's attention
    slots: tuple | None = None  # where the new positions go (blocks, offsets, tables), a pass

    def check_fits(self, shape, dtype) -> None:
        check_fits(self.pool, len(self.tables), shape, dtype)

    def positions_and_mask(self, T: int):
        return positions_and_mask(len(self.tables), T, self.length, None)

    def sliding_window(self, mask, T: int, window: int):
        return sliding_window(mask, self.length, T, window)

    def append(self, layer: int, k: np.ndarray, v: np.ndarray):
        """Write k, v (B, K, T, d) at positions [length_r, length_r + T) of each row's blocks;
        return every row's keys and values, (B, K, S, d), S = max_r length_r + T."""
        T, bs = k.shape[2], self.pool.block_size
        S = int(self.length.max()) + T
        if self.slots is None:  # the same blocks in every layer: found once per pass
            n = blocks_for(S, bs)  # the rows' tables as one (B, n) array, padded with a block
            tables = np.array([t[:n] + t[:1] * (n - len(t[:n])) for t in self.tables])
            new = self.length[:, None] + np.arange(T)  # (B, T) the new positions
            self.slots = np.take_along_axis(tables, new // bs, axis=1), new % bs, tables
        blocks, offsets, tables = self.slots
        write(self.pool, layer, blocks, offsets, k, v)
        return (gather(self.pool.k[layer, tables])[:, :, :S],  # (B, K, S, d)
                gather(self.pool.v[layer, tables])[:, :, :S])

    def advance(self, n: int) -> None:
        """Count the n positions just appended to every row as computed."""
        self.length, self.slots = self.length + n, None


class Span(NamedTuple):
    """A request's place in a packed pass: its queries' columns, its keys' among the gathered."""

    queries: slice
    keys: slice


@dataclass(eq=False)
class PackedBatch:
    """One forward pass for requests computing different numbers of tokens (a step's decodes and
    prompt chunks together), as variable-length attention batches them (FlashAttention's varlen,
    vLLM): their new tokens end to end in one row of T = sum_r n_r tokens. The linear layers,
    norms and RoPE see one (1, T) row, each token at its own position; the keys are every
    request's blocks end to end, in request order. Two requests, blocks of 4 positions:

        request            A: 2 positions cached, 1 new      B: none cached, 3 new
        the row (queries)  a2 | b0 b1 b2                     T = 4
        the keys           a0 a1 a2 .  | b0 b1 b2 .          S = 8 (each request's blocks)
        spans              A: queries [0, 1), keys [0, 3)    B: queries [1, 4), keys [4, 7)

    Attention runs a span at a time (`attend`): a request's queries against its own keys, up
    to its end, under the very mask it would have alone (layers.positions_and_mask, and
    layers.sliding_window in a local layer), so no score is spent on another request's keys
    and "." (a block's room past its request's end) is never read."""

    pool: object  # .k, .v: (n_layers, num_blocks, block_size, n_kv_heads, head_dim)
    tables: list  # per request, its block ids (holding blocks for the new positions)
    length: np.ndarray  # (R,) positions computed per request
    counts: np.ndarray  # (R,) new tokens per request, laid end to end in this order
    attention: Callable = field(default=attention, repr=False)  # the model's, run per span

    def __post_init__(self):
        bs = self.pool.block_size
        ends = self.length + self.counts  # (R,) each request's length after the pass
        widths = blocks_for(ends, bs) * bs  # (R,) the positions of the blocks each one reads
        query_starts = np.cumsum(self.counts) - self.counts  # (R,) where each span begins
        key_starts = np.cumsum(widths) - widths
        self.spans = [Span(slice(q, q + n), slice(k, k + e))
                      for q, n, k, e in zip(query_starts, self.counts, key_starts, ends)]
        self.blocks = np.concatenate([t[:w // bs] for t, w in zip(self.tables, widths)])  # (S/bs,)
        positions = np.concatenate([np.arange(a, e) for a, e in zip(self.length, ends)])  # (T,)
        index = np.repeat(key_starts, self.counts) + positions  # the new tokens among the keys
        self.positions = positions[None]
        self.slots = self.blocks[index // bs][None], (index % bs)[None]  # (block, offset), (1, T)

    def check_fits(self, shape, dtype) -> None:
        check_fits(self.pool, 1, shape, dtype)  # one packed row

    def positions_and_mask(self, T: int):
        """Positions (1, T), and per request (0, the mask of its queries over its own keys)."""
        return self.positions, [(0, positions_and_mask(1, n, start, None)[1])
                                for start, n in zip(self.length, self.counts)]

    def sliding_window(self, masks, T: int, window: int):
        """A local layer's view, per request: (its oldest key read, its window's mask)."""
        return 0, [sliding_window(mask, start, n, window)
                   for (_, mask), start, n in zip(masks, self.length, self.counts)]

    def append(self, layer: int, k: np.ndarray, v: np.ndarray):
        """Write k, v (1, K, T, d) in each request's blocks; return them all, (1, K, S, d)."""
        write(self.pool, layer, *self.slots, k, v)
        return (gather(self.pool.k[layer, self.blocks][None]),
                gather(self.pool.v[layer, self.blocks][None]))

    def attend(self, q, k, v, masks, scale=None):
        """Attention a span at a time, a request's queries (1, H, n_r, d) against its own keys
        (1, K, S_r, d) from its oldest in view, under its own mask: (1, H, T, d)."""
        out = np.empty(q.shape, np.result_type(q, v))
        for (queries, keys), (oldest, mask) in zip(self.spans, masks):
            keys = slice(keys.start + oldest, keys.stop)
            out[:, :, queries] = self.attention(q[:, :, queries], k[:, :, keys], v[:, :, keys],
                                                mask, scale)
        return out

    def advance(self, n: int) -> None:
        """Every request's new tokens are computed (n = T, all of them)."""
        self.length = self.length + self.counts
