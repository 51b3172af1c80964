"""The sampling filters: each one's defining property, by Hypothesis over random logits."""
import math

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import minillm
from minillm.sampling import (SamplingConfig, apply_count_penalties, apply_repetition_penalty,
                              filtered_probs, sample_next_token)
from minillm.testing import check_draws
from minillm.testing.strategies import logits as logit_arrays


def logit_rows(max_rows=3, max_vocab=12, allow_neg_inf=True):
    """(B, V) logits with exact ties (a few repeated values) and optional -inf entries."""
    return logit_arrays(max_rows, max_vocab, neg_inf=allow_neg_inf, huge=False)


def softmax_reference(z, temperature=1.0):
    """Plain softmax written separately from the library's, row by row."""
    out = []
    for row in np.atleast_2d(z):
        top = max(row)
        e = [math.exp((v - top) / temperature) if v > -math.inf else 0.0 for v in row]
        out.append([x / sum(e) for x in e])
    return np.array(out)


def ranked(row):
    """Token ids from most to least likely, ties by lowest id: the documented tie rule."""
    return sorted(range(len(row)), key=lambda i: (-row[i], i))


@given(logit_rows(allow_neg_inf=False), st.floats(0.2, 5.0))
def test_temperature_keeps_the_order_and_raises_every_ratio_to_the_power_one_over_t(z, t):
    p1, pt = filtered_probs(z), filtered_probs(z, temperature=t)
    for a, b, za in zip(p1, pt, z):
        dz, dp = za[:, None] - za[None, :], b[:, None] - b[None, :]
        assert np.all(dp[dz > 0] >= 0) and np.all(dp[dz == 0] == 0)  # the order is kept
        # log(pt_i / pt_j) = log(p1_i / p1_j) / T, i.e. every ratio raised to the power 1/T
        np.testing.assert_allclose(np.log(b) - np.log(b[0]), (np.log(a) - np.log(a[0])) / t,
                                   rtol=1e-9, atol=1e-9)


@given(logit_rows(), st.integers(1, 14))
def test_top_k_keeps_exactly_the_k_largest_with_ties_to_the_lowest_id(z, k):
    probs = filtered_probs(z, top_k=k)
    for row, p in zip(z, probs):
        finite = [i for i in ranked(list(row)) if row[i] > -math.inf]
        expected = set(finite[:k])
        assert set(np.flatnonzero(p)) == expected
        kept = sorted(expected)
        np.testing.assert_allclose(p[kept], softmax_reference(row[kept])[0], rtol=1e-12)


def test_top_k_tie_rule_on_an_exact_tie():
    # Ids 1, 2 and 4 tie for second place: top_k=2 keeps the largest (3) and the lowest tied (1).
    probs = filtered_probs(np.array([0.0, 1.0, 1.0, 2.0, 1.0]), top_k=2)
    assert set(np.flatnonzero(probs)) == {1, 3}
    assert set(np.flatnonzero(filtered_probs(np.ones(5), top_k=3))) == {0, 1, 2}


@given(logit_rows(), st.floats(0.01, 0.99))
def test_top_p_keeps_the_smallest_head_whose_mass_reaches_p(z, top_p):
    probs = filtered_probs(z, top_p=top_p)
    for row, p, ref in zip(z, probs, softmax_reference(z)):
        # Ranked by probability, as top-p is defined: logits a hair apart (0 and 5e-18) give
        # equal probabilities, and equal probabilities go by token id.
        order = ranked(list(ref))
        head = np.cumsum(ref[order])
        assume(np.all(np.abs(head - top_p) > 1e-9))  # no rounding-sized margins
        size = int(np.argmax(head >= top_p)) + 1 if head[-1] >= top_p else len(order)
        assert set(np.flatnonzero(p)) == set(order[:size]) - set(np.flatnonzero(ref == 0))
        assert ref[order[:size]].sum() >= top_p > ref[order[:size - 1]].sum()


def test_top_p_keeps_the_crossing_token_and_stops_at_an_exact_reach():
    z = np.log([2.0, 1.0, 1.0])  # probabilities 0.5, 0.25, 0.25, exactly representable
    assert set(np.flatnonzero(filtered_probs(z, top_p=0.5))) == {0}  # 0.5 reaches 0.5
    assert set(np.flatnonzero(filtered_probs(z, top_p=0.6))) == {0, 1}  # token 1 crosses
    assert set(np.flatnonzero(filtered_probs(z, top_p=0.75))) == {0, 1}
    assert set(np.flatnonzero(filtered_probs(z, top_p=0.76))) == {0, 1, 2}


