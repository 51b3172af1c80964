"""GGUF files of the Llama family to minillm models: the config from the metadata, q and k rows
permuted back for llama (not for qwen2), and the refusals; `minillm convert MODEL.gguf`."""
import dataclasses
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minillm
from minillm.cli import main
from minillm.files import convert, interleaved_to_half, model_from_gguf
from minillm.quantize import QuantizedWeight
from minillm.text.tokenizer import Tokenizer, same_tokens
from minillm.files.npz import WeightsError
from tests.gguf_files import (ARRAY, FLOAT32, FLOAT64, INT32, STRING, UINT32, UINT64,
                              gguf_bytes, gpt2_gguf_parts, llama_cpp_metadata,
                              llama_cpp_tensors, model_gguf_bytes, model_gguf_parts,
                              tokenizer_entries, valid_files)
from minillm.testing.strategies import model_configs

CFG = minillm.ModelConfig(arch="modern", vocab_size=40, context_length=16, d_model=24,
                          n_layers=2, n_heads=6, n_kv_heads=2, d_ff=20, rope_theta=500.0)
TOKENS = np.array([[3, 1, 4, 1, 5, 9, 2, 6, 5, 3]])


def llama_cpp_permute(w, n_head):
    """llama.cpp's convert_hf_to_gguf LlamaModel.permute, halves -> interleaved pairs."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2) \
        .reshape(w.shape)


def write(folder, data, name="m.gguf"):
    path = Path(folder) / name
    path.write_bytes(data)
    return path


def assert_same_model(converted, model):
    assert converted.config == model.config and converted.tokenizer is None
    for name, value in model.params.items():
        np.testing.assert_array_equal(converted.params[name], value, err_msg=name)
    np.testing.assert_array_equal(converted.forward(TOKENS % model.config.vocab_size),
                                  model.forward(TOKENS % model.config.vocab_size))


def test_interleaved_to_half_undoes_llama_cpps_permute():
    w = np.random.default_rng(0).standard_normal((3 * 8, 5))
    np.testing.assert_array_equal(interleaved_to_half(llama_cpp_permute(w, 3), 3), w)
    np.testing.assert_array_equal(interleaved_to_half(llama_cpp_permute(w[:, 0], 3), 3), w[:, 0])


@settings(max_examples=12)
@given(cfg=model_configs(arch="modern", context_length=16, gemma=False))
def test_a_llama_gguf_converts_to_the_same_model(cfg):
    """q and k rows permuted as llama.cpp permutes them come back; biases too (as in
    llama.cpp's converter); tied and untied output layers."""
    cfg = dataclasses.replace(cfg, activation="silu")  # GGUF's llama family is SwiGLU
    model = minillm.random_model(cfg, seed=1)
    with tempfile.TemporaryDirectory() as folder:
        converted, loaded = converted_and_reloaded(write(folder, model_gguf_bytes(model)), folder)
        assert_same_model(converted, model)
        assert_same_after_reload(converted, loaded)


@settings(max_examples=12)
@given(cfg=model_configs(arch="modern", context_length=16, gemma=False))
def test_a_qwen2_gguf_is_not_permuted(cfg):
    cfg = dataclasses.replace(cfg, activation="silu")
    model = minillm.random_model(cfg, seed=2)
    data = model_gguf_bytes(model, arch="qwen2", permute=False)
    with tempfile.TemporaryDirectory() as folder:
        assert_same_model(model_from_gguf(write(folder, data)), model)


@settings(max_examples=12)
@given(cfg=model_configs(arch="classic", context_length=16), output_copy=st.booleans())
def test_a_gpt2_gguf_converts_to_the_classic_model(cfg, output_copy):
    """llama.cpp's GPT-2 layout: fused q/k/v, biases, learned positions, GELU's tanh form; an
    output.weight (a copy of the embedding, as llama.cpp's converter writes) makes the model
    untied with the same values, none makes it tied."""
    cfg = dataclasses.replace(cfg, bias=True, activation="gelu_tanh", rope_theta=10000.0)
    model = minillm.random_model(cfg, seed=5)
    with tempfile.TemporaryDirectory() as folder:
        converted = model_from_gguf(write(folder, gguf_bytes(*gpt2_gguf_parts(model,
                                                                               output_copy))))
    if cfg.tie_embeddings and output_copy:  # the same model, its output layer held apart
        model = minillm.Model(dataclasses.replace(cfg, tie_embeddings=False),
                              {**model.params, "lm_head.weight": model.params["tok_emb.weight"]})
    assert_same_model(converted, model)


def test_a_gpt2_gguf_missing_its_biases_is_refused(tmp_path):
    cfg = minillm.ModelConfig(arch="classic", vocab_size=20, context_length=8, d_model=8,
                              n_layers=1, n_heads=2, activation="gelu_tanh")
    metadata, tensors = gpt2_gguf_parts(minillm.random_model(cfg))
    tensors = [t for t in tensors if t[0] != "blk.0.ffn_up.bias"]
    with pytest.raises(WeightsError, match="missing tensor.*blk.0.ffn_up.bias"):
        model_from_gguf(write(tmp_path, gguf_bytes(metadata, tensors)))


def test_mistral_is_permuted_like_llama(tmp_path):
    model = minillm.random_model(CFG, seed=3)
    data = model_gguf_bytes(model, arch="mistral", permute=True)
    assert_same_model(model_from_gguf(write(tmp_path, data)), model)


def test_a_file_written_by_gguf_converts_too(tmp_path):
    gguf = pytest.importorskip("gguf")
    model = minillm.random_model(CFG, seed=4)
    writer = gguf.GGUFWriter(tmp_path / "w.gguf", "llama")
    for key, value_type, value in llama_cpp_metadata(CFG)[1:]:
        {UINT32: writer.add_uint32, FLOAT32: writer.add_float32}[value_type](key, value)
    for name, w in llama_cpp_tensors(model).items():
        writer.add_tensor(name, w)
    for step in (writer.write_header_to_file, writer.write_kv_data_to_file,
                 writer.write_tensors_to_file, writer.close):
        step()
    assert_same_model(convert(tmp_path / "w.gguf"), model)


def test_a_quantized_gguf_converts_to_its_dequantized_values(tmp_path):
    gguf = pytest.importorskip("gguf")
    cfg = minillm.ModelConfig(arch="modern", vocab_size=40, context_length=16, d_model=64,
                              n_layers=1, n_heads=4, n_kv_heads=2, d_ff=64)
    model = minillm.random_model(cfg, seed=5)
    writer = gguf.GGUFWriter(tmp_path / "q.gguf", "llama")
    for key, value_type, value in llama_cpp_metadata(cfg)[1:]:
        {UINT32: writer.add_uint32, FLOAT32: writer.add_float32}[value_type](key, value)
    expected = {}
    for name, w in llama_cpp_tensors(model).items():
        qtype = gguf.GGMLQuantizationType.Q8_0 if w.ndim == 2 else gguf.GGMLQuantizationType.F32
        raw = gguf.quants.quantize(w, qtype)
        writer.add_tensor(name, raw, raw_shape=raw.shape, raw_dtype=qtype)
        expected[name] = gguf.quants.dequantize(raw, qtype)
    for step in (writer.write_header_to_file, writer.write_kv_data_to_file,
                 writer.write_tensors_to_file, writer.close):
        step()
    converted = model_from_gguf(tmp_path / "q.gguf")
    q_rows = cfg.n_heads * cfg.head_dim
    np.testing.assert_array_equal(converted.params["layers.0.attn.qkv.weight"][:q_rows],
                                  interleaved_to_half(expected["blk.0.attn_q.weight"], 4))
    np.testing.assert_array_equal(converted.params["tok_emb.weight"],
                                  expected["token_embd.weight"])
    assert np.abs(converted.forward(TOKENS) - model.forward(TOKENS)).max() < 0.05


def refusal(tmp_path, model, **changes):
    """The error message for the model's GGUF file written with some changes."""
    data = model_gguf_bytes(model, **changes)
    with pytest.raises(WeightsError) as error:
        model_from_gguf(write(tmp_path, data))
    assert "\n" not in str(error.value) and "m.gguf: " in str(error.value)
    return str(error.value)


def test_refusals_name_the_problem(tmp_path):
    model = minillm.random_model(CFG, seed=6)
    assert "general.architecture 'falcon' is not supported" in refusal(tmp_path, model, arch="falcon")
    assert "'bert' is not supported" in refusal(tmp_path, model, arch="bert")
    assert "llama.rope.scaling.type: 'longrope' is not supported" in refusal(
        tmp_path, model, extra_metadata=[("llama.rope.scaling.type", STRING, "longrope")])
    assert "llama.expert_count: found 8" in refusal(
        tmp_path, model, extra_metadata=[("llama.expert_count", UINT32, 8)])
    assert "llama.rope.dimension_count is 4" in refusal(
        tmp_path, model, extra_metadata=[("llama.attention.key_length", UINT32, 8)])


def test_missing_and_extra_tensors_and_metadata_are_refused(tmp_path):
    from tests.gguf_files import F32, gguf_bytes

    model = minillm.random_model(CFG, seed=7)
    tensors = {name: (name, w.shape, F32, w.tobytes())
               for name, w in llama_cpp_tensors(model).items()}
    metadata = llama_cpp_metadata(CFG)
    cases = [
        (metadata, [t for n, t in tensors.items() if n != "blk.1.ffn_up.weight"],
         "missing tensor(s) blk.1.ffn_up.weight"),
        (metadata, list(tensors.values()) + [("rope_freqs.weight", (4,), F32, bytes(16))],
         "rope_freqs.weight: expected (2,)"),
        (metadata, list(tensors.values()) + [("blk.0.extra.weight", (4,), F32, bytes(16))],
         "unexpected tensor(s) blk.0.extra.weight"),
        (metadata[:-2], list(tensors.values()),
         "llama.attention.layer_norm_rms_epsilon: missing, expected float32"),
        (metadata, [], "no token_embd.weight tensor"),
    ]
    for meta, tens, message in cases:
        with pytest.raises(WeightsError, match="m.gguf: ") as error:
            model_from_gguf(write(tmp_path, gguf_bytes(meta, tens)))
        assert message in str(error.value)


def test_the_convert_command_reads_gguf(tmp_path, capsys):
    model = minillm.random_model(CFG, seed=8)
    src = write(tmp_path, model_gguf_bytes(model), "tiny.bin")  # recognised by its magic
    assert main(["convert", str(src), str(tmp_path / "f.npz")]) == 0
    assert_same_model(minillm.load(tmp_path / "f.npz", fast=False), model)
    assert main(["convert", str(src), str(tmp_path / "q.npz"), "--int8"]) == 0
    assert "linear weights int8" in capsys.readouterr().out
    quantized = minillm.load(tmp_path / "q.npz", fast=False)
    assert isinstance(quantized.params["layers.0.attn.qkv.weight"], QuantizedWeight)
    np.testing.assert_array_equal(quantized.forward(TOKENS),
                                  minillm.quantize(model).forward(TOKENS))


@pytest.mark.parametrize("argv, message", [
    (["{bad}", "{out}"], "not a GGUF file"),
    (["{good}", "{out}", "--naming", "meta"], "a GGUF file carries its own config"),
    (["{bad_merges}", "{out}"], "tokenizer.ggml.merges: found integer 3, expected array of string"),
])
def test_the_convert_command_reports_a_bad_gguf_in_one_line(tmp_path, capsys, argv, message):
    files = {"bad": write(tmp_path, b"GGML" + bytes(40), "bad.gguf"), "out": tmp_path / "o.npz",
             "good": write(tmp_path, model_gguf_bytes(minillm.random_model(CFG)), "good.gguf"),
             "bad_merges": write(tmp_path, model_gguf_bytes(
                 minillm.random_model(CFG), extra_metadata=with_entry(
                     tokenizer_entries(), "tokenizer.ggml.merges", UINT32, 3)),
                 "bad_merges.gguf")}
    assert main(["convert"] + [a.format(**files) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("minillm convert: error: ") and message in err
    assert err.count("\n") == 1 and not (tmp_path / "o.npz").exists()


# ---------------------------------------------------------------------- untrusted metadata

def with_entry(entries, key, value_type, value):
    """The (key, type, value) list with `key` replaced (or added)."""
    return [e for e in entries if e[0] != key] + [(key, value_type, value)]


def gguf_refusal(tmp_path, model, key, value_type, value):
    """The WeightsError of the model's GGUF file (with a tokenizer) with one entry changed."""
    entries = llama_cpp_metadata(model.config) + tokenizer_entries(model.config.vocab_size)
    entries = with_entry(entries, key, value_type, value)
    data = gguf_bytes_of(model, entries)
    with pytest.raises(WeightsError) as error:
        model_from_gguf(write(tmp_path, data))
    message = str(error.value)
    assert "\n" not in message and "m.gguf: " in message
    return message.split("m.gguf: ", 1)[1]


def gguf_bytes_of(model, metadata):
    """The model's float32 GGUF file with `metadata` for its own."""
    return gguf_bytes(metadata, model_gguf_parts(model)[1])


def test_a_file_with_a_tokenizer_converts_with_it(tmp_path):
    model = minillm.random_model(CFG, seed=9)
    data = gguf_bytes_of(model, llama_cpp_metadata(CFG) + tokenizer_entries(CFG.vocab_size))
    converted = model_from_gguf(write(tmp_path, data))
    tok = converted.tokenizer
    assert len(tok) == 40 and tok.encode("abc") == [39] and tok.bos_token_id == 1
    assert tok.chat_template.startswith("{% for m in messages %}")


# Each: the key, a wrong (type, value), and the start of the message. The cases:
# tokenizer keys of the wrong type or value, then the configuration's.
WRONG_METADATA = [
    ("tokenizer.ggml.merges", STRING, "a b",
     "tokenizer.ggml.merges: found string 'a b', expected array of string"),
    ("tokenizer.ggml.merges", ARRAY, (INT32, [1, 2]),
     "tokenizer.ggml.merges[0]: found integer 1, expected string"),
    ("tokenizer.ggml.merges", ARRAY, (STRING, ["ab"]),
     "tokenizer.ggml.merges[0]: found string 'ab', expected two tokens separated by a space"),
    ("tokenizer.ggml.tokens", STRING, "a", "tokenizer.ggml.tokens: found string 'a', expected "
     "array of string"),
    ("tokenizer.ggml.token_type", INT32, 1, "tokenizer.ggml.token_type: found integer 1"),
    ("tokenizer.ggml.token_type", ARRAY, (STRING, ["1"] * 40),
     "tokenizer.ggml.token_type[0]: found string '1', expected int32 in [0, 6]"),
    ("tokenizer.ggml.token_type", ARRAY, (FLOAT32, [float("nan")] * 40),
     "tokenizer.ggml.token_type[0]: found float nan"),
    ("tokenizer.ggml.token_type", ARRAY, (INT32, [1] * 39 + [9]),
     "tokenizer.ggml.token_type[39]: found integer 9, expected int32 in [0, 6]"),
    ("tokenizer.ggml.bos_token_id", ARRAY, (UINT32, [1, 2]),
     "tokenizer.ggml.bos_token_id: found array of 2 integers, expected uint32 in [0, 39]"),
    ("tokenizer.ggml.eos_token_id", FLOAT32, float("inf"),
     "tokenizer.ggml.eos_token_id: found float inf"),
    ("tokenizer.ggml.eos_token_id", UINT32, 40,
     "tokenizer.ggml.eos_token_id: found integer 40, expected uint32 in [0, 39]"),
    ("tokenizer.ggml.pre", ARRAY, (STRING, ["smollm"]),
     "tokenizer.ggml.pre: found array of 1 strings, expected string"),
    ("tokenizer.ggml.add_bos_token", UINT32, 1,
     "tokenizer.ggml.add_bos_token: found integer 1, expected bool"),
    ("tokenizer.chat_template", UINT32, 7,
     "tokenizer.chat_template: found integer 7, expected string"),
    ("tokenizer.ggml.pre", STRING, "kimi-k2", "tokenizer: pre-tokenizer 'kimi-k2'"),
    ("llama.block_count", UINT64, 10**7,
     "llama.block_count: found integer 10000000, expected 2, the number of blocks"),
    ("llama.context_length", UINT64, 2**24,
     "llama.context_length: found integer 16777216, expected uint32 in [1, 1048576]"),
    ("llama.context_length", UINT64, 2**63,
     "llama.context_length: found integer 9223372036854775808, expected uint32"),
    ("llama.attention.layer_norm_rms_epsilon", FLOAT32, float("inf"),
     "llama.attention.layer_norm_rms_epsilon: found float inf, expected float32 in "
     "[1e-12, 1.0]"),
    ("llama.attention.layer_norm_rms_epsilon", FLOAT64, 1e30,
     "llama.attention.layer_norm_rms_epsilon: found float 1e+30"),
    ("llama.attention.layer_norm_rms_epsilon", STRING, "1e-5",
     "llama.attention.layer_norm_rms_epsilon: found string '1e-5', expected float32"),
    ("llama.rope.freq_base", FLOAT32, float("inf"), "llama.rope.freq_base: found float inf"),
    ("llama.rope.freq_base", FLOAT32, 1e30,
     "llama.rope.freq_base: found float 1.0000000150474662e+30, expected float32 in "
     "[1.0, 1000000000000.0]"),
    ("llama.rope.freq_base", STRING, "10000", "llama.rope.freq_base: found string '10000'"),
    ("llama.embedding_length", UINT32, 48,
     "llama.embedding_length: found integer 48, expected 24, the columns of token_embd.weight"),
    ("llama.attention.head_count", UINT32, 5, "llama.attention.head_count 5 and head_count_kv"),
    ("llama.attention.head_count_kv", UINT32, 7,
     "llama.attention.head_count_kv: found integer 7, expected uint32 in [1, 6]"),
    ("llama.feed_forward_length", UINT32, 21,
     "tensor blk.0.ffn_gate.weight: found shape (20, 24), expected (21, 24)"),
    ("general.architecture", ARRAY, (STRING, ["llama"]),
     "general.architecture: found array of 1 strings, expected string"),
]


@pytest.mark.parametrize("key, value_type, value, message", WRONG_METADATA,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(WRONG_METADATA)])
def test_every_metadata_value_is_checked_for_type_and_range(tmp_path, key, value_type, value,
                                                            message):
    model = minillm.random_model(CFG, seed=10)
    assert gguf_refusal(tmp_path, model, key, value_type, value).startswith(message)


def test_tokenizer_metadata_gives_every_key_checked_and_none_for_the_missing():
    from minillm.files.gguf_metadata import tokenizer_metadata

    metadata = {key: v[1] if t == ARRAY else v for key, t, v in tokenizer_entries()}
    fields = tokenizer_metadata(metadata)
    assert fields == {**{key: metadata.get(key) for key in fields},
                      "tokenizer.ggml.scores": None, "tokenizer.ggml.add_eos_token": None,
                      "tokenizer.ggml.add_space_prefix": None}
    assert fields["tokenizer.ggml.merges"] == ["a b", "ab c"] and len(fields) == 27
    with pytest.raises(WeightsError, match=r"^tokenizer.ggml.scores: found 2 values, expected "
                                           r"one per token \(40\)$"):
        tokenizer_metadata({**metadata, "tokenizer.ggml.scores": [0.0, 1.0]})
    with pytest.raises(WeightsError, match=r"^tokenizer.ggml.tokens: missing"):
        tokenizer_metadata({"tokenizer.ggml.model": "gpt2"})


def test_the_tokenizer_reads_the_checked_metadata_and_refuses_in_the_same_terms():
    with tempfile.TemporaryDirectory() as folder:
        path = write(folder, gguf_bytes(tokenizer_entries()))
        metadata = minillm.files.read_gguf(path).metadata
    assert len(Tokenizer.from_gguf(metadata)) == 40
    for key, value in [("tokenizer.ggml.merges", 3), ("tokenizer.ggml.tokens", None),
                       ("tokenizer.ggml.eos_token_id", float("inf"))]:
        with pytest.raises(WeightsError, match=f"^{key}: found "):
            Tokenizer.from_gguf({**metadata, key: value})


# ---------------------------------------------------------------------- convert, then load

def converted_and_reloaded(path, folder):
    """The model converted from the GGUF file at `path`, and that model saved and loaded."""
    model = model_from_gguf(path)
    minillm.save(model, Path(folder) / "m.npz")
    return model, minillm.load(Path(folder) / "m.npz", fast=False)


def assert_same_after_reload(model, loaded):
    assert loaded.config == model.config
    assert model.params.keys() == loaded.params.keys()
    for name, value in model.params.items():
        np.testing.assert_array_equal(loaded.params[name], value, err_msg=name)
    assert (model.tokenizer is None) == (loaded.tokenizer is None)
    if model.tokenizer is not None:
        assert same_tokens(loaded.tokenizer, model.tokenizer)
        assert loaded.tokenizer.config == model.tokenizer.config
    np.testing.assert_array_equal(loaded.forward(TOKENS % model.config.vocab_size),
                                  model.forward(TOKENS % model.config.vocab_size))


VALID = valid_files()


@pytest.mark.parametrize("name", sorted(VALID))
def test_whatever_convert_writes_load_reads(tmp_path, name):
    """Every valid file the suite builds (gguf_files.valid_files) converts, saves and loads
    back to the same model; the tokenizer-only file reads and is refused in one line."""
    path = write(tmp_path, VALID[name])
    if name == "vocab-only":
        assert len(Tokenizer.from_gguf(minillm.files.read_gguf(path).metadata)) == 40
        with pytest.raises(WeightsError, match="no token_embd.weight tensor$"):
            model_from_gguf(path)
        return
    assert_same_after_reload(*converted_and_reloaded(path, tmp_path))
