"""minillm's sampling filters against transformers' logits processors.

On random float64 logits (no ties, almost surely) the distributions agree to 1e-12 wherever the
documented semantics agree: temperature, top-k, top-p, min-p, the repetition penalty over a
history no longer than its window, and all of them chained in transformers' own order. The
tests at the end show the two differences that are there by design (minillm/sampling.py says
why): the repetition penalty looks at the last 64 tokens only, and top-k keeps exactly k tokens
where transformers keeps every token tied with the k-th.
"""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import minillm  # noqa: E402

ATOL = 1e-12


def hf_probs(logits, processors, input_ids=None):
    """softmax of the logits after transformers' processors, in order, as a (B, V) array."""
    scores = torch.tensor(logits, dtype=torch.float64)
    ids = torch.tensor(np.zeros((len(logits), 1), dtype=np.int64) if input_ids is None
                       else input_ids)
    for processor in processors:
        scores = processor(ids, scores)
    return torch.softmax(scores, dim=-1).numpy()


def random_logits(seed, batch=3, vocab=50, scale=3.0):
    return scale * np.random.default_rng(seed).standard_normal((batch, vocab))


@given(seed=st.integers(0, 10**6), temperature=st.floats(0.05, 5.0))
def test_temperature(seed, temperature):
    z = random_logits(seed)
    np.testing.assert_allclose(
        minillm.filtered_probs(z, temperature=temperature),
        hf_probs(z, [transformers.TemperatureLogitsWarper(temperature)]), rtol=0, atol=ATOL)


@given(seed=st.integers(0, 10**6), k=st.integers(1, 50))
def test_top_k(seed, k):
    z = random_logits(seed)
    np.testing.assert_allclose(minillm.filtered_probs(z, top_k=k),
                               hf_probs(z, [transformers.TopKLogitsWarper(k)]), rtol=0, atol=ATOL)


@given(seed=st.integers(0, 10**6), p=st.floats(0.01, 0.99))
def test_top_p(seed, p):
    z = random_logits(seed)
    np.testing.assert_allclose(minillm.filtered_probs(z, top_p=p),
                               hf_probs(z, [transformers.TopPLogitsWarper(p)]), rtol=0, atol=ATOL)


@given(seed=st.integers(0, 10**6), min_p=st.floats(0.001, 0.99))
def test_min_p(seed, min_p):
    z = random_logits(seed)
    np.testing.assert_allclose(minillm.filtered_probs(z, min_p=min_p),
                               hf_probs(z, [transformers.MinPLogitsWarper(min_p)]), rtol=0,
                               atol=ATOL)


@given(seed=st.integers(0, 10**6), penalty=st.floats(0.5, 3.0), n=st.integers(1, 64))
def test_repetition_penalty_over_a_history_within_the_window(seed, penalty, n):
    z = random_logits(seed)
    history = np.random.default_rng(seed + 1).integers(0, 50, (3, n))
    np.testing.assert_allclose(
        minillm.filtered_probs(z, repetition_penalty=penalty, history=history),
        hf_probs(z, [transformers.RepetitionPenaltyLogitsProcessor(penalty)], history),
        rtol=0, atol=ATOL)


@given(seed=st.integers(0, 10**6), temperature=st.floats(0.2, 2.0), k=st.integers(1, 50),
       p=st.floats(0.05, 0.99), min_p=st.floats(0.0, 0.5), penalty=st.floats(1.0, 2.0))
def test_the_whole_chain_in_transformers_order(seed, temperature, k, p, min_p, penalty):
    """generate() applies the penalty, then temperature, top-k, top-p, min-p: so does minillm."""
    z = random_logits(seed)
    history = np.random.default_rng(seed + 1).integers(0, 50, (3, 20))
    ours = minillm.filtered_probs(z, temperature=temperature, top_k=k, top_p=p, min_p=min_p,
                                  repetition_penalty=penalty, history=history)
    theirs = hf_probs(z, [transformers.RepetitionPenaltyLogitsProcessor(penalty),
                          transformers.TemperatureLogitsWarper(temperature),
                          transformers.TopKLogitsWarper(k), transformers.TopPLogitsWarper(p),
                          transformers.MinPLogitsWarper(min_p)], history)
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=ATOL)


# -- differences by design ---------------------------------------------------------------------

def test_repetition_penalty_differs_only_for_tokens_older_than_the_window():
    """transformers penalises every token of the input; minillm the last 64 only, so that a long
    text may use again the words it used long ago."""
    z = random_logits(0, batch=1)
    history = np.array([[7] + [1] * 64])  # token 7 appears 65 tokens back, out of the window
    ours = minillm.filtered_probs(z, repetition_penalty=2.0, history=history)
    theirs = hf_probs(z, [transformers.RepetitionPenaltyLogitsProcessor(2.0)], history)
    differs = ~np.isclose(ours, theirs, rtol=0, atol=ATOL)[0]
    assert differs[7]  # penalised by transformers only
    in_window = minillm.filtered_probs(z, repetition_penalty=2.0, history=history[:, 1:])
    np.testing.assert_allclose(ours, in_window, rtol=0, atol=ATOL)  # minillm ignores token 7
    without_7 = hf_probs(z, [transformers.RepetitionPenaltyLogitsProcessor(2.0)], history[:, 1:])
    np.testing.assert_allclose(ours, without_7, rtol=0, atol=ATOL)


def test_top_k_with_a_tie_at_the_kth_logit():
    """transformers keeps every token tied with the k-th logit; minillm exactly k (lowest ids)."""
    z = np.array([[3.0, 1.0, 2.0, 2.0, 0.0]])
    ours = minillm.filtered_probs(z, top_k=2)
    theirs = hf_probs(z, [transformers.TopKLogitsWarper(2)])
    assert np.count_nonzero(ours) == 2 and ours[0, 2] > 0 and ours[0, 3] == 0
    assert np.count_nonzero(theirs) == 3
