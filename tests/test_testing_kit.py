"""minillm.testing: each checker passes on minillm and fails on a planted bug.

Every bug below is one an engine could plausibly ship: a cache that is not read, a mask that
sees one token ahead, a rollback that forgets to truncate, padding that is attended to or
counted as positions, a sampler that multiplies by the temperature, a top-p that drops the
token crossing p, a speculative rule that resamples from p instead of the residual. For each,
the checker raises AssertionError on the bug and passes on the honest engine.
"""
import dataclasses

import numpy as np
import pytest

import minillm
from minillm import model as model_module
from minillm import speculative
from minillm.sampling import SamplingConfig, draw, filtered_probs, sample_next_token
from minillm.speculative import speculative_generate
from minillm.testing import (Engine, check_batch_equivalence, check_cache_equivalence,
                             check_filtered_probs, check_sampler, check_speculative,
                             minillm_engine, power_by_noncentral_approximation,
                             power_by_simulation)

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
    honest = minillm_engine(model)
    return dataclasses.replace(honest, extend=lambda cache, tokens: model.forward(tokens))


def truncate_forgotten(model):
    """Bug: rollback is a no-op, so rejected tokens stay visible."""
    return dataclasses.replace(minillm_engine(model), truncate=lambda cache, n: None)


def one_token_ahead(monkeypatch):
    """Bug: the causal mask lets every token see the next one too."""
    original = model_module._positions_and_mask

    def leaky(B, T, start, pad):
        positions, mask = original(B, T, start, pad)
        if mask is not None:
            mask = mask | np.eye(mask.shape[-2], mask.shape[-1], k=start + 1, dtype=bool)
        return positions, mask

    monkeypatch.setattr(model_module, "_positions_and_mask", leaky)


@pytest.mark.parametrize("model", [MODERN, CLASSIC], ids=["modern", "classic"])
def test_cache_checker_passes_minillm(model):
    check_cache_equivalence(minillm_engine(model), atol=ATOL, **SMALL)


@pytest.mark.parametrize("bug", [cache_ignored, truncate_forgotten])
def test_cache_checker_fails_a_cache_that_is_not_read_or_not_rolled_back(bug):
    with pytest.raises(AssertionError, match="logits differ"):
        check_cache_equivalence(bug(MODERN), atol=ATOL, **SMALL)


def test_cache_checker_fails_a_mask_that_sees_one_token_ahead(monkeypatch):
    """With several layers the leak already changes the chunks (a token's keys in layer 2 saw
    the next token in layer 1); with one layer only the comparison with the whole text sees it."""
    one_layer = minillm.random_model(dataclasses.replace(MODERN.config, n_layers=1), seed=5,
                                     dtype="float64", std=0.5)
    check_cache_equivalence(minillm_engine(one_layer), atol=ATOL, **SMALL)
    one_token_ahead(monkeypatch)
    with pytest.raises(AssertionError, match="logits differ"):
        check_cache_equivalence(minillm_engine(MODERN), atol=ATOL, **SMALL)
    with pytest.raises(AssertionError, match="causality"):
        check_cache_equivalence(minillm_engine(one_layer), atol=ATOL, **SMALL)


# -- batch equivalence -------------------------------------------------------------------------

def padding_attended(model):
    """Bug: the padding is not masked (and positions start at column 0)."""
    honest = minillm_engine(model)
    return dataclasses.replace(honest, forward=lambda tokens, pad=None: model.forward(tokens),
                               new_cache=lambda batch, pad=None: honest.new_cache(batch, None))


def padding_counted_as_positions(monkeypatch):
    """Bug: padding is masked, but each row's positions count from column 0."""
    original = model_module._positions_and_mask

    def from_column_0(B, T, start, pad):
        positions, mask = original(B, T, start, pad)
        if pad is not None:
            positions = np.broadcast_to(np.arange(start, start + T), (B, T))
        return positions, mask

    monkeypatch.setattr(model_module, "_positions_and_mask", from_column_0)


