"""minillm against Hugging Face transformers: converted models give the same logits and the same
greedy text, and exported folders load back in transformers with the same logits.

Models are random-init GPT2LMHeadModel / LlamaForCausalLM / Qwen2ForCausalLM with every
parameter randomised (norm gains and biases included, so that each tensor's placement matters).
Tolerances: float32 logits within 1e-4 (absolute); float64 within 1e-12. In a float64 Llama,
transformers still computes its RoPE tables and its RMSNorms in float32, so the float64
comparisons swap in float64 versions of those two (`_float64_internals`): what remains is
summation order (minillm's float64 GELU uses math.erfc, so exact-GELU models are no exception).
"""
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

import minillm  # noqa: E402
from minillm.cli import main  # noqa: E402
from minillm.files import config_from_hf, convert, export_hf, from_state_dict, half_to_interleaved

ATOL32, ATOL64 = 1e-4, 1e-12
VOCAB, CONTEXT = 97, 128

# A spread of shapes: head sizes 4 to 32, GQA and MQA, tied and untied, three rope_theta,
# both GELUs, Qwen2's q/k/v bias.
GPT2_CONFIGS = {
    "gpt2-h12-tied-gelu_new": dict(n_embd=48, n_head=4, n_layer=2, activation_function="gelu_new"),
    "gpt2-h32-untied-gelu": dict(n_embd=64, n_head=2, n_layer=3, activation_function="gelu",
                                 tie_word_embeddings=False),
    "gpt2-h8-tied-gelu": dict(n_embd=32, n_head=4, n_layer=2, activation_function="gelu"),
    "gpt2-h4-untied-ff80": dict(n_embd=32, n_head=8, n_layer=1, n_inner=80,
                                activation_function="gelu_pytorch_tanh",
                                tie_word_embeddings=False),
}
LLAMA_CONFIGS = {
    "llama-gqa4:2-h16-tied": dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                                  num_hidden_layers=2, intermediate_size=96,
                                  tie_word_embeddings=True, rope_theta=10000.0),
    "llama-mqa8:1-h8-untied-theta500": dict(hidden_size=64, num_attention_heads=8,
                                            num_key_value_heads=1, num_hidden_layers=2,
                                            intermediate_size=160, rope_theta=500.0),
    "llama-mha3-h32-theta1e6": dict(hidden_size=96, num_attention_heads=3, num_key_value_heads=3,
                                    num_hidden_layers=1, intermediate_size=64,
                                    rope_theta=1e6),
    "qwen2-bias-gqa4:2-h16-tied": dict(qwen2=True, hidden_size=64, num_attention_heads=4,
                                       num_key_value_heads=2, num_hidden_layers=2,
                                       intermediate_size=96, tie_word_embeddings=True,
                                       rope_theta=1e6),
    "qwen2-bias-gqa6:2-h8-untied": dict(qwen2=True, hidden_size=48, num_attention_heads=6,
                                        num_key_value_heads=2, num_hidden_layers=2,
                                        intermediate_size=64, rope_theta=10000.0),
}
CONFIGS = {**GPT2_CONFIGS, **LLAMA_CONFIGS}


