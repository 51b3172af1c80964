"""Sampler checks: an engine's filtered distribution and its draws, against minillm's rule.

minillm.sampling defines the distribution for each set of knobs (temperature, top-k, top-p,
min-p, repetition penalty, in that order). Two checks, for an engine's own sampler:

    check_filtered_probs   its distribution equals minillm's, |p - p_ref| <= atol, on random
                           logits (continuous values: no ties, where conventions differ)
    check_sampler          its draws follow minillm's distribution: no draw of a filtered-out
                           token, and a chi-square test at the 0.1% level (minillm.testing.stats)
"""
from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from ..sampling import SamplingConfig, probabilities
from .settings import checker_settings
from .stats import FALSE_ALARM, chi_square, chi_square_critical


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


def check_sampler(sample, knobs: SamplingConfig, logits, history=None, draws: int = 40_000,
                  seed: int = 2024) -> None:
    """sample(logits (draws, V), rng) -> (draws,) token ids, one per row, with the engine's
    sampler set to `knobs`; every row is the same logits (V,), so every draw comes from
    probabilities(logits, knobs, history). rng is numpy.random.default_rng(seed).
    history: the one text the repetition penalty looks at (a list of ids), if it is on."""
    logits = np.asarray(logits, dtype=np.float64)
    probs = probabilities(logits, knobs, None if history is None else [list(history)])
    tokens = sample(np.tile(logits, (draws, 1)), np.random.default_rng(seed))
    assert_draws_follow(tokens, probs)


def check_filtered_probs(filtered, knobs: SamplingConfig, atol: float = 1e-12, batch: int = 3,
                         vocab_size: int = 50, max_examples: int = 25) -> None:
    """filtered(logits (batch, vocab_size) float64) -> (batch, vocab_size) probabilities, the
    engine's distribution for `knobs` (without repetition penalty: it needs a history), must be
    minillm's within atol. Logits are scale * N(0, 1), seeded by Hypothesis (derandomized)."""
    if knobs.penalises:
        raise ValueError("knobs: check the repetition penalty with check_sampler and a history")

    @checker_settings(max_examples)
    @given(st.integers(0, 2**32 - 1), st.sampled_from([0.5, 3.0, 10.0]))
    def agree(seed, scale):
        z = scale * np.random.default_rng(seed).standard_normal((batch, vocab_size))
        got = np.asarray(filtered(z), dtype=np.float64)
        want = probabilities(z, knobs)
        worst = float(np.abs(got - want).max())
        if got.shape != want.shape or worst > atol:
            raise AssertionError(f"filtered probabilities differ from minillm's by {worst:.3g} "
                                 f"(atol {atol}) for {knobs}; logits seed {seed}, scale {scale}")

    agree()
