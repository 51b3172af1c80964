"""Every GGUF key llama.cpp reads that changes the model is applied or refused by name.

READ lists, per architecture, the `{arch}.*` keys llama.cpp's loader reads (llama-model.cpp
load_hparams for every architecture, then the architecture's load_arch_hparams in
src/models/*.cpp), each with a value that changes the model. A file of a tiny model that sets
the key either converts into the config that value means (APPLIED below: the field it sets;
tests/peers/test_gguf_keys_peer.py runs such files in llama.cpp and finds the same logits) or
is refused with an error that names the key. minillm.files.gguf_keys holds minillm's side.
"""
import numpy as np
import pytest

import minillm
from minillm.files import model_from_gguf
from minillm.files.npz import WeightsError
from tests.gguf_files import (ARRAY, BOOL, FLOAT32, INT32, STRING, UINT32, family_gguf_parts,
                              gguf_bytes, gpt2_gguf_parts)

BASE = dict(arch="modern", vocab_size=40, context_length=64, d_model=24, n_layers=4,
            n_heads=6, n_kv_heads=2, d_ff=20, rope_theta=500.0, norm_eps=1e-6)
FAMILY = {"llama": {}, "qwen2": {}, "qwen3": dict(qk_norm=True),
          "olmo2": dict(pre_norms=False, post_norms=True, qk_norm=True, qk_norm_all_heads=True),
          "granite": dict(logit_scale=1.0), "smollm3": dict(no_rope_layers=(3,)), "phi3": {},
          "gemma3": dict(head_dim=4, embed_scale=True, qk_norm=True, post_norms=True,
                         activation="gelu_tanh", query_pre_attn_scalar=4.0),
          "gpt2": dict(arch="classic", n_kv_heads=6, norm_eps=1e-5, activation="gelu_tanh")}
# Keys of load_hparams (every architecture), with a value that changes the model.
COMMON = [("attention.causal", BOOL, False), ("expert_count", UINT32, 8),
          ("expert_used_count", UINT32, 2), ("nextn_predict_layers", UINT32, 1),
          ("pooling_type", UINT32, 1), ("embedding_length_out", UINT32, 12),
          ("rope.scaling.type", STRING, "longrope"), ("rope.scaling.alpha", FLOAT32, 2.0),
          ("rope.scaling.attn_factor", FLOAT32, 2.0), ("attention.key_length_swa", UINT32, 8),
          ("attention.value_length_swa", UINT32, 8), ("rope.dimension_count_swa", UINT32, 2),
          ("rope.dimension_count", UINT32, 2), ("attention.value_length", UINT32, 8),
          ("classifier.output_labels", ARRAY, (STRING, ["a", "b"])),
          ("vocab_size", UINT32, 41), ("attention.head_count", ARRAY, (INT32, [6] * 4)),
          ("rope.scaling.yarn_beta_fast", FLOAT32, 16.0),
          ("rope.scaling.yarn_beta_slow", FLOAT32, 2.0),
          ("expert_shared_feed_forward_length", UINT32, 16),
          ("rope.scaling.yarn_log_multiplier", FLOAT32, 0.1),
          ("rope.scaling.yarn_attn_factor", FLOAT32, 2.0),
          ("rope.scaling.yarn_ext_factor", FLOAT32, 0.5),
          ("attn_logit_softcapping", FLOAT32, 30.0), ("final_logit_softcapping", FLOAT32, 30.0)]
# Keys an architecture's own load_arch_hparams reads (or that other architectures' do, which a
# file of this one must not carry unheeded).
OTHERS = [("attention.sliding_window", UINT32, 8), ("logit_scale", FLOAT32, 8.0),
          ("residual_scale", FLOAT32, 0.5), ("embedding_scale", FLOAT32, 12.0),
          ("attention.scale", FLOAT32, 0.125), ("rope.freq_base_swa", FLOAT32, 100.0)]
