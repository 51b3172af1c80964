"""minillm.testing: each checker passes on minillm and fails on a planted bug.

Every bug below is one an engine could plausibly ship: a cache that is not read, a mask that
sees one token ahead, a rollback that forgets to truncate, padding that is attended to or
counted as positions, RoPE keys that keep their old positions after a window slide, a sampler
that multiplies by the temperature, a top-p that drops the token crossing p, a speculative rule
that resamples from p instead of the residual, a streaming decoder that decodes each token
alone. For each, the checker raises AssertionError on the bug and passes on the honest engine
(minillm.Model, passed to the checkers as it is). Planted speculative drafters are in
tests/test_speculative.py.
"""
import dataclasses
import pathlib
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest
from hypothesis import given, settings

import minillm
from minillm import kv_cache as cache_module
from minillm import speculative
from minillm.generate import decode_steps
from minillm.knobs import generation_config
from minillm.sampling import SamplingConfig, draw, filtered_probs, sample_next_token
from minillm.speculative import speculative_generate
from minillm.testing import (LLAMA_CPP_ORDER, BudgetWarning, Engine, Tolerance, calibrate,
                             check_batch_equivalence,
                             check_cache_equivalence, check_draws, check_rollback, check_sampler,
                             check_speculative_distribution, check_stream_decoder,
                             check_window_slides, exact_sequence_distribution,
                             power_by_noncentral_approximation, power_by_simulation,
                             smallest_detectable_tv)
from minillm.text.tokenizer import BYTE_TO_CHAR
from minillm.testing.strategies import token_arrays
from tests.helpers import byte_tokenizer

ATOL = 1e-12
MODERN = minillm.random_model(minillm.ModelConfig(
    arch="modern", vocab_size=11, context_length=12, d_model=8, n_layers=2, n_heads=2,
    n_kv_heads=1, d_ff=12), seed=3, dtype="float64", std=0.5)
CLASSIC = minillm.random_model(minillm.ModelConfig(
    arch="classic", vocab_size=11, context_length=12, d_model=8, n_layers=2, n_heads=2),
    seed=4, dtype="float64", std=0.5)
SMALL = dict(max_examples=10, max_length=8)


# -- cache equivalence -------------------------------------------------------------------------

def cache_ignored(model):
    """Bug: each chunk is read as a new text; the cache is never consulted."""
    return Engine(model.vocab_size, model.context_length, new_cache=model.new_cache,
                  forward=lambda tokens, cache=None, pad=None: model.forward(tokens, pad=pad))


def truncate_forgotten(model):
    """Bug: rollback is a no-op, so rejected tokens stay visible."""
    def new_cache(batch_size):
        cache = model.new_cache(batch_size)
        cache.truncate = lambda length: None
        return cache
    return Engine(model.vocab_size, model.context_length, model.forward, new_cache)


def off_by_one(model):
    """Bug: the cache writes each chunk one position too far (a slot left empty before it)."""
    def forward(tokens, cache=None, pad=None):
        if cache is not None and cache.length > 0:
            cache.advance(1)  # the new keys land at length + 1, an empty slot before them
        return model.forward(tokens, cache, pad)
    return Engine(model.vocab_size, model.context_length, forward, model.new_cache)


def one_token_ahead(monkeypatch):
    """Bug: the causal mask lets every token see the next one too."""
    original = cache_module.positions_and_mask

    def leaky(B, T, start, pad):
        positions, mask = original(B, T, start, pad)
        if mask is not None:
            mask = mask | np.eye(mask.shape[-2], mask.shape[-1], k=start + 1, dtype=bool)
        return positions, mask

    monkeypatch.setattr(cache_module, "positions_and_mask", leaky)


@pytest.mark.parametrize("model", [MODERN, CLASSIC], ids=["modern", "classic"])
def test_cache_checker_passes_minillm(model):
    check_cache_equivalence(model, atol=ATOL, **SMALL)


@pytest.mark.parametrize("bug", [cache_ignored, truncate_forgotten, off_by_one])
def test_cache_checker_fails_a_cache_not_read_not_rolled_back_or_off_by_one(bug):
    with pytest.raises(AssertionError, match="logits differ"):
        check_cache_equivalence(bug(MODERN), atol=ATOL, **SMALL)


def test_cache_checker_fails_a_mask_that_sees_one_token_ahead(monkeypatch):
    """With several layers the leak already changes the chunks (a token's keys in layer 2 saw
    the next token in layer 1); with one layer only the comparison with the whole text sees it."""
    one_layer = minillm.random_model(dataclasses.replace(MODERN.config, n_layers=1), seed=5,
                                     dtype="float64", std=0.5)
    check_cache_equivalence(one_layer, atol=ATOL, **SMALL)
    one_token_ahead(monkeypatch)
    with pytest.raises(AssertionError, match="logits differ"):
        check_cache_equivalence(MODERN, atol=ATOL, **SMALL)
    with pytest.raises(AssertionError, match="causality"):
        check_cache_equivalence(one_layer, atol=ATOL, **SMALL)


