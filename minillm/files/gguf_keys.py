"""Every `{arch}.*` key of a GGUF file is applied or refused, never ignored.

llama.cpp reads a model's hyperparameters in llama-model.cpp (load_hparams, for every
architecture) and in each architecture's load_arch_hparams (src/models/*.cpp). For each
architecture minillm reads, APPLIED lists the keys it computes as llama.cpp does (the config is
read from them in gguf_config.py and here), NEUTRAL the keys it accepts only at the value that
changes nothing, and INERT the keys llama.cpp reads but does not use for that architecture.
Any other `{arch}.*` key, or an applied one at a value minillm cannot compute (a RoPE scaling
llama.cpp would apply differently), is a WeightsError naming the key:

    llama.attention.causal: found False; minillm runs causal attention only
    qwen2.attention.scale: minillm does not apply this key to a qwen2 model

The options read here (family_options):
    rope.scaling.type/factor  llama.cpp's type defaults to "linear": a factor without a type
                              scales linearly (theta_j / s); "yarn" with
                              rope.scaling.original_context_length, attention factor
                              (0.1 ln s + 1) * rope.scaling.attn_factor, beta_fast 32, beta_slow 1
    rope_freqs.weight         llama.cpp's llama3 scaling: theta_j / f_j (llama, granite)
    gemma3                    rope.freq_base_swa: the local layers' base (10000 by default);
                              attention.sliding_window_pattern: one global layer in so many (6)
    granite                   embedding_scale, residual_scale, attention.scale, logit_scale;
                              rope.scaling.finetuned=false: no layer rotates
    smollm3                   every fourth layer without RoPE (llama.cpp's n_no_rope_layer_step)
    qwen3, olmo2              q/k norms (olmo2: over all heads, norms after the sublayers only)
    phi3                      attention.sliding_window read and not applied, as llama.cpp does
"""
from __future__ import annotations

import math

import numpy as np

from .npz import WeightsError
from .gguf_metadata import read

_SIZES = {"context_length", "embedding_length", "block_count", "feed_forward_length",
          "attention.head_count", "attention.head_count_kv", "vocab_size"}
_ROPE = {"rope.freq_base", "rope.dimension_count", "attention.key_length",
         "attention.value_length", "rope.scaling.type", "rope.scaling.factor",
         "rope.scale_linear", "rope.scaling.original_context_length",
         "rope.scaling.attn_factor"}
_MODERN = _SIZES | _ROPE | {"attention.layer_norm_rms_epsilon"}
APPLIED = {
    "llama": _MODERN, "mistral": _MODERN, "qwen2": _MODERN, "qwen3": _MODERN,
    "olmo2": _MODERN, "smollm3": _MODERN,
    "phi3": _MODERN | {"attention.sliding_window"},
    "granite": _MODERN | {"logit_scale", "residual_scale", "embedding_scale", "attention.scale",
                          "rope.scaling.finetuned"},
    "gemma3": _MODERN | {"attention.sliding_window", "attention.sliding_window_pattern",
                         "rope.freq_base_swa", "final_logit_softcapping"},
    "gpt2": _SIZES | {"attention.layer_norm_epsilon"},
}
NEUTRAL = {"attention.causal": True, "expert_count": 0, "expert_used_count": 0,
           "expert_shared_feed_forward_length": 0, "nextn_predict_layers": 0,
           "attn_logit_softcapping": 0.0, "final_logit_softcapping": 0.0,
           "rope.scaling.yarn_beta_fast": 32.0, "rope.scaling.yarn_beta_slow": 1.0,
           "rope.scaling.yarn_log_multiplier": 0.0}
INERT = {"rope.scaling.finetuned"}  # read by llama.cpp, used by granite alone
SMOLLM3_NO_ROPE_STEP = 4


