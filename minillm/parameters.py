"""Every tensor a model has, by canonical name (docs/FORMAT.md), with its shape: what a file
must hold for a ModelConfig; and seeded random values for them (random_model's)."""
from __future__ import annotations

import numpy as np


def parameter_shapes(cfg) -> dict[str, tuple[int, ...]]:
    """Every tensor a model of this config has, by canonical name, with its shape."""
    D, F, V, d = cfg.d_model, cfg.d_ff, cfg.vocab_size, cfg.head_dim
    qkv_rows = (cfg.n_heads + 2 * cfg.n_kv_heads) * d
    classic = cfg.arch == "classic"
    norm_bias = classic and cfg.bias  # LayerNorm shifts; RMSNorm has none
    linear_bias = classic and cfg.bias  # every linear layer of the classic model
    shapes = {"tok_emb.weight": (V, D)}
    if classic:
        shapes["pos_emb.weight"] = (cfg.context_length, D)

    def norm(name):
        shapes[name + ".weight"] = (D,)
        if norm_bias:
            shapes[name + ".bias"] = (D,)

    def dense(name, out_features, in_features, bias):
        shapes[name + ".weight"] = (out_features, in_features)
        if bias:
            shapes[name + ".bias"] = (out_features,)

    for i in range(cfg.n_layers):
        p = f"layers.{i}."
        if cfg.pre_norms:
            norm(p + "attn_norm")
        dense(p + "attn.qkv", qkv_rows, D, cfg.bias)
        if cfg.qk_norm and cfg.qk_norm_all_heads:  # OLMo 2: a gain per value of every head
            shapes[p + "attn.q_norm.weight"] = (cfg.n_heads * d,)
            shapes[p + "attn.k_norm.weight"] = (cfg.n_kv_heads * d,)
        elif cfg.qk_norm:  # one gain per head dimension, shared by the heads
            shapes[p + "attn.q_norm.weight"] = shapes[p + "attn.k_norm.weight"] = (d,)
        dense(p + "attn.out", D, cfg.n_heads * d, linear_bias)
        if cfg.post_norms:
            norm(p + "attn_post_norm")
        if cfg.pre_norms:
            norm(p + "mlp_norm")
        if classic:
            dense(p + "mlp.up", F, D, linear_bias)
        else:
            dense(p + "mlp.gate_up", 2 * F, D, False)
        dense(p + "mlp.down", D, F, linear_bias)
        if cfg.post_norms:
            norm(p + "mlp_post_norm")
    norm("final_norm")
    if not cfg.tie_embeddings:
        shapes["lm_head.weight"] = (V, D)
    return shapes



def random_params(config, seed: int = 0, dtype="float32", std: float = 0.02) -> dict:
    """Seeded random weights: N(0, std^2) matrices, norm gains near 1, small biases.

    Residual output projections are scaled by 1/sqrt(2 n_layers) as in GPT-2. Norm gains and
    biases are randomised too (not 1 and 0) so that tests exercise every parameter.
    """
    rng = np.random.default_rng(seed)
    params = {}
    for name, shape in parameter_shapes(config).items():
        if name.endswith("norm.weight"):
            w = 1.0 + 0.1 * rng.standard_normal(shape)
        elif name.endswith("norm.bias"):
            w = 0.1 * rng.standard_normal(shape)
        elif name.endswith(".bias"):
            w = std * rng.standard_normal(shape)
        elif name.endswith(("out.weight", "down.weight")):
            w = std / np.sqrt(2 * config.n_layers) * rng.standard_normal(shape)
        else:
            w = std * rng.standard_normal(shape)
        params[name] = w.astype(dtype)
    return params
