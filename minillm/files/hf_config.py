"""Hugging Face config.json <-> minillm ModelConfig, for GPT-2 and the Llama family.

Anything the other side means that minillm cannot compute the same way (RoPE scaling, sliding
windows, biases where minillm has none, ...) is a ValueError naming the field, never a silent
approximation.
"""
from __future__ import annotations

from ..config import OPTIONS, ModelConfig

# Hugging Face activation names -> minillm's (ACT2FN: "gelu" is the exact erf form).
_HF_ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
                   "gelu_fast": None, "silu": "silu", "swish": "silu"}
LLAMA_FAMILY = ("llama", "mistral", "qwen2", "qwen3", "smollm3", "olmo2", "granite", "phi3")
# Each family's options of the modern architecture (ModelConfig), beyond what config.json sizes.
_FAMILY_OPTIONS = {"qwen3": dict(qk_norm=True),
                   "olmo2": dict(pre_norms=False, post_norms=True, qk_norm=True,
                                 qk_norm_all_heads=True)}


def config_from_hf(hf: dict) -> ModelConfig:
    """A ModelConfig from a Hugging Face config.json (model_type gpt2, or one of LLAMA_FAMILY)."""
    model_type = hf.get("model_type")
    if model_type not in ("gpt2",) + LLAMA_FAMILY:
        raise ValueError(f"config.json: model_type {model_type!r} is not supported; expected "
                         f"gpt2 or one of {LLAMA_FAMILY}")
    try:
        return _from_gpt2(hf) if model_type == "gpt2" else _from_llama(hf)
    except KeyError as e:
        raise ValueError(f"config.json: missing field {e} for model_type {model_type}") from None


def _activation(hf: dict, key: str, allowed) -> str:
    name = hf.get(key)
    act = _HF_ACTIVATIONS.get(name)
    if act not in allowed:
        raise ValueError(f"config.json: {key} {name!r} is not supported here")
    return act


def _require(hf: dict, key: str, ok, why: str) -> None:
    if key in hf and not ok(hf[key]):
        raise ValueError(f"config.json: {key}={hf[key]!r} is not supported ({why})")


def _from_gpt2(hf: dict) -> ModelConfig:
    _require(hf, "scale_attn_weights", lambda v: v is True, "minillm always divides by sqrt(d)")
    _require(hf, "scale_attn_by_inverse_layer_idx", lambda v: not v, "no per-layer scaling")
    _require(hf, "add_cross_attention", lambda v: not v, "decoder-only, no cross-attention")
    d_model = hf["n_embd"]
    return ModelConfig(
        arch="classic", vocab_size=hf["vocab_size"], context_length=hf["n_positions"],
        d_model=d_model, n_layers=hf["n_layer"], n_heads=hf["n_head"],
        d_ff=hf.get("n_inner") or 4 * d_model, norm_eps=hf.get("layer_norm_epsilon", 1e-5),
        tie_embeddings=hf.get("tie_word_embeddings", True), bias=True,
        activation=_activation(hf, "activation_function", ("gelu", "gelu_tanh")))


def _rope_theta(hf: dict) -> float:
    """rope_theta, from `rope_parameters` (transformers >= 5) or the older top-level fields."""
    params = hf.get("rope_parameters") or {}
    if params.get("partial_rotary_factor", hf.get("partial_rotary_factor", 1.0)) != 1.0:
        raise ValueError("config.json: partial_rotary_factor is not supported")
    return float(params.get("rope_theta", hf.get("rope_theta", 10000.0)))


def _rope_scaling(hf: dict) -> dict | None:
    """ModelConfig.rope_scaling (rope_scaling.py) from `rope_parameters` or `rope_scaling`:
    linear, llama3 and yarn; any other kind, or a number minillm would not use, is refused."""
    params = {**(hf.get("rope_scaling") or {}), **(hf.get("rope_parameters") or {})}
    kind = params.get("rope_type", params.get("type", "default"))
    if kind == "default":
        return None
    if kind not in ("linear", "llama3", "yarn"):
        raise ValueError(f"config.json: RoPE scaling {kind!r} is not supported (minillm "
                         "implements linear, llama3 and yarn)")
    for key in ("mscale", "mscale_all_dim", "extrapolation_factor"):
        if params.get(key) not in (None, 0):
            raise ValueError(f"config.json: rope_scaling.{key} is not supported")
    if params.get("truncate", True) is not True:
        raise ValueError("config.json: rope_scaling.truncate=false is not supported")
    scaling = {"type": kind, "factor": params.get("factor")}
    original = params.get("original_max_position_embeddings")
    if kind == "llama3":
        scaling.update(low_freq_factor=params.get("low_freq_factor"), original_context=original,
                       high_freq_factor=params.get("high_freq_factor"))
    if kind == "yarn":
        scaling["original_context"] = original or hf.get("max_position_embeddings")
        for key in ("beta_fast", "beta_slow", "attention_factor"):
            if params.get(key) is not None:
                scaling[key] = params[key]
    return scaling