def check_keys(metadata, arch: str, vocab_size: int) -> None:
    """Refuse, naming it, each `{arch}.*` key minillm does not apply (APPLIED, NEUTRAL,
    INERT); and a vocabulary whose size is not the embedding's rows, which llama.cpp refuses
    too."""
    for key in metadata:
        if not key.startswith(arch + "."):
            continue
        name = key[len(arch) + 1:]
        if name in APPLIED[arch] or (name in INERT and arch != "gpt2"):
            continue
        if name in NEUTRAL:
            if metadata[key] != NEUTRAL[name] or isinstance(metadata[key], bool) != isinstance(
                    NEUTRAL[name], bool):
                raise WeightsError(f"{key}: found {metadata[key]!r}; minillm computes this "
                                   f"model only with {NEUTRAL[name]!r}")
            continue
        raise WeightsError(f"{key}: minillm does not apply this key to a {arch} model")
    if key_vocab := metadata.get(f"{arch}.vocab_size"):
        if key_vocab != vocab_size:
            raise WeightsError(f"{arch}.vocab_size: found {key_vocab!r}, expected {vocab_size},"
                               " the rows of token_embd.weight")
    tokens = metadata.get("tokenizer.ggml.tokens")
    if isinstance(tokens, list) and tokens and len(tokens) != vocab_size:
        raise WeightsError(f"tokenizer.ggml.tokens: {len(tokens)} tokens, expected "
                           f"{vocab_size}, the rows of token_embd.weight")


def rope_scaling(gguf, get, head_dim: int, context_length: int):
    """ModelConfig.rope_scaling as llama.cpp scales a file's RoPE, or a WeightsError."""
    arch = gguf.metadata["general.architecture"]
    factor = get("rope.scaling.factor", "float32", default=None, low=0.0)
    if factor is None:
        factor = get("rope.scale_linear", "float32", default=0.0, low=0.0)
    kind = get("rope.scaling.type", "string", default="linear")
    attn_factor = get("rope.scaling.attn_factor", "float32", default=1.0, low=0.0)
    freqs = gguf.tensors.get("rope_freqs.weight")
    scaled = kind == "yarn" or (kind == "linear" and factor not in (0.0, 1.0))
    if kind not in ("none", "linear", "yarn"):
        raise WeightsError(f"{arch}.rope.scaling.type: {kind!r} is not supported (minillm "
                           "applies none, linear and yarn)")
    if attn_factor != 1.0 and kind != "yarn":
        raise WeightsError(f"{arch}.rope.scaling.attn_factor: {attn_factor} is applied by "
                           "minillm with yarn scaling only")
    if freqs is not None:
        if arch not in ("llama", "granite") or scaled or freqs.shape != (head_dim // 2,):
            raise WeightsError(f"rope_freqs.weight: expected ({head_dim // 2},) frequency "
                               f"factors of a llama or granite file without another RoPE "
                               f"scaling, found shape {freqs.shape} in a {arch} file")
        factors = [float(f) for f in freqs.numpy().astype("float64")]
        if not all(0 < f < math.inf for f in factors):
            raise WeightsError("rope_freqs.weight: factors must be positive and finite")
        return {"type": "freq_factors", "factors": factors}
    if not scaled:
        return None
    factor = shortest(factor)
    if kind == "linear":
        return {"type": "linear", "factor": factor}
    factor = factor or 1.0
    original = get("rope.scaling.original_context_length", default=context_length, low=1)
    return {"type": "yarn", "factor": factor, "original_context": original,
            "attention_factor": (0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0)
            * shortest(attn_factor)}


def family_options(arch: str, get, n_layers: int) -> dict:
    """ModelConfig's options of a qwen3, olmo2, granite or smollm3 file (gemma3's are in
    gguf_config.gemma3_options)."""
    if arch == "qwen3":
        return dict(qk_norm=True)
    if arch == "olmo2":
        return dict(pre_norms=False, post_norms=True, qk_norm=True, qk_norm_all_heads=True)
    if arch == "smollm3":
        return dict(no_rope_layers=tuple(i for i in range(n_layers)
                                         if (i + 1) % SMOLLM3_NO_ROPE_STEP == 0))
    if arch == "granite":
        def scale(key, default):  # llama.cpp: 0 (or absent) means "not scaled"
            return shortest(get(key, "float32", default=0.0, low=0.0)) or default
        options = dict(logit_scale=shortest(get("logit_scale", "float32", low=1e-30)),
                       residual_multiplier=scale("residual_scale", 1.0),
                       embedding_multiplier=scale("embedding_scale", 1.0),
                       attention_multiplier=scale("attention.scale", None))
        if not get("rope.scaling.finetuned", "bool", default=True):
            options["no_rope_layers"] = tuple(range(n_layers))
        return options
    return {}


def shortest(value: float) -> float:
    """A float32 from the file as the shortest decimal that rounds to it (0.22, not
    0.2199999988): what the writer meant, and the same float32."""
    return float(str(np.float32(value)))
