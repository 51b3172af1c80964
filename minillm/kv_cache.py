"""The KV cache: every layer's keys and values in one preallocated pair of arrays.

A forward pass over T new tokens appends their keys and values to each layer at positions
[length, length + T), attends to positions [0, length + T), then advances `length` by T.
Positions at or past `length` are never read, so forgetting the newest tokens (speculative
decoding's rollback) is only moving `length` back: `truncate(n)`. A cache is made as long as
its user can fill (the first write to each page of a long one costs a page fault); one whose
need grows, a conversation's, asks for more room with `reserve(capacity)`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class KVCache:
    """Keys and values of the tokens seen so far, for all layers at once.

    Logically both are (n_layers, batch, n_kv_heads, capacity, head_dim). The keys are stored
    transposed, k: (n_layers, batch, n_kv_heads, head_dim, capacity), because attention
    multiplies by K^T: a block of cached keys is then a row-major (head_dim, S) matrix that
    BLAS reads as it is. Only this file knows it: `append` and `keys_values` hand out keys as
    (B, K, S, head_dim) views.

    pad: (batch,) number of left-padding tokens in each row, for batches of prompts of
    different lengths; padded keys are masked out and each row's positions start after its pad.
    """

    k: np.ndarray
    v: np.ndarray
    length: int = 0
    pad: np.ndarray | None = None

    @classmethod
    def empty(cls, n_layers, batch_size, n_kv_heads, capacity, head_dim, dtype) -> "KVCache":
        k = np.zeros((n_layers, batch_size, n_kv_heads, head_dim, capacity), dtype=dtype)
        v = np.zeros((n_layers, batch_size, n_kv_heads, capacity, head_dim), dtype=dtype)
        return cls(k, v)

    @property
    def shape(self) -> tuple[int, int, int, int, int]:
        """(n_layers, batch, n_kv_heads, capacity, head_dim), the logical shape of k and v."""
        return self.v.shape

    @property
    def dtype(self) -> np.dtype:
        return self.v.dtype

    @property
    def capacity(self) -> int:
        return self.v.shape[3]

    @property
    def batch_size(self) -> int:
        return self.v.shape[1]

    # -- what a forward pass does ---------------------------------------------------------

    def append(self, layer: int, k: np.ndarray, v: np.ndarray):
        """Write the new tokens' keys and values k, v: (B, K, T, d) at positions
        [length, length + T) of `layer`, and return everything they attend to:
        keys and values (B, K, length + T, d), views into the cache."""
        start, end = self.length, self.length + k.shape[2]
        if end > self.capacity:
            raise ValueError(f"cache: {k.shape[2]} new tokens do not fit ({self.length} of "
                             f"{self.capacity} positions used); reset or slide the window")
        self.k[layer, ..., start:end] = k.swapaxes(-1, -2)
        self.v[layer, :, :, start:end] = v
        return self.k[layer, ..., :end].swapaxes(-1, -2), self.v[layer, :, :, :end]

    def advance(self, n: int) -> None:
        """Count the n tokens just appended to every layer as cached."""
        self.length += n

    def keys_values(self, layer: int):
        """The cached keys and values of `layer`: (B, K, length, d) views."""
        return (self.k[layer, ..., :self.length].swapaxes(-1, -2),
                self.v[layer, :, :, :self.length])

    # -- rollback and the sliding window ---------------------------------------------------

    def truncate(self, n: int) -> None:
        """Forget every token from position n on (keep the first n)."""
        if not 0 <= n <= self.length:
            raise ValueError(f"truncate: n must be in [0, {self.length}], got {n}")
        self.length = int(n)

    def reset(self) -> None:
        """Forget everything, padding included."""
        self.length = 0
        self.pad = None

    def shift(self, n: int) -> None:
        """Forget the oldest n positions of every row: [n, length) moves to [0, length - n)."""
        if not 0 <= n <= self.length:
            raise ValueError(f"shift: n must be in [0, {self.length}], got {n}")
        kept = self.length - n
        self.k[..., :kept] = self.k[..., n:self.length]  # NumPy copes with the overlap
        self.v[:, :, :, :kept] = self.v[:, :, :, n:self.length]
        self.length = kept

    def reserve(self, capacity: int) -> None:
        """Make room for `capacity` positions, keeping everything cached: a larger pair of
        arrays, the cached positions copied over (nothing happens if there is room already)."""
        if capacity <= self.capacity:
            return
        n_layers, batch, heads, _, head_dim = self.shape
        larger = KVCache.empty(n_layers, batch, heads, capacity, head_dim, self.dtype)
        larger.k[..., :self.length] = self.k[..., :self.length]
        larger.v[:, :, :, :self.length] = self.v[:, :, :, :self.length]
        self.k, self.v = larger.k, larger.v

    def fill_rows(self, rows, other: "KVCache", start: int) -> None:
        """Rows `rows` of this cache take everything `other` holds (one row of `other` per
        row listed), at positions [start, start + other.length)."""
        end = start + other.length
        if end > self.length:
            raise ValueError(f"fill_rows: positions up to {end} are past the cached {self.length}")
        self.k[:, rows, :, :, start:end] = other.k[..., :other.length]
        self.v[:, rows, :, start:end] = other.v[:, :, :, :other.length]
