"""Files in, files out: PyTorch / safetensors checkpoints, Hugging Face model folders, GGUF.

Reading: `.safetensors` through safetensors (its NumPy loader needs no torch), `.pt`/`.bin`
through `torch.load(..., weights_only=True)`, which reads tensors and plain containers and
never runs code from the file; `.gguf` with minillm's own reader (convert/gguf.py). Writing:
a Hugging Face folder (config.json, model.safetensors, tokenizer.json) that transformers'
AutoModelForCausalLM.from_pretrained loads.
"""
from __future__ import annotations

from dataclasses import replace
import importlib.util
import json
import os

import numpy as np

from ..fast import reference
from ..plumbing.optional import require
from .npz import write_replacing
from .gguf import is_gguf
from .gguf_model import model_from_gguf
from .hf_config import config_from_hf, config_to_hf
from .state_dict import from_state_dict
from .train_args import config_from_model_args


def read_checkpoint(path) -> dict:
    """{name: array or tensor} from a .safetensors, a .pt/.bin file, or a sharded index.json.

    A training checkpoint that wraps the weights ({"model": ...} as nanoGPT and llama2.c save,
    or {"state_dict": ...}) is unwrapped.
    """
    return _read_checkpoint(os.fspath(path))[0]


def _read_checkpoint(path):
    """(state dict, the training checkpoint's model_args or None)."""
    if path.endswith(".index.json"):
        return _read_sharded(path), None
    if path.endswith(".safetensors"):
        return _read_safetensors(path), None
    if path.endswith((".pt", ".pth", ".bin", ".ckpt")):
        torch = require("torch", "convert", "reading a PyTorch checkpoint")
        try:  # weights_only: tensors and plain containers, never code from the file
            data = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # a damaged file, or one that would need unpickling code
            raise ValueError(f"{path}: cannot read the checkpoint ({e})") from None
        model_args = data.get("model_args") if isinstance(data, dict) else None
        for key in ("model", "state_dict", "model_state_dict"):
            if isinstance(data, dict) and isinstance(data.get(key), dict):
                data = data[key]
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a state dict, found a {type(data).__name__}")
        return data, model_args if isinstance(model_args, dict) else None
    raise ValueError(f"{path}: unknown checkpoint type; expected .safetensors, .pt, .pth, "
                     ".bin, .ckpt or a model folder")


def _read_safetensors(path) -> dict:
    safetensors = require("safetensors.numpy", "convert", "reading .safetensors")
    try:
        return safetensors.load_file(path)
    except (TypeError, ValueError):  # bfloat16 has no NumPy dtype: read through torch
        torch_reader = require("safetensors.torch", "convert", "reading bfloat16 .safetensors")
        return torch_reader.load_file(path)


def _read_sharded(path) -> dict:
    with open(path, encoding="utf-8") as f:
        shards = sorted(set(json.load(f)["weight_map"].values()))
    folder, out = os.path.dirname(path), {}
    for shard in shards:
        out.update(read_checkpoint(os.path.join(folder, shard)))
    return out


def _folder_weights(folder) -> str:
    for name in ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                 "pytorch_model.bin.index.json"):
        if os.path.exists(os.path.join(folder, name)):
            return os.path.join(folder, name)
    raise ValueError(f"{folder}: no model.safetensors or pytorch_model.bin in this folder")


def tokenizer_support() -> bool:
    """Whether this minillm has its tokenizer module (to bundle tokenizer.json)."""
    return importlib.util.find_spec("minillm.text.tokenizer") is not None


def from_hf_folder(folder, dtype="float32", naming="auto", tokenizer=True, int8=False):
    """A Hugging Face model folder (config.json, weights, optional tokenizer.json) -> Model.

    With tokenizer.json come, when present, tokenizer_config.json (special tokens,
    add_bos_token, chat template), chat_template.jinja and generation_config.json's
    ``eos_token_id`` (the ids transformers' generate stops at). tokenizer=False leaves them out
    (minillm reads byte-level BPE tokenizers only). int8: as from_state_dict's.
    """
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        config = config_from_hf(json.load(f))
    state_dict = read_checkpoint(_folder_weights(folder))
    tokenizer_path = os.path.join(folder, "tokenizer.json")
    tokenizer_json = tokenizer_config_json = None
    if tokenizer and os.path.exists(tokenizer_path) and tokenizer_support():
        with open(tokenizer_path, encoding="utf-8") as f:
            tokenizer_json = f.read()
        tokenizer_config_json = _read_tokenizer_config(folder)
        tok = _check_tokenizer(tokenizer_json, tokenizer_config_json, tokenizer_path)
        tokenizer_config_json = _with_generation_ends(folder, tokenizer_config_json, tok)
    return from_state_dict(state_dict, config, naming=naming, dtype=dtype,
                           tokenizer_json=tokenizer_json,
                           tokenizer_config_json=tokenizer_config_json, int8=int8)