# What an applied key sets: {(arch, key): (config field, value)}; every other pair must be
# refused by name.
APPLIED = {
    ("granite", "logit_scale"): ("logit_scale", 8.0),
    ("granite", "residual_scale"): ("residual_multiplier", 0.5),
    ("granite", "embedding_scale"): ("embedding_multiplier", 12.0),
    ("granite", "attention.scale"): ("attention_multiplier", 0.125),
    ("phi3", "attention.sliding_window"): ("sliding_window", None),  # llama.cpp disables it
    ("gemma3", "attention.sliding_window"): ("sliding_window", 8),
    ("gemma3", "rope.freq_base_swa"): ("rope_local_theta", None),  # read with a window only
}
KEYS = [(arch, key, kind, value) for arch in FAMILY for key, kind, value in COMMON + OTHERS]


def convert(tmp_path, arch, extra_metadata=(), extra_tensors=(), **options):
    cfg = minillm.ModelConfig(**{**BASE, **FAMILY[arch], **options})
    model = minillm.random_model(cfg, seed=0)
    if arch == "gpt2":
        metadata, tensors = gpt2_gguf_parts(model)
        metadata += list(extra_metadata)
    else:
        metadata, tensors = family_gguf_parts(model, arch, extra_metadata, extra_tensors)
    if arch == "gemma3":  # llama.cpp requires the head size of a gemma3 file
        metadata.append(("gemma3.attention.key_length", UINT32, cfg.head_dim))
    if arch == "granite" and not any(k == "granite.logit_scale" for k, _, _ in metadata):
        metadata.append(("granite.logit_scale", FLOAT32, 1.0))  # llama.cpp requires it
    path = tmp_path / f"{arch}.gguf"
    path.write_bytes(gguf_bytes(metadata, tensors))
    return model_from_gguf(path, tokenizer=False)


@pytest.mark.parametrize("arch, key, kind, value", KEYS,
                         ids=[f"{arch}.{key}" for arch, key, _, _ in KEYS])
def test_each_key_llama_cpp_reads_is_applied_or_refused_by_name(tmp_path, arch, key, kind,
                                                               value):
    if (arch, key) in APPLIED:
        field, expected = APPLIED[arch, key]
        converted = convert(tmp_path, arch, [(f"{arch}.{key}", kind, value)])
        assert getattr(converted.config, field) == expected
        return
    with pytest.raises(WeightsError, match=f"{arch}.{key}".replace(".", r"\.")):
        convert(tmp_path, arch, [(f"{arch}.{key}", kind, value)])


@pytest.mark.parametrize("arch", ["llama", "granite", "smollm3", "qwen3"])
def test_rope_scaling_is_read_as_llama_cpp_reads_it(tmp_path, arch):
    def scaling(*metadata):
        return convert(tmp_path, arch, [(f"{arch}.{k}", t, v) for k, t, v in metadata]
                       ).config.rope_scaling

    # llama.cpp's type defaults to linear: a factor alone scales linearly; "none" never scales
    assert scaling(("rope.scaling.factor", FLOAT32, 4.0)) == {"type": "linear", "factor": 4.0}
    assert scaling(("rope.scale_linear", FLOAT32, 2.0)) == {"type": "linear", "factor": 2.0}
    assert scaling(("rope.scaling.type", STRING, "none"), ("rope.scaling.factor", FLOAT32, 4.0)) \
        is None
    assert scaling(("rope.scaling.factor", FLOAT32, 1.0)) is None
    yarn = scaling(("rope.scaling.type", STRING, "yarn"), ("rope.scaling.factor", FLOAT32, 4.0),
                   ("rope.scaling.original_context_length", UINT32, 16),
                   ("rope.scaling.attn_factor", FLOAT32, 1.25))
    assert yarn == {"type": "yarn", "factor": 4.0, "original_context": 16,
                    "attention_factor": (0.1 * np.log(4.0) + 1) * 1.25}


