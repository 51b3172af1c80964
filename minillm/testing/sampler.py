"""Sampler checks: an engine's filtered distribution and its draws, against minillm's rule.

minillm.sampling defines the distribution for each set of knobs (repetition penalty,
temperature, top-k, top-p, min-p, in that order). Two checks, for an engine's own sampler:

    check_sampler  filter_fn(logits, knobs) -> probabilities, on logits with ties, -inf and
                   huge values: every row is a distribution (finite, >= 0, sums to 1 within
                   1e-9, 1e-5 in float32) that keeps at least one token, never revives a
                   removed token (a logit of -inf stays at 0; a token is kept only if every
                   token of higher logit is, ties aside), and equals the reference within atol
                   wherever the row's finite logits are all distinct (ties, equal up to a
                   relative 1e-9, 1e-6 in float32, are where tie rules legitimately differ)
    check_draws    sample(logits, rng) -> token ids follows minillm's distribution: no draw of
                   a filtered-out token, and a chi-square test at the 0.1% level

The reference is minillm's probabilities, or the same filters in another `order` for an
engine that applies them otherwise: llama.cpp (and llama-cpp-python) apply the temperature
last, after top-k, top-p and min-p have cut the untempered distribution:
order=("top_k", "top_p", "min_p", "temperature").
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from ..sampling import SamplingConfig, filtered_probs, top_k_mask, top_p_mask
from .settings import SHRINK_SECONDS, as_list, run_property, run_seeded
from .stats import FALSE_ALARM, chi_square, chi_square_critical
from .strategies import logits as logit_arrays
from .strategies import knob_grid, sampling_knobs, smooth_logits

MINILLM_ORDER = ("temperature", "top_k", "top_p", "min_p")
LLAMA_CPP_ORDER = ("top_k", "top_p", "min_p", "temperature")
SUM_TOLERANCE = {"float64": 1e-9, "float32": 1e-5}
TIE_TOLERANCE = {"float64": 1e-9, "float32": 1e-6}


@dataclass(frozen=True)
class SamplerReport:
    """What check_sampler saw: the cases, and the largest difference from the reference on
    rows without ties (`max_diff`) and on rows with them (`max_diff_tied`, not bounded)."""

    cases: int
    max_diff: float
    max_diff_tied: float


def probabilities_in_order(z, knobs: SamplingConfig, order=MINILLM_ORDER) -> np.ndarray:
    """minillm's filters (top-k, top-p, min-p, each on what the previous kept, renormalised)
    with the temperature at its place in `order`: the filters before it see softmax(z), those
    after it softmax(z / T); the result is softmax(z / T) over the tokens kept. (B, V) -> (B, V)."""
    if tuple(order) == MINILLM_ORDER or knobs.greedy:
        return filtered_probs(z, knobs)  # greedy: the argmax survives every filter, any order
    if sorted(order) != sorted(MINILLM_ORDER):
        raise ValueError(f"order: a permutation of {MINILLM_ORDER}, got {tuple(order)}")
    z = np.asarray(z, dtype=np.float64)
    T, keep = 1.0, np.ones(z.shape, dtype=bool)
    for stage in order:
        with np.errstate(over="ignore"):
            e = np.exp((z - z.max(axis=-1, keepdims=True)) / T)  # (B, V), max entry 1
        keep &= e > 0
        if stage == "temperature":
            T = knobs.temperature
        elif stage == "top_k" and knobs.top_k is not None and knobs.top_k < z.shape[-1]:
            keep &= top_k_mask(np.where(keep, z, -np.inf), knobs.top_k)
        elif stage == "top_p" and knobs.top_p is not None:
            keep &= top_p_mask(np.where(keep, e, 0.0), knobs.top_p)
        elif stage == "min_p" and knobs.min_p is not None:  # as filtered_probs writes it
            kept = np.where(keep, e, 0.0)
            keep &= kept >= knobs.min_p * kept.max(axis=-1, keepdims=True)
    with np.errstate(over="ignore"):
        e = np.where(keep, np.exp((z - z.max(axis=-1, keepdims=True)) / T), 0.0)
    return e / e.sum(axis=-1, keepdims=True)


def tied(a, b, rel: float = 1e-9):
    """Logits equal up to a relative `rel`: the same after exp, or nearly, so that tie rules
    (which of two equal tokens top-k keeps) decide, not the filter."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        return np.abs(a - b) <= rel * np.maximum(1.0, np.maximum(np.abs(a), np.abs(b)))


