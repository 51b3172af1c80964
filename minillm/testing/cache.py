"""Cache equivalence: a KV cache changes the cost of a forward pass, never its logits.

Three properties, for any tokens, any batch size and any way of cutting the text into chunks:

    chunked:   feeding tokens[:, a:b] to a cache that holds tokens[:, :a] gives
               forward(tokens[:, :b])[:, a:b]    (one call, token by token, or anything between)
    causal:    the chunks together give forward(tokens): a position's logits do not depend on
               later tokens (in a one-layer model, a mask that lets each token see one token
               ahead passes `chunked`, both paths stopping at the chunk's end, and fails this)
    rollback:  caching tokens, cache.truncate(keep), then feeding `more` gives the logits of
               the text tokens[:, :keep] + more at the positions of `more`, computed by
               reference="uncached":  forward(tokens[:, :keep] + more), one uncached call, or
               reference="chunks":    a fresh cache fed tokens[:, :keep], then `more`: the same
                                      calls as the rolled-back cache, so that an engine whose
                                      one-token steps differ from its long calls (a kernel per
                                      call shape) is judged on its rollback alone

Tolerance (compare.Tolerance): the cached and uncached paths differ only in the order of
floating-point sums, so float64 engines agree to ~1e-12 and float32 ones to ~1e-5 (for logits
of order 1); pick atol from the engine's dtype, or a scaled, KL, TV or top-1 bound for an
engine whose paths run different kernels.
"""
from __future__ import annotations

import dataclasses
import warnings

import numpy as np

from .compare import Report, Tolerance, assert_logits_close, assert_top1, combine, per_case
from .compare import tolerance_of
from .engine import (EngineError, assert_deterministic, can_truncate, logits_of, open_cache,
                     require_cache)
from .profiles import (boundary_texts, chunk_crossings, crossable, profile_of,
                       rollback_crossings)
from .settings import SHRINK_SECONDS, as_list, run_property, run_seeded
from .strategies import chunk_cases, rollback_cases

REFERENCES = ("uncached", "chunks")
LONG_CHUNK = 4  # an engine whose kernels change with the call's size differs from here on


class BudgetWarning(UserWarning):
    """A check's budget was too small to reach a kind of case that finds differences."""


def feeds_long_chunk(tokens, cuts) -> bool:
    """Whether a case feeds a chunk of LONG_CHUNK or more tokens to a cache that already holds
    text: call-size-dependent engines (llama.cpp on some models, from 4 or 8 tokens a call)
    differ only there."""
    cuts = sorted(set(cuts) | {0, np.shape(tokens)[1]})
    return any(a > 0 and b - a >= LONG_CHUNK for a, b in zip(cuts, cuts[1:]))


def warn_short(cases: int) -> None:
    """Warn that none of the check's cases fed a long chunk to a filled cache, and texts too
    short for one: a pass says nothing about call-size-dependent engines."""
    warnings.warn(BudgetWarning(
        f"check_cache_equivalence: none of its {cases} cases fed a chunk of "
        f"{LONG_CHUNK} or more tokens to a cache that held text: raise max_examples or "
        "max_length (8 or more), or check such a chunk with assert_chunks_match"),
        stacklevel=3)