@pytest.mark.parametrize("model", [MODERN, CLASSIC], ids=["modern", "classic"])
def test_batch_checker_passes_minillm(model):
    check_batch_equivalence(minillm_engine(model), atol=ATOL, **SMALL)


def test_batch_checker_fails_unmasked_padding():
    with pytest.raises(AssertionError, match="row .* of the batch"):
        check_batch_equivalence(padding_attended(MODERN), atol=ATOL, **SMALL)


def test_batch_checker_fails_positions_counted_from_the_padding(monkeypatch):
    """Learned positions (classic) see the bug; RoPE (modern) cannot: shifting every position
    of a row by the same amount leaves every query-key angle, hence the logits, unchanged."""
    padding_counted_as_positions(monkeypatch)
    with pytest.raises(AssertionError, match="row .* of the batch"):
        check_batch_equivalence(minillm_engine(CLASSIC), atol=ATOL, **SMALL)
    check_batch_equivalence(minillm_engine(MODERN), atol=1e-10, **SMALL)


def test_a_checker_names_what_the_engine_lacks():
    bare = Engine(11, 12, forward=lambda tokens, pad=None: MODERN.forward(tokens, pad=pad))
    with pytest.raises(ValueError, match="new_cache, extend"):
        check_cache_equivalence(bare, atol=ATOL)


# -- the sampler -------------------------------------------------------------------------------

LOGITS = np.random.default_rng(1).normal(0, 1.5, 20)
KNOBS = SamplingConfig(temperature=0.7, top_p=0.8)


def honest_sampler(z, rng):
    return sample_next_token(z, temperature=0.7, top_p=0.8, rng=rng)


def temperature_multiplied(z, rng):
    """Bug: logits times T instead of divided by T (the same for T = 1, not for 0.7)."""
    return sample_next_token(z * 0.7, temperature=1.0, rng=rng)


def top_p_without_the_crossing_token(z):
    """Bug: top-p keeps only tokens whose running mass, themselves included, stays <= p."""
    p = filtered_probs(z, temperature=0.7)
    order = np.argsort(-p, axis=-1, kind="stable")
    running = np.cumsum(np.take_along_axis(p, order, axis=-1), axis=-1)
    keep = np.zeros_like(p, dtype=bool)
    np.put_along_axis(keep, order, (running <= 0.8) | (np.arange(p.shape[-1]) == 0), axis=-1)
    kept = np.where(keep, p, 0.0)
    return kept / kept.sum(axis=-1, keepdims=True)


def test_sampler_checker_passes_minillm():
    check_sampler(honest_sampler, KNOBS, LOGITS)
    check_filtered_probs(lambda z: filtered_probs(z, temperature=0.7, top_p=0.8), KNOBS,
                         max_examples=10)


def test_sampler_checker_fails_a_temperature_multiplied_in():
    """No filter, so every token stays possible: only the chi-square test can see it."""
    knobs = SamplingConfig(temperature=0.7)
    check_sampler(lambda z, rng: sample_next_token(z, temperature=0.7, rng=rng), knobs, LOGITS)
    with pytest.raises(AssertionError, match="chi-square"):
        check_sampler(temperature_multiplied, knobs, LOGITS)


def test_sampler_checker_fails_a_sampler_that_ignores_the_filter():
    with pytest.raises(AssertionError, match="probability 0"):
        check_sampler(lambda z, rng: sample_next_token(z, temperature=0.7, rng=rng), KNOBS,
                      LOGITS)


def test_probability_checker_fails_top_p_without_the_crossing_token():
    with pytest.raises(AssertionError, match="differ from minillm's"):
        check_filtered_probs(top_p_without_the_crossing_token, KNOBS, max_examples=10)


def penalty_per_occurrence(history, penalty):
    """Bug: the repetition penalty applied once for every occurrence of a token, not once per
    distinct token (CTRL penalises each seen token once)."""
    def sample(z, rng):
        z = np.array(z, dtype=np.float64)
        for token in history:
            z[:, token] = np.where(z[:, token] > 0, z[:, token] / penalty, z[:, token] * penalty)
        return sample_next_token(z, temperature=1.0, rng=rng)
    return sample


