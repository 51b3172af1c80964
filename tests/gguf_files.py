"""Tiny GGUF files written byte by byte with struct, so that tests need NumPy only.

    data = gguf_bytes(metadata=[("general.architecture", STRING, "llama")],
                      tensors=[("w", (2, 3), F32, raw_bytes)])

Every part can be given wrong on purpose (magic, version, counts, offsets) to test the reader's
refusals. Also: the GGUF tensors of a minillm model, the way llama.cpp's converter lays them out.
"""
import struct
import types

import numpy as np

from minillm.files.naming import half_to_interleaved

# Metadata value types and a few ggml tensor types, numbered as in the GGUF spec.
UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY = range(10)
UINT64, INT64, FLOAT64 = 10, 11, 12
F32, F16, Q8_0 = 0, 1, 8
SCALAR_FORMATS = {UINT8: "<B", INT8: "<b", UINT16: "<H", INT16: "<h", UINT32: "<I",
                  INT32: "<i", FLOAT32: "<f", BOOL: "<?", UINT64: "<Q", INT64: "<q",
                  FLOAT64: "<d"}


def string(text) -> bytes:
    data = text.encode("utf-8") if isinstance(text, str) else text
    return struct.pack("<Q", len(data)) + data


def value(value_type, v) -> bytes:
    """A metadata value; an array is (element type, list of elements)."""
    if value_type == STRING:
        return string(v)
    if value_type == ARRAY:
        element_type, items = v
        return (struct.pack("<IQ", element_type, len(items))
                + b"".join(value(element_type, item) for item in items))
    return struct.pack(SCALAR_FORMATS[value_type], v)


def gguf_bytes(metadata=(), tensors=(), version=3, magic=b"GGUF", alignment=32,
               n_tensors=None, n_metadata=None, offsets=None) -> bytes:
    """A whole file. metadata: (key, type, value); tensors: (name, NumPy shape, ggml type,
    raw bytes). `alignment` pads the data (it is written as general.alignment only when the
    metadata says so). n_tensors, n_metadata, offsets override the true values."""
    out = magic + struct.pack("<I", version)
    out += struct.pack("<QQ", len(tensors) if n_tensors is None else n_tensors,
                       len(metadata) if n_metadata is None else n_metadata)
    for key, value_type, v in metadata:
        out += string(key) + struct.pack("<I", value_type) + value(value_type, v)
    data, true_offsets = b"", []
    for _, _, _, raw in tensors:
        data += b"\0" * (-len(data) % alignment)
        true_offsets.append(len(data))
        data += raw
    for i, (name, shape, ggml_type, _) in enumerate(tensors):
        offset = true_offsets[i] if offsets is None else offsets[i]
        out += string(name) + struct.pack("<I", len(shape))
        out += struct.pack(f"<{len(shape)}Q", *reversed(shape))  # fastest-varying dim first
        out += struct.pack("<IQ", ggml_type, offset)
    out += b"\0" * (-len(out) % alignment)
    return out + data


def llama_cpp_tensors(model, permute=True) -> dict:
    """{GGUF name: float32 array} of a modern minillm model, as llama.cpp's converter writes a
    Hugging Face Llama (q and k rows permuted to interleaved pairs) or, permute=False, a Qwen2."""
    cfg, p = model.config, model.params
    q_rows, kv_rows = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    out = {"token_embd.weight": p["tok_emb.weight"], "output_norm.weight": p["final_norm.weight"]}
    if not cfg.tie_embeddings:
        out["output.weight"] = p["lm_head.weight"]
    for i in range(cfg.n_layers):
        src, dst = f"layers.{i}.", f"blk.{i}."
        out[dst + "attn_norm.weight"] = p[src + "attn_norm.weight"]
        for kind in ("weight", "bias") if cfg.bias else ("weight",):
            qkv = p[src + f"attn.qkv.{kind}"]
            q, k, v = qkv[:q_rows], qkv[q_rows:q_rows + kv_rows], qkv[q_rows + kv_rows:]
            if permute:
                q, k = half_to_interleaved(q, cfg.n_heads), half_to_interleaved(k, cfg.n_kv_heads)
            out[dst + f"attn_q.{kind}"], out[dst + f"attn_k.{kind}"] = q, k
            out[dst + f"attn_v.{kind}"] = v
        out[dst + "attn_output.weight"] = p[src + "attn.out.weight"]
        out[dst + "ffn_norm.weight"] = p[src + "mlp_norm.weight"]
        gate_up = p[src + "mlp.gate_up.weight"]
        out[dst + "ffn_gate.weight"] = gate_up[:cfg.d_ff]
        out[dst + "ffn_up.weight"] = gate_up[cfg.d_ff:]
        out[dst + "ffn_down.weight"] = p[src + "mlp.down.weight"]
    return {name: np.ascontiguousarray(w, dtype=np.float32) for name, w in out.items()}