def test_a_checker_names_what_the_engine_lacks():
    bare = Engine(11, 12, forward=lambda tokens, cache=None, pad=None: MODERN.forward(tokens))
    with pytest.raises(ValueError, match="new_cache"):
        check_cache_equivalence(bare, atol=ATOL)


# -- batch equivalence -------------------------------------------------------------------------

def padding_attended(model):
    """Bug: the pad mask leaks: padding is attended to (and positions start at column 0)."""
    return Engine(model.vocab_size, model.context_length, new_cache=model.new_cache,
                  forward=lambda tokens, cache=None, pad=None: model.forward(tokens, cache))


def padding_counted_as_positions(monkeypatch):
    """Bug: padding is masked, but each row's positions count from column 0."""
    original = cache_module.positions_and_mask

    def from_column_0(B, T, start, pad):
        positions, mask = original(B, T, start, pad)
        if pad is not None:
            positions = np.broadcast_to(np.arange(start, start + T), (B, T))
        return positions, mask

    monkeypatch.setattr(cache_module, "positions_and_mask", from_column_0)


@pytest.mark.parametrize("model", [MODERN, CLASSIC], ids=["modern", "classic"])
def test_batch_checker_passes_minillm(model):
    check_batch_equivalence(model, atol=ATOL, **SMALL)


def test_batch_checker_fails_a_leaking_pad_mask():
    with pytest.raises(AssertionError, match="row .* of the batch"):
        check_batch_equivalence(padding_attended(MODERN), atol=ATOL, **SMALL)


def test_batch_checker_fails_positions_counted_from_the_padding(monkeypatch):
    """Learned positions (classic) see the bug; RoPE (modern) cannot: shifting every position
    of a row by the same amount leaves every query-key angle, hence the logits, unchanged."""
    padding_counted_as_positions(monkeypatch)
    with pytest.raises(AssertionError, match="row .* of the batch"):
        check_batch_equivalence(CLASSIC, atol=ATOL, **SMALL)
    check_batch_equivalence(MODERN, atol=1e-10, **SMALL)


# -- window slides -----------------------------------------------------------------------------

def greedy_logits(model, use_cache=True):
    """minillm's generation loop as check_window_slides wants it: the logits of each step."""
    def decode(prompt, n):
        config = generation_config(max_new_tokens=n, temperature=0)
        steps = decode_steps(model, [prompt], config, None, use_cache)
        return np.array([step.logits[0] for step in steps])
    return decode


def keys_keep_their_old_positions(model, window, token, cache, shift, slid, progress=None):
    """Bug: on a slide the cache moves left (cache.shift) but its kept keys are not re-read, so
    they keep the RoPE rotation of their old positions while the new tokens count from the new
    start: every query-key angle drifts by the shift."""
    cache.shift(shift)
    return model.forward(token[:, None], cache)[:, -1]


SLIDING = minillm.random_model(minillm.ModelConfig(
    arch="modern", vocab_size=11, context_length=6, d_model=8, n_layers=1, n_heads=2,
    n_kv_heads=1, d_ff=12), seed=6, dtype="float64", std=0.5)


@pytest.mark.parametrize("use_cache", [True, False], ids=["cached", "uncached"])
@pytest.mark.parametrize("model", [SLIDING, CLASSIC], ids=["modern", "classic"])
def test_slide_checker_passes_minillm(model, use_cache):
    check_window_slides(greedy_logits(model, use_cache), model, atol=1e-10, max_examples=5)


def test_slide_checker_fails_rope_positions_that_drift_after_a_slide(monkeypatch):
    """One layer: a kept token's key depends only on its embedding and its position, so the
    only thing the bug changes is the positions."""
    monkeypatch.setattr(sys.modules["minillm.generate"], "read_slid",
                        keys_keep_their_old_positions)
    with pytest.raises(AssertionError, match=r"step \d+ .*logits differ"):
        check_window_slides(greedy_logits(SLIDING), SLIDING, atol=1e-10, max_examples=10)


# -- the sampler -------------------------------------------------------------------------------

LOGITS = np.random.default_rng(1).normal(0, 1.5, 20)
KNOBS = SamplingConfig(temperature=0.7, top_p=0.8)


def temperature_multiplied(z, rng):
    """Bug: logits times T instead of divided by T (the same for T = 1, not for 0.7)."""
    return sample_next_token(z * 0.7, temperature=1.0, rng=rng)


