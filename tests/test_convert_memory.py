"""Converting a GGUF file in bounded memory: int8 weights quantized tensor by tensor equal, bit
for bit, the float model quantized whole; and a conversion's peak of traced allocations stays
within the arrays it keeps plus the tensor at hand (tracemalloc counts NumPy's arrays)."""
import tracemalloc

import numpy as np
import pytest

import minillm
from minillm.cli import main
from minillm.files import from_state_dict, gguf_quants, model_from_gguf, to_hf_state_dict
from minillm.quantize import QuantizedWeight, is_linear_weight, quantize
from tests.gguf_files import gguf_bytes, gpt2_gguf_parts, model_gguf_bytes, valid_files

# The float model's linear weights (3.4 MiB) dwarf the largest of them (gate_up, 256 KiB), so
# that holding them all twice cannot pass for holding one more; the embedding (2 MiB, never
# quantized) is the largest tensor, so that decoding it whole, not a slice at a time, shows.
CFG = minillm.ModelConfig(arch="modern", vocab_size=4096, context_length=16, d_model=128,
                          n_layers=6, n_heads=4, n_kv_heads=2, d_ff=256, activation="silu")
GPT2 = minillm.ModelConfig(arch="classic", vocab_size=50, context_length=16, d_model=32,
                           n_layers=2, n_heads=4, d_ff=64, activation="gelu_tanh")
# Traced bytes besides the arrays: the config, the metadata, names, dicts, the decoder's
# blocks (DECODE_VALUES is set to 4096 values below).
SLACK = 256 * 1024
# Bytes per value of the largest linear weight held besides the kept arrays while it is
# converted: float32, its parts (q, k, v; gate, up) until they are fused; int8, the fused
# float32 array, quantize_rows' float64 copy and the |W| it takes the row maxima of (4 + 8 + 8).
AT_HAND = {False: 4, True: 4 + 8 + 8}


def assert_same_params(a, b):
    assert a.keys() == b.keys()
    for name in a:
        x, y = a[name], b[name]
        assert type(x) is type(y), name
        if isinstance(x, QuantizedWeight):
            assert x.bits == y.bits, name
            np.testing.assert_array_equal(x.q, y.q, err_msg=name)
            np.testing.assert_array_equal(x.scale.view(np.uint32), y.scale.view(np.uint32),
                                          err_msg=name)
        else:
            assert x.dtype == y.dtype, name
            np.testing.assert_array_equal(x, y, err_msg=name)



@pytest.mark.parametrize("name", ["llama", "llama-untied", "qwen2-bias", "llama-q8_0",
                                  "llama-tokenizer", "gpt2"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_int8_tensor_by_tensor_is_the_float_model_quantized(tmp_path, name, dtype):
    """model_from_gguf(int8=True) quantizes each weight as it is read; minillm.quantize of the
    float model gives the same integers and scales, bit for bit, and the same floats."""
    if name == "gpt2":
        data = gguf_bytes(*gpt2_gguf_parts(minillm.random_model(GPT2, seed=3)))
    else:
        data = valid_files()[name]
    path = tmp_path / f"{name}.gguf"
    path.write_bytes(data)
    int8 = model_from_gguf(path, dtype=dtype, int8=True)
    whole = quantize(model_from_gguf(path, dtype=dtype))
    assert any(isinstance(w, QuantizedWeight) for w in int8.params.values())
    assert_same_params(int8.params, whole.params)


@pytest.mark.parametrize("cfg", [CFG, GPT2], ids=["hf-llama", "hf-gpt2"])
def test_int8_from_a_state_dict_is_the_float_model_quantized(cfg):
    """The same for any state dict (a Hugging Face checkpoint's names and layouts)."""
    sd = to_hf_state_dict(minillm.random_model(cfg, seed=5))
    naming = "hf-gpt2" if cfg.arch == "classic" else "hf-llama"
    assert_same_params(from_state_dict(sd, cfg, naming=naming, int8=True).params,
                       quantize(from_state_dict(sd, cfg, naming=naming)).params)


def test_convert_int8_writes_the_float_model_quantized(tmp_path, capsys):
    path = tmp_path / "m.gguf"
    path.write_bytes(valid_files()["llama-q8_0"])
    assert main(["convert", str(path), str(tmp_path / "q.npz"), "--int8"]) == 0
    assert "linear weights int8" in capsys.readouterr().out
    loaded = minillm.load(tmp_path / "q.npz", fast=False)
    assert_same_params(loaded.params, quantize(model_from_gguf(path)).params)


def kept_bytes(model) -> int:
    return sum(w.q.nbytes + w.scale.nbytes if isinstance(w, QuantizedWeight) else w.nbytes
               for w in model.params.values())


def traced_peak(convert):
    """(what convert() returns, the peak of traced bytes while it ran)."""
    tracemalloc.start()
    try:
        result = convert()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("int8", [False, True], ids=["float32", "int8"])
@pytest.mark.parametrize("q8_0", [False, True], ids=["F32", "Q8_0"])
def test_a_conversion_holds_the_kept_arrays_plus_the_tensor_at_hand(tmp_path, monkeypatch,
                                                                    int8, q8_0):
    """peak <= kept arrays + AT_HAND bytes per value of the largest linear weight + SLACK;
    the way that holds the whole float model (quantized afterwards, or dequantized whole
    before the model is built) exceeds the same bound."""
    monkeypatch.setattr(gguf_quants, "DECODE_VALUES", 4096)
    model = minillm.random_model(CFG, seed=0)
    path = tmp_path / "m.gguf"
    path.write_bytes(model_gguf_bytes(model, q8_0=q8_0))
    largest = max(w.size for name, w in model.params.items() if is_linear_weight(name))
    converted, peak = traced_peak(lambda: model_from_gguf(path, int8=int8))
    bound = kept_bytes(converted) + AT_HAND[int8] * largest + SLACK
    assert peak <= bound, f"peak {peak:,} bytes > bound {bound:,}"

    if int8:
        _, old_peak = traced_peak(lambda: quantize(model_from_gguf(path)))
    else:  # the file's whole float32 copy beside the model being built
        def old():
            from minillm.files import read_gguf
            gguf = read_gguf(path)
            tensors = {name: t.numpy() for name, t in gguf.tensors.items()}
            return model_from_gguf(gguf), tensors
        _, old_peak = traced_peak(old)
    assert old_peak > bound, f"the old way's peak {old_peak:,} is within the bound {bound:,}"
