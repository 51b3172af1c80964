"""The KV cache: every layer's keys and values in one preallocated pair of arrays."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class KVCache:
    """Keys and values of the tokens seen so far, for all layers at once.

    k: (n_layers, batch, n_kv_heads, head_dim, capacity), the keys stored transposed;
    v: (n_layers, batch, n_kv_heads, capacity, head_dim).
    Positions [0, length) along the capacity axis are filled; a forward pass over T new tokens
    writes positions [length, length + T) and advances `length`. Keys sit transposed because
    attention multiplies by K^T: a block of cached keys is then a row-major (head_dim, S)
    matrix that BLAS reads as it is (a transposed view made the 2-8-row products of a verify
    pass up to 3x slower). Positions at or past `length` are never read, so
    rolling back (speculative decoding) is just moving `length` back: `truncate(n)`.

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
    def capacity(self) -> int:
        return self.v.shape[3]

    @property
    def batch_size(self) -> int:
        return self.k.shape[1]

    def truncate(self, n: int) -> None:
        """Forget every token from position n on (keep the first n)."""
        if not 0 <= n <= self.length:
            raise ValueError(f"truncate: n must be in [0, {self.length}], got {n}")
        self.length = int(n)

    def reset(self) -> None:
        """Forget everything, padding included."""
        self.length = 0
        self.pad = None
