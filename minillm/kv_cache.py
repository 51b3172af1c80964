"""The KV cache: every layer's keys and values in one preallocated pair of arrays."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class KVCache:
    """Keys and values of the tokens seen so far, for all layers at once.

    k, v: (n_layers, batch, n_kv_heads, capacity, head_dim). Rows [0, length) along the
    capacity axis are filled; a forward pass over T new tokens writes rows
    [length, length + T) and advances `length`. Rows at or past `length` are never read, so
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
        shape = (n_layers, batch_size, n_kv_heads, capacity, head_dim)
        return cls(np.zeros(shape, dtype=dtype), np.zeros(shape, dtype=dtype))

    @property
    def capacity(self) -> int:
        return self.k.shape[3]

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
