"""minillm/tiny.py, the whole algorithm in one file, computes what the library computes.

On Hypothesis-drawn float64 models of both architectures (odd sizes, grouped-query attention,
tied or untied output, biases on or off, each activation):
- the logits equal Model.forward's to 1e-12, over the whole text and through the cache (and
  float32 logits stay float32, equal to float32 rounding);
- the sampling filters give the library's distributions bit for bit (ties included) and the
  same token for the same generator;
- generate and speculative_generate give the library's tokens for the same seed and knobs;
- int8 rows are the library's, bit for bit, and so are (to 1e-12) the quantized logits.
The last test plants a bug in a copy of tiny.py and shows that these checks catch it.
Only the library's public names are used, and the q and scale of its quantized weights.
"""
import types
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import minillm
from minillm import tiny

EXAMPLES = settings(derandomize=True, max_examples=40, deadline=None)
ATOL = 1e-12
CONTEXT = 24


# -- what is drawn --------------------------------------------------------------------------

@st.composite
def configs(draw, vocab_size=None):
    """A tiny ModelConfig: vocab <= 64, d_model <= 24, at most 2 layers, odd sizes allowed."""
    arch = draw(st.sampled_from(["classic", "modern"]))
    if arch == "modern":
        n_kv_heads = draw(st.integers(1, 2))
        n_heads = n_kv_heads * draw(st.integers(1, 3))
        head_dim = draw(st.sampled_from([d for d in (2, 4, 6) if n_heads * d <= 24]))
        activation = draw(st.sampled_from(["silu", "silu", "gelu", "gelu_tanh"]))
    else:
        n_heads = n_kv_heads = draw(st.integers(1, 3))
        head_dim = draw(st.sampled_from([d for d in (1, 3, 5, 7) if n_heads * d <= 24]))
        activation = draw(st.sampled_from(["gelu", "gelu_tanh"]))
    return minillm.ModelConfig(
        arch=arch, vocab_size=vocab_size or draw(st.integers(2, 64)), context_length=CONTEXT,
        d_model=n_heads * head_dim, n_layers=draw(st.integers(1, 2)), n_heads=n_heads,
        n_kv_heads=n_kv_heads, d_ff=draw(st.integers(1, 37)),
        norm_eps=draw(st.sampled_from([1e-5, 1e-6, 0.01])),
        rope_theta=draw(st.sampled_from([10000.0, 500.0, 1e6])),
        tie_embeddings=draw(st.booleans()), bias=draw(st.booleans()), activation=activation)


@st.composite
def models(draw, vocab_size=None, dtype="float64"):
    """A model with seeded random weights, small or large (peaked distributions)."""
    return minillm.random_model(draw(configs(vocab_size)), seed=draw(st.integers(0, 2**16)),
                                dtype=dtype, std=draw(st.sampled_from([0.02, 0.3, 1.0])))


def token_lists(vocab, min_size, max_size):
    return st.lists(st.integers(0, vocab - 1), min_size=min_size, max_size=max_size)


KNOBS = st.fixed_dictionaries(
    {"temperature": st.sampled_from([0.0, 0.3, 0.7, 1.0, 1.0, 1.8])},
    optional={"top_k": st.integers(0, 70),
              "top_p": st.sampled_from([0.1, 0.5, 0.9, 1.0]) | st.floats(0.01, 1.0),
              "min_p": st.sampled_from([0.0, 0.1]) | st.floats(0.0, 0.8),
              "repetition_penalty": st.sampled_from([1.0, 1.5]) | st.floats(0.5, 3.0),
              "penalty_window": st.integers(1, 10)})


# -- the checks (also run on a copy of tiny with a planted bug, below) ---------------------

def check_forward(impl, model, tokens, split):
    """Uncached logits of the whole text, then a prefill of tokens[:split] and one token at a
    time through the cache: both equal the library's."""
    cfg, params = model.config, model.params
    want = model.forward(np.array([tokens]))[0]
    np.testing.assert_allclose(impl.forward(params, cfg, tokens), want, rtol=0, atol=ATOL)
    cache, lib_cache = [], model.new_cache(1)
    got = [impl.forward(params, cfg, tokens[:split], cache)]
    lib = [model.forward(np.array([tokens[:split]]), lib_cache)[0]]
    for t in tokens[split:]:
        got.append(impl.forward(params, cfg, [t], cache))
        lib.append(model.forward(np.array([[t]]), lib_cache)[0])
    np.testing.assert_allclose(np.concatenate(got), np.concatenate(lib), rtol=0, atol=ATOL)
    np.testing.assert_allclose(np.concatenate(got), want, rtol=0, atol=ATOL)
    assert impl.cache_length(cache) == len(tokens)