def assert_filter_holds(filter_fn, z, knobs: SamplingConfig, atol: float = 1e-12,
                        order=MINILLM_ORDER, dtype: str = "float64") -> tuple[float, float]:
    """check_sampler's properties on one (B, V) array of logits (given to filter_fn as a copy
    in `dtype`). Returns the largest differences from the reference on rows without and with
    ties. Messages give the knobs first, then what failed, then the rows."""
    z = np.asarray(z, dtype=dtype)
    case = f"logits {z.tolist()}"
    p = np.asarray(filter_fn(z.copy(), knobs), dtype=np.float64)
    z = z.astype(np.float64)
    if p.shape != z.shape or not np.isfinite(p).all() or (p < 0).any():
        raise AssertionError(f"{knobs}: not a distribution (shape {p.shape}, finite and >= 0 "
                             f"expected): {p.tolist()}; {case}")
    if not (p > 0).any(axis=-1).all():
        raise AssertionError(f"{knobs}: a row keeps no token: {p.tolist()}; {case}")
    if np.abs(p.sum(axis=-1) - 1).max() > SUM_TOLERANCE[dtype]:
        raise AssertionError(f"{knobs}: rows sum to {p.sum(axis=-1).tolist()}, not 1; {case}")
    if (p[np.isneginf(z)] > 0).any():
        raise AssertionError(f"{knobs}: a token of logit -inf revived: {p.tolist()}; {case}")
    for r, (row, probs) in enumerate(zip(z, p)):
        worst_kept = row[probs > 0].min()
        if (probs[(row > worst_kept) & ~tied(row, worst_kept, TIE_TOLERANCE[dtype])] == 0).any():
            raise AssertionError(f"{knobs}: row {r} keeps logit {worst_kept} but drops a higher "
                                 f"one: {probs.tolist()}; {case}")
    want = probabilities_in_order(z, knobs, order)
    plain, with_ties = 0.0, 0.0
    for r, row in enumerate(z):
        finite = np.sort(row[np.isfinite(row)])
        diff = float(np.abs(p[r] - want[r]).max())
        if tied(finite[1:], finite[:-1], TIE_TOLERANCE[dtype]).any():
            with_ties = max(with_ties, diff)
            continue
        plain = max(plain, diff)
        if diff > atol:
            rule = ("minillm's filtered_probs" if tuple(order) == MINILLM_ORDER
                    else f"minillm's filters in the order {tuple(order)}")
            raise AssertionError(f"{knobs}: row {r} differs from {rule} by {diff:.3g} (atol "
                                 f"{atol}) at {differing(p[r], want[r], atol)}; {case}")
    return plain, with_ties


def differing(got, want, atol: float, show: int = 8) -> str:
    """The entries of a row where got and want differ by more than atol: token, got, want."""
    ids = np.flatnonzero(np.abs(got - want) > atol)
    text = ", ".join(f"token {i}: {got[i]:.6g} vs {want[i]:.6g}" for i in ids[:show])
    return text + (f" (and {len(ids) - show} more)" if len(ids) > show else "")


def grid_logits(dtype: str = "float64") -> np.ndarray:
    """(3, 50) seeded logits of scales 0.5, 3 and 10 (no ties): rows on which each filter
    keeps a different set of tokens at each temperature of the grid, so that applying two
    stages in another order changes the result (tests/test_testing_budgets.py tries every
    order)."""
    rng = np.random.default_rng(20)
    rows = rng.standard_normal((3, 50)) * np.array([[0.5], [3.0], [10.0]])
    return rows.astype(dtype)