def top_p_without_the_crossing_token(z, knobs):
    """Bug: top-p keeps only tokens whose running mass, themselves included, stays <= p."""
    p = filtered_probs(z, temperature=knobs.temperature)
    order = np.argsort(-p, axis=-1, kind="stable")
    running = np.cumsum(np.take_along_axis(p, order, axis=-1), axis=-1)
    keep = np.zeros_like(p, dtype=bool)
    np.put_along_axis(keep, order, (running <= knobs.top_p) | (np.arange(p.shape[-1]) == 0),
                      axis=-1)
    kept = np.where(keep, p, 0.0)
    return kept / kept.sum(axis=-1, keepdims=True)


def top_p_of_the_unnormalised_top_k(z, knobs):
    """Bug: top-p measured against the whole distribution's mass after top-k has cut it,
    instead of against what top-k kept (so top-p keeps too much)."""
    p = filtered_probs(z, temperature=knobs.temperature)
    order = np.argsort(-p, axis=-1, kind="stable")
    sorted_p = np.take_along_axis(p, order, axis=-1)
    rank = np.arange(p.shape[-1])
    mass_before = np.cumsum(sorted_p, axis=-1) - sorted_p  # of the whole row: not renormalised
    keep_sorted = (rank < knobs.top_k) & (mass_before < knobs.top_p)
    keep = np.zeros_like(keep_sorted)
    np.put_along_axis(keep, order, keep_sorted, axis=-1)
    kept = np.where(keep, p, 0.0)
    return kept / kept.sum(axis=-1, keepdims=True)


def test_sampler_checker_passes_minillm_on_every_knob_combination():
    check_sampler(lambda z, knobs: filtered_probs(z, knobs))


@pytest.mark.parametrize("bug, knobs", [
    (top_p_without_the_crossing_token, SamplingConfig(temperature=0.7, top_p=0.8)),
    (top_p_of_the_unnormalised_top_k, SamplingConfig(temperature=1.0, top_k=5, top_p=0.6))],
    ids=["top_p_without_the_crossing_token", "top_p_of_the_unnormalised_top_k"])
def test_sampler_checker_fails_a_wrong_filter(bug, knobs):
    check_sampler(lambda z, k: filtered_probs(z, k), knobs, max_examples=20)
    with pytest.raises(AssertionError, match="differs from minillm's"):
        check_sampler(bug, knobs, max_examples=20)


def revives_removed_tokens(z, knobs):
    """Bug: tokens an earlier stage removed (logit -inf) get a little mass back."""
    p = filtered_probs(z, knobs) + 1e-3 * np.isneginf(z)
    return p / p.sum(axis=-1, keepdims=True)


def test_sampler_checker_fails_a_filter_that_revives_or_empties():
    revive = revives_removed_tokens
    with pytest.raises(AssertionError, match="revived"):
        check_sampler(revive, SamplingConfig(temperature=1.0))
    with pytest.raises(AssertionError, match="keeps no token"):
        check_sampler(lambda z, knobs: np.zeros(z.shape), SamplingConfig(temperature=1.0))


def test_draws_checker_fails_a_temperature_multiplied_in():
    """No filter, so every token stays possible: only the chi-square test can see it."""
    knobs = SamplingConfig(temperature=0.7)
    check_draws(lambda z, rng: sample_next_token(z, temperature=0.7, rng=rng), knobs, LOGITS)
    with pytest.raises(AssertionError, match="chi-square"):
        check_draws(temperature_multiplied, knobs, LOGITS)


def test_draws_checker_fails_a_sampler_that_ignores_the_filter():
    check_draws(lambda z, rng: sample_next_token(z, temperature=0.7, top_p=0.8, rng=rng), KNOBS,
                LOGITS)
    with pytest.raises(AssertionError, match="probability 0"):
        check_draws(lambda z, rng: sample_next_token(z, temperature=0.7, rng=rng), KNOBS, LOGITS)


def penalty_per_occurrence(history, penalty):
    """Bug: the repetition penalty applied once for every occurrence of a token, not once per
    distinct token (CTRL penalises each seen token once)."""
    def sample(z, rng):
        z = np.array(z, dtype=np.float64)
        for token in history:
            z[:, token] = np.where(z[:, token] > 0, z[:, token] / penalty, z[:, token] * penalty)
        return sample_next_token(z, temperature=1.0, rng=rng)
    return sample


