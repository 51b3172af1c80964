"""A minillm Model from a GGUF file of the Llama family (llama, mistral, qwen2).

    model = model_from_gguf("SmolLM2-135M-Instruct.Q4_1.gguf")    # float32, dequantized

The config comes from the `{arch}.*` metadata, the vocabulary size from the token embedding's
rows. Tensors are dequantized to float (minillm.quantize can quantize them again, to its own
row-wise int8) and renamed through a naming table; from there the path is the one of any state
dict (minillm.convert.state_dict): q, k, v rows fused, gate and up rows fused, every tensor of
the config required and every tensor of the file used.

Rotary embeddings. llama.cpp's Llama rotates interleaved pairs (x_2j, x_2j+1), and its converter
permutes the q and k rows of a Hugging Face Llama to match (`LlamaModel.permute`, which is
minillm's `half_to_interleaved`). So for llama and mistral the rows are permuted back with
`interleaved_to_half`. Qwen2 runs in llama.cpp with the "NeoX" rotation, the halves that minillm
uses, and its converter leaves the rows alone: so does this one.
"""
from __future__ import annotations

import numpy as np

from ..config import ModelConfig
from ..tokenizer import Tokenizer
from ..weights import WeightsError
from .gguf import GGUFFile, read_gguf
from .naming import Naming
from .state_dict import from_state_dict

# Architectures read, and whether llama.cpp's converter permuted their q and k rows.
ARCHITECTURES = {"llama": True, "mistral": True, "qwen2": False}

GGUF_NAMES = {
    "tok_emb.weight": "token_embd.weight",
    "layers.{i}.attn_norm.weight": "blk.{i}.attn_norm.weight",
    "layers.{i}.attn.q.weight": "blk.{i}.attn_q.weight",
    "layers.{i}.attn.k.weight": "blk.{i}.attn_k.weight",
    "layers.{i}.attn.v.weight": "blk.{i}.attn_v.weight",
    "layers.{i}.attn.q.bias": "blk.{i}.attn_q.bias",
    "layers.{i}.attn.k.bias": "blk.{i}.attn_k.bias",
    "layers.{i}.attn.v.bias": "blk.{i}.attn_v.bias",
    "layers.{i}.attn.out.weight": "blk.{i}.attn_output.weight",
    "layers.{i}.mlp_norm.weight": "blk.{i}.ffn_norm.weight",
    "layers.{i}.mlp.gate.weight": "blk.{i}.ffn_gate.weight",
    "layers.{i}.mlp.up.weight": "blk.{i}.ffn_up.weight",
    "layers.{i}.mlp.down.weight": "blk.{i}.ffn_down.weight",
    "final_norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}


def model_from_gguf(source, dtype="float32", tokenizer=True):
    """A Model from a GGUF path or a GGUFFile from read_gguf, with the tokenizer (and its chat
    template) that the file's metadata describes, when it describes one and `tokenizer`."""
    gguf = source if isinstance(source, GGUFFile) else read_gguf(source)
    try:
        arch = architecture(gguf)
        config = config_from_gguf(gguf)
        naming = Naming(GGUF_NAMES, interleaved_rope=ARCHITECTURES[arch])
        state_dict = {name: tensor.numpy() for name, tensor in gguf.tensors.items()}
        model = from_state_dict(state_dict, config, naming=naming, dtype=dtype)
        if tokenizer and "tokenizer.ggml.model" in gguf.metadata:
            model.tokenizer = Tokenizer.from_gguf(gguf.metadata)
            if len(model.tokenizer) > config.vocab_size:
                raise ValueError(f"tokenizer: {len(model.tokenizer)} tokens do not fit the "
                                 f"model's vocab_size {config.vocab_size}")
        return model
    except ValueError as e:  # WeightsError included: one line, naming the file
        raise WeightsError(f"{gguf.path}: {e}") from None


def architecture(gguf: GGUFFile) -> str:
    arch = gguf.metadata.get("general.architecture")
    if arch not in ARCHITECTURES:
        raise WeightsError(f"general.architecture {arch!r} is not supported; minillm converts "
                           f"{', '.join(ARCHITECTURES)}")
    return arch


def config_from_gguf(gguf: GGUFFile) -> ModelConfig:
    """ModelConfig(arch="modern") from the `{arch}.*` metadata; refuses what minillm would
    compute differently (rope scaling, partial rotation, other head sizes, experts)."""
    arch = architecture(gguf)
    meta = gguf.metadata

    def get(key, default=None):
        value = meta.get(f"{arch}.{key}", default)
        if value is None:
            raise WeightsError(f"missing metadata {arch}.{key}")
        return value

    if "token_embd.weight" not in gguf.tensors:
        raise WeightsError("no token_embd.weight tensor")
    if get("expert_count", 0):
        raise WeightsError(f"{arch}.expert_count is {get('expert_count')}: mixtures of experts "
                           "are not supported")
    scaling = get("rope.scaling.type", "none")
    if scaling != "none" or "rope_freqs.weight" in gguf.tensors:
        raise WeightsError(f"RoPE scaling ({scaling if scaling != 'none' else 'rope_freqs'}) "
                           "is not supported")
    n_heads = get("attention.head_count")
    config = ModelConfig(
        arch="modern",
        vocab_size=gguf.tensors["token_embd.weight"].shape[0],
        context_length=get("context_length"),
        d_model=get("embedding_length"),
        n_layers=get("block_count"),
        n_heads=n_heads,
        n_kv_heads=get("attention.head_count_kv", n_heads),
        d_ff=get("feed_forward_length"),
        norm_eps=shortest_float32(get("attention.layer_norm_rms_epsilon")),
        rope_theta=shortest_float32(get("rope.freq_base", 10000.0)),
        tie_embeddings="output.weight" not in gguf.tensors,
        bias="blk.0.attn_q.bias" in gguf.tensors,
    )
    for key in ("rope.dimension_count", "attention.key_length", "attention.value_length"):
        if get(key, config.head_dim) != config.head_dim:
            raise WeightsError(f"{arch}.{key} is {get(key)}, but minillm needs the head size "
                               f"embedding_length / head_count = {config.head_dim}")
    return config


def shortest_float32(value) -> float:
    """A float32 from the file as the shortest decimal that rounds to it (1e-05, not
    9.99999974738e-06): what the writer meant, and the same float32."""
    return float(str(np.float32(value)))