def _family_options(hf: dict) -> dict:
    """The options a family's config.json sets (Granite's multipliers, SmolLM3's layers
    without RoPE), and the refusal of what minillm does not compute."""
    model_type, options = hf["model_type"], dict(_FAMILY_OPTIONS.get(hf["model_type"], {}))
    if model_type == "granite":
        options.update(embedding_multiplier=float(hf.get("embedding_multiplier", 1.0)),
                       residual_multiplier=float(hf.get("residual_multiplier", 1.0)),
                       attention_multiplier=float(hf.get("attention_multiplier", 1.0)),
                       logit_scale=float(hf.get("logits_scaling", 1.0)))
    if model_type == "smollm3":
        flags = hf.get("no_rope_layers") or [1] * hf["num_hidden_layers"]
        if len(flags) != hf["num_hidden_layers"] or any(f not in (0, 1) for f in flags):
            raise ValueError("config.json: no_rope_layers must hold a 0 or 1 per layer")
        options["no_rope_layers"] = tuple(i for i, use_rope in enumerate(flags) if not use_rope)
    if model_type == "phi3" and hf.get("sliding_window") is not None:
        # every layer local: no layer's index + 1 is a multiple of n_layers + 1
        options.update(sliding_window=hf["sliding_window"],
                       sliding_window_pattern=hf["num_hidden_layers"] + 1)
    return options


def _from_llama(hf: dict) -> ModelConfig:
    model_type = hf["model_type"]
    d_model, n_heads = hf["hidden_size"], hf["num_attention_heads"]
    _require(hf, "mlp_bias", lambda v: not v, "minillm's gated MLP has no biases")
    _require(hf, "pretraining_tp", lambda v: v == 1, "tensor-parallel slicing")
    if model_type not in ("qwen2", "mistral"):
        _require(hf, "attention_bias", lambda v: not v,
                 f"{model_type}'s attention_bias also puts a bias on o_proj; minillm's modern "
                 "model has a q/k/v bias only, as Qwen2")
    _require(hf, "use_sliding_window", lambda v: not v, "sliding windows of this family")
    if hf.get("sliding_window") is not None and model_type in ("llama", "mistral"):
        raise ValueError("config.json: sliding_window attention is not supported")
    return ModelConfig(
        arch="modern", vocab_size=hf["vocab_size"],
        context_length=hf.get("max_position_embeddings", 2048), d_model=d_model,
        n_layers=hf["num_hidden_layers"], n_heads=n_heads,
        n_kv_heads=hf.get("num_key_value_heads") or n_heads, d_ff=hf["intermediate_size"],
        norm_eps=hf.get("rms_norm_eps", 1e-6), rope_theta=_rope_theta(hf),
        tie_embeddings=hf.get("tie_word_embeddings", False), bias=model_type == "qwen2",
        activation=_activation(hf, "hidden_act", ("silu", "gelu", "gelu_tanh")),
        head_dim=hf.get("head_dim") or d_model // n_heads, rope_scaling=_rope_scaling(hf),
        **_family_options(hf))


def config_to_hf(cfg: ModelConfig, dtype: str = "float32") -> dict:
    """A Hugging Face config.json for GPT2LMHeadModel (classic), LlamaForCausalLM (modern) or
    Qwen2ForCausalLM (modern with a q/k/v bias). Raises ValueError if none can express it."""
    common = {"vocab_size": cfg.vocab_size, "tie_word_embeddings": cfg.tie_embeddings,
              "bos_token_id": None, "eos_token_id": None, "pad_token_id": None,
              "dtype": dtype, "use_cache": True}
    if cfg.arch == "classic":
        if not cfg.bias:
            raise ValueError("model: a classic model without biases has no GPT-2 equivalent "
                             "(GPT-2 has a bias on every linear layer and norm)")
        return {**common, "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
                "n_positions": cfg.context_length, "n_embd": cfg.d_model,
                "n_layer": cfg.n_layers, "n_head": cfg.n_heads, "n_inner": cfg.d_ff,
                "activation_function": {"gelu": "gelu", "gelu_tanh": "gelu_new"}[cfg.activation],
                "layer_norm_epsilon": cfg.norm_eps, "resid_pdrop": 0.0, "embd_pdrop": 0.0,
                "attn_pdrop": 0.0, "scale_attn_weights": True}
    options = [name for name in OPTIONS if name in cfg.to_dict()]
    if options:
        raise ValueError(f"model: the option(s) {', '.join(options)} cannot be exported; "
                         "minillm exports GPT-2, Llama and Qwen2")
    if cfg.activation != "silu":
        raise ValueError(f"model: a modern model with activation {cfg.activation!r} is not a "
                         "Llama (whose gated MLP is SwiGLU); only silu can be exported")
    arch, model_type = (("Qwen2ForCausalLM", "qwen2") if cfg.bias
                        else ("LlamaForCausalLM", "llama"))
    out = {**common, "architectures": [arch], "model_type": model_type,
           "hidden_size": cfg.d_model, "intermediate_size": cfg.d_ff,
           "num_hidden_layers": cfg.n_layers, "num_attention_heads": cfg.n_heads,
           "num_key_value_heads": cfg.n_kv_heads, "head_dim": cfg.head_dim,
           "max_position_embeddings": cfg.context_length, "rms_norm_eps": cfg.norm_eps,
           "rope_theta": cfg.rope_theta,
           "rope_parameters": {"rope_type": "default", "rope_theta": cfg.rope_theta},
           "hidden_act": "silu", "attention_dropout": 0.0}
    if model_type == "llama":
        out.update(attention_bias=False, mlp_bias=False)
    else:
        out.update(use_sliding_window=False, sliding_window=None)
    return out