def llama_cpp_metadata(cfg, arch="llama") -> list:
    """(key, type, value) of the `{arch}.*` hyperparameters llama.cpp writes."""
    return [("general.architecture", STRING, arch),
            (f"{arch}.block_count", UINT32, cfg.n_layers),
            (f"{arch}.context_length", UINT32, cfg.context_length),
            (f"{arch}.embedding_length", UINT32, cfg.d_model),
            (f"{arch}.feed_forward_length", UINT32, cfg.d_ff),
            (f"{arch}.attention.head_count", UINT32, cfg.n_heads),
            (f"{arch}.attention.head_count_kv", UINT32, cfg.n_kv_heads),
            (f"{arch}.rope.freq_base", FLOAT32, cfg.rope_theta),
            (f"{arch}.attention.layer_norm_rms_epsilon", FLOAT32, cfg.norm_eps),
            (f"{arch}.rope.dimension_count", UINT32, cfg.head_dim)]


def model_gguf_bytes(model, arch="llama", permute=True, extra_metadata=(), q8_0=False) -> bytes:
    """A GGUF file of a modern minillm model: float32, or with q8_0 its matrices in Q8_0 (rows
    must then be whole blocks of 32) as llama.cpp quantizes them, the norms float32."""
    return gguf_bytes(*model_gguf_parts(model, arch, permute, extra_metadata, q8_0))


def model_gguf_parts(model, arch="llama", permute=True, extra_metadata=(), q8_0=False):
    """The (metadata, tensors) arguments of gguf_bytes for model_gguf_bytes."""
    tensors = [(name, w.shape, Q8_0, q8_0_bytes(w)) if q8_0 and w.ndim == 2 else
               (name, w.shape, F32, w.tobytes())
               for name, w in llama_cpp_tensors(model, permute).items()]
    return llama_cpp_metadata(model.config, arch) + list(extra_metadata), tensors


def q8_0_bytes(w) -> bytes:
    """Q8_0 blocks of 32 values: a float16 scale d = max|x| / 127 and 32 int8 round(x / d)."""
    x = np.asarray(w, np.float32).reshape(-1, 32)
    d = np.abs(x).max(axis=1) / 127
    inverse = np.divide(1, d, out=np.zeros_like(d), where=d > 0)
    blocks = np.zeros(len(x), dtype=[("d", "<f2"), ("qs", "i1", 32)])
    blocks["d"], blocks["qs"] = d, np.round(x * inverse[:, None])
    return blocks.tobytes()


CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def tokenizer_entries(n_tokens=40) -> list:
    """(key, type, value) of a byte-level BPE tokenizer of `n_tokens` tokens, as llama.cpp
    writes SmolLM2's: three control tokens, then single characters, then two merged tokens."""
    letters = [chr(c) for c in range(ord("a"), ord("a") + n_tokens - 5)]
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + letters + ["ab", "abc"]
    return [("tokenizer.ggml.model", STRING, "gpt2"),
            ("tokenizer.ggml.pre", STRING, "smollm"),
            ("tokenizer.ggml.tokens", ARRAY, (STRING, tokens)),
            ("tokenizer.ggml.token_type", ARRAY, (INT32, [3, 3, 3] + [1] * (n_tokens - 3))),
            ("tokenizer.ggml.merges", ARRAY, (STRING, ["a b", "ab c"])),
            ("tokenizer.ggml.bos_token_id", UINT32, 1),
            ("tokenizer.ggml.eos_token_id", UINT32, 2),
            ("tokenizer.ggml.padding_token_id", UINT32, 2),
            ("tokenizer.ggml.unknown_token_id", UINT32, 0),
            ("tokenizer.ggml.add_bos_token", BOOL, False),
            ("tokenizer.chat_template", STRING, CHATML)]


def valid_files() -> dict:
    """{name: GGUF bytes} of one file of every kind minillm reads (valid_file_parts)."""
    return {name: gguf_bytes(*parts) for name, parts in valid_file_parts().items()}


def valid_file_parts() -> dict:
    """{name: (metadata, tensors)} of one file of every kind minillm reads: Llama (tied and
    untied output layer), Mistral, Qwen2 (q/k/v biases), a Q8_0 model, a model with its
    tokenizer, and a file holding a tokenizer only (no tensors: it reads, and does not
    convert)."""
    from minillm import ModelConfig, random_model

    cfg = ModelConfig(arch="modern", vocab_size=40, context_length=16, d_model=24, n_layers=2,
                      n_heads=6, n_kv_heads=2, d_ff=20, rope_theta=500.0)
    untied = ModelConfig(**{**cfg.to_dict(), "tie_embeddings": False, "n_layers": 1})
    biased = ModelConfig(**{**cfg.to_dict(), "bias": True, "n_kv_heads": 3})
    blocks = ModelConfig(**{**cfg.to_dict(), "d_model": 32, "n_heads": 4, "d_ff": 32})
    model = random_model(cfg, seed=1)
    return {
        "llama": model_gguf_parts(model),
        "llama-untied": model_gguf_parts(random_model(untied, seed=2)),
        "mistral": model_gguf_parts(model, arch="mistral"),
        "qwen2-bias": model_gguf_parts(random_model(biased, seed=3), arch="qwen2",
                                       permute=False),
        "llama-q8_0": model_gguf_parts(random_model(blocks, seed=4), q8_0=True),
        "llama-tokenizer": model_gguf_parts(model, extra_metadata=tokenizer_entries(40)),
        "vocab-only": ([("general.architecture", STRING, "llama")] + tokenizer_entries(40),
                       []),
    }


