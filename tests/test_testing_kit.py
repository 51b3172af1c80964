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
import sys

import numpy as np
import pytest

import minillm
from minillm import model as model_module
from minillm import speculative
from minillm.generate import decode_steps, generation_config
from minillm.sampling import SamplingConfig, draw, filtered_probs, probabilities, sample_next_token
from minillm.speculative import speculative_generate
from minillm.testing import (Engine, check_batch_equivalence, check_cache_equivalence,
                             check_draws, check_sampler, check_speculative_distribution,
                             check_stream_decoder, check_window_slides,
                             exact_sequence_distribution, power_by_noncentral_approximation,
                             power_by_simulation, smallest_detectable_tv)
from minillm.tokenizer import BYTE_TO_CHAR
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
    original = model_module.positions_and_mask

    def leaky(B, T, start, pad):
        positions, mask = original(B, T, start, pad)
        if mask is not None:
            mask = mask | np.eye(mask.shape[-2], mask.shape[-1], k=start + 1, dtype=bool)
        return positions, mask

    monkeypatch.setattr(model_module, "positions_and_mask", leaky)


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
    original = model_module.positions_and_mask

    def from_column_0(B, T, start, pad):
        positions, mask = original(B, T, start, pad)
        if pad is not None:
            positions = np.broadcast_to(np.arange(start, start + T), (B, T))
        return positions, mask

    monkeypatch.setattr(model_module, "positions_and_mask", from_column_0)


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
        config = generation_config(model.vocab_size, n, temperature=0)
        steps = decode_steps(model, [prompt], config, None, use_cache)
        return np.array([step.logits[0] for step in steps])
    return decode


def keys_keep_their_old_positions(model, window, token, cache, shift, slid):
    """Bug: on a slide the cache moves left (cache.shift) but its kept keys are not re-read, so
    they keep the RoPE rotation of their old positions while the new tokens count from the new
    start: every query-key angle drifts by the shift."""
    if shift:
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
    monkeypatch.setattr(sys.modules["minillm.generate"], "_decode", keys_keep_their_old_positions)
    with pytest.raises(AssertionError, match=r"step \d+ .*logits differ"):
        check_window_slides(greedy_logits(SLIDING), SLIDING, atol=1e-10, max_examples=5)


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
    check_sampler(lambda z, knobs: probabilities(z, knobs))


@pytest.mark.parametrize("bug, knobs", [
    (top_p_without_the_crossing_token, SamplingConfig(temperature=0.7, top_p=0.8)),
    (top_p_of_the_unnormalised_top_k, SamplingConfig(temperature=1.0, top_k=5, top_p=0.6))],
    ids=["top_p_without_the_crossing_token", "top_p_of_the_unnormalised_top_k"])
def test_sampler_checker_fails_a_wrong_filter(bug, knobs):
    check_sampler(lambda z, k: probabilities(z, k), knobs, max_examples=20)
    with pytest.raises(AssertionError, match="differs from minillm's"):
        check_sampler(bug, knobs, max_examples=20)


def revives_removed_tokens(z, knobs):
    """Bug: tokens an earlier stage removed (logit -inf) get a little mass back."""
    p = probabilities(z, knobs) + 1e-3 * np.isneginf(z)
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
