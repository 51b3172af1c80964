"""The configuration of a GGUF file, read from its `{arch}.*` metadata and checked against its
tensor table: config_from_gguf(gguf) -> ModelConfig, check_tensors(gguf, config).

Gemma 3 (gemma3) is the modern architecture with Gemma's options (ModelConfig), set as llama.cpp
runs such a file (llama-model.cpp): the head size is attention.key_length; every layer but each
sixth is local, with attention.sliding_window keys and RoPE base 10000 (the global layers take
rope.freq_base); scores scaled by 1/sqrt(head size); embeddings by sqrt(d_model); q/k norms and
post-sublayer norms; GeGLU with tanh-GELU; tied head. llama.cpp's converter stores Gemma's
RMSNorm gains as 1 + w (Gemma multiplies by 1 + w), which is minillm's gain as it stands.

GPT-2 (gpt2) is the classic architecture: llama.cpp's converter writes the fused q/k/v
projection as one (3 D, D) matrix, the Conv1D weights transposed to (out, in), the learned
positions as position_embd.weight, a bias on every linear layer and LayerNorm; llama.cpp runs
its MLP with ggml_gelu, GELU's tanh form, which is also GPT-2's own ("gelu_new").
"""
from __future__ import annotations

import numpy as np

from ..config import MAX_CONTEXT_LENGTH, ModelConfig
from .npz import WeightsError
from .gguf import GGUFFile
from .gguf_keys import check_keys, family_options, rope_scaling
from .gguf_metadata import REQUIRED, read

# The allowed ranges of the RMSNorm epsilon and the RoPE base (docs/CONVERT.md): outside them
# the number is no model's (an epsilon that swamps unit activations; frequencies that do not
# decay, or that rotate less than 1e-6 radians over the longest context).
EPS_RANGE = (1e-12, 1.0)
ROPE_BASE_RANGE = (1.0, 1e12)

# Architectures read, and whether llama.cpp's converter permuted their q and k rows (those
# llama.cpp rotates with LLAMA_ROPE_TYPE_NORM, interleaved pairs).
ARCHITECTURES = {"llama": True, "mistral": True, "qwen2": False, "gemma3": False,
                 "gpt2": False, "qwen3": False, "olmo2": False, "phi3": False, "granite": True,
                 "smollm3": True}
# llama.cpp's Gemma 3: one global layer in six, local layers rotating with base 10000.
GEMMA3_PATTERN, GEMMA3_LOCAL_ROPE_BASE = 6, 10000.0


def architecture(gguf: GGUFFile) -> str:
    arch = read(gguf.metadata, "general.architecture", "string")
    if arch not in ARCHITECTURES:
        raise WeightsError(f"general.architecture {arch!r} is not supported; minillm converts "
                           f"{', '.join(ARCHITECTURES)}")
    return arch


