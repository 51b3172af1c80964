"""The paged KV cache as a forward pass sees it: the rows of a step's requests read and written
through their block tables (blocks.py holds the pool).

`PagedBatch`: a row per request, every row computing as many new tokens (a step of decodes).
`PackedBatch`: the requests' chunks of different lengths end to end in one row (a step that
reads prompts too). Each implements the cache interface Model.forward speaks (kv_cache.py), and
reads the keys and values of a request in the order a contiguous cache holds them, so the
logits are the contiguous cache's (tests/test_serving.py).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .block_manager import BlockManager as BlockPool, blocks_for


def write(pool: BlockPool, layer: int, blocks, offsets, k, v) -> None:
    """The new keys and values k, v (B, K, T, d) into the pool at (blocks, offsets), (B, T)
    each. They are copied whole into (B, T, K, d) first: a scattered write from a strided
    source copies element by element, about 200 times slower."""
    pool.k[layer, blocks, offsets] = np.ascontiguousarray(k.swapaxes(1, 2))
    pool.v[layer, blocks, offsets] = np.ascontiguousarray(v.swapaxes(1, 2))


def gather(blocks: np.ndarray) -> np.ndarray:
    """Each row's blocks (B, n, block_size, K, d) laid end to end, seen as (B, K, n *
    block_size, d): the positions of a row are consecutive in the gathered copy, so the
    (B, n * block_size, K, d) reshape is a view, and so is the head axis brought forward."""
    B, n, bs, K, d = blocks.shape
    return blocks.reshape(B, n * bs, K, d).swapaxes(1, 2)


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
        if (pool.shape[0], len(self.tables), pool.shape[3], pool.shape[4]) != shape \
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
        write(self.pool, layer, blocks, offsets, k, v)
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


@dataclass(eq=False)
class PackedBatch:
    """One forward pass for requests computing different numbers of tokens (a step's decodes
    and prompt chunks together): their new tokens laid end to end in one row of T = sum_r n_r
    tokens, as variable-length attention batches them (FlashAttention's varlen, vLLM). The
    linear layers, norms and RoPE see one (1, T) row, each token at its own position; attention
    keeps each text to itself:

        query i (request r_i, position p_i) sees key j (request r_j, position p_j)
            iff r_i = r_j and p_j <= p_i            (and p_i - p_j < W in a local layer)

    The keys are every request's blocks end to end, in request order, gathered at once; the
    positions past a request's end that its last block holds are hidden by the same rule, and
    attention runs a request at a time (`attend`), so no score is spent on another's keys. The
    Model's cache protocol, plus `packed`: the model then takes the positions and the mask from
    here (positions_and_mask, sliding_window), and attention from `attend`."""

    pool: BlockPool
    tables: list  # per request, its block ids (holding blocks for the new positions)
    length: np.ndarray  # (R,) positions computed per request
    counts: np.ndarray  # (R,) new tokens per request, laid end to end in this order
    inner: object  # the model's attention (Model.attend), which `attend` runs per request
    pad: None = None
    packed: bool = True

    def __post_init__(self):
        bs, R = self.pool.block_size, len(self.tables)
        ends = self.length + self.counts
        held = blocks_for(ends, bs) * bs  # (R,) positions of the blocks each request reads
        self.spans = list(zip(np.cumsum(self.counts) - self.counts, np.cumsum(self.counts),
                              np.cumsum(held) - held, np.cumsum(held)))  # its queries, keys
        self.blocks = np.concatenate([table[:n // bs] for table, n in zip(self.tables, held)])
        self.query = (np.repeat(np.arange(R), self.counts),  # (T,) request and position
                      np.concatenate([np.arange(s, e) for s, e in zip(self.length, ends)]))
        self.key = (np.repeat(np.arange(R), held),  # (S,) request and position of each key
                    np.concatenate([np.arange(n) for n in held]))
        new = np.repeat(np.cumsum(held) - held, self.counts) + self.query[1]  # (T,) among keys
        self.new = self.blocks[new // bs][None], (new % bs)[None]  # (1, T) blocks, offsets

    def check_fits(self, shape, dtype) -> None:
        pool = self.pool.k
        if (pool.shape[0], 1, pool.shape[3], pool.shape[4]) != shape or pool.dtype != dtype:
            raise ValueError(f"cache: a block pool of {pool.shape} / {pool.dtype} for one "
                             f"packed row does not fit this model and batch (expected {shape} "
                             f"/ {dtype})")

    def positions_and_mask(self):
        """Positions (1, T) and the mask (T, S): a query sees its own text's keys, up to its
        own position."""
        (rq, pq), (rk, pk) = self.query, self.key
        return pq[None], (rq[:, None] == rk) & (pk <= pq[:, None])

    def sliding_window(self, mask, window: int):
        """A local layer's view, as layers.sliding_window: (0, the mask with p_i - p_j < W)."""
        return 0, mask & (self.query[1][:, None] - self.key[1] < window)

    def append(self, layer: int, k: np.ndarray, v: np.ndarray):
        """Write the new keys and values k, v (1, K, T, d) in each request's blocks and return
        every request's blocks end to end, (1, K, S, d)."""
        write(self.pool, layer, *self.new, k, v)
        return (gather(self.pool.k[layer, self.blocks][None]),
                gather(self.pool.v[layer, self.blocks][None]))

    def attend(self, q, k, v, mask, scale=None):
        """Attention a request at a time: its queries (1, H, n_r, d) against its own keys and
        values (1, K, S_r, d), its part of the mask; the other requests' keys, which the mask
        hides, would weigh exactly 0. Returns (1, H, T, d)."""
        out = np.empty(q.shape, np.result_type(q, v))
        for a, b, c, e in self.spans:
            out[:, :, a:b] = self.inner(q[:, :, a:b], k[:, :, c:e], v[:, :, c:e],
                                        mask[a:b, c:e], scale)
        return out

    def advance(self, n: int) -> None:
        """Every request's new tokens are computed (n = T, all of them)."""
        self.length = self.length + self.counts
