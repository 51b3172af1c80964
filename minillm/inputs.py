"""The checks of Model.forward's inputs: each wrong input is one ValueError naming it."""
from __future__ import annotations

import numpy as np


def check_tokens(tokens, vocab_size: int) -> np.ndarray:
    """(B, T) integer ids in [0, vocab_size), T >= 1, as an array."""
    tokens = np.asarray(tokens)
    if tokens.ndim != 2:
        raise ValueError(f"tokens: expected a (batch, length) array, got shape {tokens.shape}")
    if tokens.shape[1] == 0:
        raise ValueError("tokens: empty sequence")
    if not np.issubdtype(tokens.dtype, np.integer):
        raise ValueError(f"tokens: expected integer ids, got dtype {tokens.dtype}")
    if tokens.min() < 0 or tokens.max() >= vocab_size:
        raise ValueError(f"tokens: ids must be in [0, {vocab_size}), got "
                         f"min {tokens.min()} and max {tokens.max()}")
    return tokens


def check_cache(cache, shape, dtype, T: int) -> None:
    """A cache of (n_layers, B, n_kv_heads, head_dim) = `shape` and `dtype`, with room for T
    more tokens."""
    n_layers, B, heads, head_dim = shape
    expected = (n_layers, B, heads, cache.capacity, head_dim)
    if cache.shape != expected or cache.dtype != dtype:
        raise ValueError(f"cache: its arrays {cache.shape} / {cache.dtype} do not fit this "
                         f"model and batch (expected {expected} / {dtype})")
    if cache.length + T > cache.capacity:
        raise ValueError(f"cache: {T} new tokens do not fit ({cache.length} of "
                         f"{cache.capacity} positions used); reset or slide the window")


def check_pad(pad, B: int, T: int) -> np.ndarray | None:
    """(B,) padding counts in [0, T), as an array; None when no row is padded."""
    pad = np.asarray(pad, dtype=np.int64)
    if pad.shape != (B,) or pad.min() < 0 or pad.max() >= T:
        raise ValueError(f"pad: expected {B} counts in [0, {T}), got {pad.tolist()}")
    return None if not pad.any() else pad