def _read_tokenizer_config(folder):
    """minillm's tokenizer config (JSON text) from the folder's tokenizer_config.json and
    chat_template.jinja (newer transformers keep the template there), or None if neither."""
    from ..text.tokenizer import TokenizerConfig

    data = {}
    config_path = os.path.join(folder, "tokenizer_config.json")
    if os.path.exists(config_path):
        with open(config_path, encoding="utf-8") as f:
            data = json.load(f)
    template_path = os.path.join(folder, "chat_template.jinja")
    if os.path.exists(template_path):
        with open(template_path, encoding="utf-8") as f:
            data["chat_template"] = f.read()
    if not data:
        return None
    try:
        return TokenizerConfig.from_dict(data).to_json()
    except ValueError as e:
        raise ValueError(f"{config_path}: {e}") from None


def _check_tokenizer(text, config_json, path):
    """The tokenizer; fail early, and say how to go on without it, if minillm cannot read it."""
    from ..text.tokenizer import Tokenizer, TokenizerConfig

    try:
        config = None if config_json is None else TokenizerConfig.from_json(config_json)
        return Tokenizer.from_json(text, config)
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: minillm cannot read this tokenizer ({e}); convert the "
                         "weights alone with --no_tokenizer (tokenizer=False)") from None


def _with_generation_ends(folder, config_json, tokenizer):
    """The tokenizer config (JSON text, or None) with the ids a generation ends at, as
    transformers' generate stops: generation_config.json's ``eos_token_id`` (an id or a list of
    ids), and the tokenizer's EOS. Without that file or key: the config as it was."""
    from ..text.tokenizer_config import TokenizerConfig, token_ids

    path = os.path.join(folder, "generation_config.json")
    if not os.path.exists(path):
        return config_json
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        if not isinstance(data, dict):
            raise ValueError("expected a JSON object")
        ends = token_ids(data.get("eos_token_id"), "eos_token_id")
    except ValueError as e:  # not UTF-8, not JSON, or not ids
        raise ValueError(f"{path}: {e}") from None
    if ends is None:
        return config_json
    outside = [i for i in ends if i >= len(tokenizer)]
    if outside:
        raise ValueError(f"{path}: eos_token_id {outside[0]} is not a token id of tokenizer.json "
                         f"({len(tokenizer)} tokens)")
    eos = () if tokenizer.eos_token_id is None else (tokenizer.eos_token_id,)
    config = TokenizerConfig() if config_json is None else TokenizerConfig.from_json(config_json)
    return replace(config, end_of_generation_ids=tuple(sorted({*ends, *eos}))).to_json()