@given(logit_rows(), st.floats(0.0, 1.0))
def test_min_p_keeps_exactly_the_tokens_at_least_min_p_times_the_top(z, min_p):
    probs = filtered_probs(z, min_p=min_p)
    for p, ref in zip(probs, softmax_reference(z)):
        threshold = min_p * ref.max()
        assume(np.all(np.abs(ref - threshold) > 1e-12 * ref.max()))
        assert set(np.flatnonzero(p)) == set(np.flatnonzero((ref >= threshold) & (ref > 0)))


@given(logit_rows(max_rows=1), st.floats(1.01, 5.0), st.data())
def test_penalty_lowers_every_repeated_token_and_no_other(z, r, data):
    V = z.shape[1]
    history = data.draw(st.lists(st.integers(0, V - 1), max_size=20))
    seen = np.zeros_like(z, dtype=bool)
    seen[0, history] = True
    out = apply_repetition_penalty(z, seen, r)
    assert np.all(out[~seen] == z[~seen])
    moved = seen & np.isfinite(z) & (z != 0)
    assert np.all(out[moved] < z[moved])
    assert np.all(out[seen & ~moved] == z[seen & ~moved])  # 0 and -inf cannot go lower
    # once per distinct token: repeating the history changes nothing
    np.testing.assert_array_equal(filtered_probs(z, repetition_penalty=r, history=[history]),
                                  filtered_probs(z, repetition_penalty=r,
                                                 history=[history + history]))


def test_penalty_looks_only_at_the_last_window_tokens():
    z = np.array([2.0, 2.0, 2.0])
    probs = filtered_probs(z, repetition_penalty=2.0, history=[[0, 1, 1]], penalty_window=2)
    assert probs[0] > probs[1] and probs[0] == probs[2]  # token 0 fell out of the window
    padded = filtered_probs(z, repetition_penalty=2.0, history=np.array([[-1, -1, 1]]))
    np.testing.assert_array_equal(padded, filtered_probs(z, repetition_penalty=2.0,
                                                         history=[[1]]))


@given(logit_rows(), st.data())
def test_disabled_knobs_are_the_identity(z, data):
    history = data.draw(st.lists(st.lists(st.integers(0, z.shape[1] - 1), max_size=5),
                                 min_size=len(z), max_size=len(z)))
    plain = filtered_probs(z)
    np.testing.assert_allclose(plain, softmax_reference(z), rtol=1e-12, atol=1e-300)
    for off in (dict(top_k=0, top_p=1.0, min_p=0.0, repetition_penalty=1.0, history=history),
                dict(top_k=None, top_p=None, min_p=None, repetition_penalty=None),
                dict(top_k=z.shape[1])):
        np.testing.assert_array_equal(filtered_probs(z, **off), plain)


@given(logit_rows(), st.data())
def test_every_combination_leaves_a_distribution_with_the_top_token_in_it(z, data):
    knobs = dict(temperature=data.draw(st.sampled_from([0.0, 1e-6, 0.7, 1.0, 30.0])),
                 top_k=data.draw(st.sampled_from([None, 1, 2, 5])),
                 top_p=data.draw(st.sampled_from([None, 1e-9, 0.5, 0.95])),
                 min_p=data.draw(st.sampled_from([None, 0.1, 1.0])))
    probs = filtered_probs(z, **knobs)
    assert not np.isnan(probs).any() and (probs >= 0).all()
    np.testing.assert_allclose(probs.sum(axis=-1), 1.0, rtol=1e-12)
    assert all(p[ranked(list(row))[0]] > 0 for row, p in zip(z, probs))