def test_draws_checker_fails_a_penalty_applied_per_occurrence():
    knobs = SamplingConfig(temperature=1.0, repetition_penalty=1.5)
    logits = np.array([2.0, 1.5, 1.0, 0.5, 0.0, -0.5])
    history = [0, 0, 0, 1]  # token 0 three times

    def honest(z, rng):
        return sample_next_token(z, temperature=1.0, repetition_penalty=1.5,
                                 history=np.tile(history, (len(z), 1)), rng=rng)

    check_draws(honest, knobs, logits, history)
    with pytest.raises(AssertionError, match="chi-square"):
        check_draws(penalty_per_occurrence(history, 1.5), knobs, logits, history)


# -- speculative decoding ----------------------------------------------------------------------

TARGET = minillm.random_model(minillm.ModelConfig(
    arch="modern", vocab_size=4, context_length=16, d_model=8, n_layers=2, n_heads=2,
    n_kv_heads=1, d_ff=12), seed=10, dtype="float64", std=1.0)
DRAFT = minillm.random_model(minillm.ModelConfig(
    arch="classic", vocab_size=4, context_length=16, d_model=4, n_layers=1, n_heads=1),
    seed=11, dtype="float64", std=1.0)


def resample_from_p(p, q, drafted, u, v):
    """Bug: a rejected guess is replaced by a draw from p, not from max(0, p - q)."""
    for i, x in enumerate(drafted):
        if u[i] * q[i, x] >= p[i, x]:
            return i, int(draw(p[i], v))
    return len(drafted), int(draw(p[len(drafted)], v))


def test_exact_distribution_is_the_chain_rule_and_sums_to_one():
    exact = exact_sequence_distribution(TARGET, [1, 2], 2, temperature=0.8, top_k=3)
    assert exact.shape == (4, 4) and exact.sum() == pytest.approx(1.0, abs=1e-12)
    p1 = filtered_probs(TARGET.forward(np.array([[1, 2]]))[0, -1], temperature=0.8, top_k=3)
    p2 = filtered_probs(TARGET.forward(np.array([[1, 2, 3]]))[0, -1], temperature=0.8, top_k=3)
    assert exact[3, 0] == pytest.approx(p1[3] * p2[0], abs=1e-15)


@pytest.mark.slow
def test_speculative_checker_fails_resampling_from_p(monkeypatch):
    """The honest rule passes this check in tests/test_speculative.py (the same target, draft
    and knobs); resampling from p moves the distribution by a total variation of about 0.2."""
    monkeypatch.setattr(speculative, "accept", resample_from_p)
    exact = exact_sequence_distribution(TARGET, [1, 2], 3, temperature=1.0)

    def sample_fn(seed):
        out, _ = speculative_generate(TARGET, DRAFT, [1, 2], max_new_tokens=3, k=2, seed=seed,
                                      temperature=1.0)
        return out[2:]

    with pytest.raises(AssertionError, match="do not follow the target"):
        check_speculative_distribution(sample_fn, exact, runs=1000)


# -- streaming text ----------------------------------------------------------------------------

TOKENIZER = byte_tokenizer()
BYTE_IDS = [TOKENIZER.token_to_id(BYTE_TO_CHAR[b]) for b in range(256)]


def minillm_stream(ids):
    decoder = TOKENIZER.stream_decoder()
    return [decoder.push(i) for i in ids] + [decoder.flush()]


def each_token_alone(ids):
    """Bug: each token decoded on its own, so a character split across tokens prints as
    replacement characters."""
    return [TOKENIZER.decode([i]) for i in ids]


def test_stream_checker_passes_minillm_and_fails_decoding_each_token_alone():
    check_stream_decoder(minillm_stream, TOKENIZER.decode, BYTE_IDS, len(TOKENIZER))
    with pytest.raises(AssertionError, match="pieces joined"):
        check_stream_decoder(each_token_alone, TOKENIZER.decode, BYTE_IDS, len(TOKENIZER))


# -- the statistics ----------------------------------------------------------------------------

def test_false_alarm_rate_and_power_by_both_methods():
    """Under the null the simulated rate is the nominal 0.001 (Monte Carlo error ~3e-4 at
    10,000 trials); a 10% mixture with another distribution is caught by both methods."""
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(30))
    assert power_by_simulation(p, p, 3000, trials=10_000) < 0.003
    assert power_by_noncentral_approximation(p, p, 3000) == pytest.approx(1e-3, rel=0.01)
    other = 0.9 * p + 0.1 * rng.dirichlet(np.ones(30))
    simulated = power_by_simulation(p, other, 3000, trials=1000)
    assert abs(simulated - power_by_noncentral_approximation(p, other, 3000)) < 0.1