def to_hf_state_dict(model) -> dict:
    """minillm parameters -> Hugging Face names and layouts (GPT-2 Conv1D is (in, out))."""
    cfg, p = model.config, reference(model).params  # arrays, whichever model was loaded
    out = {}
    if cfg.arch == "classic":
        out["transformer.wte.weight"] = p["tok_emb.weight"]
        out["transformer.wpe.weight"] = p["pos_emb.weight"]
        for i in range(cfg.n_layers):
            src, dst = f"layers.{i}.", f"transformer.h.{i}."
            for ours, theirs, transpose in (
                    ("attn_norm", "ln_1", False), ("attn.qkv", "attn.c_attn", True),
                    ("attn.out", "attn.c_proj", True), ("mlp_norm", "ln_2", False),
                    ("mlp.up", "mlp.c_fc", True), ("mlp.down", "mlp.c_proj", True)):
                w = p[src + ours + ".weight"]
                out[dst + theirs + ".weight"] = w.T if transpose else w
                out[dst + theirs + ".bias"] = p[src + ours + ".bias"]
        out["transformer.ln_f.weight"] = p["final_norm.weight"]
        out["transformer.ln_f.bias"] = p["final_norm.bias"]
    else:
        q_rows = cfg.n_heads * cfg.head_dim
        k_rows = cfg.n_kv_heads * cfg.head_dim
        out["model.embed_tokens.weight"] = p["tok_emb.weight"]
        for i in range(cfg.n_layers):
            src, dst = f"layers.{i}.", f"model.layers.{i}."
            out[dst + "input_layernorm.weight"] = p[src + "attn_norm.weight"]
            for kind in ("weight", "bias") if cfg.bias else ("weight",):
                qkv = p[src + f"attn.qkv.{kind}"]  # rows: q heads, k heads, v heads
                out[dst + f"self_attn.q_proj.{kind}"] = qkv[:q_rows]
                out[dst + f"self_attn.k_proj.{kind}"] = qkv[q_rows:q_rows + k_rows]
                out[dst + f"self_attn.v_proj.{kind}"] = qkv[q_rows + k_rows:]
            out[dst + "self_attn.o_proj.weight"] = p[src + "attn.out.weight"]
            out[dst + "post_attention_layernorm.weight"] = p[src + "mlp_norm.weight"]
            gate_up = p[src + "mlp.gate_up.weight"]  # rows: gate, then up
            out[dst + "mlp.gate_proj.weight"] = gate_up[:cfg.d_ff]
            out[dst + "mlp.up_proj.weight"] = gate_up[cfg.d_ff:]
            out[dst + "mlp.down_proj.weight"] = p[src + "mlp.down.weight"]
        out["model.norm.weight"] = p["final_norm.weight"]
    if not cfg.tie_embeddings:
        out["lm_head.weight"] = p["lm_head.weight"]
    return {name: np.ascontiguousarray(w) for name, w in out.items()}


def export_hf(model, out_dir) -> None:
    """Write `model` as a Hugging Face folder: config.json, model.safetensors, tokenizer.json."""
    if not all(isinstance(w, np.ndarray) for w in reference(model).params.values()):
        raise ValueError("model: quantized weights cannot be exported; export the float model")
    config = config_to_hf(model.config, dtype=str(model.dtype))  # raises if not expressible
    tokenizer = model.tokenizer
    if tokenizer is not None:  # the special ids transformers' generate stops and starts on
        config.update(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                      pad_token_id=tokenizer.pad_token_id)
    safetensors = require("safetensors.numpy", "convert", "writing model.safetensors")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2, sort_keys=True)
    data = safetensors.save(to_hf_state_dict(model), metadata={"format": "pt"})  # bytes
    write_replacing(os.path.join(out_dir, "model.safetensors"), lambda f: f.write(data))
    if model.tokenizer is not None:
        with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
            f.write(model.tokenizer.to_json())


def convert(src, naming="auto", config=None, dtype="float32", tokenizer=True, int8=False):
    """A Model from a Hugging Face folder, a GGUF file (recognised by its suffix or its first
    bytes), or a checkpoint file and its ModelConfig (which a nanoGPT or llama2.c training
    checkpoint carries as `model_args`). int8: the linear weights quantized as
    minillm.quantize(model) would, each as soon as it is read (from_state_dict)."""
    src = os.fspath(src)
    if os.path.isdir(src):
        if config is not None:
            raise ValueError("config: a Hugging Face folder carries its own config.json")
        return from_hf_folder(src, dtype=dtype, naming=naming, tokenizer=tokenizer,
                              int8=int8)
    if not os.path.exists(src):
        raise ValueError(f"{src}: no such file or folder")
    if src.endswith(".gguf") or is_gguf(src):
        if config is not None or naming != "auto":
            raise ValueError("config, naming: a GGUF file carries its own config and names")
        return model_from_gguf(src, dtype=dtype, tokenizer=tokenizer, int8=int8)
    state_dict, model_args = _read_checkpoint(src)
    if config is None and model_args is not None:  # a nanoGPT or llama2.c training checkpoint
        config = config_from_model_args(model_args, state_dict)
    if config is None:
        raise ValueError(f"config: {os.path.basename(src)} holds weights only; give the model's "
                         "config (a minillm config JSON or a Hugging Face config.json)")
    return from_state_dict(state_dict, config, naming=naming, dtype=dtype, int8=int8)
