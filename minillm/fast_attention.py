"""Causal attention that skips what the mask hides: the fast model's `attend`.

`layers.attention` is the formula: every query against every key, the causal mask's hidden half
computed and then set to -inf. `causal_attention` computes the same a tile at a time: a block of
queries against only the keys it may see, keys in blocks with the running ("online") softmax,
so that the scores held at once are bounded whatever the length of the text.
tests/test_fast_attention.py proves the two equal; docs/PERFORMANCE.md ("Tiled attention and
long texts") holds the measurements behind the constants (`python -m
bench.studies.tiled_attention`, `python -m bench.studies.attention_cost`).
"""
from __future__ import annotations

import functools
import math

import numpy as np

# Attention is computed a tile at a time: for a block of many queries, QUERY_ROWS queries of
# one key head's query heads against at most SCORE_ENTRIES scores (1 MiB in float32), which
# stays in cache from the product that makes it to the one that reads it; keys in blocks, the
# softmax running over the blocks (docs/PERFORMANCE.md, "Tiled attention and long texts";
# bench.studies.tiled_attention).
QUERY_ROWS = 128
SCORE_ENTRIES = 2 ** 18
# exp(s - c) is computed without moving the shift c while a query's sums stay in range: no
# term overflows, and its total weight is at least TINY = e^-48 (a term is then in float32's
# normal range whenever it matters). A shift that moves goes to the block's maximum, which
# keeps every term at most e^48 (7e20): summed over 2^20 keys times values of 10^6 still
# 10^5 below float32's largest number (`_running_softmax`).
EXP_RANGE = 48.0
TINY = math.exp(-EXP_RANGE)


