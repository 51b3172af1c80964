"""Converters without torch: naming tables, layouts, RoPE permutations, configs, errors.

Checkpoints here are dicts of NumPy arrays built from a minillm model by hand, in each source
layout; converting them back must give the model's tensors exactly (no arithmetic happens).
"""
import os
import stat

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import minillm
from minillm.cli import main
from minillm.files import (NAMINGS, Naming, config_from_hf, config_to_hf, detect_naming,
                           from_state_dict, half_to_interleaved, interleaved_to_half,
                           to_hf_state_dict)
from minillm.layers import apply_rope, rope_tables
from minillm.testing.strategies import model_configs


def _hf_ready(cfg):
    """GPT-2 has biases everywhere: give classic configs their biases."""
    if cfg.arch == "classic" and not cfg.bias:
        return minillm.ModelConfig(**{**cfg.to_dict(), "bias": True})
    return cfg


def _assert_same_params(model, params):
    assert sorted(model.params) == sorted(params)
    for name, value in params.items():
        np.testing.assert_array_equal(model.params[name], value, err_msg=name)


# -- RoPE layouts ----------------------------------------------------------------------------

def _rope_interleaved(x, m, theta):
    """Interleaved RoPE (Meta, llama2.c): rotate each pair (x_2j, x_2j+1) by m * theta_j."""
    d = x.shape[-1]
    angle = m * theta ** (-np.arange(0, d, 2) / d)
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = a * np.cos(angle) - b * np.sin(angle)
    out[..., 1::2] = b * np.cos(angle) + a * np.sin(angle)
    return out


@given(heads=st.integers(1, 4), half=st.integers(1, 5), cols=st.integers(1, 4),
       m=st.integers(0, 50), seed=st.integers(0, 1000))
def test_permuted_rows_rotated_by_halves_equal_interleaved_rotation_permuted(heads, half, cols,
                                                                              m, seed):
    d, rng = 2 * half, np.random.default_rng(seed)
    w = rng.standard_normal((heads * d, cols))  # an interleaved checkpoint's q rows
    h = rng.standard_normal(cols)
    theirs = _rope_interleaved((w @ h).reshape(heads, d), m, 10000.0)  # (heads, d)
    cos, sin = rope_tables(m + 1, d, 10000.0, np.float64)
    ours = apply_rope((interleaved_to_half(w, heads) @ h).reshape(1, 1, heads, d),
                      cos[m], sin[m])[0, 0]
    expected = interleaved_to_half(theirs.reshape(heads * d), heads).reshape(heads, d)
    np.testing.assert_allclose(ours, expected, rtol=0, atol=1e-12)


@given(heads=st.integers(1, 4), half=st.integers(1, 5), seed=st.integers(0, 1000))
def test_half_to_interleaved_inverts_interleaved_to_half(heads, half, seed):
    w = np.random.default_rng(seed).standard_normal((heads * 2 * half, 3))
    np.testing.assert_array_equal(half_to_interleaved(interleaved_to_half(w, heads), heads), w)
    b = w[:, 0]  # biases permute the same way
    np.testing.assert_array_equal(interleaved_to_half(b, heads), interleaved_to_half(w, heads)[:, 0])


def test_interleaved_to_half_moves_even_rows_to_the_first_half():
    w = np.arange(8.0)  # one head of size 8: rows 0..7
    np.testing.assert_array_equal(interleaved_to_half(w, 1), [0, 2, 4, 6, 1, 3, 5, 7])
    np.testing.assert_array_equal(interleaved_to_half(w, 2), [0, 2, 1, 3, 4, 6, 5, 7])


# -- the tables --------------------------------------------------------------------------------

@given(cfg=model_configs(gemma=False), seed=st.integers(0, 100))
def test_hugging_face_layout_round_trip_is_exact(cfg, seed):
    cfg = _hf_ready(cfg)
    model = minillm.random_model(cfg, seed=seed)
    sd = to_hf_state_dict(model)
    naming = "hf-gpt2" if cfg.arch == "classic" else "hf-llama"
    assert detect_naming(sd) == naming or cfg.d_model == 1  # c_attn (1, 3) reads either way
    _assert_same_params(from_state_dict(sd, cfg, naming=naming), model.params)


