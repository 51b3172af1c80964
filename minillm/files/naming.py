"""Naming tables: where each minillm tensor lives in someone else's state dict.

A table maps *pieces* (minillm's canonical names of docs/FORMAT.md, plus the unfused parts
`attn.q`, `attn.k`, `attn.v`, `mlp.gate`, `mlp.up` that checkpoints often keep apart) to source
names, with `{i}` standing for the layer index:

    {"tok_emb.weight": "wte.weight", "layers.{i}.attn.qkv.weight": "h.{i}.attn.c_attn.weight", ...}

and says how the source stores things: linear weights as (out, in) like torch.nn.Linear or
(in, out) like Hugging Face's GPT-2 Conv1D, and rotary embeddings on interleaved pairs
(Meta, llama2.c) or on halves (Hugging Face, minillm).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

# Prefixes that wrappers add in front of every name: torch.compile and DistributedDataParallel.
WRAPPER_PREFIXES = ("_orig_mod.", "module.")


@dataclass(frozen=True)
class Naming:
    """A naming table. `names`: piece -> source name ({i} = layer index).

    strip: prefixes removed from source names first (a base model saves without them).
    linear_in_out: block linear weights are stored (in_features, out_features): transpose them.
    interleaved_rope: q and k rows rotate interleaved pairs: permute them to halves.
    ignore: regular expressions for source entries that hold no parameter (mask buffers,
    precomputed rotary tables).
    """

    names: dict
    strip: tuple = ()
    linear_in_out: bool = False
    interleaved_rope: bool = False
    ignore: tuple = ()


# nanoGPT and Hugging Face GPT-2 share their names; they differ in how linear weights lie.
_GPT2_NAMES = {
    "tok_emb.weight": "wte.weight",
    "pos_emb.weight": "wpe.weight",
    "layers.{i}.attn_norm.weight": "h.{i}.ln_1.weight",
    "layers.{i}.attn_norm.bias": "h.{i}.ln_1.bias",
    "layers.{i}.attn.qkv.weight": "h.{i}.attn.c_attn.weight",
    "layers.{i}.attn.qkv.bias": "h.{i}.attn.c_attn.bias",
    "layers.{i}.attn.out.weight": "h.{i}.attn.c_proj.weight",
    "layers.{i}.attn.out.bias": "h.{i}.attn.c_proj.bias",
    "layers.{i}.mlp_norm.weight": "h.{i}.ln_2.weight",
    "layers.{i}.mlp_norm.bias": "h.{i}.ln_2.bias",
    "layers.{i}.mlp.up.weight": "h.{i}.mlp.c_fc.weight",
    "layers.{i}.mlp.up.bias": "h.{i}.mlp.c_fc.bias",
    "layers.{i}.mlp.down.weight": "h.{i}.mlp.c_proj.weight",
    "layers.{i}.mlp.down.bias": "h.{i}.mlp.c_proj.bias",
    "final_norm.weight": "ln_f.weight",
    "final_norm.bias": "ln_f.bias",
    "lm_head.weight": "lm_head.weight",
}
# The causal-mask buffers that nanoGPT (without flash attention) and old transformers saved.
_GPT2_IGNORE = (r"h\.\d+\.attn\.bias", r"h\.\d+\.attn\.masked_bias")

_HF_LLAMA_NAMES = {
    "tok_emb.weight": "embed_tokens.weight",
    "layers.{i}.attn_norm.weight": "layers.{i}.input_layernorm.weight",
    "layers.{i}.attn.q.weight": "layers.{i}.self_attn.q_proj.weight",
    "layers.{i}.attn.k.weight": "layers.{i}.self_attn.k_proj.weight",
    "layers.{i}.attn.v.weight": "layers.{i}.self_attn.v_proj.weight",
    "layers.{i}.attn.q.bias": "layers.{i}.self_attn.q_proj.bias",
    "layers.{i}.attn.k.bias": "layers.{i}.self_attn.k_proj.bias",
    "layers.{i}.attn.v.bias": "layers.{i}.self_attn.v_proj.bias",
    "layers.{i}.attn.qkv.weight": "layers.{i}.self_attn.qkv_proj.weight",  # Phi-3: fused
    "layers.{i}.attn.q_norm.weight": "layers.{i}.self_attn.q_norm.weight",  # Qwen3, OLMo 2
    "layers.{i}.attn.k_norm.weight": "layers.{i}.self_attn.k_norm.weight",
    "layers.{i}.attn.out.weight": "layers.{i}.self_attn.o_proj.weight",
    "layers.{i}.mlp_norm.weight": "layers.{i}.post_attention_layernorm.weight",
    "layers.{i}.mlp.gate.weight": "layers.{i}.mlp.gate_proj.weight",
    "layers.{i}.mlp.up.weight": "layers.{i}.mlp.up_proj.weight",
    "layers.{i}.mlp.gate_up.weight": "layers.{i}.mlp.gate_up_proj.weight",  # Phi-3: gate; up
    "layers.{i}.mlp.down.weight": "layers.{i}.mlp.down_proj.weight",
    "final_norm.weight": "norm.weight",
    "lm_head.weight": "lm_head.weight",
}
# OLMo 2 norms the sublayers' outputs only: its post_attention_layernorm comes after attention.
_HF_OLMO2_NAMES = {
    **{k: v for k, v in _HF_LLAMA_NAMES.items() if k not in (
        "layers.{i}.attn_norm.weight", "layers.{i}.mlp_norm.weight")},
    "layers.{i}.attn_post_norm.weight": "layers.{i}.post_attention_layernorm.weight",
    "layers.{i}.mlp_post_norm.weight": "layers.{i}.post_feedforward_layernorm.weight"}

# Meta's reference Llama and llama2.c: w1 is the gate, w3 the up projection, w2 the down one.
_META_NAMES = {
    "tok_emb.weight": "tok_embeddings.weight",
    "layers.{i}.attn_norm.weight": "layers.{i}.attention_norm.weight",
    "layers.{i}.attn.q.weight": "layers.{i}.attention.wq.weight",
    "layers.{i}.attn.k.weight": "layers.{i}.attention.wk.weight",
    "layers.{i}.attn.v.weight": "layers.{i}.attention.wv.weight",
    "layers.{i}.attn.out.weight": "layers.{i}.attention.wo.weight",
    "layers.{i}.mlp_norm.weight": "layers.{i}.ffn_norm.weight",
    "layers.{i}.mlp.gate.weight": "layers.{i}.feed_forward.w1.weight",
    "layers.{i}.mlp.up.weight": "layers.{i}.feed_forward.w3.weight",
    "layers.{i}.mlp.down.weight": "layers.{i}.feed_forward.w2.weight",
    "final_norm.weight": "norm.weight",
    "lm_head.weight": "output.weight",
}

NAMINGS = {
    "nanogpt": Naming(_GPT2_NAMES, strip=("transformer.",), ignore=_GPT2_IGNORE),
    "hf-gpt2": Naming(_GPT2_NAMES, strip=("transformer.",), linear_in_out=True,
                      ignore=_GPT2_IGNORE),
    "hf-llama": Naming(_HF_LLAMA_NAMES, strip=("model.",),
                       ignore=(r"layers\.\d+\.self_attn\.rotary_emb\.inv_freq",)),
    "hf-olmo2": Naming(_HF_OLMO2_NAMES, strip=("model.",)),
    "meta": Naming(_META_NAMES, interleaved_rope=True,
                   ignore=(r"rope\.freqs", r"freqs_cos", r"freqs_sin")),
}


def get_naming(naming) -> Naming:
    """A Naming from a table name in NAMINGS, a plain dict {piece: source name}, or a Naming."""
    if isinstance(naming, Naming):
        return naming
    if isinstance(naming, dict):
        return Naming(dict(naming))
    if naming in NAMINGS:
        return NAMINGS[naming]
    raise ValueError(f"naming: unknown table {naming!r}; expected one of {sorted(NAMINGS)}, "
                     "'auto', or a dict {minillm piece: source name}")


def strip_prefixes(keys, naming: Naming) -> dict:
    """{stripped name: original name}: wrapper prefixes first, then the table's own."""
    out = {}
    for key in keys:
        name = key
        for prefix in WRAPPER_PREFIXES + naming.strip:
            if name.startswith(prefix):
                name = name[len(prefix):]
        out[name] = key
    return out