def check_filters(impl, logits, history, knobs, seed):
    """The same distribution, bit for bit, and the same token from the same generator."""
    got = impl.filtered_probs(logits, history, **knobs)
    want = minillm.filtered_probs(logits[None], history=[history], **knobs)[0]
    assert np.array_equal(got, want), (got, want)
    token = impl.sample(got, knobs.get("temperature", 1.0), np.random.default_rng(seed))
    assert token == minillm.sample_next_token(logits[None], history=[history],
                                              rng=np.random.default_rng(seed), **knobs)[0]


def check_generate(impl, model, prompt, n, seed, knobs, stop_tokens=()):
    got = impl.generate(model.params, model.config, prompt, n, seed=seed,
                        stop_tokens=stop_tokens, **knobs)
    want = minillm.generate(model, prompt, seed=seed, max_new_tokens=n,
                            stop_tokens=stop_tokens, **knobs)
    assert got == want


def check_speculative(impl, target, draft, prompt, n, k, seed, knobs, stop_tokens=()):
    got = impl.speculative_generate(target.params, draft.params, target.config, draft.config,
                                    prompt, k=k, max_new_tokens=n, seed=seed,
                                    stop_tokens=stop_tokens, **knobs)
    want, _ = minillm.speculative_generate(target, draft, prompt, k=k, max_new_tokens=n,
                                           seed=seed, stop_tokens=stop_tokens, **knobs)
    assert got == want


def library_int8(params):
    """The library's quantized params in tiny's form: (Q, s) pairs for its quantized weights."""
    return {name: (w.q, w.scale) if hasattr(w, "q") and hasattr(w, "scale") else w
            for name, w in params.items()}


def check_int8(impl, model, w, tokens):
    q, s = impl.quantize_rows(w)
    want_q, want_s = minillm.quantize_rows(w)
    assert q.dtype == want_q.dtype and s.dtype == want_s.dtype
    assert np.array_equal(q, want_q) and np.array_equal(s, want_s)
    quantized = minillm.quantize(model)
    lib, ours = library_int8(quantized.params), impl.quantize(model.params)
    assert lib.keys() == ours.keys()
    for name, value in lib.items():
        assert isinstance(value, tuple) == isinstance(ours[name], tuple), name
        if isinstance(value, tuple):
            assert all(np.array_equal(a, b) for a, b in zip(value, ours[name])), name
    assert any(isinstance(value, tuple) for value in ours.values())
    np.testing.assert_allclose(impl.forward(ours, model.config, tokens),
                               quantized.forward(np.array([tokens]))[0], rtol=0, atol=ATOL)


# -- the tests ------------------------------------------------------------------------------

@EXAMPLES
@given(models(), st.data())
def test_logits_equal_the_library_uncached_and_cached(model, data):
    tokens = data.draw(token_lists(model.config.vocab_size, 1, CONTEXT))
    check_forward(tiny, model, tokens, data.draw(st.integers(1, len(tokens))))


@EXAMPLES
@given(models(dtype="float32"), st.data())
def test_float32_logits_stay_float32_and_agree_with_the_library(model, data):
    """tiny uses the library's float32 erfc fit and never promotes to float64; the two agree
    to float32 rounding (usually bit for bit)."""
    tokens = data.draw(token_lists(model.config.vocab_size, 1, CONTEXT))
    got = tiny.forward(model.params, model.config, tokens)
    want = model.forward(np.array([tokens]))[0]
    assert got.dtype == want.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max())


@EXAMPLES
@given(st.integers(1, 40).flatmap(lambda V: st.tuples(
    arrays(np.float64, V, elements=st.sampled_from([-3.0, -1.0, 0.0, 0.0, 0.5, 2.0]))
    | arrays(np.float64, V, elements=st.floats(-20, 20)),
    token_lists(V, 0, 12))), KNOBS, st.integers(0, 2**32 - 1))
def test_sampling_filters_and_draw_equal_the_library(logits_history, knobs, seed):
    """Ties (many equal logits) exercise top-k's and top-p's lowest-id rule."""
    logits, history = logits_history
    check_filters(tiny, logits, history, knobs, seed)


@EXAMPLES
@given(models(), KNOBS, st.integers(0, 2**32 - 1), st.data())
def test_generate_gives_the_library_tokens(model, knobs, seed, data):
    V = model.config.vocab_size
    prompt = data.draw(token_lists(V, 1, CONTEXT - 1))
    n = data.draw(st.integers(1, CONTEXT - len(prompt)))
    stops = data.draw(st.lists(st.integers(0, V - 1), max_size=2))
    check_generate(tiny, model, prompt, n, seed, knobs, stops)


@EXAMPLES
@given(models(), st.sampled_from(["itself", "perturbed", "other"]), KNOBS,
       st.integers(0, 2**32 - 1), st.data())