def config_from_gguf(gguf: GGUFFile) -> ModelConfig:
    """ModelConfig(arch="modern") from the `{arch}.*` metadata, each key read through
    gguf_metadata.read with its type and range; refuses what minillm would compute differently
    (rope scaling, partial rotation, other head sizes, experts).

    The sizes are bounded by the file before anything is built from them: the vocabulary and
    the width are token_embd.weight's shape, the block count is the number of blocks whose
    tensors the file holds, the heads divide the width; the context length is at most
    MAX_CONTEXT_LENGTH."""
    arch = architecture(gguf)

    def get(key, type="uint32", default=REQUIRED, **bounds):
        return read(gguf.metadata, f"{arch}.{key}", type, default=default, **bounds)

    embedding = gguf.tensors.get("token_embd.weight")
    if embedding is None:
        raise WeightsError("no token_embd.weight tensor")
    if len(embedding.shape) != 2 or 0 in embedding.shape:
        raise WeightsError(f"token_embd.weight: found shape {embedding.shape}, expected "
                           "(vocab_size, embedding_length)")
    vocab_size, d_model = embedding.shape
    check_keys(gguf.metadata, arch, vocab_size)  # every key applied below, or refused here
    n_blocks = blocks_in(gguf)
    n_layers = get("block_count", low=1)
    if n_layers != n_blocks:
        raise WeightsError(f"{arch}.block_count: found integer {n_layers}, expected "
                           f"{n_blocks}, the number of blocks (blk.N) the file holds tensors of")
    if get("embedding_length", low=1) != d_model:
        raise WeightsError(f"{arch}.embedding_length: found integer {get('embedding_length')}, "
                           f"expected {d_model}, the columns of token_embd.weight")
    if arch == "gpt2":
        return gpt2_config(gguf, get, vocab_size, d_model, n_layers)
    n_heads = get("attention.head_count", low=1, high=d_model)
    n_kv_heads = get("attention.head_count_kv", default=n_heads, low=1, high=n_heads)
    gemma = gemma3_options(get, d_model, n_heads, n_layers) if arch == "gemma3" else {}
    head_dim = get("attention.key_length", default=d_model // n_heads, low=2, high=2**16)
    if n_heads % n_kv_heads or head_dim % 2:
        raise WeightsError(f"{arch}.attention.head_count {n_heads} and head_count_kv "
                           f"{n_kv_heads}: expected head_count_kv to divide head_count, and "
                           f"heads of even size (attention.key_length, or embedding_length "
                           f"{d_model} / head_count)")
    context_length = get("context_length", low=1, high=MAX_CONTEXT_LENGTH)
    config = ModelConfig(
        arch="modern",
        vocab_size=vocab_size,
        context_length=context_length,
        d_model=d_model,
        n_layers=n_layers,
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        d_ff=get("feed_forward_length", low=1),
        norm_eps=shortest_float32(get("attention.layer_norm_rms_epsilon", "float32",
                                      low=EPS_RANGE[0], high=EPS_RANGE[1])),
        rope_theta=shortest_float32(get("rope.freq_base", "float32", default=10000.0,
                                        low=ROPE_BASE_RANGE[0], high=ROPE_BASE_RANGE[1])),
        tie_embeddings="output.weight" not in gguf.tensors,
        bias="blk.0.attn_q.bias" in gguf.tensors,
        head_dim=head_dim,
        rope_scaling=rope_scaling(gguf, get, head_dim, context_length),
        **gemma, **family_options(arch, get, n_layers),
    )
    for key in ("rope.dimension_count", "attention.value_length"):
        if get(key, default=config.head_dim) != config.head_dim:
            raise WeightsError(f"{arch}.{key} is {get(key)}, but minillm needs the head size "
                               f"attention.key_length (or embedding_length / head_count) = "
                               f"{config.head_dim}")
    return config


def gpt2_config(gguf, get, vocab_size, d_model, n_layers) -> ModelConfig:
    """ModelConfig(arch="classic") of a gpt2 file: biases and LayerNorm shifts, GELU's tanh
    form, learned positions; untied when the file has an output.weight (llama.cpp's converter
    writes one, a copy of the embedding)."""
    n_heads = get("attention.head_count", low=1, high=d_model)
    if d_model % n_heads:
        raise WeightsError(f"gpt2.attention.head_count {n_heads}: expected it to divide "
                           f"embedding_length {d_model}")
    return ModelConfig(
        arch="classic", vocab_size=vocab_size,
        context_length=get("context_length", low=1, high=MAX_CONTEXT_LENGTH),
        d_model=d_model, n_layers=n_layers, n_heads=n_heads,
        d_ff=get("feed_forward_length", low=1),
        norm_eps=shortest_float32(get("attention.layer_norm_epsilon", "float32",
                                      low=EPS_RANGE[0], high=EPS_RANGE[1])),
        tie_embeddings="output.weight" not in gguf.tensors, bias=True, activation="gelu_tanh")


def gemma3_options(get, d_model, n_heads, n_layers) -> dict:
    """ModelConfig's Gemma options as llama.cpp sets them for a gemma3 file: the head size
    from attention.key_length; the scores scaled by 1/sqrt(head size), or by
    1/sqrt(d_model / n_heads) for the 62-layer (27B) model; a sliding window on five layers in
    six when the file gives attention.sliding_window."""
    head_dim = get("attention.key_length", low=2, high=2**16)
    softcap = get("final_logit_softcapping", "float32", default=0.0)
    if softcap:
        raise WeightsError(f"gemma3.final_logit_softcapping {softcap}: logit soft-capping is "
                           "not supported")
    window = get("attention.sliding_window", default=0, low=0, high=MAX_CONTEXT_LENGTH) or None
    pattern = get("attention.sliding_window_pattern", default=GEMMA3_PATTERN, low=1,
                  high=2**16)
    local_base = get("rope.freq_base_swa", "float32", default=GEMMA3_LOCAL_ROPE_BASE,
                     low=ROPE_BASE_RANGE[0], high=ROPE_BASE_RANGE[1])
    return dict(embed_scale=True, qk_norm=True, post_norms=True,
                activation="gelu_tanh",
                query_pre_attn_scalar=float(d_model // n_heads if n_layers == 62 else head_dim),
                sliding_window=window, sliding_window_pattern=pattern,
                rope_local_theta=None if window is None else shortest_float32(local_base))


def blocks_in(gguf: GGUFFile) -> int:
    """The number of distinct blocks N that tensors named blk.N.* belong to."""
    return len({name.split(".")[1] for name in gguf.tensors if name.startswith("blk.")})


def gguf_shapes(cfg: ModelConfig, fused: bool = False) -> dict:
    """{GGUF tensor name: NumPy shape} of every tensor a file of this config holds (fused:
    a phi3 file's)."""
    D, F, V, d = cfg.d_model, cfg.d_ff, cfg.vocab_size, cfg.head_dim
    q_rows, kv_rows = cfg.n_heads * d, cfg.n_kv_heads * d
    shapes = {"token_embd.weight": (V, D), "output_norm.weight": (D,)}
    if not cfg.tie_embeddings:
        shapes["output.weight"] = (V, D)
    if cfg.arch == "classic":
        return {**shapes, **gpt2_shapes(cfg)}
    if cfg.rope_scaling is not None and cfg.rope_scaling["type"] == "freq_factors":
        shapes["rope_freqs.weight"] = (d // 2,)
    for i in range(cfg.n_layers):
        blk = f"blk.{i}."
        pre = (D,) if cfg.pre_norms else None  # OLMo 2 has no norms before the sublayers
        if fused:  # phi3: q, k, v rows in one matrix; gate and up rows in one
            shapes.update({blk + "attn_norm.weight": pre,
                           blk + "attn_qkv.weight": (q_rows + 2 * kv_rows, D),
                           blk + "attn_output.weight": (D, q_rows), blk + "ffn_norm.weight": pre,
                           blk + "ffn_up.weight": (2 * F, D), blk + "ffn_down.weight": (D, F)})
        else:
            shapes.update({blk + "attn_norm.weight": pre, blk + "attn_q.weight": (q_rows, D),
                           blk + "attn_k.weight": (kv_rows, D),
                           blk + "attn_v.weight": (kv_rows, D),
                           blk + "attn_output.weight": (D, q_rows), blk + "ffn_norm.weight": pre,
                           blk + "ffn_gate.weight": (F, D), blk + "ffn_up.weight": (F, D),
                           blk + "ffn_down.weight": (D, F)})
        if cfg.bias:
            shapes.update({blk + "attn_q.bias": (q_rows,), blk + "attn_k.bias": (kv_rows,),
                           blk + "attn_v.bias": (kv_rows,)})
        if cfg.qk_norm:
            q, k = (q_rows, kv_rows) if cfg.qk_norm_all_heads else (d, d)
            shapes.update({blk + "attn_q_norm.weight": (q,), blk + "attn_k_norm.weight": (k,)})
        if cfg.post_norms:
            shapes.update({blk + "post_attention_norm.weight": (D,),
                           blk + "post_ffw_norm.weight": (D,)})
    return {name: shape for name, shape in shapes.items() if shape is not None}


def gpt2_shapes(cfg: ModelConfig) -> dict:
    """{GGUF tensor name: NumPy shape} of the positions and blocks of a gpt2 file."""
    D, F = cfg.d_model, cfg.d_ff
    shapes = {"position_embd.weight": (cfg.context_length, D), "output_norm.bias": (D,)}
    for i in range(cfg.n_layers):
        blk = f"blk.{i}."
        for name, out_features, in_features in (("attn_qkv", 3 * D, D), ("attn_output", D, D),
                                                ("ffn_up", F, D), ("ffn_down", D, F)):
            shapes[blk + name + ".weight"] = (out_features, in_features)
            shapes[blk + name + ".bias"] = (out_features,)
        for norm in ("attn_norm", "ffn_norm"):
            shapes[blk + norm + ".weight"] = shapes[blk + norm + ".bias"] = (D,)
    return shapes


def check_tensors(gguf: GGUFFile, cfg: ModelConfig) -> None:
    """The file's tensors are exactly those of the config, each of the shape it needs; else a
    WeightsError in the file's terms (tensor name, expected and found shape)."""
    expected = gguf_shapes(cfg, fused=architecture(gguf) == "phi3")
    missing = [name for name in expected if name not in gguf.tensors]
    if missing:
        raise WeightsError(f"missing tensor(s) {', '.join(missing[:8])}"
                           + (f" and {len(missing) - 8} more" if len(missing) > 8 else ""))
    unexpected = [name for name in gguf.tensors if name not in expected]
    if unexpected:
        raise WeightsError(f"unexpected tensor(s) {', '.join(unexpected[:8])}"
                           + (f" and {len(unexpected) - 8} more" if len(unexpected) > 8 else ""))
    for name, shape in expected.items():
        if gguf.tensors[name].shape != shape:
            raise WeightsError(f"tensor {name}: found shape {gguf.tensors[name].shape}, "
                               f"expected {shape}")


def shortest_float32(value) -> float:
    """A float32 from the file as the shortest decimal that rounds to it (1e-05, not
    9.99999974738e-06): what the writer meant, and the same float32."""
    return float(str(np.float32(value)))
