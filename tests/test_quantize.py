"""Row quantization and the int8 weight type.

Tolerances: the int8 matmul is compared with s_r (Q_r . x) computed in float64; with float32
activations the blocked float32 sums differ from it by float32 rounding, bounded here by
1e-5 * sum_j |s_r Q_rj x_j| + 1e-30 (a few ulps per term, far above float32's 6e-8 per add, far below any
bug, which shows up at the scale of the terms themselves). In float64: 1e-12 relative.
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import minillm
from minillm.fast import model as fast
from minillm.quantize import QuantizedWeight, quantize_rows
from minillm.testing.strategies import model_configs

ELEMENTS = st.floats(-1e3, 1e3, allow_nan=False, allow_subnormal=False, width=32).filter(
    lambda v: v == 0 or abs(v) > 1e-20)


@st.composite
def matrices(draw):
    rows, cols = draw(st.integers(1, 9)), draw(st.integers(1, 12))
    w = draw(arrays(np.float32, (rows, cols), elements=ELEMENTS))
    if draw(st.booleans()):
        w[draw(st.integers(0, rows - 1))] = 0  # an all-zero row
    return w


@given(matrices(), st.integers(2, 8))
def test_rounding_error_at_most_half_a_step_and_range(w, bits):
    q, s = quantize_rows(w, bits=bits)
    qmax = 2 ** (bits - 1) - 1
    assert q.dtype == np.int8 and s.dtype == np.float32 and s.shape == (w.shape[0],)
    assert np.all(np.abs(q.astype(np.int64)) <= qmax)
    assert np.all(s > 0) and np.all(np.isfinite(s))
    err = np.abs(w.astype(np.float64) - s[:, None].astype(np.float64) * q)
    assert np.all(err <= s[:, None] / 2 * (1 + 1e-12))
    # the largest-magnitude entry of every non-zero row maps to +-qmax, with W's sign
    for r in range(w.shape[0]):
        j = np.argmax(np.abs(w[r]))
        if w[r, j] != 0:
            assert q[r, j] == np.sign(w[r, j]) * qmax
        else:
            assert np.all(q[r] == 0)


@given(matrices(), st.sampled_from([1, 2, 3, 4]))
def test_groups_bound_each_group_by_its_own_scale(w, group_size):
    cols = w.shape[1] - w.shape[1] % group_size
    if cols == 0:
        return
    w = w[:, :cols]
    q, s = quantize_rows(w, bits=4, group_size=group_size)
    assert s.shape == (w.shape[0], cols // group_size)
    step = np.repeat(s.astype(np.float64), group_size, axis=1)
    assert np.all(np.abs(w - step * q) <= step / 2 * (1 + 1e-12))
    np.testing.assert_allclose(QuantizedWeight(q, s, 4).dequantize(np.float64), step * q)


@given(matrices(), st.integers(2, 8))
def test_per_row_bound_never_exceeds_the_per_matrix_bound(w, bits):
    _, s = quantize_rows(w, bits=bits)
    s_all = np.abs(w).max() / (2 ** (bits - 1) - 1)
    nonzero = np.abs(w).max(axis=1) > 0
    assert np.all(s[nonzero] <= np.float32(s_all) * (1 + 1e-6))


def test_planted_outlier_costs_its_row_only():
    rng = np.random.default_rng(1)
    w = rng.normal(0, 0.02, size=(384, 384)).astype(np.float32)
    w[7, 42] = 0.5
    q, s = quantize_rows(w)
    err_rows = np.abs(q * s[:, None] - w).mean()
    s_all = np.abs(w).max() / 127
    err_all = np.abs(np.round(w / s_all) * s_all - w).mean()
    assert err_rows * 4 < err_all  # "several times smaller" with a scale per row


def test_bad_arguments_raise_clear_errors():
    w = np.ones((2, 6), np.float32)
    for kwargs, message in [({"bits": 1}, "bits"), ({"bits": 9}, "bits"),
                            ({"group_size": 4}, "group_size"), ({"group_size": 0}, "group_size")]:
        with pytest.raises(ValueError, match=message):
            quantize_rows(w, **kwargs)
    with pytest.raises(ValueError, match="non-finite"):
        quantize_rows(np.array([[np.nan]]))
    with pytest.raises(ValueError, match="2-D"):
        quantize_rows(np.ones(3))


SHAPES = [(1, 1), (5, 3), (64, 48), (700, 96), (384, 1024)]  # (out, in)


@pytest.mark.parametrize("out_features, in_features", SHAPES)
@pytest.mark.parametrize("lead", [(1, 1), (1, 7), (3, 1), (2, 5)])  # decode, prefill, batches
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("group_size", [None, 1])
@pytest.mark.parametrize("product", ["reference", "fast", "fast, small blocks"])
def test_int8_matmul_equals_scaled_integer_dot_products(out_features, in_features, lead, dtype,
                                                       group_size, product, monkeypatch):
    if product == "fast, small blocks":  # many ragged blocks
        monkeypatch.setattr(fast, "BLOCK_BYTES", 3000)
    rng = np.random.default_rng(out_features * 31 + in_features)
    w = rng.standard_normal((out_features, in_features))
    weight = QuantizedWeight.from_float(w, group_size=group_size)
    x = rng.standard_normal(lead + (in_features,)).astype(dtype)
    y = (weight if product == "reference" else fast.Int8(weight.q, weight.scale, weight.bits)).matmul(x)
    assert y.dtype == dtype and y.shape == lead + (out_features,)
    s = weight.scale.astype(np.float64).reshape(out_features, -1, 1)
    terms = (weight.q.reshape(out_features, s.shape[1], -1) * s).reshape(out_features, -1)
    terms = x.astype(np.float64)[..., None, :] * terms  # (..., out, in): s_r Q_rj x_j
    exact = terms.sum(-1)
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    assert np.all(np.abs(y - exact) <= rtol * np.abs(terms).sum(-1) + 1e-30)


@pytest.mark.parametrize("out_features, in_features", [(1152, 384), (384, 384), (384, 1024)])
def test_resident_bytes_stay_under_30_percent_of_float32_and_no_buffer_is_kept(out_features,
                                                                              in_features):
    w = np.random.default_rng(0).standard_normal((out_features, in_features)).astype(np.float32)
    weight = QuantizedWeight.from_float(w)
    before = {k: v.nbytes for k, v in vars(weight).items() if isinstance(v, np.ndarray)}
    weight.matmul(np.ones((3, in_features), np.float32))
    after = {k: v.nbytes for k, v in vars(weight).items() if isinstance(v, np.ndarray)}
    assert before == after and sum(after.values()) == weight.nbytes
    assert weight.nbytes <= 0.3 * w.nbytes


def _model(cfg, dtype="float64"):
    return minillm.random_model(cfg, seed=5, dtype=dtype, std=0.5)


@given(model_configs())
def test_quantize_replaces_linear_weights_only_and_keeps_the_tie(cfg):
    model = _model(cfg)
    model8 = minillm.quantize(model)
    for name, value in model8.params.items():
        linear = name.endswith(("qkv.weight", "out.weight", "up.weight", "down.weight"))
        assert isinstance(value, QuantizedWeight) == linear, name
        if not linear:
            assert value is model.params[name]
    head = "tok_emb.weight" if cfg.tie_embeddings else "lm_head.weight"
    assert model8.params[head] is model.params[head]  # lm_head skipped / tied embedding
    if not cfg.tie_embeddings:
        head = minillm.quantize(model, skip=()).params["lm_head.weight"]
        assert isinstance(head, QuantizedWeight)


def test_quantized_logits_stay_close_to_float_logits():
    """Bound: cosine >= 0.999 per position on random models with GPT-2-like weight scale."""
    for arch in ("classic", "modern"):
        cfg = minillm.ModelConfig(arch=arch, vocab_size=64, context_length=16, d_model=64,
                                  n_layers=2, n_heads=4)
        model = minillm.random_model(cfg, seed=6, dtype="float32", std=0.1)
        tokens = np.random.default_rng(7).integers(0, 64, (2, 16))
        a, b = model.forward(tokens), minillm.quantize(model).forward(tokens)
        cos = (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)
        assert cos.min() >= 0.999, cos.min()


@given(st.data())
def test_cached_equals_uncached_for_an_int8_model(data):
    cfg = data.draw(model_configs())
    model = minillm.quantize(_model(cfg))
    tokens = np.array([data.draw(st.lists(st.integers(0, cfg.vocab_size - 1),
                                          min_size=2, max_size=cfg.context_length))])
    cache = model.new_cache()
    split = data.draw(st.integers(1, tokens.shape[1] - 1))
    steps = [model.forward(tokens[:, :split], cache)]
    steps += [model.forward(tokens[:, t:t + 1], cache) for t in range(split, tokens.shape[1])]
    np.testing.assert_allclose(np.concatenate(steps, axis=1), model.forward(tokens),
                               rtol=0, atol=1e-12)


CFG = minillm.ModelConfig(arch="classic", vocab_size=30, context_length=8, d_model=8, n_layers=2,
                          n_heads=2)


@pytest.mark.parametrize("arch", ["classic", "modern"])
@pytest.mark.parametrize("bits, group_size", [(8, None), (4, 4)])
def test_save_load_round_trip_is_exact(tmp_path, arch, bits, group_size):
    cfg = minillm.ModelConfig(arch=arch, vocab_size=30, context_length=8, d_model=8, n_layers=2,
                              n_heads=2)
    model8 = minillm.quantize(minillm.random_model(cfg, seed=3), skip=(), bits=bits,
                              group_size=group_size)
    minillm.save(model8, tmp_path / "m.npz")
    back = minillm.load(tmp_path / "m.npz", fast=False)
    assert back.params.keys() == model8.params.keys()
    for name, value in model8.params.items():
        got = back.params[name]
        assert type(got) is type(value), name  # no silent dequantization
        if isinstance(value, QuantizedWeight):
            assert got.bits == bits and got.group_size == group_size
            np.testing.assert_array_equal(got.q, value.q)
            np.testing.assert_array_equal(got.scale, value.scale)
        else:
            np.testing.assert_array_equal(got, value)
    tokens = np.array([[1, 2, 3]])
    np.testing.assert_array_equal(back.forward(tokens), model8.forward(tokens))


def _entries(tmp_path):
    minillm.save(minillm.quantize(minillm.random_model(CFG, seed=4)), tmp_path / "good.npz")
    with np.load(tmp_path / "good.npz") as f:
        return {k: f[k] for k in f.files}


QKV = "layers.0.attn.qkv.weight"
MALFORMED = {
    "scale missing": (lambda e: {k: v for k, v in e.items() if k != QKV + "_scale"},
                      "no 'layers.0.attn.qkv.weight_scale' entry"),
    "bits missing": (lambda e: {k: v for k, v in e.items() if k != QKV + "_bits"},
                     "no 'layers.0.attn.qkv.weight_bits'"),
    "scale shape": (lambda e: {**e, QKV + "_scale": np.ones(5, np.float32)},
                    r"_scale' has shape \(5,\)"),
    "group scale shape": (lambda e: {**e, QKV + "_scale": np.ones((24, 3), np.float32)},
                          r"_scale' has shape \(24, 3\)"),
    "scale dtype": (lambda e: {**e, QKV + "_scale": e[QKV + "_scale"].astype(np.float64)},
                    "expected float32"),
    "negative scale": (lambda e: {**e, QKV + "_scale": -e[QKV + "_scale"]}, "negative scales"),
    "non-finite scale": (lambda e: {**e, QKV + "_scale": e[QKV + "_scale"] * np.inf},
                         "non-finite"),
    "int8 out of range": (lambda e: {**e, QKV: np.full((24, 8), -128, np.int8)},
                          r"outside \[-127, 127\]"),
    "out of range for bits": (lambda e: {**e, QKV + "_bits": np.array(4)},
                              r"outside \[-7, 7\] for 4 bits"),
    "bad bits": (lambda e: {**e, QKV + "_bits": np.array(9)}, r"integer scalar in \[2, 8\]"),
    "int8 norm": (lambda e: {**e, "final_norm.weight": np.ones(8, np.int8)},
                  "'final_norm.weight' is int8, but only linear-layer weights"),
    "int8 embedding": (lambda e: {**e, "tok_emb.weight": np.ones((30, 8), np.int8)},
                       "int8 tensor 'tok_emb.weight' has no 'tok_emb.weight_scale' entry"),
    "int8 shape": (lambda e: {**e, QKV: np.ones((8, 8), np.int8)}, r"has shape \(8, 8\)"),
    "stray scale": (lambda e: {**e, "final_norm.weight_scale": np.ones(8, np.float32)},
                    "unexpected tensor.*final_norm.weight_scale"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_quantized_file_gives_one_clear_error(tmp_path, case):
    change, message = MALFORMED[case]
    path = tmp_path / "bad.npz"
    with open(path, "wb") as f:
        np.savez(f, **change(_entries(tmp_path)))
    with pytest.raises(minillm.WeightsError, match=message):
        minillm.load(path)


def test_cli_quantize_writes_an_int8_file_and_reports_sizes(tmp_path, capsys):
    from minillm.cli import main

    minillm.save(minillm.random_model(CFG, seed=8), tmp_path / "f.npz")
    assert main(["quantize", str(tmp_path / "f.npz"), str(tmp_path / "q.npz"),
                 "--group_size", "4"]) == 0
    out = capsys.readouterr().out
    assert "file" in out and "weights in memory" in out
    model8 = minillm.load(tmp_path / "q.npz")
    assert model8.params[QKV].group_size == 4
    assert main(["quantize", str(tmp_path / "f.npz"), str(tmp_path / "x.npz"),
                 "--group_size", "3"]) == 2
    assert "group_size" in capsys.readouterr().err


def test_quality_compare_on_identical_and_uniform_models():
    from minillm.study.quality import compare, next_token_loss, windows

    model = minillm.random_model(CFG, seed=9)
    wins = windows(np.arange(43) % CFG.vocab_size, 8)  # 5 windows of 8 predictions, 2 left over
    assert wins.shape == (5, 9) and (wins[1:, 0] == wins[:-1, -1]).all()
    r = compare(model, model, wins)
    assert r.positions == 40 and r.same_top == 1.0 and r.loss_float == r.loss_quant
    assert abs(r.cosine - 1) < 1e-6
    uniform = np.zeros((2, 5, 30))  # every token equally likely: loss = ln V
    np.testing.assert_allclose(next_token_loss(uniform, np.zeros((2, 5), int)), np.log(30))
    r8 = compare(model, minillm.quantize(model, bits=2), wins)
    assert r8.cosine < 1 and r8.loss_quant != r8.loss_float


def test_the_fast_int8_rows_are_row_major_whatever_the_input_layout():
    """fast.Int8 widens contiguous blocks of rows; a model's float weights may be column-major."""
    cfg = minillm.ModelConfig(arch="modern", vocab_size=16, context_length=8, d_model=8,
                              n_layers=1, n_heads=2)
    model = minillm.random_model(cfg)
    name = "layers.0.mlp.gate_up.weight"
    model.params[name] = np.asfortranarray(model.params[name])
    quantized = fast.accelerate(minillm.quantize(model))
    assert quantized.params[name].q.flags.c_contiguous