def hf_model(name, seed=0, vocab_size=VOCAB):
    """A random-init transformers model for CONFIGS[name], every parameter randomised."""
    kw = dict(CONFIGS[name])
    common = dict(vocab_size=vocab_size, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    if name.startswith("gpt2"):
        config = transformers.GPT2Config(n_positions=CONTEXT, resid_pdrop=0.0, embd_pdrop=0.0,
                                         attn_pdrop=0.0, **common, **kw)
        model = transformers.GPT2LMHeadModel(config)
    else:
        qwen2 = kw.pop("qwen2", False)
        theta = kw.pop("rope_theta")
        kind = transformers.Qwen2Config if qwen2 else transformers.LlamaConfig
        config = kind(max_position_embeddings=CONTEXT, rms_norm_eps=1e-6,
                      rope_parameters={"rope_type": "default", "rope_theta": theta},
                      **common, **kw)
        model = (transformers.Qwen2ForCausalLM if qwen2 else transformers.LlamaForCausalLM)(config)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            is_norm = "norm" in pname or ".ln_" in pname or pname.endswith("ln_f.weight")
            p.copy_(1.0 + 0.1 * noise if is_norm and pname.endswith("weight") else 0.1 * noise)
    return model.eval()


def _float64_internals(model):
    """Make transformers' rotary tables and RMSNorms float64 (its own compute in float32)."""
    cfg = model.config
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    theta = cfg.rope_parameters["rope_theta"]

    def rope(x, position_ids):
        inv_freq = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        angles = position_ids[..., None].double() * inv_freq  # (B, T, d/2)
        emb = torch.cat((angles, angles), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)

    def rms_norm(module):
        def forward(h):
            return module.weight * h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True)
                                                   + module.variance_epsilon)
        return forward

    model.model.rotary_emb.forward = rope
    for module in model.modules():
        if type(module).__name__.endswith("RMSNorm"):
            module.forward = rms_norm(module)


def hf_logits(model, tokens, dtype=torch.float32):
    model = model.to(dtype)
    if dtype == torch.float64 and hasattr(model, "model"):
        _float64_internals(model)
    with torch.no_grad():
        return model(torch.tensor(tokens)).logits.numpy()


def tokens(batch=2, length=48, seed=1):
    return np.random.default_rng(seed).integers(0, VOCAB, (batch, length))


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("dtype, atol", [("float32", ATOL32), ("float64", ATOL64)])
def test_converted_state_dict_gives_transformers_logits(name, dtype, atol):
    model = hf_model(name)
    cfg = config_from_hf(model.config.to_dict())
    ours = from_state_dict(model.state_dict(), cfg, dtype=dtype)
    x = tokens()
    np.testing.assert_allclose(ours.forward(x), hf_logits(model, x, getattr(torch, dtype)),
                               rtol=0, atol=atol)


@pytest.mark.parametrize("name", CONFIGS)
def test_greedy_64_tokens_identical_through_a_saved_folder(name, tmp_path):
    model = hf_model(name, seed=2)
    model.save_pretrained(tmp_path / "hf")
    ours = convert(tmp_path / "hf")
    prompt = tokens(batch=1, length=8, seed=3)
    with torch.no_grad():
        theirs = model.generate(torch.tensor(prompt), do_sample=False, max_new_tokens=64,
                                min_new_tokens=64, pad_token_id=0).numpy()
    assert theirs.shape == (1, 72)
    ids = minillm.generate(ours, prompt[0].tolist(), max_new_tokens=64, temperature=0)
    np.testing.assert_array_equal(ids, theirs[0])


@pytest.mark.parametrize("name", CONFIGS)
def test_cli_round_trip_hf_to_npz_to_hf_keeps_the_logits(name, tmp_path, capsys):
    model = hf_model(name, seed=4)
    model.save_pretrained(tmp_path / "hf")
    assert main(["convert", str(tmp_path / "hf"), str(tmp_path / "m.npz")]) == 0
    assert main(["inspect", str(tmp_path / "m.npz")]) == 0
    assert main(["export", str(tmp_path / "m.npz"), "--to", "hf", str(tmp_path / "back")]) == 0
    capsys.readouterr()
    back = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "back").eval()
    assert type(back) is type(model)
    x = tokens(seed=5)
    expected = hf_logits(model, x)
    np.testing.assert_allclose(hf_logits(back, x), expected, rtol=0, atol=ATOL32)
    np.testing.assert_allclose(minillm.load(tmp_path / "m.npz").forward(x), expected, rtol=0,
                               atol=ATOL32)


EXPORT_CONFIGS = [
    dict(arch="classic", d_model=48, n_heads=4, activation="gelu", tie_embeddings=False),
    dict(arch="classic", d_model=32, n_heads=2, activation="gelu_tanh", tie_embeddings=True),
    dict(arch="modern", d_model=64, n_heads=4, n_kv_heads=2, tie_embeddings=True),
    dict(arch="modern", d_model=48, n_heads=6, n_kv_heads=3, tie_embeddings=False,
         rope_theta=500.0),
    dict(arch="modern", d_model=64, n_heads=4, n_kv_heads=1, bias=True, rope_theta=1e6),
]


