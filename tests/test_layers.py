"""Known values for each building block, checked by hand-computable cases and identities."""
import math
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from minillm.layers import (apply_rope, attention, erfc, erfc_fit, gelu, gelu_tanh, layer_norm,
                            linear, rms_norm, rope_tables, silu, softmax)


def test_softmax_known_values():
    p = softmax(np.log(np.array([[1.0, 2.0, 5.0]])))
    np.testing.assert_allclose(p, [[0.125, 0.25, 0.625]], rtol=1e-15)


def test_softmax_handles_minus_inf_and_huge_values():
    p = softmax(np.array([[-np.inf, 1e300, 1e300, 0.0]]))
    np.testing.assert_array_equal(p, [[0.0, 0.5, 0.5, 0.0]])


def test_layer_norm_known_values():
    x = np.array([[1.0, 2.0, 3.0, 6.0]])  # mean 3, variance 3.5
    out = layer_norm(x, np.full(4, 2.0), np.full(4, 1.0), eps=0.0)
    expected = (x - 3.0) / math.sqrt(3.5) * 2.0 + 1.0
    np.testing.assert_allclose(out, expected, rtol=1e-15)


def test_rms_norm_known_values():
    x = np.array([[3.0, 4.0]])  # mean square 12.5
    np.testing.assert_allclose(rms_norm(x, np.array([1.0, 2.0]), eps=0.0),
                               [[3 / math.sqrt(12.5), 8 / math.sqrt(12.5)]], rtol=1e-15)


def test_erfc_fit_relative_error_below_1_2e_7_and_float64_is_math_erfc():
    x = np.linspace(-6, 9, 20001)
    exact = np.array([math.erfc(v) for v in x])
    assert np.max(np.abs(erfc_fit(x) - exact) / exact) < 1.2e-7  # the fit itself, in float64
    np.testing.assert_array_equal(erfc(x), exact)  # float64 takes math.erfc
    assert erfc(x.astype(np.float32)).dtype == np.float32


def test_gelu_matches_math_erfc_and_known_values():
    x = np.linspace(-10, 10, 4001)
    # the reference written with erfc too: 1 + erf(x) cancels catastrophically for x << 0
    exact = np.array([0.5 * v * math.erfc(-v / math.sqrt(2)) for v in x])
    nonzero = exact != 0
    # float64: math.erfc, so only the rounding of x / sqrt(2) (amplified in the far tail) differs
    assert np.max(np.abs(gelu(x) - exact)[nonzero] / np.abs(exact[nonzero])) < 1e-13
    assert gelu(np.array([0.0]))[0] == 0.0
    np.testing.assert_allclose(gelu(np.array([1.0])), [0.8413447460685429], rtol=1e-15)
    # float32: the fit's 1.2e-7 plus float32 rounding, which the tail's conditioning amplifies
    x32 = np.linspace(-4, 4, 801, dtype=np.float32)
    ref32 = np.array([0.5 * float(v) * math.erfc(-float(v) / math.sqrt(2)) for v in x32])
    np.testing.assert_allclose(gelu(x32), ref32, rtol=2e-6, atol=1e-7)


def test_gelu_tanh_close_to_gelu_and_silu_known_values():
    x = np.linspace(-5, 5, 1001)
    assert np.max(np.abs(gelu_tanh(x) - gelu(x))) < 1e-3  # the approximation's known gap
    np.testing.assert_allclose(silu(np.array([0.0, 1.0, -1.0])),
                               [0.0, 1 / (1 + math.exp(-1)), -1 / (1 + math.exp(1))], rtol=1e-15)
    with warnings.catch_warnings():  # e^-x overflowing far left is expected, not reported
        warnings.simplefilter("error")
        far = silu(np.array([-1e4, -100.0, 1e4], dtype=np.float32))
    assert np.array_equal(far, [0.0, 0.0, 1e4])


@pytest.mark.parametrize("fn", [gelu, gelu_tanh, silu, softmax])
def test_float32_in_float32_out(fn):
    assert fn(np.ones((2, 3), dtype=np.float32)).dtype == np.float32


def test_norms_and_rope_keep_float32():
    x = np.ones((1, 2, 3, 4), dtype=np.float32)
    w = np.ones(4, dtype=np.float32)
    assert layer_norm(x, w, w, 1e-5).dtype == np.float32
    assert rms_norm(x, w, 1e-5).dtype == np.float32
    cos, sin = rope_tables(8, 4, 10000.0, np.float32)
    assert apply_rope(x, cos[:2, None], sin[:2, None]).dtype == np.float32


def test_rope_rotates_first_pair_by_position():
    # head_dim 2: one pair, frequency 1, so position m rotates by exactly m radians
    cos, sin = rope_tables(4, 2, 10000.0, np.float64)
    x = np.array([1.0, 0.0]).reshape(1, 1, 1, 2).repeat(4, axis=1)  # (B=1, T=4, heads=1, 2)
    out = apply_rope(x, cos[:, None], sin[:, None])[0, :, 0]
    m = np.arange(4)
    np.testing.assert_allclose(out, np.stack([np.cos(m), np.sin(m)], axis=1), atol=1e-15)


vectors = arrays(np.float64, 8, elements=st.floats(-10, 10))


@given(q=vectors, k=vectors, m=st.integers(0, 60), n=st.integers(0, 60), shift=st.integers(0, 60))
def test_rope_preserves_norms_and_depends_only_on_relative_position(q, k, m, n, shift):
    cos, sin = rope_tables(128, 8, 10000.0, np.float64)

    def rot(x, pos):
        return apply_rope(x.reshape(1, 1, 1, 8), cos[pos], sin[pos]).reshape(8)

    assert np.linalg.norm(rot(q, m)) == pytest.approx(np.linalg.norm(q), rel=1e-12, abs=1e-12)
    dot = rot(q, m) @ rot(k, n)
    dot_shifted = rot(q, m + shift) @ rot(k, n + shift)
    assert dot == pytest.approx(dot_shifted, rel=1e-9, abs=1e-9)


def test_attention_single_key_returns_its_value_and_grouped_heads_share_keys():
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 4, 1, 3))  # 4 query heads
    k = rng.standard_normal((1, 2, 1, 3))  # 2 key/value heads
    v = rng.standard_normal((1, 2, 1, 3))
    out = attention(q, k, v)
    # one key: softmax weight 1, so each query head returns its group's value
    np.testing.assert_allclose(out[0, :, 0], v[0, [0, 0, 1, 1], 0], rtol=1e-15)


def test_attention_matches_explicit_formula_with_mask():
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((1, 2, 3, 4)) for _ in range(3))
    mask = np.tril(np.ones((3, 3), dtype=bool))
    out = attention(q, k, v, mask)
    for h in range(2):
        s = q[0, h] @ k[0, h].T / 2.0
        s[~mask] = -np.inf
        w = np.exp(s - s.max(1, keepdims=True))
        w /= w.sum(1, keepdims=True)
        np.testing.assert_allclose(out[0, h], w @ v[0, h], rtol=1e-13)


def test_linear_is_x_times_w_transposed_plus_b():
    rng = np.random.default_rng(3)
    w, b = rng.standard_normal((7, 5)), rng.standard_normal(7)
    x = rng.standard_normal((2, 3, 5))
    y = linear(x, w, b)
    assert y.shape == (2, 3, 7)
    for i in range(2):
        for t in range(3):
            np.testing.assert_allclose(y[i, t], [x[i, t] @ w[r] + b[r] for r in range(7)],
                                       rtol=0, atol=1e-13)
