"""A minillm Model from a GGUF file of the Llama family (llama, mistral, qwen2), Gemma 3 or GPT-2.

    model = model_from_gguf("SmolLM2-135M-Instruct.Q4_1.gguf")    # float32, dequantized
    model = model_from_gguf(path, int8=True)    # linear weights int8, as minillm.quantize's

The config comes from the `{arch}.*` metadata, the vocabulary size from the token embedding's
rows. Tensors are dequantized to float (minillm.quantize can quantize them again, to its own
row-wise int8) and renamed through a naming table; from there the path is the one of any state
dict (minillm.convert.state_dict): q, k, v rows fused, gate and up rows fused, every tensor of
the config required and every tensor of the file used.

Rotary embeddings. llama.cpp's Llama rotates interleaved pairs (x_2j, x_2j+1), and its converter
permutes the q and k rows of a Hugging Face Llama to match (`LlamaModel.permute`, which is
minillm's `half_to_interleaved`). So for llama and mistral the rows are permuted back with
`interleaved_to_half`. Qwen2 runs in llama.cpp with the "NeoX" rotation, the halves that minillm
uses, and its converter leaves the rows alone: so does this one. So does Gemma 3.

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

from collections.abc import Mapping

import numpy as np

from ..config import MAX_CONTEXT_LENGTH, ModelConfig
from ..tokenizer import Tokenizer
from ..weights import WeightsError
from .gguf import GGUFFile, read_gguf
from .gguf_metadata import REQUIRED, read
from .naming import Naming
from .state_dict import from_state_dict

# The allowed ranges of the RMSNorm epsilon and the RoPE base (docs/CONVERT.md): outside them
# the number is no model's (an epsilon that swamps unit activations; frequencies that do not
# decay, or that rotate less than 1e-6 radians over the longest context).
EPS_RANGE = (1e-12, 1.0)
ROPE_BASE_RANGE = (1.0, 1e12)

# Architectures read, and whether llama.cpp's converter permuted their q and k rows.
ARCHITECTURES = {"llama": True, "mistral": True, "qwen2": False, "gemma3": False,
                 "gpt2": False}
# llama.cpp's Gemma 3: one global layer in six, local layers rotating with base 10000.
GEMMA3_PATTERN, GEMMA3_LOCAL_ROPE_BASE = 6, 10000.0

GGUF_NAMES = {
    "tok_emb.weight": "token_embd.weight",
    "pos_emb.weight": "position_embd.weight",
    "layers.{i}.attn_norm.bias": "blk.{i}.attn_norm.bias",
    "layers.{i}.attn.qkv.weight": "blk.{i}.attn_qkv.weight",
    "layers.{i}.attn.qkv.bias": "blk.{i}.attn_qkv.bias",
    "layers.{i}.attn.out.bias": "blk.{i}.attn_output.bias",
    "layers.{i}.mlp_norm.bias": "blk.{i}.ffn_norm.bias",
    "layers.{i}.mlp.up.bias": "blk.{i}.ffn_up.bias",
    "layers.{i}.mlp.down.bias": "blk.{i}.ffn_down.bias",
    "final_norm.bias": "output_norm.bias",
    "layers.{i}.attn_norm.weight": "blk.{i}.attn_norm.weight",
    "layers.{i}.attn.q.weight": "blk.{i}.attn_q.weight",
    "layers.{i}.attn.k.weight": "blk.{i}.attn_k.weight",
    "layers.{i}.attn.v.weight": "blk.{i}.attn_v.weight",
    "layers.{i}.attn.q.bias": "blk.{i}.attn_q.bias",
    "layers.{i}.attn.k.bias": "blk.{i}.attn_k.bias",
    "layers.{i}.attn.v.bias": "blk.{i}.attn_v.bias",
    "layers.{i}.attn.q_norm.weight": "blk.{i}.attn_q_norm.weight",
    "layers.{i}.attn.k_norm.weight": "blk.{i}.attn_k_norm.weight",
    "layers.{i}.attn.out.weight": "blk.{i}.attn_output.weight",
    "layers.{i}.attn_post_norm.weight": "blk.{i}.post_attention_norm.weight",
    "layers.{i}.mlp_norm.weight": "blk.{i}.ffn_norm.weight",
    "layers.{i}.mlp.gate.weight": "blk.{i}.ffn_gate.weight",
    "layers.{i}.mlp.up.weight": "blk.{i}.ffn_up.weight",
    "layers.{i}.mlp.down.weight": "blk.{i}.ffn_down.weight",
    "layers.{i}.mlp_post_norm.weight": "blk.{i}.post_ffw_norm.weight",
    "final_norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}


def model_from_gguf(source, dtype="float32", tokenizer=True, int8=False):
    """A Model from a GGUF path or a GGUFFile from read_gguf, with the tokenizer (and its chat
    template) that the file's metadata describes, when it describes one and `tokenizer`; int8:
    each linear weight quantized as soon as it is dequantized (from_state_dict).

    Nothing is dequantized before the metadata and the tensor table agree: the config is read
    and bounded (config_from_gguf), every tensor it needs is present with the shape it needs
    (check_tensors), and the tokenizer's keys are checked (gguf_metadata.tokenizer_metadata).
    The model is then built through the checks of `load`, tokenizer included: whatever
    converts also saves and loads."""
    gguf = source if isinstance(source, GGUFFile) else read_gguf(source)
    try:
        arch = architecture(gguf)
        config = config_from_gguf(gguf)
        check_tensors(gguf, config)
        # The tokenizer goes in as the .npz stores it: what load would refuse is refused here
        # (and only its text is held meanwhile: a 262,144-token vocabulary is large).
        tok_json = tok_config_json = None
        if tokenizer and "tokenizer.ggml.model" in gguf.metadata:
            tok = Tokenizer.from_gguf(gguf.metadata)
            tok_json, tok_config_json = tok.to_json(), tok.config.to_json()
            del tok
        naming = Naming(GGUF_NAMES, interleaved_rope=ARCHITECTURES[arch])
        return from_state_dict(Dequantized(gguf.tensors), config, naming=naming, dtype=dtype,
                               tokenizer_json=tok_json, tokenizer_config_json=tok_config_json,
                               int8=int8)
    except ValueError as e:  # WeightsError included: one line, naming the file
        raise WeightsError(f"{gguf.path}: {e}") from None


class Dequantized(Mapping):
    """The file's tensors by name, each dequantized to float32 when it is read and not kept
    here: a conversion holds the arrays of the model it builds, plus the one being decoded
    (and a block's q, k, v or gate, up until they are fused), never the file's whole float32
    copy beside them."""

    def __init__(self, tensors):
        self.tensors = tensors

    def __getitem__(self, name):
        return self.tensors[name].numpy()

    def __iter__(self):
        return iter(self.tensors)

    def __len__(self):
        return len(self.tensors)


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
    if get("expert_count", default=0):
        raise WeightsError(f"{arch}.expert_count is {get('expert_count')}: mixtures of experts "
                           "are not supported")
    scaling = get("rope.scaling.type", "string", default="none")
    if scaling != "none" or "rope_freqs.weight" in gguf.tensors:
        raise WeightsError(f"RoPE scaling ({scaling if scaling != 'none' else 'rope_freqs'}) "
                           "is not supported")
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
    head_dim = gemma.get("head_dim", d_model // n_heads)
    if n_heads % n_kv_heads or head_dim % 2 or (not gemma and d_model % n_heads):
        raise WeightsError(f"{arch}.attention.head_count {n_heads} and head_count_kv "
                           f"{n_kv_heads}: expected head_count_kv to divide head_count, and "
                           f"heads of even size (embedding_length {d_model} / head_count"
                           + (", or attention.key_length" if gemma else "") + ")")
    config = ModelConfig(
        arch="modern",
        vocab_size=vocab_size,
        context_length=get("context_length", low=1, high=MAX_CONTEXT_LENGTH),
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
        **gemma,
    )
    for key in ("rope.dimension_count", "attention.key_length", "attention.value_length"):
        if get(key, default=config.head_dim) != config.head_dim:
            source = "attention.key_length" if gemma else "embedding_length / head_count"
            raise WeightsError(f"{arch}.{key} is {get(key)}, but minillm needs the head size "
                               f"{source} = {config.head_dim}")
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
    window = get("attention.sliding_window", default=None, low=1, high=MAX_CONTEXT_LENGTH)
    return dict(head_dim=head_dim, embed_scale=True, qk_norm=True, post_norms=True,
                activation="gelu_tanh",
                query_pre_attn_scalar=float(d_model // n_heads if n_layers == 62 else head_dim),
                sliding_window=window, sliding_window_pattern=GEMMA3_PATTERN,
                rope_local_theta=None if window is None else GEMMA3_LOCAL_ROPE_BASE)


def blocks_in(gguf: GGUFFile) -> int:
    """The number of distinct blocks N that tensors named blk.N.* belong to."""
    return len({name.split(".")[1] for name in gguf.tensors if name.startswith("blk.")})


def gguf_shapes(cfg: ModelConfig) -> dict:
    """{GGUF tensor name: NumPy shape} of every tensor a file of this config holds."""
    D, F, V, d = cfg.d_model, cfg.d_ff, cfg.vocab_size, cfg.head_dim
    q_rows, kv_rows = cfg.n_heads * d, cfg.n_kv_heads * d
    shapes = {"token_embd.weight": (V, D), "output_norm.weight": (D,)}
    if not cfg.tie_embeddings:
        shapes["output.weight"] = (V, D)
    if cfg.arch == "classic":
        return {**shapes, **gpt2_shapes(cfg)}
    for i in range(cfg.n_layers):
        blk = f"blk.{i}."
        shapes.update({blk + "attn_norm.weight": (D,), blk + "attn_q.weight": (q_rows, D),
                       blk + "attn_k.weight": (kv_rows, D), blk + "attn_v.weight": (kv_rows, D),
                       blk + "attn_output.weight": (D, q_rows), blk + "ffn_norm.weight": (D,),
                       blk + "ffn_gate.weight": (F, D), blk + "ffn_up.weight": (F, D),
                       blk + "ffn_down.weight": (D, F)})
        if cfg.bias:
            shapes.update({blk + "attn_q.bias": (q_rows,), blk + "attn_k.bias": (kv_rows,),
                           blk + "attn_v.bias": (kv_rows,)})
        if cfg.qk_norm:
            shapes.update({blk + "attn_q_norm.weight": (d,), blk + "attn_k_norm.weight": (d,)})
        if cfg.post_norms:
            shapes.update({blk + "post_attention_norm.weight": (D,),
                           blk + "post_ffw_norm.weight": (D,)})
    return shapes


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
    expected = gguf_shapes(cfg)
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
