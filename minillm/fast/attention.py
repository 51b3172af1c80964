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
# The least total weight a query's sums taken without a shift may have (`_softmax_sums`): a
# term that underflowed (below float32's smallest normal number, about e^-87) is then under
# e^-39 of the total, where it would not count.
TINY = math.exp(-48.0)


def causal_attention(q, k, v, mask=None, scale=None):
    """softmax(Q K^T / sqrt(d) + M) V, as `layers.attention(q, k, v, mask)` for the causal
    masks a forward pass builds (`layers.positions_and_mask`), computed a tile at a time.

    Causal: with S - T keys cached before the T queries, the mask hides from query t every key
    past S - T + t. A block of queries [t0, t1) is therefore scored against keys
    [0, S - T + t1) only: the masked triangle beyond is never computed. Those keys are taken
    a block at a time with the running ("online") softmax (Milakov & Gimelshein 2018;
    FlashAttention, Dao et al. 2022): with c a query's shift, l its running sum of exp(s - c)
    and a its running sum of exp(s - c) v, a block of scores s_J moves them to

        l' = r l + sum_J exp(s_j - c'),   a' = r a + sum_J exp(s_j - c') v_j,   r = exp(c - c'),

    and the output is a / l once every block is in: the same softmax, its sums split in parts.
    The shift only keeps exp in range: the sums are first taken with c = 0 (nothing
    subtracted, nothing rescaled), and only where they left the range again with
    FlashAttention's running maximum (`_softmax_sums`). l rides along with a as one more
    column, [a, l]: for a block of many queries, V gets a column of ones, so that one product
    exp(s - c') [V, 1] gives both sums and the scores are not read again to add them up (V is
    copied once per call for that, which for a few queries would copy the cache at every
    decoding step: they add up the scores instead). Inside the blocks, the mask hides what it
    hides (the causal diagonal, padding, a local layer's window), in the blocks past the first
    key some query may not see.
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
    if mask is not None:
        mask = np.broadcast_to(mask, (B, 1, 1, T, k.shape[2]))  # a view: text b's is mask[b]
    if T < QUERY_ROWS:  # a few queries (a decoding step): one tile for every head
        _tiles(q, k, v, mask, out, ones=False)
        return out.reshape(B, H, T, d)
    v = np.concatenate([v, np.ones(v.shape[:-1] + (1,), v.dtype)], axis=-1)  # [V, 1]
    for b in range(B):  # a prompt: a tile per key head of each text, so that it stays in cache
        text = None if mask is None else mask[b, 0, 0]  # (T, S)
        for h in range(K):  # (group, T, d) queries, (S, d) keys, (S, d + 1) [V, 1]
            _tiles(q[b, h], k[b, h], v[b, h], text, out[b, h], ones=True)
    return out.reshape(B, H, T, d)


def _tiles(q, k, v, mask, out, ones: bool) -> None:
    """out = softmax(Q K^T + M) V for q (..., group, T, d) scaled, k (..., S, d), v the values
    or [V, 1] (`ones`), mask (..., T, S) or None, a block of QUERY_ROWS queries against a block
    of keys at a time; out: (..., group, T, d). The leading axes (...) are (B, K) for one tile
    of every head, none for a tile of one key head."""
    *lead, group, T, d = q.shape
    S = k.shape[-2]
    rows = min(T, QUERY_ROWS)  # queries per block
    step = max(rows, SCORE_ENTRIES // (math.prod(lead) * group * rows))  # keys per block
    for t0 in range(0, T, rows):
        t1 = min(t0 + rows, T)
        n = t1 - t0  # the block's queries, and the keys they may see:
        seen = S if mask is None else S - T + t1
        qb = q[..., t0:t1, :].reshape(*lead, group * n, d)
        visible = None if mask is None else mask[..., t0:t1, :seen]
        first = seen if visible is None else _first_hidden(visible)
        blocks = [(j0, min(j0 + step, seen)) for j0 in range(0, seen, step)]
        scores = functools.partial(_block_scores, qb, k, visible, first, group)
        acc = _softmax_sums(scores, blocks, v, ones)  # (..., group n, d + 1): [a, l]
        out[..., t0:t1, :] = (acc[..., :d] / acc[..., d:]).reshape(*lead, group, n, d)


def _first_hidden(visible) -> int:
    """The first key (column of visible (..., n, J)) that some query may not see; J if none:
    the keys before it need no mask (with nothing padded, the causal diagonal's first)."""
    hidden = ~visible.all(axis=-2).reshape(-1, visible.shape[-1]).all(axis=0)  # (J,)
    return int(np.argmax(hidden)) if hidden.any() else visible.shape[-1]


def _block_scores(qb, k, visible, first: int, group: int, j0: int, j1: int):
    """The scores of keys [j0, j1), a new array (..., group n, J), -inf where the mask hides
    the key: only in blocks past the first hidden key."""
    scores = _scores(qb, k[..., j0:j1, :])
    if j1 > first:
        *lead, rows, J = scores.shape
        _hide(scores.reshape(*lead, group, rows // group, J), visible[..., j0:j1],
              max(first - j0, 0))
    return scores


def _scores(qb, keys):
    """Q K^T: qb (..., R, d) times keys (..., J, d) transposed, (..., R, J)."""
    return qb @ keys.swapaxes(-1, -2)


def _hide(scores, visible, first: int) -> None:
    """Set to -inf the scores (..., n, J) of keys the mask hides, visible (..., n, J); from
    column `first` on (the ones before are seen by every query)."""
    np.copyto(scores[..., first:], -np.inf, where=~visible[..., first:])


def _softmax_sums(scores, blocks, v, ones: bool):
    """[a, l] = sum_j exp(s_j) [v_j, 1] over the blocks of keys, a block at a time.

    softmax(s) = exp(s - c) / sum exp(s - c) for any shift c: it only keeps exp in range. For
    the scores models produce c = 0 keeps it there, so the sums are taken without one, and
    kept if they stayed in range: all finite (no term overflowed) and every query's total
    weight l >= TINY (a term small enough to underflow would not have counted). Otherwise
    (scores past about 88 in float32, a query whose scores all lie far below 0) they are
    computed again with the running maximum as the shift (`_running_softmax`).
    scores(j0, j1): the scores of keys [j0, j1), a new array; v (..., S, d) or [V, 1].
    """
    acc = None
    with np.errstate(over="ignore", invalid="ignore"):  # what overflows is caught below
        for j0, j1 in blocks:
            block = _sums(_exp(scores(j0, j1), None), v[..., j0:j1, :], ones)
            acc = block if acc is None else np.add(acc, block, out=acc)
    if np.isfinite(acc).all() and (acc[..., -1] >= TINY).all():
        return acc
    return _running_softmax(scores, blocks, v, ones)


def _running_softmax(scores, blocks, v, ones: bool):
    """The running ("online") softmax with the running maximum m as the shift: a block of
    keys with maximum m_J moves it to m' = max(m, m_J), and

        [a', l'] = exp(m - m') [a, l] + sum_J exp(s_j - m') [v_j, 1],

    every term at most 1, the sums in range whatever the scores. A query that sees no key yet
    (m = -inf) keeps the shift 0 and sums of 0."""
    acc = c = None
    m = -np.inf
    for j0, j1 in blocks:
        s = scores(j0, j1)
        m = np.maximum(m, s.max(axis=-1, keepdims=True))  # (..., R, 1)
        shift = np.where(m > -np.inf, m, 0).astype(s.dtype)
        block = _sums(_exp(s, shift), v[..., j0:j1, :], ones)
        # exp(c - c') <= 1, and 1 where a query had no weight (its c was 0, c' may be below)
        acc = block if acc is None else acc * np.exp(np.minimum(c - shift, 0)) + block
        c = shift
    return acc


def _exp(scores, shift):
    """exp(s - c), in place of the scores (..., R, J); shift None: c = 0."""
    if shift is not None:
        scores -= shift
    return np.exp(scores, out=scores)


def _sums(weights, v, ones: bool):
    """weights [V, 1]: a block's share of the running sums, (..., R, d + 1)."""
    block = weights @ v  # with [V, 1]: (..., R, d + 1), [sum w v, sum w]
    if not ones:
        block = np.concatenate([block, weights.sum(axis=-1, keepdims=True)], axis=-1)
    return block