def test_the_detectable_total_variation_is_caught_at_the_stated_power():
    """The least detectable error at a total variation d moves d from half the mass to the other
    half, proportionally: its chi-square distance is exactly 4 d^2. At the stated d the
    simulated power is about 0.9 (1,000 trials: +-0.03); at half of it, well below."""
    p = np.random.default_rng(2).dirichlet(np.ones(40))
    d = smallest_detectable_tv(p, 3000)
    order = np.argsort(-p)
    upper = np.zeros(len(p), dtype=bool)
    upper[order[np.cumsum(p[order]) <= 0.5]] = True
    a, b = p[upper].sum(), p[~upper].sum()
    wrong = np.where(upper, p * (1 + d / a), p * (1 - d / b))
    assert 0.85 <= power_by_simulation(p, wrong, 3000, trials=1000) <= 1.0
    assert 0.01 < d < 0.1 and smallest_detectable_tv(p, 12_000) < d


# -- tolerances and reports --------------------------------------------------------------------

def noisy_one_token_steps(model, noise=1e-3):
    """An engine like llama.cpp without flash attention: a call of one token runs another
    kernel, modelled as a fixed perturbation of its logits; longer calls are exact."""
    wobble = np.random.default_rng(7).standard_normal(model.vocab_size) * noise

    def forward(tokens, cache=None, pad=None):
        logits = model.forward(tokens, cache, pad)
        return logits + wobble if np.asarray(tokens).shape[1] == 1 else logits
    return Engine(model.vocab_size, model.context_length, forward, model.new_cache)


def test_every_logits_checker_returns_what_it_saw():
    cache = check_cache_equivalence(MODERN, atol=ATOL, **SMALL)
    batch = check_batch_equivalence(MODERN, atol=ATOL, **SMALL)
    window = check_window_slides(greedy_logits(SLIDING), SLIDING, atol=1e-10, max_examples=3)
    for report in (cache, batch, window):
        assert report.comparisons > 0 and report.positions >= report.comparisons
        assert 0 <= report.max_abs <= ATOL and report.top1 == 1.0 and report.repeat == 0
    assert "positions" in str(cache)


def test_a_report_gives_the_largest_difference_of_a_passing_check():
    """The one-token noise (1e-3 at most, elementwise) passes atol 1e-2 and is reported."""
    report = check_cache_equivalence(noisy_one_token_steps(MODERN), atol=1e-2, **SMALL)
    wobble = np.abs(np.random.default_rng(7).standard_normal(MODERN.vocab_size) * 1e-3).max()
    assert wobble - 1e-12 <= report.max_abs <= wobble + 1e-12
    assert report.max_kl > 0 and report.max_tv > 0 and report.max_scaled > 0


@pytest.mark.parametrize("bound, message", [
    (Tolerance(scaled=1e-6), "scaled difference"),
    (Tolerance(kl=1e-12), "KL divergence"),
    (Tolerance(tv=1e-9), "total variation")], ids=["scaled", "kl", "tv"])
def test_each_bound_fails_what_exceeds_it_and_passes_what_does_not(bound, message):
    engine = noisy_one_token_steps(MODERN)
    with pytest.raises(AssertionError, match=message):
        check_cache_equivalence(engine, tolerance=bound, **SMALL)
    loose = dataclasses.replace(bound, **{field: 1.0 for field in ("scaled", "kl", "tv")
                                          if getattr(bound, field) is not None})
    check_cache_equivalence(engine, tolerance=loose, **SMALL)


def test_top1_is_a_rate_over_every_position_compared():
    """Noise of 5 against logits of scale ~1 moves the top-1 token on some positions only."""
    engine = noisy_one_token_steps(MODERN, noise=5.0)
    seen = check_cache_equivalence(engine, tolerance=Tolerance(top1=0.0), **SMALL)
    assert 0 < seen.top1 < 1
    check_cache_equivalence(engine, tolerance=Tolerance(top1=seen.top1), **SMALL)
    with pytest.raises(AssertionError, match=r"top-1 token agrees on \d+ of \d+ positions"):
        check_cache_equivalence(engine, tolerance=Tolerance(top1=min(1.0, seen.top1 + 0.01)),
                                **SMALL)


def test_atol_or_tolerance_exactly_one():
    with pytest.raises(ValueError, match="exactly one"):
        check_cache_equivalence(MODERN)
    with pytest.raises(ValueError, match="exactly one"):
        check_cache_equivalence(MODERN, atol=1e-12, tolerance=Tolerance(atol=1e-12))
    with pytest.raises(ValueError, match="at least one bound"):
        check_cache_equivalence(MODERN, tolerance=Tolerance())
    with pytest.raises(ValueError, match="top1"):
        Tolerance(top1=1.5)


# -- like for like -----------------------------------------------------------------------------