def gpt2_gguf_parts(model, output_copy=True):
    """(metadata, tensors) for gguf_bytes of a classic minillm model, float32, as llama.cpp's
    converter writes a GPT-2: the fused q/k/v, (out, in) matrices, biases, learned positions,
    and (output_copy) an output.weight, a copy of the embedding when the model is tied."""
    cfg, p = model.config, model.params
    out = {"token_embd.weight": p["tok_emb.weight"], "position_embd.weight": p["pos_emb.weight"],
           "output_norm.weight": p["final_norm.weight"], "output_norm.bias": p["final_norm.bias"]}
    if output_copy or not cfg.tie_embeddings:
        out["output.weight"] = p.get("lm_head.weight", p["tok_emb.weight"])
    for i in range(cfg.n_layers):
        src, dst = f"layers.{i}.", f"blk.{i}."
        for ours, theirs in (("attn_norm", "attn_norm"), ("attn.qkv", "attn_qkv"),
                             ("attn.out", "attn_output"), ("mlp_norm", "ffn_norm"),
                             ("mlp.up", "ffn_up"), ("mlp.down", "ffn_down")):
            for kind in ("weight", "bias"):
                out[f"{dst}{theirs}.{kind}"] = p[f"{src}{ours}.{kind}"]
    metadata = [("general.architecture", STRING, "gpt2"),
                ("gpt2.block_count", UINT32, cfg.n_layers),
                ("gpt2.context_length", UINT32, cfg.context_length),
                ("gpt2.embedding_length", UINT32, cfg.d_model),
                ("gpt2.feed_forward_length", UINT32, cfg.d_ff),
                ("gpt2.attention.head_count", UINT32, cfg.n_heads),
                ("gpt2.attention.layer_norm_epsilon", FLOAT32, cfg.norm_eps)]
    tensors = [(name, w.shape, F32, np.ascontiguousarray(w, dtype=np.float32).tobytes())
               for name, w in out.items()]
    return metadata, tensors


def family_gguf_parts(model, arch, extra_metadata=(), extra_tensors=()):
    """(metadata, tensors) of a modern minillm model with the families' options as llama.cpp's
    converter writes each architecture: llama, granite and smollm3 permuted to interleaved
    pairs; qwen3 with per-head q/k norms; olmo2 without the norms before the sublayers and
    with q/k norms over all heads; phi3 with q, k, v fused in attn_qkv and gate, up in
    ffn_up; attention.key_length when the head size is not d_model / n_heads. extra_tensors:
    (name, float32 array) pairs."""
    cfg, p = model.config, model.params
    permute = arch in ("llama", "granite", "smollm3")
    if cfg.pre_norms:
        tensors = llama_cpp_tensors(model, permute)
    else:  # olmo2: the blocks without the norms before the sublayers
        stand_in = {**p, **{f"layers.{i}.{n}.weight": p["final_norm.weight"]
                            for i in range(cfg.n_layers) for n in ("attn_norm", "mlp_norm")}}
        tensors = {n: w for n, w in llama_cpp_tensors(
            types.SimpleNamespace(config=cfg, params=stand_in), permute).items()
            if not n.endswith(("attn_norm.weight", "ffn_norm.weight"))}
    for i in range(cfg.n_layers):
        src, dst = f"layers.{i}.", f"blk.{i}."
        if cfg.qk_norm:
            tensors[dst + "attn_q_norm.weight"] = p[src + "attn.q_norm.weight"]
            tensors[dst + "attn_k_norm.weight"] = p[src + "attn.k_norm.weight"]
        if cfg.post_norms:
            tensors[dst + "post_attention_norm.weight"] = p[src + "attn_post_norm.weight"]
            tensors[dst + "post_ffw_norm.weight"] = p[src + "mlp_post_norm.weight"]
        if arch == "phi3":
            tensors[dst + "attn_qkv.weight"] = p[src + "attn.qkv.weight"]
            tensors[dst + "ffn_up.weight"] = p[src + "mlp.gate_up.weight"]
            for name in ("attn_q", "attn_k", "attn_v", "ffn_gate"):
                del tensors[dst + name + ".weight"]
    tensors.update(extra_tensors)
    metadata = llama_cpp_metadata(cfg, arch)
    if cfg.head_dim != cfg.d_model // cfg.n_heads:
        metadata += [(f"{arch}.attention.key_length", UINT32, cfg.head_dim),
                     (f"{arch}.attention.value_length", UINT32, cfg.head_dim)]
    listed = [(name, w.shape, F32, np.ascontiguousarray(w, dtype=np.float32).tobytes())
              for name, w in tensors.items()]
    return metadata + list(extra_metadata), listed
