"""From a state dict (name -> array) to a minillm Model, through a naming table.

The steps, for every tensor of docs/FORMAT.md:
  1. find its source entry (or its unfused parts: q, k, v; gate, up) through the table;
  2. bring it to minillm's layout: transpose (in, out) weights to (out, in); permute the q and k
     rows of an interleaved-RoPE checkpoint to the half-split convention;
  3. fuse: qkv = [q; k; v] rows, gate_up = [gate; up] rows;
  4. check that every source entry was used, and build the Model (the .npz checks apply).

Memory: the tokenizer is read first, then each tensor is read, laid out and fused in turn
(with int8, quantized at once, minillm.quantize's rule), so that a conversion holds the arrays
it keeps plus the tensor at hand; a source that reads its tensors when asked (a GGUF file)
is then never whole in memory beside them.
"""
from __future__ import annotations

import json

import numpy as np

from ..config import ModelConfig
from ..quantize import quantize_param
from .npz import (CONFIG_KEY, FORMAT_VERSION, VERSION_KEY, model_from_entries, parameter_shapes,
                  read_tokenizer, tensor_entries)
from .naming import detect_naming, get_naming, interleaved_to_half, is_ignored, strip_prefixes

# The unfused parts a canonical tensor can be built from, in the order of its rows.
_PARTS = {
    "attn.qkv.weight": ("attn.q.weight", "attn.k.weight", "attn.v.weight"),
    "attn.qkv.bias": ("attn.q.bias", "attn.k.bias", "attn.v.bias"),
    "mlp.gate_up.weight": ("mlp.gate.weight", "mlp.up.weight"),
}
# Block weights that are linear layers (transposed when the source stores them (in, out)).
_LINEAR = ("attn.qkv.weight", "attn.q.weight", "attn.k.weight", "attn.v.weight",
           "attn.out.weight", "mlp.up.weight", "mlp.gate.weight", "mlp.down.weight",
           "mlp.gate_up.weight")


def to_numpy(value, dtype) -> np.ndarray:
    """A NumPy array of `dtype` from a NumPy array or a torch tensor (bfloat16 included)."""
    if hasattr(value, "detach"):  # a torch tensor: NumPy has no bfloat16, so widen in torch
        value = value.detach().cpu()
        value = (value.double() if np.dtype(dtype) == np.float64 else value.float()).numpy()
    return np.asarray(value, dtype=dtype)


def from_state_dict(state_dict: dict, config: ModelConfig, naming="auto", dtype="float32",
                    tokenizer_json: str | None = None,
                    tokenizer_config_json: str | None = None, int8: bool = False):
    """Build a minillm Model from `state_dict` ({name: array or tensor}) and its `config`.

    naming: "auto" (recognise the layout), a table name ("nanogpt", "hf-gpt2", "hf-llama",
    "meta" for interleaved-RoPE Meta / llama2.c checkpoints), or a dict {piece: source name}
    with `{i}` for the layer index, e.g. {"layers.{i}.attn.qkv.weight": "blocks.{i}.qkv.weight"}.
    A source entry that the table does not map, or a tensor the config needs that the source
    lacks, is a ValueError listing the names. int8: each linear weight quantized as
    minillm.quantize(model) would (the same bits), as soon as it is built.
    """
    if not isinstance(config, ModelConfig):
        raise ValueError(f"config: expected a minillm.ModelConfig, got {type(config).__name__}")
    if naming == "auto":
        naming = detect_naming(state_dict)
    table = get_naming(naming)
    sources = strip_prefixes(state_dict, table)  # stripped name -> original key
    used = set()
    # Read first, its temporaries gone before the model's arrays come (a 262,144-token
    # vocabulary's reach hundreds of MiB).
    tokenizer = read_tokenizer(tokenizer_json, tokenizer_config_json)

    def read(piece: str, layer: int | None):
        """The source array for one piece, in minillm's (out, in) layout, or None if unmapped."""
        pattern = table.names.get(piece if layer is None else f"layers.{{i}}.{piece}")
        if pattern is None:
            return None
        name = pattern.format(i=layer)
        if name not in sources:
            return None
        used.add(name)
        w = to_numpy(state_dict[sources[name]], dtype)
        if table.linear_in_out and layer is not None and piece in _LINEAR:
            w = w.T
        if table.interleaved_rope and piece.startswith(("attn.q.", "attn.k.")):
            heads = config.n_heads if piece.startswith("attn.q.") else config.n_kv_heads
            w = interleaved_to_half(w, heads)
        if table.interleaved_rope and piece.startswith("attn.qkv."):
            w = _permute_fused_qk(w, config)
        return np.ascontiguousarray(w)

    params, missing = {}, []
    for canonical in parameter_shapes(config):
        layer, piece = _split_layer(canonical)
        w = read(piece, layer)
        if w is None and piece in _PARTS:
            w = _fused([read(part, layer) for part in _PARTS[piece]])  # the parts then go
        if w is None:
            missing.append(_source_names(table, canonical, piece, layer))
            continue
        params[canonical] = quantize_param(canonical, w) if int8 else w
    if missing:
        raise ValueError(f"state_dict: missing tensor(s) {', '.join(missing[:10])}"
                         + (f" and {len(missing) - 10} more" if len(missing) > 10 else "")
                         + f"; the checkpoint has {', '.join(sorted(sources)[:10])}"
                         + (" ..." if len(sources) > 10 else ""))
    _check_tied_head(config, params, read)
    unmapped = sorted(name for name in sources if name not in used and not is_ignored(name, table))
    if unmapped:
        raise ValueError(f"state_dict: {len(unmapped)} entr{'y' if len(unmapped) == 1 else 'ies'}"
                         f" not mapped by the naming table: {', '.join(unmapped[:10])}"
                         + (" ..." if len(unmapped) > 10 else ""))
    entries = {VERSION_KEY: np.array(FORMAT_VERSION), CONFIG_KEY: np.array(config.to_json())}
    for name, value in params.items():
        entries.update(tensor_entries(name, value))
    return model_from_entries(entries, tokenizer)