def test_rollback_and_batch_like_for_like_tell_one_token_noise_from_a_bug():
    """Rows of equal length: a ragged row of one token alone is a one-token call too."""
    noisy = noisy_one_token_steps(MODERN)
    with pytest.raises(AssertionError, match="against one uncached call"):
        check_rollback(noisy, atol=ATOL, **SMALL)
    check_rollback(noisy, atol=ATOL, reference="chunks", **SMALL)
    with pytest.raises(AssertionError, match="against the row alone, one uncached call"):
        check_batch_equivalence(noisy, atol=ATOL, ragged=False, max_batch=2, **SMALL)
    check_batch_equivalence(noisy, atol=ATOL, ragged=False, reference="chunks", **SMALL)
    with pytest.raises(AssertionError, match="against a fresh cache fed the same chunks"):
        check_rollback(truncate_forgotten(noisy), atol=ATOL, reference="chunks", **SMALL)


# -- determinism, caches' lifetime, shrinking --------------------------------------------------

def test_an_engine_that_answers_twice_differently_is_named():
    calls = iter(range(10**6))

    def drifting(tokens, cache=None, pad=None):
        return MODERN.forward(tokens, cache, pad) + 1e-6 * next(calls)

    engine = Engine(MODERN.vocab_size, MODERN.context_length, drifting, MODERN.new_cache)
    with pytest.raises(AssertionError, match="the engine is not deterministic: the same calls"):
        check_cache_equivalence(engine, atol=ATOL, **SMALL)


def test_a_case_that_fails_then_passes_is_named_not_a_flaky_group():
    """Deterministic on the probe (whose later chunks are one token each), not on the cases:
    the first later chunk of two tokens or more fails, once."""
    failed = []

    def once(tokens, cache=None, pad=None):
        second_chunk = cache is not None and cache.length > 0 and tokens.shape[1] >= 2
        logits = MODERN.forward(tokens, cache, pad)
        if second_chunk and not failed:
            failed.append(True)
            return logits + 1.0
        return logits

    engine = Engine(MODERN.vocab_size, MODERN.context_length, once, MODERN.new_cache)
    with pytest.raises(AssertionError, match="not deterministic: a case failed, then passed"):
        check_cache_equivalence(engine, atol=ATOL, **SMALL)


def counting_caches(model):
    """An engine whose caches count how many are alive (closed ones are not)."""
    alive, most = [0], [0]

    def new_cache(batch_size):
        cache = model.new_cache(batch_size)
        alive[0] += 1
        most[0] = max(most[0], alive[0])

        def close():
            alive[0] -= 1
        cache.close = close
        return cache
    return new_cache, alive, most


@pytest.mark.parametrize("reference", ["uncached", "chunks"])
def test_caches_are_closed_as_each_case_ends_while_shrinking_too(reference):
    new_cache, alive, most = counting_caches(MODERN)
    noisy = noisy_one_token_steps(MODERN)
    engine = Engine(noisy.vocab_size, noisy.context_length, noisy.forward, new_cache)
    with pytest.raises(AssertionError):
        check_cache_equivalence(engine, atol=ATOL, reference=reference, **SMALL)
    with pytest.raises(AssertionError):
        check_batch_equivalence(engine, atol=ATOL, reference=reference, **SMALL)
    assert alive[0] == 0 and most[0] <= 2


def test_shrinking_stops_when_its_time_is_spent():
    """shrink_seconds=0: after the first failure no new case is run, only that one again to
    report it; the full search runs many more and reports a smaller case."""
    def counted(calls):
        def forward(tokens, cache=None, pad=None):
            calls.append(1)
            return cache_ignored(MODERN).forward(tokens, cache, pad)
        return Engine(MODERN.vocab_size, MODERN.context_length, forward, MODERN.new_cache)

    bounded_calls, full_calls = [], []
    with pytest.raises(AssertionError, match="logits differ") as bounded:
        check_cache_equivalence(counted(bounded_calls), atol=ATOL, shrink_seconds=0, **SMALL)
    with pytest.raises(AssertionError, match="logits differ") as full:
        check_cache_equivalence(counted(full_calls), atol=ATOL, **SMALL)
    assert len(bounded_calls) < len(full_calls)
    case = lambda error: str(error.value).split("; ")[1].splitlines()[0]  # noqa: E731
    assert len(case(full)) < len(case(bounded))


# -- one-row and uncached engines, windows -----------------------------------------------------