def causal_attention(q, k, v, mask=None, scale=None):
    """softmax(Q K^T / sqrt(d) + M) V, as `layers.attention(q, k, v, mask)` for the causal
    masks a forward pass builds (`masks.positions_and_mask`), computed a tile at a time.

    Causal: with S - T keys cached before the T queries, the mask hides from query t every key
    past S - T + t. A block of queries [t0, t1) is therefore scored against keys
    [0, S - T + t1) only: the masked triangle beyond is never computed. Those keys are taken
    a block at a time with the running ("online") softmax (Milakov & Gimelshein 2018;
    FlashAttention, Dao et al. 2022): with c a query's shift, l its running sum of exp(s - c)
    and a its running sum of exp(s - c) v, a block of scores s_J moves them to

        l' = r l + sum_J exp(s_j - c'),   a' = r a + sum_J exp(s_j - c') v_j,   r = exp(c - c'),

    and the output is a / l once every block is in: the same softmax, its sums split in parts.
    The shift only keeps exp in range; FlashAttention moves it to the running maximum at every
    block, this one only when the sums would leave that range (`_running_softmax`), so that
    for the scores models produce the shift stays 0: no maximum, nothing subtracted, nothing
    rescaled. l rides along with a as one more column, [a, l]: for a block of many queries,
    V gets a column of ones, so that one product exp(s - c') [V, 1] gives both sums and the
    scores are not read again to add them up (V is copied once per call for that, which for a
    few queries would copy the cache at every decoding step: they add up the scores instead).
    Inside the blocks, the mask hides what it hides (the causal diagonal, padding).
    Many queries (a prompt) are tiled one key head of one text at a time, so that a tile stays
    in cache between its products; a few (a decoding step) in one tile for every head, which
    saves the loop's calls where there is little to compute.
    Extra memory: one tile of scores, at most max(SCORE_ENTRIES, B H QUERY_ROWS^2) entries,
    whatever T and S; keys are read in place (views of the cache, no copy).

    q: (B, H, T, d); k, v: (B, K, S, d) with K dividing H, S >= T; mask: None (every key
    visible, nothing skipped) or causal booleans broadcastable to (B, 1, 1, T, S), True where
    a key is visible.
    Returns (B, H, T, d).
    """
    B, H, T, d = q.shape
    K = k.shape[1]
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    q = (q * scale).reshape(B, K, H // K, T, d)  # the query heads that share a key head together
    out = np.empty(q.shape, dtype=np.result_type(q, k, v))  # (B, K, group, T, d)
    mask = None if mask is None else np.asarray(mask)
    if T < QUERY_ROWS:  # a few queries (a decoding step): one tile for every head
        _tiles(q, k, v, mask, out, ones=False)
        return out.reshape(B, H, T, d)
    v = np.concatenate([v, np.ones(v.shape[:-1] + (1,), v.dtype)], axis=-1)  # [V, 1]
    if mask is not None:
        mask = np.broadcast_to(mask, (B, 1, 1, T, k.shape[2]))  # a view: text b's is mask[b]
    for b in range(B):  # a prompt: a tile per key head of each text, so that it stays in cache
        text = None if mask is None else mask[b:b + 1]
        for h in range(K):
            one = (slice(b, b + 1), slice(h, h + 1))  # text b, key head h
            _tiles(q[one], k[one], v[one], text, out[one], ones=True)
    return out.reshape(B, H, T, d)


def _tiles(q, k, v, mask, out, ones: bool) -> None:
    """out = softmax(Q K^T + M) V for q (B, K, group, T, d) scaled, k (B, K, S, d), v the
    values or [V, 1] (`ones`), a block of QUERY_ROWS queries against a block of keys at a time;
    out: (B, K, group, T, d)."""
    B, K, group, T, d = q.shape
    S = k.shape[2]
    rows = min(T, QUERY_ROWS)  # queries per block
    step = max(rows, SCORE_ENTRIES // (B * K * group * rows))  # keys per block
    for t0 in range(0, T, rows):
        t1 = min(t0 + rows, T)
        n = t1 - t0  # the block's queries, and the keys they may see:
        seen = S if mask is None else S - T + t1
        qb = q[:, :, :, t0:t1].reshape(B, K, group * n, d)
        shift = acc = None
        for j0 in range(0, seen, step):
            j1 = min(j0 + step, seen)
            visible = None if mask is None else mask[..., t0:t1, j0:j1]
            scores = functools.partial(_scores, qb, k[:, :, j0:j1], visible, group)
            shift, acc = _running_softmax(scores, v[:, :, j0:j1], shift, acc, ones)
        out[:, :, :, t0:t1] = (acc[..., :d] / acc[..., d:]).reshape(B, K, group, n, d)


def _scores(qb, keys, visible, group: int):
    """A tile's scores (B, K, group n, J), a new array: qb (B, K, group n, d) times keys
    (B, K, J, d) transposed, -inf where the mask (n, J) or (B, 1, 1, n, J) hides the key."""
    scores = qb @ keys.swapaxes(-1, -2)
    if visible is not None:
        B, K, rows, J = scores.shape
        _hide(scores.reshape(B, K, group, rows // group, J), visible)
    return scores


def _hide(scores, visible) -> None:
    """Set to -inf the scores (..., n, J) of keys the mask hides, visible (n, J) or
    (B, 1, 1, n, J); only from the first key that some query may not see (the causal
    diagonal's columns, when nothing is padded)."""
    hidden_from_some = ~visible.all(axis=-2)  # (..., J)
    if hidden_from_some.any():
        first = int(np.argmax(hidden_from_some.reshape(-1, visible.shape[-1]).any(axis=0)))
        np.copyto(scores[..., first:], -np.inf, where=~visible[..., first:])  # (B, K, group, n, J)


def _running_softmax(scores, v, shift, acc, ones: bool):
    """One block of keys into the running sums: (c', [a', l']) from (c, [a, l]), where
    [a, l] = sum_j exp(s_j - c) [v_j, 1] and c is a query's shift; None: no block yet (for
    acc), every shift 0 (for shift). scores(): the block's scores (B, K, R, J), a new array at
    each call; v (B, K, J, d), or [V, 1] (B, K, J, d + 1) when `ones`.

    softmax(s) = exp(s - c) / sum exp(s - c) for any c: the shift only keeps exp in range.
    So exp is taken with the shifts as they are and the block kept if the sums stayed in
    range: all finite (no term overflowed) and every query's total weight l' >= TINY (its
    terms did not underflow). Otherwise (scores past about 88 in float32, a query whose
    first scores all lie far below its shift, or one whose keys so far are all hidden) the
    scores are computed again, rather than kept for that rare case, and each query with a
    block maximum m > c + EXP_RANGE, or without weight yet and m < c - EXP_RANGE, moves its
    shift to m, its sums so far rescaled by exp(c - m).
    """
    with np.errstate(over="ignore", invalid="ignore"):  # what overflows is caught below
        sums = _sums(_exp(scores(), shift), v, acc, ones)
    if np.isfinite(sums).all() and (sums[..., -1] >= TINY).all():
        return shift, sums
    s = scores()
    m = s.max(axis=-1, keepdims=True)  # (B, K, R, 1)
    c = 0.0 if shift is None else shift
    empty = True if acc is None else acc[..., -1:] == 0  # no weight yet: nothing to rescale
    moves = ((m > c + EXP_RANGE) | (empty & (m < c - EXP_RANGE))) & (m > -np.inf)
    if moves.any():
        shift = np.where(moves, m, c).astype(s.dtype)
        if acc is not None:  # a query whose shift came down has no weight: leave it as is
            acc = acc * np.exp(np.minimum(c - shift, 0))
    return shift, _sums(_exp(s, shift), v, acc, ones)


def _exp(scores, shift):
    """exp(s - c), in place of the scores (B, K, R, J); shift None: c = 0."""
    if shift is not None:
        scores -= shift
    return np.exp(scores, out=scores)


def _sums(weights, v, acc, ones: bool):
    """[a, l] + weights [V, 1]: the running sums with this block's (B, K, R, d + 1)."""
    block = weights @ v  # with [V, 1]: (B, K, R, d + 1), [sum exp(s - c') v, sum exp(s - c')]
    if not ones:
        block = np.concatenate([block, weights.sum(axis=-1, keepdims=True)], axis=-1)
    return block if acc is None else acc + block