def _fused(parts):
    """The parts' rows stacked in order (qkv = [q; k; v]), or None when a part is missing."""
    if any(p is None for p in parts):
        return None
    return np.concatenate(parts, axis=0)


def _split_layer(canonical: str):
    """'layers.3.attn.out.weight' -> (3, 'attn.out.weight'); 'final_norm.weight' -> (None, ...)."""
    if canonical.startswith("layers."):
        _, index, piece = canonical.split(".", 2)
        return int(index), piece
    return None, canonical


def _source_names(table, canonical, piece, layer) -> str:
    """How a missing tensor would have been found, for the error message."""
    pieces = [piece] + [p for p in _PARTS.get(piece, ())]
    names = []
    for p in pieces:
        pattern = table.names.get(p if layer is None else f"layers.{{i}}.{p}")
        if pattern is not None:
            names.append(pattern.format(i=layer))
    return f"{canonical} (from {' or '.join(names)})" if names else f"{canonical} (not in table)"


def _permute_fused_qk(w, config):
    """Permute the q rows and the k rows of a fused interleaved qkv weight (v rows stay)."""
    q_rows, k_rows = config.n_heads * config.head_dim, config.n_kv_heads * config.head_dim
    return np.concatenate([interleaved_to_half(w[:q_rows], config.n_heads),
                           interleaved_to_half(w[q_rows:q_rows + k_rows], config.n_kv_heads),
                           w[q_rows + k_rows:]], axis=0)


def _check_tied_head(config, params, read) -> None:
    """With tied embeddings a checkpoint may still carry the output layer: it must be the same."""
    if not config.tie_embeddings:
        return
    head = read("lm_head.weight", None)
    if head is not None and not np.array_equal(head, params["tok_emb.weight"]):
        raise ValueError("config: tie_embeddings is true but the checkpoint's output layer "
                         "differs from its token embedding; set tie_embeddings to false")


def config_from_json_file(path) -> ModelConfig:
    """A minillm config JSON, or a Hugging Face config.json (recognised by `model_type`)."""
    from .hf_config import config_from_hf

    with open(path, "rb") as f:
        raw = f.read()
    try:  # a decode error names the file, which json's and the codec's do not
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not UTF-8 text (byte 0x{raw[e.start]:02x} at offset "
                         f"{e.start})") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON ({e})") from None
    if isinstance(data, dict) and "model_type" in data:
        return config_from_hf(data)
    return ModelConfig.from_dict(data)
