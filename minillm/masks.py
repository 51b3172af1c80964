"""Which keys each new token may see: causality, left padding, and a local layer's window.

Token t of a chunk of T new tokens sits at index i = start + t of its row (start tokens are
cached before it). It sees key j when

    j <= i                       causality
    j >= pad (or j == i)         not a padding token (a padding query sees itself, so that no
                                 softmax row is empty)
    i - j < window               a local layer's sliding window (Gemma 3): itself and the
                                 window - 1 keys before it

The window counts indices, not positions: within a row the two differ by the row's padding,
so their differences are the same.
"""
from __future__ import annotations

import numpy as np


def positions_and_mask(B, T, start, pad):
    """Positions of the new tokens and which keys each of them may see (causality, padding).

    A token's position is its index minus its row's padding.
    Returns positions (a slice of T, or (B, T) indices) and a mask broadcastable to
    (B, 1, 1, T, S), or None when every key is visible.
    """
    if pad is None and T == 1:  # decoding one token: it sees every key
        return slice(start, start + 1), None
    index = np.arange(start, start + T)  # (T,)
    keys = np.arange(start + T)  # (S,)
    causal = keys <= index[:, None]  # (T, S)
    if pad is None:  # positions are the indices: a slice, so lookups are views, not copies
        return slice(start, start + T), causal
    positions = np.maximum(index - pad[:, None], 0)  # (B, T)
    visible = causal & ((keys >= pad[:, None, None]) | (keys == index[:, None]))  # (B, T, S)
    return positions, visible[:, None, None]


def sliding_window(mask, start, T, window):
    """A local layer's view: (first, mask') where keys before index `first` are out of every
    new token's window (the layer need not read them) and mask' is `mask` over keys
    [first, start + T) with the window applied, or None when every one of those is visible."""
    first = max(0, start + 1 - window)  # the oldest key the first new token still sees
    index = np.arange(start, start + T)  # (T,)
    near = index[:, None] - np.arange(first, start + T) < window  # (T, S - first)
    if mask is None:
        return first, None if near.all() else near
    return first, mask[..., first:] & near