def test_an_uncached_engine_gets_the_uncached_checks():
    uncached = Engine(SLIDING.vocab_size, SLIDING.context_length,
                      lambda tokens, cache=None, pad=None: SLIDING.forward(tokens, pad=pad))
    report = check_batch_equivalence(uncached, atol=ATOL, **SMALL)
    assert report.comparisons > 0
    check_window_slides(greedy_logits(SLIDING, use_cache=False), uncached, atol=1e-10,
                        max_examples=3)
    with pytest.raises(AssertionError, match="row .* of the batch"):
        check_batch_equivalence(padding_attended(MODERN), atol=ATOL, **SMALL)


def test_an_engine_with_one_row_per_cache():
    def one_row(batch_size):
        if batch_size != 1:
            raise ValueError("one row per cache")
        return MODERN.new_cache(1)

    engine = Engine(MODERN.vocab_size, MODERN.context_length, MODERN.forward, one_row)
    check_cache_equivalence(engine, atol=ATOL, max_batch=1, **SMALL)
    with pytest.raises(AssertionError):
        check_cache_equivalence(cache_ignored(engine), atol=ATOL, max_batch=1, **SMALL)


def test_the_window_is_the_loops_not_the_engines_context():
    """SLIDING's loop slides at 6 tokens; an engine that claims a context of 12 is checked at
    window=6; a window past the engine's context is refused."""
    wide = Engine(SLIDING.vocab_size, 12, SLIDING.forward, SLIDING.new_cache)
    report = check_window_slides(greedy_logits(SLIDING), wide, atol=1e-10, window=6,
                                 max_examples=3)
    assert report.worst.startswith("step") and "window 6" in report.worst
    with pytest.raises(ValueError, match="window"):
        check_window_slides(greedy_logits(SLIDING), SLIDING, atol=1e-10, window=7)


# -- samplers of other engines -----------------------------------------------------------------

def temperature_first(z, knobs):
    """minillm's own rule: the temperature before the filters."""
    return filtered_probs(np.asarray(z, dtype=np.float64), knobs)


def temperature_last(z, knobs):
    """The filters on softmax(z), then softmax(z / T) over what they kept (llama.cpp's order)."""
    z = np.asarray(z, dtype=np.float64)
    untempered = dataclasses.replace(knobs, temperature=1.0)
    kept = filtered_probs(z, untempered) > 0 if not knobs.greedy else None
    if kept is None:
        return filtered_probs(z, knobs)
    e = np.where(kept, np.exp((z - z.max(axis=-1, keepdims=True)) / knobs.temperature), 0.0)
    return e / e.sum(axis=-1, keepdims=True)


def test_sampler_checker_takes_another_order_of_knobs():
    knobs = SamplingConfig(temperature=0.7, top_p=0.5)
    check_sampler(temperature_last, knobs, order=LLAMA_CPP_ORDER, max_examples=30)
    with pytest.raises(AssertionError, match="differs from minillm's filtered_probs"):
        check_sampler(temperature_last, knobs, max_examples=30)
    with pytest.raises(AssertionError, match="in the order"):
        check_sampler(temperature_first, knobs, order=LLAMA_CPP_ORDER, max_examples=30)


def test_sampler_checker_in_float32_with_the_knobs_first_in_its_message():
    def in_float32(z, knobs):
        assert z.dtype == np.float32
        return filtered_probs(z, knobs).astype(np.float32)

    report = check_sampler(in_float32, atol=1e-6, dtype="float32")
    assert report.cases > 0 and report.max_diff <= 1e-6
    with pytest.raises(AssertionError, match=r"^SamplingConfig\(temperature=0.7"):
        check_sampler(top_p_without_the_crossing_token, SamplingConfig(temperature=0.7,
                                                                       top_p=0.8))


# -- cases that find differences, failures that explain themselves ----------------------------

def test_drawn_texts_mix_uniform_ids_over_the_whole_vocabulary_with_structured_ones():
    seen = []

    @settings(max_examples=40, derandomize=True, database=None)
    @given(token_arrays(49152, 1, 16))
    def draw(tokens):
        seen.append(int(tokens.max()))

    draw()
    assert any(top > 10_000 for top in seen) and any(top < 100 for top in seen)