def long_chunk(engine, batch: int, length: int, tol: Tolerance) -> list[Report]:
    """The case a small derandomized budget rarely reaches, run when the drawn cases missed
    it: seeded uniform ids over the whole vocabulary read in two calls, the second of at least
    LONG_CHUNK tokens (length // 2 or more) into the filled cache. Nothing when texts are too
    short for it."""
    if length <= LONG_CHUNK:
        return []
    tokens = np.random.default_rng(0).integers(0, engine.vocab_size, (batch, length))
    cuts = [length - max(LONG_CHUNK, length // 2)]
    return [run_seeded(lambda: compare_chunks(engine, tokens, cuts, tol)[1],
                       "check_cache_equivalence: the drawn cases passed; this one, run because "
                       "none of them fed a long chunk to a filled cache, failed",
                       f"minillm.testing.assert_chunks_match(engine, {as_list(tokens)}, {cuts}, "
                       f"tolerance={tol!r})")]


def chunk_crossing_cases(engine, batch: int, boundaries, tol: Tolerance) -> list[Report]:
    """The seeded chunked cases that cross each boundary the context holds (profiles)."""
    reports = []
    for b in crossable(boundaries, engine.context_length):
        for n, (length, cuts) in enumerate(chunk_crossings(b)):
            tokens = boundary_texts(engine.vocab_size, batch, length, seed=b + n)
            reports.append(run_seeded(
                lambda: compare_chunks(engine, tokens, cuts, tol)[1],
                f"check_cache_equivalence: a seeded case crossing {b} tokens, run after the "
                f"drawn cases", f"minillm.testing.assert_chunks_match(engine, "
                f"{as_list(tokens)}, {cuts}, tolerance={tol!r})"))
    return reports


def rollback_crossing_cases(engine, batch: int, boundaries, tol: Tolerance,
                            reference: str) -> list[Report]:
    """The seeded rollback cases around each boundary the context holds (profiles)."""
    reports = []
    for b in crossable(boundaries, engine.context_length):
        for n, (length, keep, fed) in enumerate(rollback_crossings(b)):
            tokens = boundary_texts(engine.vocab_size, batch, length, seed=100 + b + n)
            more = boundary_texts(engine.vocab_size, batch, fed, seed=200 + b + n)
            reports.append(run_seeded(
                lambda: assert_rollback_matches(engine, tokens, keep, more, tolerance=tol,
                                                reference=reference),
                f"check_rollback: a seeded case around {b} tokens, run after the drawn cases",
                f"minillm.testing.assert_rollback_matches(engine, {as_list(tokens)}, {keep}, "
                f"{as_list(more)}, tolerance={tol!r}, reference={reference!r})"))
    return reports


def compare_chunks(engine, tokens, cuts, tol: Tolerance) -> tuple[np.ndarray, Report]:
    """assert_chunks_match's comparisons: the cached logits (B, T, V) and what was measured."""
    require_cache(engine)
    tokens = np.asarray(tokens, dtype=np.int64)
    cuts = sorted(set(cuts) | {0, tokens.shape[1]})
    case = f"tokens {tokens.tolist()}, chunks cut at {cuts}"
    chunks, reports = [], []
    with open_cache(engine, len(tokens)) as cache:
        for a, b in zip(cuts, cuts[1:]):
            chunks.append(logits_of(engine, tokens[:, a:b], cache))
            want = logits_of(engine, tokens[:, :b])[:, a:b]
            across = f"a call of {b - a} into a cache of {a}, against one call of {b}" if a else ""
            reports.append(assert_logits_close(chunks[-1], want, tol, f"cached chunk [{a}, {b})",
                                               case, first=a, across=across))
    cached = np.concatenate(chunks, axis=1)
    sizes = [b - a for a, b in zip(cuts, cuts[1:])]
    reports.append(assert_logits_close(
        cached, logits_of(engine, tokens), tol, "cached chunks against the whole text "
        "(causality)", case, across=f"calls of {sizes} against one of {tokens.shape[1]}"
        if len(sizes) > 1 else ""))
    return cached, combine(reports)


def assert_chunks_match(engine, tokens, cuts, atol: float | None = None, rtol: float = 0.0, *,
                        tolerance: Tolerance | None = None) -> np.ndarray:
    """Feed tokens (B, T) through one cache in chunks [cuts[i], cuts[i + 1]) and compare each
    chunk's logits with the uncached forward pass of the text up to the chunk's end, then all
    of them with the uncached pass over the whole text. cuts: positions in (0, T) (0 and T
    may be given too). Returns the cached logits (B, T, V), for further comparisons."""
    return compare_chunks(engine, tokens, cuts, tolerance_of(atol, rtol, tolerance))[0]


def assert_rollback_matches(engine, tokens, keep: int, more, atol: float | None = None,
                            rtol: float = 0.0, *, tolerance: Tolerance | None = None,
                            reference: str = "uncached") -> Report:
    """Cache all of tokens (B, T), cache.truncate(keep), feed `more` (B, M): the logits must be
    those of the text tokens[:, :keep] + more at the positions of `more`, from one uncached
    call (reference="uncached") or a fresh cache fed tokens[:, :keep] then `more`
    (reference="chunks"). Two caches of B rows are alive at once with "chunks"."""
    tol = tolerance_of(atol, rtol, tolerance)
    require_cache(engine)
    if reference not in REFERENCES:
        raise ValueError(f"reference: must be one of {REFERENCES}, got {reference!r}")
    tokens, more = np.asarray(tokens, dtype=np.int64), np.asarray(more, dtype=np.int64)
    case = f"tokens {tokens.tolist()}, then {more.tolist()}"
    with open_cache(engine, len(tokens)) as cache:
        if not can_truncate(cache):
            raise ValueError("engine: its cache has no truncate(length), so rollback cannot be "
                             "checked")
        logits_of(engine, tokens, cache)
        cache.truncate(keep)
        got = logits_of(engine, more, cache)
        if reference == "uncached":
            text = np.concatenate([tokens[:, :keep], more], axis=1)
            want = logits_of(engine, text)[:, keep:]
            what = f"after truncate({keep}), against one uncached call"
            across = f"a call of {more.shape[1]} into the cache cut to {keep}, against one " \
                     f"call of {keep + more.shape[1]}" if keep else ""
        else:
            with open_cache(engine, len(tokens)) as fresh:
                if keep:
                    logits_of(engine, tokens[:, :keep], fresh)
                want = logits_of(engine, more, fresh)
            what = f"after truncate({keep}), against a fresh cache fed the same chunks"
            across = f"the kept tokens cached in a call of {tokens.shape[1]}, the reference's " \
                     f"in one of {keep}" if 0 < keep < tokens.shape[1] else ""
    return assert_logits_close(got, want, tol, what, case, first=keep, across=across,
                               chunks=reference == "uncached")


def rolls_back(engine) -> bool:
    """Whether the engine's caches have truncate(length)."""
    with open_cache(engine, 1) as probe:
        return can_truncate(probe)


def check_rollback(engine, atol: float | None = None, rtol: float = 0.0, *,
                   tolerance: Tolerance | None = None, reference: str = "uncached",
                   max_batch: int = 2, max_length: int | None = None,
                   max_examples: int | None = None, profile: str = "default",
                   shrink_seconds: float = SHRINK_SECONDS) -> Report:
    """The rollback property alone (check_cache_equivalence runs it too), against
    `reference`, on the profile's drawn cases (max_examples, max_length: profiles), then
    seeded cases that cache past each of the profile's boundaries and truncate on either side
    of it, or feed across it; returns a Report."""
    tol = tolerance_of(atol, rtol, tolerance)
    require_cache(engine)
    budget = profile_of(profile, max_length, max_examples)
    length = min(budget.max_length, engine.context_length)
    if not rolls_back(engine):
        raise ValueError("engine: its cache has no truncate(length), so rollback cannot be "
                         "checked")
    if length < 2:
        raise ValueError(f"engine: a context of {length} token cannot hold a rollback case")
    reports = []
    run_property(rollback_cases(engine.vocab_size, max_batch, length),
                 lambda case: reports.append(assert_rollback_matches(
                     engine, *case, tolerance=per_case(tol), reference=reference)),
                 budget.max_examples, shrink_seconds, "check_rollback",
                 lambda case: f"minillm.testing.assert_rollback_matches(engine, "
                              f"{as_list(case[0])}, {case[1]}, {as_list(case[2])}, "
                              f"tolerance={per_case(tol)!r}, reference={reference!r})")
    reports += rollback_crossing_cases(engine, 1, budget.boundaries, per_case(tol),
                                       reference)  # one row: the batch check crosses with two
    report = combine(reports)
    assert_top1(report, tol, "rollback checks")
    return report


def check_cache_equivalence(engine, atol: float | None = None, rtol: float = 0.0, *,
                            tolerance: Tolerance | None = None, reference: str = "uncached",
                            max_batch: int = 2, max_length: int | None = None,
                            max_examples: int | None = None, profile: str = "default",
                            shrink_seconds: float = SHRINK_SECONDS) -> Report:
    """The properties of the module docstring on the profile's drawn cases each (Hypothesis,
    derandomized: the same cases on every run; profiles: "quick", "default", "long", an
    explicit max_examples or max_length in place of the profile's). Texts are at most
    min(max_length, engine.context_length) tokens; when none of them fed a chunk of
    LONG_CHUNK or more tokens to a filled cache, one seeded case that does is run after them;
    then seeded cases whose texts cross each of the profile's boundaries (16, 32, 64 by
    default) that the context holds. Rollback is checked when the engine's caches have
    truncate(length), against `reference`. Bounds: atol (and rtol), or a Tolerance; top1 is a
    rate over all positions compared. First, the engine must be deterministic
    (engine.assert_deterministic). Returns a Report of everything compared; raises
    AssertionError with the smallest failing case Hypothesis finds in shrink_seconds."""
    tol = tolerance_of(atol, rtol, tolerance)
    require_cache(engine)
    budget = profile_of(profile, max_length, max_examples)
    length = min(budget.max_length, engine.context_length)
    repeat = assert_deterministic(engine, tol, min(2, max_batch))
    reports, reached = [], []

    def check(case):
        reached.append(feeds_long_chunk(*case))
        reports.append(compare_chunks(engine, *case, per_case(tol))[1])

    run_property(chunk_cases(engine.vocab_size, max_batch, length), check,
                 budget.max_examples, shrink_seconds, "check_cache_equivalence",
                 lambda case: f"minillm.testing.assert_chunks_match(engine, {as_list(case[0])}, "
                              f"{list(case[1])}, tolerance={per_case(tol)!r})")
    crossings = chunk_crossing_cases(engine, 1, budget.boundaries,
                                     per_case(tol))  # each feeds a long chunk to a filled cache
    if not any(reached) and not crossings:  # nothing fed the case of call-size differences
        reports += long_chunk(engine, min(2, max_batch), length, per_case(tol))
        if length <= LONG_CHUNK:
            warn_short(budget.max_examples)
    reports += crossings
    if rolls_back(engine) and length >= 2:
        reports.append(check_rollback(engine, tolerance=per_case(tol), reference=reference,
                                      max_batch=max_batch, max_length=budget.max_length,
                                      max_examples=budget.max_examples, profile=profile,
                                      shrink_seconds=shrink_seconds))
    assert_top1(combine(reports), tol, "cache checks")
    return dataclasses.replace(combine(reports), repeat=repeat)
