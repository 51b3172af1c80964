"""Batch equivalence: a row's logits do not depend on the other rows of its batch.

Rows of different lengths are left-padded to one width: row r is tokens[r, pad[r]:] and its
first pad[r] columns hold filler ids (any ids: the engine must ignore them). For every row,

    uncached:  forward(tokens, pad=pad)[r, pad[r]:] == forward(row r alone)
    cached:    a cache fed the first `split` columns with pad=pad, then one column a step,
               gives the same logits at the row's positions

Tolerance: |batched - alone| <= atol + rtol |alone|. A batched matrix product may sum in
another order than a single row's, so use the same atol as for cache equivalence.
"""
from __future__ import annotations

import numpy as np
from hypothesis import given

from .compare import assert_logits_close
from .engine import logits_of
from .settings import checker_settings
from .strategies import ragged_batches


def assert_batch_matches(engine, tokens, pad, atol: float, rtol: float = 0.0,
                         split: int | None = None) -> None:
    """Each row of the left-padded batch tokens (B, T) with pad (B,) against the row alone,
    uncached, and cached (when the engine has new_cache) with a prefill of `split` columns
    (default: all of them), split > max(pad) so that every row has a real token in it."""
    tokens, pad = np.asarray(tokens, dtype=np.int64), np.asarray(pad, dtype=np.int64)
    T = tokens.shape[1]
    split = T if split is None else split
    if not (pad.max() < split <= T):
        raise ValueError(f"split: must be in ({pad.max()}, {T}], got {split}")
    case = f"tokens {tokens.tolist()}, pad {pad.tolist()}, prefill {split}"
    uncached = logits_of(engine, tokens, pad=pad)
    cached = None
    if getattr(engine, "new_cache", None) is not None:
        cache = engine.new_cache(len(tokens))
        steps = [logits_of(engine, tokens[:, :split], cache, pad)]
        steps += [logits_of(engine, tokens[:, t:t + 1], cache) for t in range(split, T)]
        cached = np.concatenate(steps, axis=1)
    for row, p in enumerate(pad):
        alone = logits_of(engine, tokens[row:row + 1, p:])[0]
        assert_logits_close(uncached[row, p:], alone, atol, rtol, f"row {row} of the batch, "
                            "uncached, against the row alone", case, row=row)
        if cached is not None:
            assert_logits_close(cached[row, p:], alone, atol, rtol, f"row {row} of the batch, "
                                "cached, against the row alone", case, row=row)


def check_batch_equivalence(engine, atol: float, rtol: float = 0.0, ragged: bool = True,
                            max_batch: int = 3, max_length: int = 16,
                            max_examples: int = 25) -> None:
    """The module's property on `max_examples` drawn batches (Hypothesis, derandomized).
    ragged=False draws rows of equal length, for an engine that refuses `pad`.
    Raises AssertionError with the smallest failing batch Hypothesis finds."""
    length = min(max_length, engine.context_length)

    @checker_settings(max_examples)
    @given(ragged_batches(engine.vocab_size, max_batch, length, ragged))
    def batched(case):
        tokens, pad, split = case
        assert_batch_matches(engine, tokens, pad, atol, rtol, split)

    batched()
