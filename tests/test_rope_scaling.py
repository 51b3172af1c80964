"""RoPE scaling (minillm/rope_scaling.py) by its defining properties, NumPy only; the equality
with transformers' and llama.cpp's is in tests/peers/test_families_peer.py and
tests/peers/test_gguf_keys_peer.py."""
import math

import numpy as np
import pytest

import minillm
from minillm.layers import rope_tables

D, BASE = 16, 500.0


def angles(cos, sin):
    """The rotation angle of each position and frequency, from rope_tables' second halves."""
    half = cos.shape[-1] // 2
    return np.arctan2(sin[:, half:], cos[:, half:])


def test_linear_scaling_reads_position_m_as_m_over_s():
    cos, sin = rope_tables(32, D, BASE, np.float64, {"type": "linear", "factor": 4.0})
    plain_cos, plain_sin = rope_tables(8, D, BASE, np.float64)
    np.testing.assert_allclose(cos[::4], plain_cos, rtol=0, atol=1e-12)  # position 4k as k
    np.testing.assert_allclose(sin[::4], plain_sin, rtol=0, atol=1e-12)
    assert not np.allclose(cos[:8], plain_cos)


def test_llama3_keeps_fast_frequencies_and_divides_slow_ones():
    scaling = {"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_context": 64}
    theta = BASE ** (-np.arange(0, D, 2) / D)
    scaled = angles(*rope_tables(2, D, BASE, np.float64, scaling))[1]  # position 1: theta'
    wavelength = 2 * math.pi / theta
    fast, slow = wavelength < 64 / 4, wavelength > 64 / 1
    assert fast.any() and slow.any() and (~fast & ~slow).any()  # all three regimes are used
    np.testing.assert_allclose(scaled[fast], theta[fast], rtol=1e-12)
    np.testing.assert_allclose(scaled[slow], theta[slow] / 8, rtol=1e-12)
    between = scaled[~fast & ~slow]
    assert np.all(between < theta[~fast & ~slow]) and np.all(between > theta[~fast & ~slow] / 8)


def test_yarn_blends_between_the_kept_and_the_interpolated_and_scales_by_its_factor():
    scaling = {"type": "yarn", "factor": 4.0, "original_context": 64}
    cos, sin = rope_tables(2, D, BASE, np.float64, scaling)
    m = 0.1 * math.log(4.0) + 1
    np.testing.assert_allclose(cos[0], m, rtol=1e-12)  # position 0: cos 0 = 1, times m
    theta = BASE ** (-np.arange(0, D, 2) / D)
    ratio = angles(cos, sin)[1] / theta  # 1 where kept, 1/4 where interpolated
    assert ratio[0] == pytest.approx(1) and ratio[-1] == pytest.approx(0.25)
    assert np.all(np.diff(ratio) <= 1e-12)  # monotone from kept to interpolated
    given = rope_tables(2, D, BASE, np.float64, {**scaling, "attention_factor": 1.5})[0]
    np.testing.assert_allclose(given[0], 1.5, rtol=1e-12)


def test_freq_factors_divide_each_frequency():
    factors = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    theta = BASE ** (-np.arange(0, D, 2) / D)
    scaled = angles(*rope_tables(2, D, BASE, np.float64, {"type": "freq_factors",
                                                           "factors": factors}))[1]
    np.testing.assert_allclose(scaled, theta / np.array(factors), rtol=1e-12)


def test_only_global_layers_are_scaled_and_no_rope_layers_are_not_rotated():
    cfg = minillm.ModelConfig(arch="modern", vocab_size=11, context_length=32, d_model=16,
                              n_layers=4, n_heads=2, sliding_window=4,
                              sliding_window_pattern=2, rope_local_theta=10.0,
                              rope_scaling={"type": "linear", "factor": 2.0},
                              no_rope_layers=(3,))
    model = minillm.random_model(cfg, seed=0, dtype="float64")
    assert model._rope_of_layer == [(10.0, False), (10000.0, True), (10.0, False), None]
    model.forward(np.array([[1, 2, 3, 4, 5]]))
    cos, _ = model._rope_tables[10000.0, True]
    expected, _ = rope_tables(len(cos), 8, 10000.0, np.float64, cfg.rope_scaling)
    np.testing.assert_array_equal(cos[:, 0], expected)
