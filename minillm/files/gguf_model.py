"""A minillm Model from a GGUF file of the Llama family (llama, mistral, qwen2), Gemma 3 or GPT-2.

    model = model_from_gguf("SmolLM2-135M-Instruct.Q4_1.gguf")    # float32, dequantized
    model = model_from_gguf(path, int8=True)    # linear weights int8, as minillm.quantize's

The config comes from the `{arch}.*` metadata, the vocabulary size from the token embedding's
rows (gguf_config.py, with Gemma 3's and GPT-2's options). Tensors are dequantized to float
(with int8=True each linear weight is then quantized at once, as minillm.quantize would) and
renamed through a naming table; from there the path is the one of any state dict
(minillm.files.state_dict): q, k, v rows fused, gate and up rows fused, every tensor of the
config required and every tensor of the file used.

Rotary embeddings. llama.cpp's Llama rotates interleaved pairs (x_2j, x_2j+1), and its converter
permutes the q and k rows of a Hugging Face Llama to match (`LlamaModel.permute`, which is
minillm's `half_to_interleaved`). So for llama and mistral the rows are permuted back with
`interleaved_to_half`. Qwen2 runs in llama.cpp with the "NeoX" rotation, the halves that minillm
uses, and its converter leaves the rows alone: so does this one. So does Gemma 3.
"""
from __future__ import annotations

from collections.abc import Mapping

from ..text.tokenizer import Tokenizer
from .npz import WeightsError
from .gguf import GGUFFile, read_gguf
from .gguf_config import ARCHITECTURES, architecture, check_tensors, config_from_gguf
from .naming import Naming
from .state_dict import from_state_dict

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
# Phi-3: llama.cpp keeps its fused gate and up rows in ffn_up (and q, k, v in attn_qkv).
PHI3_NAMES = {**{k: v for k, v in GGUF_NAMES.items() if v != "blk.{i}.ffn_up.weight"},
              "layers.{i}.mlp.gate_up.weight": "blk.{i}.ffn_up.weight"}


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
        names = GGUF_NAMES if arch != "phi3" else PHI3_NAMES
        naming = Naming(names, interleaved_rope=ARCHITECTURES[arch],
                        ignore=(r"rope_freqs\.weight",))  # read into the config
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
