"""The repetition, frequency and presence penalties against llama.cpp's penalty sampler
(`llama_sampler_init_penalties`, through llama-cpp-python's low-level binding).

llama.cpp counts each token over the last `penalty_last_n` tokens it accepted and, for every
token seen there, applies the CTRL rule (logit / r if positive, * r otherwise) and then
`logit -= count * frequency_penalty + (count > 0) * presence_penalty`; minillm does the same
over the last `penalty_window` tokens of the history. Its own cases (tests/test-sampling.cpp:
`test_penalties`, probabilities expected to 1e-5) and Hypothesis-drawn ones are compared.
"""
import ctypes

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import minillm

llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")


def llama_penalised(logits, last_tokens, repeat, frequency, presence, last_n):
    """The logits after llama.cpp's penalty sampler has accepted `last_tokens` (float32)."""
    V = len(logits)
    data = (llama_cpp.llama_token_data * V)(
        *[llama_cpp.llama_token_data(i, float(z), 0.0) for i, z in enumerate(logits)])
    candidates = llama_cpp.llama_token_data_array(data, V, -1, False)
    sampler = llama_cpp.llama_sampler_init_penalties(V, last_n, repeat, frequency, presence)
    try:
        for token in last_tokens:
            llama_cpp.llama_sampler_accept(sampler, token)
        llama_cpp.llama_sampler_apply(sampler, ctypes.byref(candidates))
    finally:
        llama_cpp.llama_sampler_free(sampler)
    out = np.empty(V)
    for i in range(V):  # the sampler may reorder the candidates: place each by its id
        out[data[i].id] = data[i].logit
    return out


def softmax(z):
    e = np.exp(z - z.max())
    return e / e.sum()


def ours(logits, last_tokens, repeat, frequency, presence, last_n):
    return minillm.filtered_probs(np.asarray(logits, dtype=np.float64), temperature=1.0,
                                  repetition_penalty=repeat, frequency_penalty=frequency,
                                  presence_penalty=presence, penalty_window=last_n,
                                  history=[list(last_tokens)])


# test_penalties in llama.cpp's tests/test-sampling.cpp: (probs, last tokens, expected probs,
# repeat, frequency, presence); the window there is the whole list of last tokens.
LLAMA_CASES = [
    ([0.2] * 5, [0], [0, 0.25, 0.25, 0.25, 0.25], 50.0, 0.0, 0.0),
    ([0.2] * 5, [0, 1, 2], [0, 0, 0, 0.5, 0.5], 50.0, 0.0, 0.0),
    ([0.2] * 5, [0, 1, 2, 0, 0], [0, 0, 0, 0.5, 0.5], 50.0, 0.0, 0.0),
    ([0.2] * 5, [0], [0.000011, 0.249997, 0.249997, 0.249997, 0.249997], 1.0, 5.0, 5.0),
    ([0.2] * 5, [0, 1, 2], [0.000023, 0.000023, 0.000023, 0.499966, 0.499966], 1.0, 5.0, 5.0),
    ([0.2] * 5, [0, 1, 2, 0, 0], [0.000000, 0.000023, 0.000023, 0.499977, 0.499977],
     1.0, 5.0, 5.0),
]


@pytest.mark.parametrize("probs, last, expected, repeat, frequency, presence", LLAMA_CASES)
def test_llama_cpp_own_penalty_cases(probs, last, expected, repeat, frequency, presence):
    logits = np.log(np.float32(probs))
    got = ours(logits, last, repeat, frequency, presence, len(last))
    assert np.abs(got - expected).max() < 1e-5  # llama.cpp's own tolerance for these cases
    theirs = softmax(llama_penalised(logits, last, repeat, frequency, presence, len(last)))
    assert np.abs(got - theirs).max() < 1e-6


@given(st.data())
def test_penalties_equal_llama_cpp_on_drawn_cases(data):
    V = data.draw(st.integers(2, 12), label="V")
    logits = np.float32(data.draw(st.lists(st.floats(-8, 8, width=32), min_size=V, max_size=V),
                                  label="logits"))
    last = data.draw(st.lists(st.integers(0, V - 1), max_size=20), label="last tokens")
    last_n = data.draw(st.integers(1, 24), label="window")
    repeat = data.draw(st.sampled_from([1.0, 1.3, 0.7, 2.0]), label="repeat")
    frequency = data.draw(st.sampled_from([0.0, 0.5, -0.4, 1.5]), label="frequency")
    presence = data.draw(st.sampled_from([0.0, 0.6, -0.8, 2.0]), label="presence")
    got = ours(logits, last, repeat, frequency, presence, last_n)
    theirs = softmax(llama_penalised(logits, last, repeat, frequency, presence, last_n))
    assert np.abs(got - theirs).max() < 1e-5  # llama.cpp computes in float32