def test_greedy_is_one_hot_on_the_lowest_id_among_ties():
    z = np.array([[1.0, 3.0, 3.0, -np.inf], [0.0, 0.0, 0.0, 0.0]])
    np.testing.assert_array_equal(filtered_probs(z, temperature=0),
                                  [[0, 1, 0, 0], [1, 0, 0, 0]])
    np.testing.assert_array_equal(sample_next_token(z, temperature=0), [1, 0])
    # All finite: sample_next_token takes the argmax without filtered_probs; same rule.
    finite = np.array([[1.0, 3.0, 3.0, -2.0], [0.5, 0.5, 0.0, 0.5]], dtype=np.float32)
    np.testing.assert_array_equal(sample_next_token(finite, temperature=0), [1, 0])
    assert sample_next_token(finite[1], temperature=0) == 0
    with pytest.raises(ValueError, match="NaN"):
        sample_next_token(np.array([0.0, np.nan, 1.0]), temperature=0)
    with pytest.raises(ValueError, match="top_k"):
        sample_next_token(finite, temperature=0, top_k=-1)


@pytest.mark.parametrize("row", [
    [1e308, -1e308, 1e308], [3.4e38, -3.4e38, 0.0], [np.inf, 1.0, np.inf], [5.0, 5.0, 5.0],
    [-np.inf, -np.inf, -1e300]])
@pytest.mark.parametrize("temperature", [0.0, 1e-3, 1.0, 100.0])
def test_extreme_logits_give_no_nan(row, temperature):
    probs = filtered_probs(np.array(row), temperature=temperature, top_p=0.9, min_p=0.01,
                           top_k=2, repetition_penalty=1.5, history=[0, 1])
    assert np.isfinite(probs).all() and probs.sum() == pytest.approx(1.0)


def test_an_infinite_logit_takes_all_the_mass():
    np.testing.assert_array_equal(filtered_probs(np.array([np.inf, 1.0, np.inf])), [.5, 0, .5])


def test_float32_logits_and_a_batch_row_by_row():
    z = np.random.default_rng(0).standard_normal((4, 50)).astype(np.float32)
    batch = filtered_probs(z, temperature=0.7, top_k=10, top_p=0.8, min_p=0.05)
    for row, p in zip(z, batch):
        np.testing.assert_array_equal(filtered_probs(row, temperature=0.7, top_k=10, top_p=0.8,
                                                     min_p=0.05), p)


@pytest.mark.parametrize("knobs", [
    dict(temperature=1.0), dict(temperature=0.6, top_k=6), dict(temperature=1.3, top_p=0.8),
    dict(temperature=0.9, min_p=0.08, repetition_penalty=1.8, history=[[0, 1, 2]])])
def test_draws_follow_the_filtered_distribution(knobs):
    """minillm.testing.check_draws: no filtered-out token is ever drawn, and a chi-square
    test at the 0.1% level (four tests: about 0.004 false alarms in all; a fixed seed, so a
    given version of the code passes or fails deterministically)."""
    logits = np.random.default_rng(1).normal(0, 1.5, 20)
    history = knobs.get("history")

    def sample(z, rng):
        rows = None if history is None else history * len(z)
        return sample_next_token(z, **{**knobs, "history": rows}, rng=rng)

    config = SamplingConfig(**{k: v for k, v in knobs.items() if k != "history"})
    check_draws(sample, config, logits, None if history is None else history[0],
                  draws=40_000, seed=2024)


def test_same_seed_same_draws():
    z = np.random.default_rng(3).standard_normal((5, 30))
    draw = [sample_next_token(z, temperature=1.0, rng=np.random.default_rng(s)) for s in
            (7, 7, 8)]
    np.testing.assert_array_equal(draw[0], draw[1])
    assert not np.array_equal(draw[0], draw[2])
    assert isinstance(sample_next_token(z[0], rng=np.random.default_rng(0)), np.integer)


@pytest.mark.parametrize("knob, value", [
    ("temperature", -0.1), ("temperature", np.nan), ("temperature", np.inf),
    ("top_k", -1), ("top_k", 2.5), ("top_k", True), ("top_p", 0.0), ("top_p", 1.5),
    ("min_p", -0.1), ("min_p", 1.01), ("repetition_penalty", 0.0),
    ("repetition_penalty", -2.0), ("penalty_window", 0)])
def test_every_knob_is_validated(knob, value):
    with pytest.raises(ValueError, match=knob):
        filtered_probs(np.zeros(4), **{knob: value}, history=[0])


@pytest.mark.parametrize("logits, history, match", [
    (np.array([np.nan, 1.0]), None, "NaN"), (np.array([-np.inf, -np.inf]), None, "logits"),
    (np.zeros((2, 3, 4)), None, "logits"), (np.zeros(4), [[0], [1]], "history"),
    (np.zeros(4), [9], "history"), (np.zeros(4), None, "history")])