def _pieces(model) -> dict:
    """The model's tensors by canonical name, plus the unfused parts the tables may name:
    q, k, v (rows of qkv) and, in the modern model, gate and up (rows of gate_up)."""
    cfg, p = model.config, model.params
    q_rows, k_rows = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    out = dict(p)
    for i in range(cfg.n_layers):
        for kind in ("weight", "bias"):
            qkv = p.get(f"layers.{i}.attn.qkv.{kind}")
            if qkv is not None:
                out[f"layers.{i}.attn.q.{kind}"] = qkv[:q_rows]
                out[f"layers.{i}.attn.k.{kind}"] = qkv[q_rows:q_rows + k_rows]
                out[f"layers.{i}.attn.v.{kind}"] = qkv[q_rows + k_rows:]
        if cfg.arch == "modern":
            gate_up = p[f"layers.{i}.mlp.gate_up.weight"]
            out[f"layers.{i}.mlp.gate.weight"] = gate_up[:cfg.d_ff]
            out[f"layers.{i}.mlp.up.weight"] = gate_up[cfg.d_ff:]
    return out


def _source_dict(model, naming, transform=lambda name, w: w):
    """A checkpoint in `naming`'s layout, written straight from its table."""
    pieces = _pieces(model)
    out = {}
    for piece, source in NAMINGS[naming].names.items():
        for i in range(model.config.n_layers) if "{i}" in piece else [None]:
            name = piece.format(i=i)
            if name in pieces:
                out[source.format(i=i)] = transform(name, pieces[name])
    return out


@given(cfg=model_configs(arch="classic"))
def test_nanogpt_checkpoint_with_compile_prefix_and_mask_buffers(cfg):
    cfg = _hf_ready(cfg)
    model = minillm.random_model(cfg, seed=3)
    sd = {"_orig_mod.transformer." + k if not k.startswith("lm_head") else "_orig_mod." + k: v
          for k, v in _source_dict(model, "nanogpt").items()}
    for i in range(cfg.n_layers):  # nanoGPT without flash attention saves its causal mask
        sd[f"_orig_mod.transformer.h.{i}.attn.bias"] = np.tril(np.ones((1, 1, 4, 4)))
    if cfg.tie_embeddings:  # nanoGPT ties by sharing: both names hold the same tensor
        sd["_orig_mod.lm_head.weight"] = model.params["tok_emb.weight"]
    _assert_same_params(from_state_dict(sd, cfg, naming="nanogpt"), model.params)


@given(cfg=model_configs(arch="modern", gemma=False))
def test_meta_interleaved_checkpoint_is_permuted_back(cfg):
    cfg = minillm.ModelConfig(**{**cfg.to_dict(), "bias": False})  # Meta has no biases
    model = minillm.random_model(cfg, seed=4)

    def to_interleaved(name, w):
        if ".attn.q." in name:
            return half_to_interleaved(w, cfg.n_heads)
        return half_to_interleaved(w, cfg.n_kv_heads) if ".attn.k." in name else w

    sd = _source_dict(model, "meta", to_interleaved)
    assert detect_naming(sd) == "meta"
    _assert_same_params(from_state_dict(sd, cfg, naming="meta"), model.params)


def test_fused_interleaved_qkv_permutes_q_and_k_rows_only():
    cfg = minillm.ModelConfig(arch="modern", vocab_size=7, context_length=8, d_model=12,
                              n_layers=1, n_heads=3, n_kv_heads=1, d_ff=8)
    model = minillm.random_model(cfg, seed=7)
    split = _source_dict(model, "meta", lambda name, w: (
        half_to_interleaved(w, 3) if ".attn.q." in name else
        half_to_interleaved(w, 1) if ".attn.k." in name else w))
    fused = {k: v for k, v in split.items() if ".attention.w" not in k or ".wo." in k}
    fused["layers.0.attention.wqkv.weight"] = np.concatenate(
        [split[f"layers.0.attention.w{c}.weight"] for c in "qkv"])
    names = {**NAMINGS["meta"].names,
             "layers.{i}.attn.qkv.weight": "layers.{i}.attention.wqkv.weight"}
    table = Naming(names, interleaved_rope=True)
    _assert_same_params(from_state_dict(fused, cfg, naming=table), model.params)