def check_sampler(filter_fn, knobs=None, atol: float = 1e-12, max_examples: int = 50, *,
                  order=MINILLM_ORDER, dtype: str = "float64",
                  shrink_seconds: float = SHRINK_SECONDS) -> SamplerReport:
    """filter_fn(logits (B, V), knobs: SamplingConfig) -> (B, V) probabilities, the engine's
    distribution for the knobs (no penalty: the penalties need a history, see check_draws).
    knobs: one SamplingConfig, or a strategy of them (default: every combination of
    sampling_knobs(penalty=False)). order: where the engine applies the temperature among the
    filters (module docstring). dtype "float32": logits are handed over as float32, their
    huge values +-1e30 instead of +-1e300 and +-3.4e38 (so that logits / T stays within
    float32's range), and the sum and tie tolerances are float32's.

    First the grid: every knob combination (strategies.knob_grid, 240 of them, greedy
    included; or the one SamplingConfig given) on grid_logits, where the usual misorderings
    (top-p or min-p before the temperature, top-p before top-k, ...) each differ from the
    reference. Then `max_examples` drawn cases: logits from strategies.smooth_logits (50
    tokens, no ties) and strategies.logits (ties, -inf, huge values) with drawn knobs,
    Hypothesis derandomized. Returns a SamplerReport (cases: both counted); AssertionError
    with the failing grid case, or the smallest failing drawn case found in shrink_seconds."""
    if dtype not in SUM_TOLERANCE:
        raise ValueError(f"dtype: one of {sorted(SUM_TOLERANCE)}, got {dtype!r}")
    grid = knob_grid() if knobs is None else []
    if isinstance(knobs, SamplingConfig):
        if knobs.penalises:
            raise ValueError("knobs: check the penalties with check_draws")
        grid, knobs = [knobs], st.just(knobs)
    knobs = sampling_knobs(penalty=False) if knobs is None else knobs
    seen, z = [], grid_logits(dtype)
    for i, config in enumerate(grid):
        seen.append(run_seeded(
            lambda: assert_filter_holds(filter_fn, z, config, atol, order, dtype),
            f"check_sampler: knob combination {i + 1} of {len(grid)} of the grid, before the "
            f"drawn cases", f"minillm.testing.assert_filter_holds(filter_fn, "
            f"minillm.testing.sampler.grid_logits({dtype!r}), {config!r}, {atol}, "
            f"{tuple(order)}, {dtype!r})"))
    cases = st.tuples(st.one_of(smooth_logits(),
                                logit_arrays(max_rows=3, max_vocab=12, dtype=dtype)), knobs)
    run_property(cases, lambda case: seen.append(assert_filter_holds(
        filter_fn, case[0], case[1], atol, order, dtype)), max_examples, shrink_seconds,
        "check_sampler", lambda case: f"minillm.testing.assert_filter_holds(filter_fn, "
                                      f"{as_list(case[0])}, {case[1]!r}, {atol}, {tuple(order)}, "
                                      f"{dtype!r})")
    return SamplerReport(len(seen), max((a for a, _ in seen), default=0.0),
                         max((b for _, b in seen), default=0.0))


def assert_draws_follow(tokens, probs, names=None) -> dict:
    """Draws (n,) from one distribution probs (V,): never a token of probability 0, and a
    chi-square statistic under the critical value (false alarms: FALSE_ALARM). Returns
    {statistic, df, critical, false_alarm}. A failure lists only the entries that differ most
    (by their share of the statistic), named by `names` (default: their ids)."""
    tokens = np.asarray(tokens)
    names = list(range(len(probs))) if names is None else list(names)
    if tokens.min() < 0 or tokens.max() >= len(probs):
        raise AssertionError(f"drew token ids outside [0, {len(probs)}): {tokens.min()} to "
                             f"{tokens.max()}")
    counts = np.bincount(tokens, minlength=len(probs))
    if counts[probs == 0].any():
        bad = np.flatnonzero(counts * (probs == 0))
        raise AssertionError(f"drew tokens of probability 0: "
                             f"{[(names[i], int(counts[i])) for i in bad[:10]]} (token, times)")
    stat, df = chi_square(counts, probs)
    critical = chi_square_critical(df)
    if stat >= critical:
        raise AssertionError(f"draws do not follow the distribution: chi-square {stat:.1f} >= "
                             f"{critical:.1f} (df {df}, false-alarm rate {FALSE_ALARM}); the "
                             f"entries that differ most: {differing_entries(counts, probs, names)}")
    return dict(statistic=stat, df=df, critical=critical, false_alarm=FALSE_ALARM)


def differing_entries(counts, probs, names, show: int = 6) -> str:
    """The `show` entries of largest (observed - expected)^2 / expected, as text."""
    expected = counts.sum() * np.asarray(probs)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(expected > 0, (counts - expected) ** 2 / expected, 0.0)
    order = np.argsort(-share)[:show]
    text = ", ".join(f"{names[i]!r}: drawn {int(counts[i])}, expected {expected[i]:.1f}"
                     for i in order)
    return text + (f" (of {len(probs)} entries)" if len(probs) > show else "")


def check_draws(sample, knobs: SamplingConfig, logits, history=None, draws: int = 40_000,
                seed: int = 2024) -> dict:
    """sample(logits (draws, V), rng) -> (draws,) token ids, one per row, with the engine's
    sampler set to `knobs`; every row is the same logits (V,), so every draw comes from
    filtered_probs(logits, knobs, history). rng is numpy.random.default_rng(seed).
    history: the one text the penalties look at (a list of ids), if one is on.
    Returns assert_draws_follow's {statistic, df, critical, false_alarm}."""
    logits = np.asarray(logits, dtype=np.float64)
    probs = filtered_probs(logits, knobs, None if history is None else [list(history)])
    tokens = sample(np.tile(logits, (draws, 1)), np.random.default_rng(seed))
    return assert_draws_follow(tokens, probs)
