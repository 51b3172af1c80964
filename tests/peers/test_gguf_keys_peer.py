"""The GGUF keys minillm applies give llama.cpp's logits: tiny random models of each family,
written as llama.cpp's converter lays them out (tests/gguf_files.family_gguf_parts), with the
keys set, run in llama.cpp (llama-cpp-python, float32 KV cache) and in minillm.

The two agree within float32 error: 1e-5 of the largest logit over 32 positions (llama.cpp
sums in another order; its RoPE tables are computed in float32). tests/test_gguf_keys.py holds
the refusals.
"""
import numpy as np
import pytest

import minillm
from minillm.files import model_from_gguf
from tests.gguf_files import (BOOL, FLOAT32, STRING, UINT32, family_gguf_parts, gguf_bytes,
                              tokenizer_entries)

llama_cpp = pytest.importorskip("llama_cpp")

BASE = dict(arch="modern", vocab_size=40, context_length=64, d_model=24, n_layers=4,
            n_heads=6, n_kv_heads=2, d_ff=20, rope_theta=500.0, norm_eps=1e-6)
TOKENS = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6, 2, 6, 4, 3, 3, 8, 3, 2,
          7, 9, 5]
GRANITE = [("granite.logit_scale", FLOAT32, 8.0), ("granite.residual_scale", FLOAT32, 0.25),
           ("granite.embedding_scale", FLOAT32, 12.0), ("granite.attention.scale", FLOAT32, 0.125)]
# name: (architecture, ModelConfig options, metadata, extra tensors)
CASES = {
    "llama-plain": ("llama", {}, [], []),
    "llama-factor-without-type-is-linear": ("llama", {}, [("llama.rope.scaling.factor",
                                                            FLOAT32, 4.0)], []),
    "llama-scale-linear": ("llama", {}, [("llama.rope.scale_linear", FLOAT32, 2.0)], []),
    "llama-yarn-attn-factor": ("llama", {}, [
        ("llama.rope.scaling.type", STRING, "yarn"), ("llama.rope.scaling.factor", FLOAT32, 4.0),
        ("llama.rope.scaling.original_context_length", UINT32, 8),
        ("llama.rope.scaling.attn_factor", FLOAT32, 1.25)], []),
    "llama-rope-freqs": ("llama", {}, [], [("rope_freqs.weight",
                                             np.array([1.0, 6.5], np.float32))]),
    "qwen2-yarn": ("qwen2", {}, [("qwen2.rope.scaling.type", STRING, "yarn"),
                                 ("qwen2.rope.scaling.factor", FLOAT32, 4.0),
                                 ("qwen2.rope.scaling.original_context_length", UINT32, 8)], []),
    "qwen3-head-size-8": ("qwen3", dict(qk_norm=True, head_dim=8), [], []),
    "olmo2": ("olmo2", dict(tie_embeddings=False, pre_norms=False, post_norms=True,
                            qk_norm=True, qk_norm_all_heads=True), [], []),
    "phi3": ("phi3", {}, [], []),
    "smollm3": ("smollm3", dict(no_rope_layers=(3,)), [], []),
    "granite": ("granite", {}, GRANITE, []),
    "granite-no-rope": ("granite", {}, GRANITE + [("granite.rope.scaling.finetuned", BOOL,
                                                   False)], []),
}


@pytest.mark.parametrize("name", CASES)
def test_minillm_gives_llama_cpps_logits(name, tmp_path):
    arch, options, metadata, tensors = CASES[name]
    model = minillm.random_model(minillm.ModelConfig(**BASE, **options), seed=1, std=0.3)
    parts = family_gguf_parts(model, arch, metadata + tokenizer_entries(40), tensors)
    path = tmp_path / f"{name}.gguf"
    path.write_bytes(gguf_bytes(*parts))
    ours = model_from_gguf(path).forward(np.array([TOKENS]))[0]
    llm = llama_cpp.Llama(str(path), n_ctx=64, logits_all=True, verbose=False, n_threads=1,
                          type_k=0, type_v=0)  # GGML_TYPE_F32: no float16 rounding of K, V
    llm.eval(TOKENS)
    theirs = np.array(llm.scores[:len(TOKENS)])
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-5 * np.abs(theirs).max())
