"""Batch equivalence: a row's logits do not depend on the other rows of its batch.

Rows of different lengths are left-padded to one width: row r is tokens[r, pad[r]:] and its
first pad[r] columns hold filler ids (any ids: the engine must ignore them). For every row,

    uncached:  forward(tokens, pad)[r, pad[r]:] == forward(row r alone)
    cached:    a cache made for `pad`, fed the first `split` columns then one column a step,
               gives the same logits at the row's positions

Tolerance: |batched - alone| <= atol + rtol |alone|. A batched matrix product may sum in
another order than a single row's, so use the same atol as for cache equivalence.
"""
from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from .cache import token_arrays
from .compare import assert_logits_close
from .engine import Engine
from .settings import checker_settings


def assert_batch_matches(engine: Engine, tokens, pad, atol: float, rtol: float = 0.0,
                         split: int | None = None) -> None:
    """Each row of the left-padded batch tokens (B, T) with pad (B,) against the row alone,
    uncached, and cached (when the engine has a cache) with a prefill of `split` columns
    (default: all of them), split > max(pad) so that every row has a real token in it."""
    tokens, pad = np.asarray(tokens, dtype=np.int64), np.asarray(pad, dtype=np.int64)
    T = tokens.shape[1]
    split = T if split is None else split
    if not (pad.max() < split <= T):
        raise ValueError(f"split: must be in ({pad.max()}, {T}], got {split}")
    case = f"tokens {tokens.tolist()}, pad {pad.tolist()}, prefill {split}"
    padding = None if not pad.any() else pad
    uncached = np.asarray(engine.forward(tokens, padding))
    cached = None
    if engine.new_cache is not None:
        cache = engine.new_cache(len(tokens), padding)
        steps = [engine.extend(cache, tokens[:, :split])]
        steps += [engine.extend(cache, tokens[:, t:t + 1]) for t in range(split, T)]
        cached = np.concatenate([np.asarray(s) for s in steps], axis=1)
    for row, p in enumerate(pad):
        alone = np.asarray(engine.forward(tokens[row:row + 1, p:], None))[0]
        assert_logits_close(uncached[row, p:], alone, atol, rtol, f"row {row} of the batch, "
                            "uncached, against the row alone", case)
        if cached is not None:
            assert_logits_close(cached[row, p:], alone, atol, rtol, f"row {row} of the batch, "
                                "cached, against the row alone", case)


@st.composite
def batch_cases(draw, vocab_size: int, max_batch: int = 3, max_length: int = 16,
                padding: bool = True):
    """(tokens (B, T), pad (B,), split): B >= 2 rows, filler ids drawn like real ones."""
    batch = draw(st.integers(2, max_batch))
    length = draw(st.integers(1, max_length))
    tokens = draw(token_arrays(vocab_size, batch, length))
    pads = st.integers(0, length - 1) if padding else st.just(0)
    pad = np.array(draw(st.lists(pads, min_size=batch, max_size=batch)), dtype=np.int64)
    split = draw(st.integers(int(pad.max()) + 1, length))
    return tokens, pad, split


def check_batch_equivalence(engine: Engine, atol: float, rtol: float = 0.0, max_batch: int = 3,
                            max_length: int = 16, max_examples: int = 25) -> None:
    """The module's property on `max_examples` drawn batches (Hypothesis, derandomized).
    Ragged (padded) batches are drawn when engine.pads, equal lengths otherwise.
    Raises AssertionError with the smallest failing batch Hypothesis finds."""
    length = min(max_length, engine.context_length)

    @checker_settings(max_examples)
    @given(batch_cases(engine.vocab_size, max_batch, length, engine.pads))
    def batched(case):
        tokens, pad, split = case
        assert_batch_matches(engine, tokens, pad, atol, rtol, split)

    batched()
