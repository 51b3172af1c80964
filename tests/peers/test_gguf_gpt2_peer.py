"""A GPT-2 GGUF file (general.architecture = gpt2) against transformers.

A random GPT2LMHeadModel (tanh GELU, "gelu_new", which is what llama.cpp runs for gpt2) is
converted to minillm through its state dict, written as a GGUF file in llama.cpp's GPT-2 layout
(fused q/k/v, (out, in) matrices, biases, learned positions, output.weight a copy of the
embedding), and read back: the float32 logits are transformers' within 1e-4.
"""
import numpy as np
import pytest

from minillm.files import config_from_hf, from_state_dict, model_from_gguf
from tests.gguf_files import gguf_bytes, gpt2_gguf_parts

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

VOCAB, CONTEXT = 97, 64


@pytest.mark.parametrize("tied", [True, False])
def test_a_gpt2_gguf_gives_transformers_logits(tmp_path, tied):
    config = transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=CONTEXT, n_embd=48, n_head=4, n_layer=2,
        activation_function="gelu_new", tie_word_embeddings=tied, resid_pdrop=0.0,
        embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=None, eos_token_id=None)
    hf = transformers.GPT2LMHeadModel(config).eval()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=gen))
    ours = from_state_dict(hf.state_dict(), config_from_hf(hf.config.to_dict()))
    path = tmp_path / "gpt2.gguf"
    path.write_bytes(gguf_bytes(*gpt2_gguf_parts(ours)))
    converted = model_from_gguf(path)
    assert converted.config.arch == "classic" and not converted.config.tie_embeddings
    tokens = np.random.default_rng(1).integers(0, VOCAB, (2, 40))
    with torch.no_grad():
        expected = hf(torch.tensor(tokens)).logits.numpy()
    np.testing.assert_allclose(converted.forward(tokens), expected, rtol=0, atol=1e-4)