def is_ignored(name: str, naming: Naming) -> bool:
    return any(re.fullmatch(pattern, name) for pattern in naming.ignore)


def detect_naming(state_dict) -> str:
    """Guess the table from telltale names (and, for GPT-2, the orientation of c_attn)."""
    names = set(strip_prefixes(state_dict, Naming({}, strip=("transformer.", "model."))))
    if "h.0.attn.c_attn.weight" in names:
        key = next(k for k in state_dict if k.endswith("h.0.attn.c_attn.weight"))
        rows, cols = np.shape(state_dict[key])
        return "hf-gpt2" if cols == 3 * rows else "nanogpt"  # Conv1D: (D, 3D); Linear: (3D, D)
    if "layers.0.post_feedforward_layernorm.weight" in names and (
            "layers.0.input_layernorm.weight" not in names):
        return "hf-olmo2"  # norms after the sublayers only
    if {"layers.0.self_attn.q_proj.weight", "layers.0.self_attn.qkv_proj.weight"} & names:
        return "hf-llama"
    if "layers.0.attention.wq.weight" in names:
        return "meta"
    sample = ", ".join(sorted(state_dict)[:6])
    raise ValueError(f"naming: cannot recognise the checkpoint layout (first keys: {sample}); "
                     f"pass naming= one of {sorted(NAMINGS)} or a dict of names")


def interleaved_to_half(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Permute the rows of a q or k projection from interleaved RoPE pairs to halves.

    Within each head of size d, interleaved RoPE rotates rows (2j, 2j+1) by theta_j, and the
    half-split convention rotates rows (j, j + d/2) by the same theta_j. So
        new[h, j] = old[h, 2j],   new[h, d/2 + j] = old[h, 2j + 1].
    The same permutation of q and k leaves every dot product q . k, so attention, unchanged.
    w: (n_heads * d, ...) weight or bias.
    """
    d = w.shape[0] // n_heads
    rest = w.shape[1:]
    return w.reshape(n_heads, d // 2, 2, *rest).swapaxes(1, 2).reshape(w.shape)


def half_to_interleaved(w: np.ndarray, n_heads: int) -> np.ndarray:
    """The inverse of interleaved_to_half: old[h, 2j + c] = new[h, c * d/2 + j]."""
    d = w.shape[0] // n_heads
    rest = w.shape[1:]
    return w.reshape(n_heads, 2, d // 2, *rest).swapaxes(1, 2).reshape(w.shape)