def test_a_users_own_table_with_fused_and_split_pieces():
    cfg = minillm.ModelConfig(arch="modern", vocab_size=11, context_length=8, d_model=8,
                              n_layers=2, n_heads=2, n_kv_heads=1, d_ff=12)
    model = minillm.random_model(cfg, seed=5)
    table = {"tok_emb.weight": "emb", "layers.{i}.attn_norm.weight": "b{i}.n1",
             "layers.{i}.attn.qkv.weight": "b{i}.qkv", "layers.{i}.attn.out.weight": "b{i}.o",
             "layers.{i}.mlp_norm.weight": "b{i}.n2", "layers.{i}.mlp.gate.weight": "b{i}.g",
             "layers.{i}.mlp.up.weight": "b{i}.u", "layers.{i}.mlp.down.weight": "b{i}.d",
             "final_norm.weight": "norm"}
    p = model.params
    sd = {"emb": p["tok_emb.weight"], "norm": p["final_norm.weight"]}
    for i in range(2):
        gate_up = p[f"layers.{i}.mlp.gate_up.weight"]
        sd.update({f"b{i}.n1": p[f"layers.{i}.attn_norm.weight"],
                   f"b{i}.qkv": p[f"layers.{i}.attn.qkv.weight"],
                   f"b{i}.o": p[f"layers.{i}.attn.out.weight"],
                   f"b{i}.n2": p[f"layers.{i}.mlp_norm.weight"], f"b{i}.g": gate_up[:12],
                   f"b{i}.u": gate_up[12:], f"b{i}.d": p[f"layers.{i}.mlp.down.weight"]})
    _assert_same_params(from_state_dict(sd, cfg, naming=table), p)

    with pytest.raises(ValueError, match=r"missing tensor.*layers\.1\.mlp\.down\.weight "
                                         r"\(from b1\.d\)"):
        from_state_dict({k: v for k, v in sd.items() if k != "b1.d"}, cfg, naming=table)
    with pytest.raises(ValueError, match="not mapped by the naming table: extra, zz"):
        from_state_dict({**sd, "zz": np.zeros(1), "extra": np.zeros(1)}, cfg, naming=table)
    with pytest.raises(ValueError, match="tensor 'tok_emb.weight' has shape"):
        from_state_dict({**sd, "emb": np.zeros((11, 9))}, cfg, naming=table)


def test_tied_config_rejects_a_different_output_layer():
    cfg = minillm.ModelConfig(arch="modern", vocab_size=11, context_length=8, d_model=8,
                              n_layers=1, n_heads=2, tie_embeddings=True)
    sd = to_hf_state_dict(minillm.random_model(cfg, seed=6))
    sd["lm_head.weight"] = sd["model.embed_tokens.weight"] + 1.0
    with pytest.raises(ValueError, match="tie_embeddings"):
        from_state_dict(sd, cfg)


def test_unknown_naming_and_unrecognised_layout():
    cfg = minillm.ModelConfig(arch="classic", vocab_size=5, context_length=4, d_model=4,
                              n_layers=1, n_heads=1)
    with pytest.raises(ValueError, match="naming: unknown table 'gpt5'"):
        from_state_dict({}, cfg, naming="gpt5")
    with pytest.raises(ValueError, match="cannot recognise.*first keys: w"):
        from_state_dict({"w": np.zeros(2)}, cfg)


# -- configs -----------------------------------------------------------------------------------

@given(cfg=model_configs(gemma=False))
def test_config_to_hf_and_back_is_the_same_config(cfg):
    cfg = _hf_ready(cfg)
    if cfg.arch == "modern" and cfg.activation != "silu":
        with pytest.raises(ValueError, match="activation"):
            config_to_hf(cfg)
        return
    back = config_from_hf(config_to_hf(cfg))
    if cfg.arch == "classic":  # no RoPE: rope_theta is unused and not carried
        back.rope_theta = cfg.rope_theta
    assert back == cfg