def test_speculative_decoding_gives_the_library_tokens(target, kind, knobs, seed, data):
    """The draft is the target itself (nearly every guess kept: bonus tokens), a perturbed
    copy (some kept, some resampled), or another model (mostly resampled)."""
    cfg = target.config
    if kind == "itself":
        draft = target
    elif kind == "perturbed":
        rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
        draft = minillm.Model(cfg, {name: w + 0.1 * w.std() * rng.standard_normal(w.shape)
                                    for name, w in target.params.items()})
    else:
        draft = data.draw(models(vocab_size=cfg.vocab_size))
    prompt = data.draw(token_lists(cfg.vocab_size, 1, CONTEXT - 1))
    n = data.draw(st.integers(0, CONTEXT - len(prompt)))
    stops = data.draw(st.lists(st.integers(0, cfg.vocab_size - 1), max_size=1))
    check_speculative(tiny, target, draft, prompt, n, data.draw(st.integers(1, 5)), seed, knobs,
                      stops)


@EXAMPLES
@given(models(), st.data())
def test_int8_rows_and_quantized_logits_equal_the_library(model, data):
    """quantize_rows bit for bit (zero rows, float32 input); the library's int8 product widens
    Q to the activations' float64 and scales after the sum, so the logits agree to 1e-12."""
    dtype = data.draw(st.sampled_from([np.float64, np.float32]))
    values = st.sampled_from([0.0, 1.0, -1.0]) | st.floats(-1e6, 1e6, width=32)
    w = data.draw(arrays(dtype, st.tuples(st.integers(1, 6), st.integers(1, 9)),
                         elements=values))
    tokens = data.draw(token_lists(model.config.vocab_size, 1, CONTEXT))
    check_int8(tiny, model, w, tokens)


# -- the checks can fail: a planted bug in a copy of tiny.py is caught ----------------------

def mutant(old: str, new: str) -> types.ModuleType:
    """tiny.py with `old` (which must occur once) replaced by `new`, as a module."""
    source = Path(tiny.__file__).read_text(encoding="utf-8")
    assert source.count(old) == 1, f"tiny.py no longer holds {old!r}: update the planted bug"
    module = types.ModuleType("tiny_with_a_planted_bug")
    exec(compile(source.replace(old, new), "tiny_with_a_planted_bug", "exec"), module.__dict__)
    return module


def fixed_model(arch, seed=0, **changes):
    cfg = minillm.ModelConfig(arch=arch, vocab_size=19, context_length=CONTEXT, d_model=16,
                              n_layers=2, n_heads=4, **changes)
    return minillm.random_model(cfg, seed=seed, dtype="float64", std=0.5)


def top_p_ties(impl):
    """8 equal logits, top_p 0.6: five tokens have mass before them < 0.6, the fifth crossing."""
    check_filters(impl, np.zeros(8), [], {"top_p": 0.6}, seed=1)


def penalty_window(impl):
    """Only the last token (1) is penalised, not the one before it (0)."""
    check_filters(impl, np.array([2.0, 1.9, -1.0]), [0, 1],
                  {"repetition_penalty": 3.0, "penalty_window": 1}, seed=1)


def grouped_heads(impl):
    check_forward(impl, fixed_model("modern", n_kv_heads=2), [1, 5, 2, 7, 3], split=2)


def speculative_residual(impl):
    target, draft = fixed_model("classic"), fixed_model("classic", seed=1)
    for seed in range(4):
        check_speculative(impl, target, draft, [3, 1, 4], 12, 3, seed, {"temperature": 1.0})


def int8_scale(impl):
    model = fixed_model("modern")
    check_int8(impl, model, model.params["layers.0.attn.qkv.weight"], [1, 2, 3])


PLANTED = {  # name: (tiny's text, the bug, a check that must catch it)
    "top-p drops the crossing token": (
        "(np.cumsum(sorted_e) - sorted_e)", "np.cumsum(sorted_e)", top_p_ties),
    "the repetition penalty ignores its window": (
        "history[-penalty_window:]", "history", penalty_window),
    "query head h reads key head h % K": (
        "np.repeat(k, H // len(k), axis=0)", "np.tile(k, (H // len(k), 1, 1))", grouped_heads),
    "a rejection resamples from p, not the residual": (
        "draw(residual(p[i], q[i]), v)", "draw(p[i], v)", speculative_residual),
    "int8 scales over 128 levels": ("/ 127).astype", "/ 128).astype", int8_scale),
}


@pytest.mark.parametrize("name", PLANTED)
def test_a_planted_bug_is_caught(name):
    old, new, check = PLANTED[name]
    check(tiny)  # tiny itself passes the check...
    with pytest.raises(AssertionError):
        check(mutant(old, new))  # ...and fails it with the bug