def test_rope_freqs_are_llama3_frequency_factors_of_llama_and_granite_only(tmp_path):
    factors = np.array([1.5, 4.0], np.float32)  # head_dim 4: two frequencies
    for arch in ("llama", "granite"):
        cfg = convert(tmp_path, arch, extra_tensors=[("rope_freqs.weight", factors)]).config
        assert cfg.rope_scaling == {"type": "freq_factors", "factors": [1.5, 4.0]}
    for arch in ("qwen2", "phi3"):
        with pytest.raises(WeightsError, match="rope_freqs.weight"):
            convert(tmp_path, arch, extra_tensors=[("rope_freqs.weight", factors)])
    with pytest.raises(WeightsError, match="rope_freqs.weight"):  # with another scaling
        convert(tmp_path, "llama", [("llama.rope.scaling.factor", FLOAT32, 2.0)],
                [("rope_freqs.weight", factors)])


def test_gemma3_reads_its_window_pattern_and_local_base(tmp_path):
    cfg = convert(tmp_path, "gemma3", [("gemma3.attention.sliding_window", UINT32, 8),
                                       ("gemma3.attention.sliding_window_pattern", UINT32, 3),
                                       ("gemma3.rope.freq_base_swa", FLOAT32, 100.0)]).config
    assert (cfg.sliding_window, cfg.sliding_window_pattern, cfg.rope_local_theta) == (8, 3, 100.0)
    assert convert(tmp_path, "gemma3", [("gemma3.attention.sliding_window", UINT32, 8)]
                   ).config.rope_local_theta == 10000.0  # llama.cpp's default local base
    with pytest.raises(WeightsError, match="gemma3.attention.sliding_window_pattern"):
        convert(tmp_path, "gemma3", [("gemma3.attention.sliding_window", UINT32, 8),
                                     ("gemma3.attention.sliding_window_pattern", ARRAY,
                                      (BOOL, [True, False, True, False]))])


def test_the_families_options_come_from_the_architecture(tmp_path):
    assert convert(tmp_path, "smollm3").config.no_rope_layers == (3,)
    assert convert(tmp_path, "granite", [("granite.rope.scaling.finetuned", BOOL, False)]
                   ).config.no_rope_layers == (0, 1, 2, 3)
    qwen3 = convert(tmp_path, "qwen3", head_dim=8).config  # key_length 8, not 24 / 6
    assert (qwen3.head_dim, qwen3.qk_norm, qwen3.qk_norm_all_heads) == (8, True, False)
    olmo2 = convert(tmp_path, "olmo2").config
    assert (olmo2.pre_norms, olmo2.post_norms, olmo2.qk_norm_all_heads) == (False, True, True)


def test_neutral_values_of_read_keys_are_accepted(tmp_path):
    """The values converters write that change nothing (attention.causal true, no experts,
    YaRN's default betas) convert as if absent."""
    plain = convert(tmp_path, "llama")
    same = convert(tmp_path, "llama", [("llama.attention.causal", BOOL, True),
                                       ("llama.expert_count", UINT32, 0),
                                       ("llama.rope.scaling.yarn_beta_fast", FLOAT32, 32.0),
                                       ("llama.rope.scaling.finetuned", BOOL, True),
                                       ("llama.vocab_size", UINT32, 40)])
    assert same.config == plain.config
    with pytest.raises(WeightsError, match="tokenizer.ggml.tokens: 3 tokens, expected 40"):
        convert(tmp_path, "llama", [("tokenizer.ggml.tokens", ARRAY, (STRING, ["a", "b", "c"]))])


def test_the_list_covers_every_key_minillm_applies():
    """A key minillm applies beyond this test's list would go unchecked: there is none."""
    from minillm.files.gguf_keys import APPLIED as MINILLM_APPLIED
    from minillm.files.gguf_keys import INERT, NEUTRAL

    listed = {key for key, _, _ in COMMON + OTHERS}
    sizes = {"context_length", "embedding_length", "block_count", "feed_forward_length",
             "attention.head_count_kv", "attention.layer_norm_rms_epsilon", "rope.freq_base",
             "attention.key_length", "rope.scaling.factor", "rope.scale_linear",
             "rope.scaling.original_context_length", "rope.scaling.finetuned",
             "attention.layer_norm_epsilon", "attention.sliding_window_pattern"}
    for arch, keys in MINILLM_APPLIED.items():
        assert keys <= listed | sizes, (arch, sorted(keys - listed - sizes))
    assert set(NEUTRAL) | INERT <= listed | sizes