def test_sampler_checker_fails_a_penalty_applied_per_occurrence():
    knobs = SamplingConfig(temperature=1.0, repetition_penalty=1.5)
    logits = np.array([2.0, 1.5, 1.0, 0.5, 0.0, -0.5])
    history = [0, 0, 0, 1]  # token 0 three times

    def honest(z, rng):
        return sample_next_token(z, temperature=1.0, repetition_penalty=1.5,
                                 history=np.tile(history, (len(z), 1)), rng=rng)

    check_sampler(honest, knobs, logits, history)
    with pytest.raises(AssertionError, match="chi-square"):
        check_sampler(penalty_per_occurrence(history, 1.5), knobs, logits, history)


def top_p_of_the_unnormalised_top_k(z):
    """Bug: top-p measured against the whole distribution's mass after top-k has cut it,
    instead of against what top-k kept (so top-p keeps too much)."""
    p = filtered_probs(z, temperature=1.0)
    order = np.argsort(-p, axis=-1, kind="stable")
    sorted_p = np.take_along_axis(p, order, axis=-1)
    rank = np.arange(p.shape[-1])
    mass_before = np.cumsum(sorted_p, axis=-1) - sorted_p  # of the whole row: not renormalised
    keep_sorted = (rank < 5) & (mass_before < 0.6)
    keep = np.zeros_like(keep_sorted)
    np.put_along_axis(keep, order, keep_sorted, axis=-1)
    kept = np.where(keep, p, 0.0)
    return kept / kept.sum(axis=-1, keepdims=True)


def test_probability_checker_fails_top_p_on_an_unnormalised_top_k_output():
    knobs = SamplingConfig(temperature=1.0, top_k=5, top_p=0.6)
    check_filtered_probs(lambda z: filtered_probs(z, temperature=1.0, top_k=5, top_p=0.6),
                         knobs, max_examples=10)
    with pytest.raises(AssertionError, match="differ from minillm's"):
        check_filtered_probs(top_p_of_the_unnormalised_top_k, knobs, max_examples=10)


# -- speculative decoding ----------------------------------------------------------------------

TARGET = minillm.random_model(minillm.ModelConfig(
    arch="modern", vocab_size=4, context_length=16, d_model=8, n_layers=2, n_heads=2,
    n_kv_heads=1, d_ff=12), seed=10, dtype="float64", std=1.0)
DRAFT = minillm.random_model(minillm.ModelConfig(
    arch="classic", vocab_size=4, context_length=16, d_model=4, n_layers=1, n_heads=1),
    seed=11, dtype="float64", std=1.0)
SPEC_KNOBS = SamplingConfig(temperature=1.0)


def speculative_loop(draft):
    def generate(prompt, n, rng):
        out, _ = speculative_generate(TARGET, draft, prompt, max_new_tokens=n, k=2, rng=rng,
                                      temperature=1.0)
        return out[len(prompt):]
    return generate


def resample_from_p(p, q, drafted, u, v):
    """Bug: a rejected guess is replaced by a draw from p, not from max(0, p - q)."""
    for i, x in enumerate(drafted):
        if u[i] * q[i, x] >= p[i, x]:
            return i, int(draw(p[i], v))
    return len(drafted), int(draw(p[len(drafted)], v))


@pytest.mark.parametrize("rule, detected", [(speculative.accept, False),
                                             (resample_from_p, True)],
                         ids=["honest", "resample_from_p"])
def test_speculative_checker_fails_resampling_from_p(monkeypatch, rule, detected):
    monkeypatch.setattr(speculative, "accept", rule)
    check = lambda: check_speculative(speculative_loop(DRAFT), minillm_engine(TARGET),  # noqa
                                      [1, 2], SPEC_KNOBS)
    if detected:
        with pytest.raises(AssertionError, match="do not follow the target"):
            check()
    else:
        check()


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
