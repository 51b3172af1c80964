"""GGUF files of the Llama family to minillm models: the config from the metadata, q and k rows
permuted back for llama (not for qwen2), and the refusals; `minillm convert MODEL.gguf`."""
import dataclasses
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings

import minillm
from minillm.cli import main
from minillm.convert import convert, interleaved_to_half, model_from_gguf
from minillm.quantize import QuantizedWeight
from minillm.weights import WeightsError
from tests.gguf_files import (FLOAT32, STRING, UINT32, llama_cpp_metadata, llama_cpp_tensors,
                              model_gguf_bytes)
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
@given(cfg=model_configs(arch="modern", context_length=16))
def test_a_llama_gguf_converts_to_the_same_model(cfg):
    """q and k rows permuted as llama.cpp permutes them come back; biases too (as in
    llama.cpp's converter); tied and untied output layers."""
    cfg = dataclasses.replace(cfg, activation="silu")  # GGUF's llama family is SwiGLU
    model = minillm.random_model(cfg, seed=1)
    with tempfile.TemporaryDirectory() as folder:
        assert_same_model(model_from_gguf(write(folder, model_gguf_bytes(model))), model)


@settings(max_examples=12)
@given(cfg=model_configs(arch="modern", context_length=16))
def test_a_qwen2_gguf_is_not_permuted(cfg):
    cfg = dataclasses.replace(cfg, activation="silu")
    model = minillm.random_model(cfg, seed=2)
    data = model_gguf_bytes(model, arch="qwen2", permute=False)
    with tempfile.TemporaryDirectory() as folder:
        assert_same_model(model_from_gguf(write(folder, data)), model)


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
    assert "general.architecture 'gpt2' is not supported" in refusal(tmp_path, model, arch="gpt2")
    assert "'phi3' is not supported" in refusal(tmp_path, model, arch="phi3")
    assert "RoPE scaling (yarn)" in refusal(
        tmp_path, model, extra_metadata=[("llama.rope.scaling.type", STRING, "yarn")])
    assert "mixtures of experts" in refusal(
        tmp_path, model, extra_metadata=[("llama.expert_count", UINT32, 8)])
    assert "llama.attention.key_length is 8" in refusal(
        tmp_path, model, extra_metadata=[("llama.attention.key_length", UINT32, 8)])


def test_missing_and_extra_tensors_and_metadata_are_refused(tmp_path):
    from tests.gguf_files import F32, gguf_bytes

    model = minillm.random_model(CFG, seed=7)
    tensors = {name: (name, w.shape, F32, w.tobytes())
               for name, w in llama_cpp_tensors(model).items()}
    metadata = llama_cpp_metadata(CFG)
    cases = [
        (metadata, [t for n, t in tensors.items() if n != "blk.1.ffn_up.weight"],
         "missing tensor(s) layers.1.mlp.gate_up.weight (from blk.1.ffn_gate.weight or "
         "blk.1.ffn_up.weight)"),
        (metadata, list(tensors.values()) + [("rope_freqs.weight", (4,), F32, bytes(16))],
         "RoPE scaling (rope_freqs)"),
        (metadata, list(tensors.values()) + [("blk.0.extra.weight", (4,), F32, bytes(16))],
         "not mapped by the naming table: blk.0.extra.weight"),
        (metadata[:-2], list(tensors.values()), "missing metadata llama.attention.layer_norm"),
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
])
def test_the_convert_command_reports_a_bad_gguf_in_one_line(tmp_path, capsys, argv, message):
    files = {"bad": write(tmp_path, b"GGML" + bytes(40), "bad.gguf"), "out": tmp_path / "o.npz",
             "good": write(tmp_path, model_gguf_bytes(minillm.random_model(CFG)), "good.gguf")}
    assert main(["convert"] + [a.format(**files) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("minillm convert: error: ") and message in err
    assert err.count("\n") == 1 and not (tmp_path / "o.npz").exists()