def test_bad_logits_and_history_are_errors(logits, history, match):
    with pytest.raises(ValueError, match=match):
        filtered_probs(logits, repetition_penalty=1.2, history=history)


def test_sampling_needs_a_generator_but_greedy_does_not():
    with pytest.raises(ValueError, match="rng"):
        sample_next_token(np.zeros(3), temperature=1.0)
    assert sample_next_token(np.zeros(3), temperature=0) == 0


def test_the_knobs_come_as_a_sampling_config_by_name_or_both():
    """filtered_probs(logits, sampling, history, **knobs): a SamplingConfig (positional or
    `sampling=`), the knobs by name, or both (the named ones replace the config's)."""
    z = np.array([[1.0, 2.0, 0.5, -1.0]])
    by_name = filtered_probs(z, temperature=0.7, top_k=2, top_p=None, min_p=None)
    sampling = SamplingConfig(temperature=0.7, top_k=2)
    np.testing.assert_array_equal(filtered_probs(z, sampling), by_name)
    np.testing.assert_array_equal(filtered_probs(z, sampling=sampling), by_name)
    np.testing.assert_array_equal(filtered_probs(z, SamplingConfig(temperature=0.7), top_k=2),
                                  by_name)
    assert sample_next_token(z, sampling=SamplingConfig(temperature=0)) == [1]
    with pytest.raises(ValueError, match="sampling: expected a SamplingConfig, got {"):
        filtered_probs(z, {"temperature": 0.7})
    with pytest.raises(TypeError, match="temprature: not a sampling knob"):
        filtered_probs(z, temprature=0.7)


def test_exported():
    assert minillm.filtered_probs is filtered_probs
    assert minillm.sample_next_token is sample_next_token


@given(logit_rows(max_rows=1), st.floats(-2.0, 2.0), st.floats(-2.0, 2.0),
       st.sampled_from([None, 1.4]), st.integers(1, 8), st.data())
def test_frequency_and_presence_follow_their_formula_after_the_repetition_penalty(
        z, frequency, presence, r, window, data):
    """z_i -> CTRL_r(z_i) - frequency * c_i - presence * [c_i > 0], c_i the count of token i
    in the last `window` tokens of the history; then the softmax."""
    V = z.shape[1]
    history = data.draw(st.lists(st.integers(0, V - 1), max_size=12))
    counts = np.bincount(np.array(history[-window:], dtype=np.int64), minlength=V)[None]
    expected = z if r is None else apply_repetition_penalty(z, counts > 0, r)
    expected = expected - frequency * counts - presence * (counts > 0)
    got = filtered_probs(z, frequency_penalty=frequency, presence_penalty=presence,
                         repetition_penalty=r, penalty_window=window, history=[history])
    np.testing.assert_allclose(got, softmax_reference(expected), rtol=1e-12, atol=1e-300)
    np.testing.assert_array_equal(  # the same subtraction, done by the filter itself
        apply_count_penalties(z, counts, frequency, presence),
        z - frequency * counts - presence * (counts > 0))


def test_frequency_counts_every_repeat_and_presence_only_the_first():
    z = np.zeros(3)
    history = [[0, 0, 0, 1]]
    frequency = filtered_probs(z, frequency_penalty=1.0, history=history)
    assert frequency[0] < frequency[1] < frequency[2]  # three, one, no repeats
    np.testing.assert_allclose(np.log(frequency[2] / frequency), [3.0, 1.0, 0.0], atol=1e-12)
    presence = filtered_probs(z, presence_penalty=1.0, history=history)
    assert presence[0] == presence[1] < presence[2]
    np.testing.assert_allclose(np.log(presence[2] / presence), [1.0, 1.0, 0.0], atol=1e-12)
    padded = filtered_probs(z, frequency_penalty=1.0, history=np.array([[-1, -1, 0, 0, 0, 1]]))
    np.testing.assert_array_equal(padded, frequency)  # padding (-1) is not a token
    window = filtered_probs(z, frequency_penalty=1.0, history=history, penalty_window=2)
    np.testing.assert_allclose(np.log(window[2] / window), [1.0, 1.0, 0.0], atol=1e-12)
