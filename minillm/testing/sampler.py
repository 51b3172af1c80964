"""Sampler checks: an engine's filtered distribution and its draws, against minillm's rule.

minillm.sampling defines the distribution for each set of knobs (repetition penalty,
temperature, top-k, top-p, min-p, in that order). Two checks, for an engine's own sampler:

    check_sampler  filter_fn(logits, knobs) -> probabilities, on logits with ties, -inf and
                   huge values: every row is a distribution (finite, >= 0, sums to 1 within
                   1e-9) that keeps at least one token, never revives a removed token (a
                   logit of -inf stays at 0; a token is kept only if every token of higher
                   logit is, ties aside), and equals minillm's filtered_probs within atol
                   wherever the row's finite logits are all distinct (ties, equal up to a
                   relative 1e-9, are where tie rules legitimately differ)
    check_draws    sample(logits, rng) -> token ids follows minillm's distribution: no draw of
                   a filtered-out token, and a chi-square test at the 0.1% level
"""
from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from ..sampling import SamplingConfig, filtered_probs
from .settings import checker_settings
from .stats import FALSE_ALARM, chi_square, chi_square_critical
from .strategies import logits as logit_arrays
from .strategies import sampling_knobs, smooth_logits


def tied(a, b):
    """Logits equal up to a relative 1e-9: the same after exp, or nearly, so that tie rules
    (which of two equal tokens top-k keeps) decide, not the filter."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        return np.abs(a - b) <= 1e-9 * np.maximum(1.0, np.maximum(np.abs(a), np.abs(b)))


def assert_filter_holds(filter_fn, z, knobs: SamplingConfig, atol: float = 1e-12) -> None:
    """check_sampler's properties on one (B, V) array of logits."""
    case = f"logits {z.tolist()}, {knobs}"
    p = np.asarray(filter_fn(z.copy(), knobs), dtype=np.float64)
    if p.shape != z.shape or not np.isfinite(p).all() or (p < 0).any():
        raise AssertionError(f"not a distribution (shape {p.shape}, finite and >= 0 expected): "
                             f"{p.tolist()}; {case}")
    if not (p > 0).any(axis=-1).all():
        raise AssertionError(f"a row keeps no token: {p.tolist()}; {case}")
    if np.abs(p.sum(axis=-1) - 1).max() > 1e-9:
        raise AssertionError(f"rows sum to {p.sum(axis=-1).tolist()}, not 1; {case}")
    if (p[np.isneginf(z)] > 0).any():
        raise AssertionError(f"a token of logit -inf revived: {p.tolist()}; {case}")
    for r, (row, probs) in enumerate(zip(z, p)):
        worst_kept = row[probs > 0].min()
        if (probs[(row > worst_kept) & ~tied(row, worst_kept)] == 0).any():
            raise AssertionError(f"row {r} keeps logit {worst_kept} but drops a higher one: "
                                 f"{probs.tolist()}; {case}")
    want = filtered_probs(z, knobs)
    for r, row in enumerate(z):
        finite = np.sort(row[np.isfinite(row)])
        if not tied(finite[1:], finite[:-1]).any() and np.abs(p[r] - want[r]).max() > atol:
            raise AssertionError(f"row {r} differs from minillm's filtered_probs by "
                                 f"{np.abs(p[r] - want[r]).max():.3g} (atol {atol}): "
                                 f"{p[r].tolist()} vs {want[r].tolist()}; {case}")


def check_sampler(filter_fn, knobs=None, atol: float = 1e-12, max_examples: int = 50) -> None:
    """filter_fn(logits (B, V) float64, knobs: SamplingConfig) -> (B, V) probabilities, the
    engine's distribution for the knobs (no repetition penalty: it needs a history, see
    check_draws). knobs: one SamplingConfig, or a strategy of them (default: every
    combination of sampling_knobs(penalty=False)). Logits from strategies.smooth_logits (50
    tokens, no ties) and strategies.logits (ties, -inf, huge values), Hypothesis derandomized;
    AssertionError with the smallest failing case."""
    if isinstance(knobs, SamplingConfig):
        if knobs.penalises:
            raise ValueError("knobs: check the repetition penalty with check_draws")
        knobs = st.just(knobs)
    knobs = sampling_knobs(penalty=False) if knobs is None else knobs

    @checker_settings(max_examples)
    @given(st.one_of(smooth_logits(), logit_arrays(max_rows=3, max_vocab=12)), knobs)
    def holds(z, config):
        assert_filter_holds(filter_fn, z, config, atol)

    holds()


def assert_draws_follow(tokens, probs) -> None:
    """Draws (n,) from one distribution probs (V,): never a token of probability 0, and a
    chi-square statistic under the critical value (false alarms: FALSE_ALARM)."""
    tokens = np.asarray(tokens)
    if tokens.min() < 0 or tokens.max() >= len(probs):
        raise AssertionError(f"drew token ids outside [0, {len(probs)}): {tokens.min()} to "
                             f"{tokens.max()}")
    counts = np.bincount(tokens, minlength=len(probs))
    if counts[probs == 0].any():
        bad = np.flatnonzero(counts * (probs == 0))
        raise AssertionError(f"drew tokens of probability 0: {bad.tolist()[:10]}")
    stat, df = chi_square(counts, probs)
    critical = chi_square_critical(df)
    if stat >= critical:
        raise AssertionError(f"draws do not follow the distribution: chi-square {stat:.1f} >= "
                             f"{critical:.1f} (df {df}, false-alarm rate {FALSE_ALARM}); counts "
                             f"{counts.tolist()}, expected "
                             f"{(len(tokens) * probs).round(1).tolist()}")


def check_draws(sample, knobs: SamplingConfig, logits, history=None, draws: int = 40_000,
                seed: int = 2024) -> None:
    """sample(logits (draws, V), rng) -> (draws,) token ids, one per row, with the engine's
    sampler set to `knobs`; every row is the same logits (V,), so every draw comes from
    filtered_probs(logits, knobs, history). rng is numpy.random.default_rng(seed).
    history: the one text the repetition penalty looks at (a list of ids), if it is on."""
    logits = np.asarray(logits, dtype=np.float64)
    probs = filtered_probs(logits, knobs, None if history is None else [list(history)])
    tokens = sample(np.tile(logits, (draws, 1)), np.random.default_rng(seed))
    assert_draws_follow(tokens, probs)
