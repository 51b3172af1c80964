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
import os
import subprocess
import sys
import types

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

import minillm  # noqa: E402
from minillm.files import convert  # noqa: E402

VOCAB, CONTEXT = 97, 128
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
}


def hf_model(name, seed=0):
    config_class, model_class, settings = FAMILIES[name]
    config = getattr(transformers, config_class)(**COMMON, **settings)
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