@pytest.mark.parametrize("arch", ["classic", "modern"])
def test_quantized_embeddings_are_looked_up_as_scaled_rows_and_round_trip(arch, tmp_path):
    cfg = minillm.ModelConfig(arch=arch, vocab_size=40, context_length=12, d_model=16,
                              n_layers=2, n_heads=2)
    model = minillm.random_model(cfg, seed=8, dtype="float32", std=0.1)
    model8 = minillm.quantize(model, embeddings=True)
    emb = model8.params["tok_emb.weight"]
    assert isinstance(emb, QuantizedWeight)
    ids = np.array([[3, 0, 39]])
    np.testing.assert_array_equal(emb[ids], emb.dequantize()[ids])
    tokens = np.random.default_rng(9).integers(0, 40, (2, 12))
    a, b = model.forward(tokens), model8.forward(tokens)
    cos = (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)
    assert cos.min() >= 0.999, cos.min()
    cache = model8.new_cache(2)
    cached = np.concatenate([model8.forward(tokens[:, t:t + 1], cache) for t in range(12)], 1)
    np.testing.assert_allclose(cached, b, rtol=0, atol=1e-5)
    minillm.save(model8, tmp_path / "m.npz")
    again = minillm.load(tmp_path / "m.npz", fast=False)
    assert isinstance(again.params["tok_emb.weight"], QuantizedWeight)
    np.testing.assert_array_equal(again.forward(tokens), b)