def test_a_budget_that_never_feeds_a_long_chunk_to_a_filled_cache_is_warned_of():
    with pytest.warns(BudgetWarning, match="none of its 5 cases fed a chunk of 4"):
        check_cache_equivalence(MODERN, atol=ATOL, max_length=3, max_examples=5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", BudgetWarning)
        check_cache_equivalence(MODERN, atol=ATOL, max_length=12, max_examples=25)


def test_a_call_size_dependent_engine_is_caught_by_the_long_chunk_the_draws_missed():
    """An engine off only where a call of LONG_CHUNK or more tokens meets a filled cache (as
    llama.cpp on Qwen2.5): a budget too small to draw that case still runs one, and fails it
    with a replay line that fails the same way."""
    def call_sized(tokens, cache=None, pad=None):
        logits = MODERN.forward(tokens, cache, pad)
        filled = cache is not None and cache.length > tokens.shape[1]  # after this call's own
        return logits + 0.5 if filled and tokens.shape[1] >= 4 else logits

    engine = Engine(MODERN.vocab_size, MODERN.context_length, call_sized, MODERN.new_cache)
    with pytest.raises(AssertionError, match="run because none of them fed a long chunk") as e:
        check_cache_equivalence(engine, atol=ATOL, max_batch=1, max_length=8, max_examples=3)
    replay = str(e.value).split("replay: ")[1]
    with pytest.raises(AssertionError, match="logits differ"):
        eval(replay, {"minillm": minillm, "engine": engine, "Tolerance": Tolerance})


def test_calibration_measures_one_token_noise_and_suggests_a_bound_above_it():
    calibration = calibrate(noisy_one_token_steps(MODERN))
    assert calibration.one_token > 1e-4 and calibration.call_sizes[1] == calibration.one_token
    assert max(calibration.call_sizes[c] for c in (2, 3, 4, 8)) < 1e-12
    assert calibration.suggested == calibration.floor < 1e-12 and calibration.reference == "chunks"
    assert calibration.across_sizes == 2 * calibration.one_token
    check_cache_equivalence(noisy_one_token_steps(MODERN), atol=calibration.across_sizes,
                            reference=calibration.reference, **SMALL)
    exact = calibrate(MODERN)
    assert exact.suggested < 1e-12 and exact.position_shift is None


def test_an_engine_exception_names_the_check_the_case_the_call_and_a_hint():
    def one_row(batch_size):
        if batch_size != 1:
            raise ValueError("one row per cache")
        return MODERN.new_cache(1)

    engine = Engine(MODERN.vocab_size, MODERN.context_length, MODERN.forward, one_row)
    with pytest.raises(AssertionError, match=r"determinism probe .*tokens \[\[.*the engine raised "
                       r"ValueError: one row per cache; in new_cache\(2\); hint: .*max_batch=1"):
        check_cache_equivalence(engine, atol=ATOL, **SMALL)

    def refuses_seven(tokens, cache=None, pad=None):
        if cache is not None and 7 in np.asarray(tokens):
            raise RuntimeError("llama_decode returned -1")
        return MODERN.forward(tokens, cache, pad)

    engine = Engine(MODERN.vocab_size, MODERN.context_length, refuses_seven, MODERN.new_cache)
    with pytest.raises(AssertionError) as e:
        check_rollback(engine, atol=ATOL, max_batch=1, **SMALL)
    message = str(e.value)
    assert ("the engine raised RuntimeError: llama_decode returned -1; in forward(tokens [["
            in message)
    assert "check_rollback: " in message and "cases passed before the first failure" in message
    assert message.splitlines()[-1].startswith("replay: minillm.testing.assert_rollback_matches(")


@pytest.mark.parametrize("bug", [cache_ignored, truncate_forgotten, off_by_one])
def test_a_failure_counts_its_cases_and_its_last_line_replays_it(bug):
    engine = bug(MODERN)
    with pytest.raises(AssertionError) as e:
        check_cache_equivalence(engine, atol=ATOL, **SMALL)
    message = str(e.value)
    assert re.search(r"\[check_\w+: \d+ cases passed before the first failure; \d+ ran in all",
                     message)
    line = message.splitlines()[-1]
    assert line.startswith("replay: minillm.testing.assert_")
    with pytest.raises(AssertionError, match="logits differ"):
        eval(line[len("replay: "):], {"minillm": minillm, "engine": engine,
                                      "Tolerance": Tolerance})


def test_printed_reports_name_the_worst_comparison():
    report = check_cache_equivalence(MODERN, atol=ATOL, **SMALL)
    assert f"worst: {report.worst}" in str(report) and "tokens" in report.worst


def test_adapters_import_their_peer_only_when_used_and_say_how_to_install_it(monkeypatch):
    code = ("import sys, minillm.testing.adapters.llama_cpp, "
            "minillm.testing.adapters.transformers, minillm.testing.adapters.openai, "
            "minillm.testing.api; print([m for m in ('llama_cpp', 'torch', 'transformers', "
            "'openai') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=pathlib.Path(__file__).resolve().parent.parent)
    assert out.stdout.strip() == "[]"
    from minillm.testing.adapters import llama_cpp, transformers
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(ImportError,
                       match="needs the `llama_cpp` package .*pip install llama-cpp-python"):
        llama_cpp.LlamaContext("model.gguf")
    with pytest.raises(ImportError, match=r"needs the `torch` package: pip install"):
        transformers.hf_engine(object())