@pytest.mark.parametrize("kw", EXPORT_CONFIGS, ids=lambda kw: "-".join(map(str, kw.values())))
@pytest.mark.parametrize("dtype, atol", [("float32", ATOL32), ("float64", ATOL64)])
def test_exported_minillm_model_loads_in_transformers_with_the_same_logits(kw, dtype, atol,
                                                                           tmp_path):
    cfg = minillm.ModelConfig(vocab_size=VOCAB, context_length=CONTEXT, n_layers=2, **kw)
    ours = minillm.random_model(cfg, seed=6, dtype=dtype, std=0.1)
    export_hf(ours, tmp_path)
    theirs = transformers.AutoModelForCausalLM.from_pretrained(
        tmp_path, dtype=getattr(torch, dtype)).eval()
    x = tokens(seed=7)
    np.testing.assert_allclose(ours.forward(x), hf_logits(theirs, x, getattr(torch, dtype)),
                               rtol=0, atol=atol)


def test_nanogpt_training_checkpoint_converts_from_the_command_line(tmp_path, capsys):
    """nanoGPT's names are GPT-2's, with nn.Linear (out, in) weights, a torch.compile prefix,
    causal-mask buffers, and the weights inside a training checkpoint."""
    model = hf_model("gpt2-h8-tied-gelu", seed=8)  # nanoGPT: exact GELU, tied, biases
    state = {}
    for key, value in model.state_dict().items():
        conv1d = key.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight"))
        state["_orig_mod." + key] = value.t().contiguous() if conv1d else value
    for i in range(model.config.n_layer):
        state[f"_orig_mod.transformer.h.{i}.attn.bias"] = torch.tril(torch.ones(1, 1, 8, 8))
    state["_orig_mod.lm_head.weight"] = state["_orig_mod.transformer.wte.weight"]  # tied
    model_args = dict(n_layer=2, n_head=4, n_embd=32, block_size=CONTEXT, bias=True,
                      vocab_size=VOCAB, dropout=0.0)
    torch.save({"model": state, "iter_num": 100, "model_args": model_args},
               tmp_path / "ckpt.pt")
    assert main(["convert", str(tmp_path / "ckpt.pt"), str(tmp_path / "m.npz")]) == 0
    assert "classic" in capsys.readouterr().out
    assert minillm.load(tmp_path / "m.npz").config == config_from_hf(model.config.to_dict())
    x = tokens(seed=9)
    np.testing.assert_allclose(minillm.load(tmp_path / "m.npz").forward(x), hf_logits(model, x),
                               rtol=0, atol=ATOL32)


