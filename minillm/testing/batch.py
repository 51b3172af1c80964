"""Batch equivalence: a row's logits do not depend on the other rows of its batch.

Rows of different lengths are left-padded to one width: row r is tokens[r, pad[r]:] and its
first pad[r] columns hold filler ids (any ids: the engine must ignore them). For every row,

    uncached:  forward(tokens, pad=pad)[r, pad[r]:] == forward(row r alone)
    cached:    a cache fed the first `split` columns with pad=pad, then one column a step,
               gives the logits of the row alone at the row's positions, computed by
               reference="uncached":  one uncached call over the row, or
               reference="chunks":    the row alone in a fresh cache, fed the same chunks
                                      (its prefill, then a token a step): like for like, for
                                      an engine whose one-token steps differ from long calls

Tolerance: as for cache equivalence (compare.Tolerance). A batched matrix product may sum in
another order than a single row's, so use the same atol as for cache equivalence.
"""
from __future__ import annotations

import dataclasses
from contextlib import nullcontext

import numpy as np

from .cache import REFERENCES
from .compare import Report, Tolerance, assert_logits_close, assert_top1, combine, per_case
from .compare import tolerance_of
from .engine import assert_deterministic, logits_of, open_cache
from .settings import SHRINK_SECONDS, as_list, run_property
from .strategies import ragged_batches


def row_in_chunks(engine, row, split: int) -> np.ndarray:
    """The row (T,) alone in a fresh cache: its first `split` tokens in one call, then one
    token a step; its logits (T, V)."""
    with open_cache(engine, 1) as cache:
        steps = [logits_of(engine, row[None, :split], cache)]
        steps += [logits_of(engine, row[None, t:t + 1], cache) for t in range(split, len(row))]
    return np.concatenate(steps, axis=1)[0]


def assert_batch_matches(engine, tokens, pad, atol: float | None = None, rtol: float = 0.0,
                         split: int | None = None, *, tolerance: Tolerance | None = None,
                         reference: str = "uncached") -> Report:
    """Each row of the left-padded batch tokens (B, T) with pad (B,) against the row alone,
    uncached, and cached (when the engine has new_cache) with a prefill of `split` columns
    (default: all of them), split > max(pad) so that every row has a real token in it. Caches
    alive at once: the batch's (B rows) and, with reference="chunks", one row's."""
    tol = tolerance_of(atol, rtol, tolerance)
    if reference not in REFERENCES:
        raise ValueError(f"reference: must be one of {REFERENCES}, got {reference!r}")
    tokens, pad = np.asarray(tokens, dtype=np.int64), np.asarray(pad, dtype=np.int64)
    T = tokens.shape[1]
    split = T if split is None else split
    if not (pad.max() < split <= T):
        raise ValueError(f"split: must be in ({pad.max()}, {T}], got {split}")
    case = f"tokens {tokens.tolist()}, pad {pad.tolist()}, prefill {split}"
    cached = getattr(engine, "new_cache", None) is not None
    reports = []
    with open_cache(engine, len(tokens)) if cached else nullcontext() as cache:
        uncached = logits_of(engine, tokens, pad=pad)
        if cached:
            steps = [logits_of(engine, tokens[:, :split], cache, pad)]
            steps += [logits_of(engine, tokens[:, t:t + 1], cache) for t in range(split, T)]
            batched = np.concatenate(steps, axis=1)  # (B, T, V)
        for row, p in enumerate(pad):
            alone = logits_of(engine, tokens[row:row + 1, p:])[0]
            reports.append(assert_logits_close(
                uncached[row, p:], alone, tol, f"row {row} of the batch, uncached, against the "
                "row alone", case, row=row))
            if not cached:
                continue
            if reference == "chunks":
                alone = row_in_chunks(engine, tokens[row, p:], split - p)
                what = "against the row alone in a fresh cache fed the same chunks"
            else:
                what = "against the row alone, one uncached call"
            reports.append(assert_logits_close(batched[row, p:], alone, tol,
                                               f"row {row} of the batch, cached, {what}", case,
                                               row=row))
    return combine(reports)


def check_batch_equivalence(engine, atol: float | None = None, rtol: float = 0.0,
                            ragged: bool = True, max_batch: int = 3, max_length: int = 16,
                            max_examples: int = 25, *, tolerance: Tolerance | None = None,
                            reference: str = "uncached",
                            shrink_seconds: float = SHRINK_SECONDS) -> Report:
    """The module's property on `max_examples` drawn batches (Hypothesis, derandomized).
    ragged=False draws rows of equal length, for an engine that refuses `pad`. An engine
    without new_cache gets the uncached comparison only. Returns a Report; raises
    AssertionError with the smallest failing batch Hypothesis finds in shrink_seconds."""
    tol = tolerance_of(atol, rtol, tolerance)
    length = min(max_length, engine.context_length)
    repeat = assert_deterministic(engine, tol, 2)
    reports = []
    run_property(ragged_batches(engine.vocab_size, max_batch, length, ragged),
                 lambda case: reports.append(assert_batch_matches(
                     engine, case[0], case[1], split=case[2], tolerance=per_case(tol),
                     reference=reference)),
                 max_examples, shrink_seconds, "check_batch_equivalence",
                 lambda case: f"minillm.testing.assert_batch_matches(engine, {as_list(case[0])}, "
                              f"{as_list(case[1])}, split={case[2]}, tolerance={per_case(tol)!r}, "
                              f"reference={reference!r})")
    report = dataclasses.replace(combine(reports), repeat=repeat)
    assert_top1(report, tol, "batch checks")
    return report
