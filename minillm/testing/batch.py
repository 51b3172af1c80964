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
from .profiles import boundary_texts, crossable, profile_of
from .settings import SHRINK_SECONDS, as_list, run_property, run_seeded
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
                "row alone", case, row=row,
                across=f"a call of {T} columns, {p} of them padding, against one of {T - p}"
                if p else ""))
            if not cached:
                continue
            if reference == "chunks":
                alone = row_in_chunks(engine, tokens[row, p:], split - p)
                what = "against the row alone in a fresh cache fed the same chunks"
                across = (f"a prefill of {split} columns, {p} of them padding, against one of "
                          f"{split - p}" if p else "")
            else:
                what = "against the row alone, one uncached call"
                across = (f"a prefill of {split} columns, then one a step, against one call of "
                          f"{T - p}" if split < T or p else "")
            reports.append(assert_logits_close(batched[row, p:], alone, tol,
                                               f"row {row} of the batch, cached, {what}", case,
                                               row=row, across=across,
                                               chunks=reference == "uncached"))
    return combine(reports)


def batch_crossing_cases(engine, boundaries, tol: Tolerance, reference: str) -> list[Report]:
    """Seeded ragged batches whose long row crosses each boundary the context holds: rows of
    b + 2 and b // 2 tokens, a prefill to just before b, then one column a step over it."""
    reports = []
    for b in crossable(boundaries, engine.context_length):
        tokens = boundary_texts(engine.vocab_size, 2, b + 2, seed=300 + b)
        pad, split = np.array([0, b + 2 - b // 2]), b - 1
        reports.append(run_seeded(
            lambda: assert_batch_matches(engine, tokens, pad, split=split, tolerance=tol,
                                         reference=reference),
            f"check_batch_equivalence: a seeded batch crossing {b} tokens, run after the drawn "
            f"cases", f"minillm.testing.assert_batch_matches(engine, {as_list(tokens)}, "
            f"{as_list(pad)}, split={split}, tolerance={tol!r}, reference={reference!r})"))
    return reports


def check_batch_equivalence(engine, atol: float | None = None, rtol: float = 0.0,
                            ragged: bool = True, max_batch: int = 3,
                            max_length: int | None = None, max_examples: int | None = None, *,
                            tolerance: Tolerance | None = None, reference: str = "uncached",
                            profile: str = "default",
                            shrink_seconds: float = SHRINK_SECONDS) -> Report:
    """The module's property on the profile's drawn batches (Hypothesis, derandomized;
    profiles: an explicit max_examples or max_length in place of the profile's), then seeded
    batches whose long row crosses each of the profile's boundaries the context holds
    (ragged ones; with ragged=False none). ragged=False draws rows of equal length, for an
    engine that refuses `pad`. An engine without new_cache gets the uncached comparison only.
    Returns a Report; raises AssertionError with the smallest failing batch Hypothesis finds
    in shrink_seconds."""
    tol = tolerance_of(atol, rtol, tolerance)
    budget = profile_of(profile, max_length, max_examples)
    length = min(budget.max_length, engine.context_length)
    repeat = assert_deterministic(engine, tol, 2)
    reports = []
    run_property(ragged_batches(engine.vocab_size, max_batch, length, ragged),
                 lambda case: reports.append(assert_batch_matches(
                     engine, case[0], case[1], split=case[2], tolerance=per_case(tol),
                     reference=reference)),
                 budget.max_examples, shrink_seconds, "check_batch_equivalence",
                 lambda case: f"minillm.testing.assert_batch_matches(engine, {as_list(case[0])}, "
                              f"{as_list(case[1])}, split={case[2]}, tolerance={per_case(tol)!r}, "
                              f"reference={reference!r})")
    if ragged:
        reports += batch_crossing_cases(engine, budget.boundaries, per_case(tol), reference)
    report = dataclasses.replace(combine(reports), repeat=repeat)
    assert_top1(report, tol, "batch checks")
    return report