def test_hf_gpt2_config_fields():
    cfg = config_from_hf({"model_type": "gpt2", "vocab_size": 50, "n_positions": 64,
                          "n_embd": 32, "n_layer": 2, "n_head": 4, "n_inner": None,
                          "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5})
    assert (cfg.arch, cfg.d_ff, cfg.activation, cfg.tie_embeddings, cfg.bias) == \
        ("classic", 128, "gelu_tanh", True, True)
    assert config_to_hf(minillm.ModelConfig(**{**cfg.to_dict(), "activation": "gelu"})
                        )["activation_function"] == "gelu"


def test_hf_llama_config_old_and_new_rope_fields():
    base = {"model_type": "llama", "vocab_size": 50, "hidden_size": 32, "intermediate_size": 64,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "rms_norm_eps": 1e-6, "max_position_embeddings": 128, "hidden_act": "silu"}
    old = config_from_hf({**base, "rope_theta": 500000.0, "rope_scaling": None})
    new = config_from_hf({**base, "rope_parameters": {"rope_type": "default",
                                                      "rope_theta": 500000.0}})
    assert old == new
    assert (old.n_kv_heads, old.rope_theta, old.norm_eps, old.tie_embeddings, old.bias) == \
        (2, 500000.0, 1e-6, False, False)
    assert config_from_hf({**base, "model_type": "qwen2", "sliding_window": 4096,
                           "use_sliding_window": False}).bias


@pytest.mark.parametrize("change, message", [
    ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "rope_scaling.low_freq_factor"),
    ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4}}, "rope_scaling.factor"),
    ({"rope_scaling": {"rope_type": "longrope", "factor": 8.0}}, "RoPE scaling 'longrope'"),
    ({"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, "RoPE scaling 'dynamic'"),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "mscale": 0.7}},
     "rope_scaling.mscale"),
    ({"partial_rotary_factor": 0.75, "model_type": "phi3"}, "partial_rotary_factor"),
    ({"model_type": "qwen3", "use_sliding_window": True, "sliding_window": 64},
     "use_sliding_window"),
    ({"model_type": "granite", "attention_bias": True}, "attention_bias"),
    ({"attention_bias": True}, "attention_bias"),
    ({"mlp_bias": True}, "mlp_bias"),
    ({"hidden_act": "relu"}, "hidden_act 'relu'"),
    ({"model_type": "mistral", "sliding_window": 4096}, "sliding_window"),
    ({"model_type": "gemma"}, "model_type 'gemma'"),
    ({"hidden_size": None, "model_type": "llama"}, "hidden_size"),
])
def test_hf_config_features_minillm_cannot_compute_are_rejected(change, message):
    base = {"model_type": "llama", "vocab_size": 50, "hidden_size": 32, "intermediate_size": 64,
            "num_hidden_layers": 2, "num_attention_heads": 4, "hidden_act": "silu"}
    data = {**base, **change}
    if change.get("hidden_size", 0) is None:
        del data["hidden_size"]
    with pytest.raises(ValueError, match=message):
        config_from_hf(data)


def test_export_rejects_what_the_target_cannot_express():
    classic = minillm.ModelConfig(arch="classic", vocab_size=5, context_length=4, d_model=4,
                                  n_layers=1, n_heads=1, bias=False)
    with pytest.raises(ValueError, match="without biases"):
        config_to_hf(classic)
    modern = minillm.ModelConfig(arch="modern", vocab_size=5, context_length=4, d_model=4,
                                 n_layers=1, n_heads=1, activation="gelu")
    with pytest.raises(ValueError, match="activation 'gelu'"):
        config_to_hf(modern)
    gemma = minillm.ModelConfig(arch="modern", vocab_size=5, context_length=4, d_model=4,
                                n_layers=1, n_heads=1, qk_norm=True, sliding_window=2)
    with pytest.raises(ValueError, match="qk_norm, sliding_window cannot be exported"):
        config_to_hf(gemma)


def test_export_writes_files_with_the_permissions_open_would_give_them(tmp_path):
    pytest.importorskip("safetensors")
    from minillm.files import export_hf

    cfg = minillm.ModelConfig(arch="modern", vocab_size=20, context_length=8, d_model=8,
                              n_layers=1, n_heads=2)
    old = os.umask(0o027)
    try:
        export_hf(minillm.random_model(cfg, seed=0), tmp_path)
    finally:
        os.umask(old)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "model.safetensors"]
    for name in ("config.json", "model.safetensors"):
        assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == 0o640


def test_exported_config_names_the_tokenizers_special_ids(tmp_path):
    pytest.importorskip("safetensors")
    import json

    from minillm.files import export_hf

    model = minillm.load("weights/target.npz")  # GPT-2 style: <|endoftext|> ends a text
    export_hf(model, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    eos = model.tokenizer.token_to_id("<|endoftext|>")
    assert eos is not None and config["eos_token_id"] == eos


# -- command line errors (no optional package needed to get them) -----------------------------

def test_cli_convert_errors_are_one_line(tmp_path, capsys):
    assert main(["convert", str(tmp_path / "nothing"), str(tmp_path / "o.npz")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["convert", str(tmp_path), str(tmp_path / "o.npz")]) == 2  # no config.json
    assert capsys.readouterr().err.count("\n") == 1