@pytest.mark.parametrize("name", ["llama-gqa4:2-h16-tied", "llama-mqa8:1-h8-untied-theta500"])
def test_interleaved_rope_checkpoint_in_llama2c_naming(name, tmp_path):
    """A Meta / llama2.c checkpoint made from an HF Llama by the inverse permutation: converting
    it must permute q and k back, and give transformers' logits."""
    model = hf_model(name, seed=10)
    cfg = config_from_hf(model.config.to_dict())
    rename = {"self_attn.q_proj": "attention.wq", "self_attn.k_proj": "attention.wk",
              "self_attn.v_proj": "attention.wv", "self_attn.o_proj": "attention.wo",
              "mlp.gate_proj": "feed_forward.w1", "mlp.down_proj": "feed_forward.w2",
              "mlp.up_proj": "feed_forward.w3", "input_layernorm": "attention_norm",
              "post_attention_layernorm": "ffn_norm", "model.embed_tokens": "tok_embeddings",
              "model.norm": "norm", "lm_head": "output", "model.layers": "layers"}
    state = {}
    for key, value in model.state_dict().items():
        w = value.numpy()
        if "q_proj" in key:
            w = half_to_interleaved(w, cfg.n_heads)
        elif "k_proj" in key:
            w = half_to_interleaved(w, cfg.n_kv_heads)
        for theirs, meta in rename.items():
            key = key.replace(theirs, meta)
        state[key] = torch.from_numpy(w.copy())
    if cfg.tie_embeddings:  # llama2.c shares tok_embeddings and output
        state["output.weight"] = state["tok_embeddings.weight"]
    state["freqs_cos"] = torch.zeros(CONTEXT, cfg.head_dim // 2)  # ignored buffers
    if cfg.tie_embeddings:  # llama2.c's own checkpoints carry their model_args
        model_args = dict(dim=cfg.d_model, n_layers=cfg.n_layers, n_heads=cfg.n_heads,
                          n_kv_heads=cfg.n_kv_heads, vocab_size=VOCAB, multiple_of=32,
                          norm_eps=cfg.norm_eps, max_seq_len=CONTEXT, dropout=0.0)
        torch.save({"model": state, "model_args": model_args}, tmp_path / "llama2c.pt")
        config_args = []
        assert cfg.rope_theta == 10000.0  # llama2.c's fixed theta
    else:  # Meta's consolidated.00.pth: the bare state dict, the config beside it
        torch.save(state, tmp_path / "llama2c.pt")
        (tmp_path / "cfg.json").write_text(json.dumps(model.config.to_dict()))
        config_args = ["--config", str(tmp_path / "cfg.json")]
    assert main(["convert", str(tmp_path / "llama2c.pt"), str(tmp_path / "m.npz"),
                 *config_args]) == 0  # naming detected: meta
    assert minillm.load(tmp_path / "m.npz").config == cfg
    x = tokens(seed=11)
    np.testing.assert_allclose(minillm.load(tmp_path / "m.npz").forward(x), hf_logits(model, x),
                               rtol=0, atol=ATOL32)
    # Without the permutation (read as if it were half-split) the logits are wrong.
    table = dict(minillm.files.NAMINGS["meta"].names)
    plain = minillm.files.Naming(table, ignore=(r"freqs_cos",))
    wrong = from_state_dict(state, cfg, naming=plain).forward(x)
    assert np.abs(wrong - hf_logits(model, x)).max() > 100 * ATOL32


def test_tokenizer_json_travels_with_the_model(tmp_path):
    """A folder's tokenizer.json is bundled into the .npz and written out again by export."""
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>"],
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(["the quick brown fox jumps over the lazy dog"] * 20, trainer)
    model = hf_model("llama-gqa4:2-h16-tied", seed=12, vocab_size=320)
    model.save_pretrained(tmp_path / "hf")
    tok.save(str(tmp_path / "hf" / "tokenizer.json"))
    ours = convert(tmp_path / "hf")
    text = "the lazy fox jumps, quickly!"
    assert ours.tokenizer is not None
    assert ours.tokenizer.encode(text) == tok.encode(text).ids
    minillm.save(ours, tmp_path / "m.npz")
    export_hf(minillm.load(tmp_path / "m.npz"), tmp_path / "out")
    again = tokenizers.Tokenizer.from_file(str(tmp_path / "out" / "tokenizer.json"))
    assert again.encode(text).ids == tok.encode(text).ids
    assert convert(tmp_path / "hf", tokenizer=False).tokenizer is None


def test_a_tokenizer_minillm_cannot_read_stops_the_conversion_with_a_way_on(tmp_path, capsys):
    model = hf_model("llama-gqa4:2-h16-tied", seed=13)
    model.save_pretrained(tmp_path / "hf")
    (tmp_path / "hf" / "tokenizer.json").write_text('{"model": {"type": "Unigram"}}')
    assert main(["convert", str(tmp_path / "hf"), str(tmp_path / "m.npz")]) == 2
    assert "--no_tokenizer" in capsys.readouterr().err
    assert main(["convert", str(tmp_path / "hf"), str(tmp_path / "m.npz"), "--no_tokenizer"]) == 0
