"""The KV cache: every layer's keys and values in one pair of arrays that grows as it fills.

A forward pass over T new tokens appends their keys and values to each layer at positions
[length, length + T), attends to positions [0, length + T), then advances `length` by T.
Positions at or past `length` are never read, so forgetting the newest tokens (speculative
decoding's rollback) is only moving `length` back: `truncate(n)`.

The arrays hold room for some positions and, when a write would pass it, are replaced by
arrays twice as long (at most `capacity`), the cached positions copied over: writing n tokens
one at a time copies fewer than 2n positions in all, and nobody pays for a context they do not
fill. A caller that knows how much it will write makes the room at once with `reserve(n)`.

Local layers (a sliding window of W keys, Gemma 3) keep their keys in the same arrays, every
position of the text, and the forward pass reads only the last W of them (minillm.layers). A
ring buffer of W positions would hold less, but speculative decoding's rollback crosses the
window's edge: the rejected tokens' keys would have overwritten older keys that the kept
tokens still see, and truncating would need them back. With the plain arrays `truncate(n)` stays
`length = n`, exact by construction, and local and global layers share one layout. The price is
memory the local layers never read again: 2 x (local layers) x (KV heads) x (head size) numbers
per token of text past the window, which a ring buffer would not hold.

What a forward pass asks of its cache, whatever the cache (the serving engine's block batches,
minillm/serving/batches.py, answer the same): `positions_and_mask(T)`, where the T new tokens
sit and which keys each may see; `sliding_window(mask, T, W)`, a local layer's view of them;
`append(layer, k, v)`, the keys and values to attend to; `attend(q, k, v, mask, scale)`, the
attention over them; `advance(T)`, the new tokens counted as cached.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .layers import attention, positions_and_mask, sliding_window


@dataclass
class KVCache:
    """Keys and values of the tokens seen so far, for all layers at once.

    k, v: (n_layers, batch, n_kv_heads, room, head_dim); positions [0, length) hold the cached
    tokens, and at most `capacity` positions ever will (room grows up to it).
    pad: (batch,) number of left-padding tokens in each row, for batches of prompts of
    different lengths; padded keys are masked out and each row's positions start after its pad.
    attend: Attention(q, k, v, mask, scale), the model's own (Model.new_cache gives it; the fast
    path's computes the same numbers another way).
    """

    k: np.ndarray
    v: np.ndarray
    capacity: int
    length: int = 0
    pad: np.ndarray | None = None
    attend: Callable = field(default=attention, repr=False)

    @classmethod
    def empty(cls, n_layers, batch_size, n_kv_heads, capacity, head_dim, dtype,
              attend: Callable = attention) -> "KVCache":
        """A cache of `capacity` positions, none of them allocated yet."""
        k = np.zeros((n_layers, batch_size, n_kv_heads, 0, head_dim), dtype=dtype)
        return cls(k, k.copy(), capacity, attend=attend)

    @property
    def shape(self) -> tuple[int, int, int, int, int]:
        """(n_layers, batch, n_kv_heads, capacity, head_dim): the arrays once full."""
        n_layers, batch, heads, _, head_dim = self.v.shape
        return n_layers, batch, heads, self.capacity, head_dim

    @property
    def dtype(self) -> np.dtype:
        return self.v.dtype

    @property
    def batch_size(self) -> int:
        return self.v.shape[1]

    # -- what a forward pass does ---------------------------------------------------------

    def check_fits(self, shape, dtype) -> None:
        """A cache of (n_layers, B, n_kv_heads, head_dim) = `shape` and `dtype` (whether the
        new tokens fit is append's check)."""
        n_layers, B, heads, head_dim = shape
        got = self.k.shape
        if (got[0], got[1], got[2], got[4]) != shape or self.k.dtype != dtype:
            raise ValueError(f"cache: its arrays {got[:3] + (self.capacity, got[4])} / "
                             f"{self.k.dtype} do not fit this model and batch (expected "
                             f"{(n_layers, B, heads, self.capacity, head_dim)} / {dtype})")

    def positions_and_mask(self, T: int):
        """The positions of T new tokens and which keys each may see (layers.positions_and_mask:
        causality, each row's padding)."""
        return positions_and_mask(self.v.shape[1], T, self.length, self.pad)

    def sliding_window(self, mask, T: int, window: int):
        """A local layer's view of the keys: (index of the oldest it reads, its mask)."""
        return sliding_window(mask, self.length, T, window)

    def append(self, layer: int, k: np.ndarray, v: np.ndarray):
        """Write the new tokens' keys and values k, v: (B, K, T, d) at positions
        [length, length + T) of `layer`, and return everything they attend to:
        keys and values (B, K, length + T, d), views into the cache (nothing copied)."""
        start, end = self.length, self.length + k.shape[2]
        if end > self.capacity:
            raise ValueError(f"cache: {k.shape[2]} new tokens do not fit ({self.length} of "
                             f"{self.capacity} positions used); reset or slide the window")
        if end > self.v.shape[3]:
            self._grow(min(self.capacity, max(end, 2 * self.v.shape[3])))
        self.k[layer, :, :, start:end] = k
        self.v[layer, :, :, start:end] = v
        return self.k[layer, :, :, :end], self.v[layer, :, :, :end]

    def advance(self, n: int) -> None:
        """Count the n tokens just appended to every layer as cached."""
        self.length += n

    def keys_values(self, layer: int):
        """The cached keys and values of `layer`: (B, K, length, d) views."""
        return self.k[layer, :, :, :self.length], self.v[layer, :, :, :self.length]

    # -- rollback and the sliding window ---------------------------------------------------

    def truncate(self, n: int) -> None:
        """Forget every token from position n on (keep the first n)."""
        if not 0 <= n <= self.length:
            raise ValueError(f"truncate: n must be in [0, {self.length}], got {n}")
        self.length = int(n)

    def reset(self) -> None:
        """Forget everything, padding included (the room stays, for the next text)."""
        self.length = 0
        self.pad = None

    def shift(self, n: int, pad=None) -> None:
        """Forget the oldest n positions of every row: [n, length) moves to [0, length - n).
        pad: each row's left padding after the move, (B,) counts or None (no row padded)."""
        if not 0 <= n <= self.length:
            raise ValueError(f"shift: n must be in [0, {self.length}], got {n}")
        kept = self.length - n
        self.k[:, :, :, :kept] = self.k[:, :, :, n:self.length]  # NumPy copes with the overlap
        self.v[:, :, :, :kept] = self.v[:, :, :, n:self.length]
        self.length = kept
        self.pad = pad

    def fill_rows(self, rows, other: "KVCache", start: int) -> None:
        """Rows `rows` of this cache take everything `other` holds (one row of `other` per
        row listed), at positions [start, start + other.length)."""
        end = start + other.length
        if end > self.length:
            raise ValueError(f"fill_rows: positions up to {end} are past the cached {self.length}")
        self.k[:, rows, :, start:end] = other.k[:, :, :, :other.length]
        self.v[:, rows, :, start:end] = other.v[:, :, :, :other.length]

    # -- room --------------------------------------------------------------------------------

    def reserve(self, n: int) -> None:
        """Make room for n positions at once, instead of growing step by step; a cache made
        with a smaller capacity may then hold n positions."""
        self.capacity = max(self.capacity, n)
        if n > self.v.shape[3]:
            self._grow(n)

    def _grow(self, room: int) -> None:
        """Replace the arrays by longer ones of `room` positions, the old ones copied in."""
        n_layers, batch, heads, old, head_dim = self.v.shape
        k = np.zeros((n_layers, batch, heads, room, head_dim), dtype=self.v.dtype)
        v = np.zeros_like(k)
        k[:, :, :, :old] = self.k
        v[:, :, :, :old] = self.v
        self.k, self.v = k, v
