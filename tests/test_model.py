"""The forward pass: cached decoding equals the full forward pass, whatever the chunking
(minillm.testing's cache and batch checks, on Hypothesis-drawn tiny models).

Tolerance: in float64, cached and uncached logits agree to 1e-12 (absolute) at every step;
the only difference between the two paths is the order of floating-point sums.
"""
import copy
import tracemalloc

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import minillm
from minillm.config import MAX_CONTEXT_LENGTH
from minillm.layers import rope_tables
from minillm.testing import assert_batch_matches, assert_chunks_match, assert_rollback_matches
from minillm.testing.strategies import (chunkings, model_configs, ragged_batches, rollback_cases,
                                        token_arrays)

ATOL = 1e-12


@given(st.data())
def test_decode_with_cache_equals_full_forward_at_every_step(data):
    cfg = data.draw(model_configs())
    model = minillm.random_model(cfg, seed=data.draw(st.integers(0, 2**16)), dtype="float64",
                                 std=0.5)
    batch = data.draw(st.integers(1, 3))
    length = data.draw(st.integers(2, cfg.context_length))
    prompt_len = data.draw(st.integers(1, length - 1))
    tokens = data.draw(token_arrays(cfg.vocab_size, batch, length))
    # prefill, then one token a step: each against the uncached pass over the text so far
    assert_chunks_match(model, tokens, range(prompt_len, length), atol=ATOL)
    cache = model.new_cache(batch)
    for t in range(length):
        model.forward(tokens[:, t:t + 1], cache)
        assert cache.length == t + 1


@given(st.data())
def test_prefill_in_one_call_equals_token_by_token_equals_random_chunks(data):
    cfg = data.draw(model_configs())
    model = minillm.random_model(cfg, seed=1, dtype="float64", std=0.5)
    length = data.draw(st.integers(1, cfg.context_length))
    tokens = data.draw(token_arrays(cfg.vocab_size, 1, length))
    whole = assert_chunks_match(model, tokens, [], atol=ATOL)
    one_by_one = assert_chunks_match(model, tokens, range(1, length), atol=ATOL)
    cuts = data.draw(chunkings(length))
    chunks = assert_chunks_match(model, tokens, cuts, atol=ATOL)
    np.testing.assert_allclose(one_by_one, whole, rtol=0, atol=ATOL)
    np.testing.assert_allclose(chunks, whole, rtol=0, atol=ATOL)
    last = data.draw(st.integers(1, length))
    np.testing.assert_allclose(model.forward(tokens, last=last), model.forward(tokens)[:, -last:],
                               rtol=0, atol=ATOL)


@given(st.data())
def test_left_padded_rows_equal_their_unpadded_forward(data):
    cfg = data.draw(model_configs())
    model = minillm.random_model(cfg, seed=2, dtype="float64", std=0.5)
    tokens, pads, split = data.draw(ragged_batches(cfg.vocab_size, 3, cfg.context_length))
    assert_batch_matches(model, tokens, pads, atol=ATOL, split=split)


@given(st.data())
def test_rollback_equals_the_uncached_text(data):
    cfg = data.draw(model_configs())
    model = minillm.random_model(cfg, seed=3, dtype="float64", std=0.5)
    case = data.draw(rollback_cases(cfg.vocab_size, max_batch=2, max_length=cfg.context_length))
    assert_rollback_matches(model, *case, atol=ATOL)


@pytest.mark.slow  # quick run: test_prefill_in_one_call_equals_token_by_token_equals_random_chunks
@pytest.mark.parametrize("fast", [False, True])
def test_a_long_text_read_in_chunks_equals_one_pass(fast):
    """1,100 tokens in the loop's chunks (window.READ_CHUNK) and in uneven ones, against the
    uncached pass at every chunk's end; the fast model's attention tiles
    (fast_attention.QUERY_ROWS queries, blocks of keys) fall across the chunks' edges."""
    from minillm.window import READ_CHUNK

    cfg = minillm.ModelConfig(arch="modern", vocab_size=64, context_length=1100, d_model=16,
                              n_layers=2, n_heads=4, n_kv_heads=2, d_ff=32)
    model = minillm.random_model(cfg, seed=4, dtype="float64", std=0.5)
    if fast:
        model = minillm.fast.accelerate(model)
    tokens = np.random.default_rng(0).integers(0, 64, size=(2, 1100))
    assert_chunks_match(model, tokens, range(READ_CHUNK, 1100, READ_CHUNK), atol=ATOL)
    assert_chunks_match(model, tokens, [1, 130, 131, 700, 1099], atol=ATOL)


@pytest.mark.parametrize("arch", ["classic", "modern"])
def test_float32_in_float32_out(arch):
    cfg = minillm.ModelConfig(arch=arch, vocab_size=32, context_length=16, d_model=16, n_layers=2,
                              n_heads=2)
    model = minillm.random_model(cfg)
    cache = model.new_cache()
    assert model.forward(np.zeros((1, 3), dtype=np.int64), cache).dtype == np.float32
    assert model.forward(np.zeros((1, 1), dtype=np.int32), cache).dtype == np.float32
    assert cache.k.dtype == np.float32


def test_truncate_and_reset_roll_the_cache_back():
    cfg = minillm.ModelConfig(arch="modern", vocab_size=20, context_length=12, d_model=8,
                              n_layers=2, n_heads=2, n_kv_heads=1)
    model = minillm.random_model(cfg, dtype="float64", std=0.5)
    tokens = np.array([[1, 2, 3, 4, 5, 6]])
    cache = model.new_cache()
    model.forward(tokens, cache)
    cache.truncate(3)
    again = model.forward(np.array([[7, 8]]), cache)
    np.testing.assert_allclose(again, model.forward(np.array([[1, 2, 3, 7, 8]]))[:, 3:], atol=ATOL)
    cache.reset()
    assert cache.length == 0
    with pytest.raises(ValueError, match="truncate"):
        cache.truncate(1)


def test_parameter_count_matches_config():
    for arch in ("classic", "modern"):
        for tie in (False, True):
            for bias in (False, True):
                cfg = minillm.ModelConfig(arch=arch, vocab_size=50, context_length=8, d_model=12,
                                          n_layers=2, n_heads=2, tie_embeddings=tie, bias=bias)
                model = minillm.random_model(cfg)
                assert sum(p.size for p in model.params.values()) == cfg.n_params()


def test_parameter_count_matches_config_with_gemma_options():
    for qk_norm in (False, True):
        for post_norms in (False, True):
            cfg = minillm.ModelConfig(arch="modern", vocab_size=50, context_length=8, d_model=12,
                                      n_layers=2, n_heads=2, n_kv_heads=1, head_dim=10,
                                      qk_norm=qk_norm, post_norms=post_norms)
            model = minillm.random_model(cfg)
            assert sum(p.size for p in model.params.values()) == cfg.n_params()


def window_config(**options):
    return minillm.ModelConfig(arch="modern", vocab_size=30, context_length=32, d_model=8,
                               n_layers=1, n_heads=2, n_kv_heads=1, **options)


@pytest.mark.parametrize("window", [1, 3, 7])
def test_a_local_layer_sees_exactly_its_window(window):
    """One local layer of window W: the logits at index i depend on token j iff i - W < j <= i
    (changing token 0 changes positions 0 .. W-1 and no later one)."""
    model = minillm.random_model(window_config(sliding_window=window, sliding_window_pattern=2),
                                 seed=3, dtype="float64", std=0.5)
    tokens = np.arange(1, 17)[None] % 30
    changed = tokens.copy()
    changed[0, 0] = 0
    moved = np.abs(model.forward(tokens) - model.forward(changed)).max(axis=-1)[0]  # (T,)
    assert (moved[:window] > 1e-6).all() and (moved[window:] == 0).all()


def test_a_global_layer_and_a_window_of_the_whole_text_see_everything():
    """Layer i is global when (i + 1) is a multiple of the pattern; a window at least as long as
    the text changes nothing."""
    tokens = np.arange(1, 17)[None] % 30
    plain = minillm.random_model(window_config(), seed=3, dtype="float64", std=0.5)
    for options in (dict(sliding_window=3, sliding_window_pattern=1),
                    dict(sliding_window=16, sliding_window_pattern=2)):
        model = minillm.Model(window_config(**options), plain.params)
        assert model.config.is_local(0) == (options["sliding_window_pattern"] == 2)
        np.testing.assert_array_equal(model.forward(tokens), plain.forward(tokens))


def test_clear_errors_for_bad_input():
    cfg = minillm.ModelConfig(arch="classic", vocab_size=10, context_length=4, d_model=4,
                              n_layers=1, n_heads=1)
    model = minillm.random_model(cfg)
    with pytest.raises(ValueError, match=r"ids must be in \[0, 10\)"):
        model.forward(np.array([[3, 10]]))
    with pytest.raises(ValueError, match="exceed the context length"):
        model.forward(np.zeros((1, 5), dtype=int))
    with pytest.raises(ValueError, match="batch, length"):
        model.forward(np.array([1, 2]))
    with pytest.raises(ValueError, match="tokens: token ids must be integers"):
        model.forward(np.array([[1.0]]))
    cache = model.new_cache(capacity=4)
    model.forward(np.zeros((1, 3), dtype=int), cache)
    with pytest.raises(ValueError, match="do not fit"):
        model.forward(np.zeros((1, 2), dtype=int), cache)
    with pytest.raises(ValueError, match="do not fit this model"):
        model.forward(np.zeros((2, 1), dtype=int), cache)


def test_a_new_cache_allocates_what_is_written_not_the_whole_context():
    """model.new_cache() holds no position until a forward pass writes some; then as many as
    were written, growing (by doubling) only when the text does."""
    cfg = minillm.ModelConfig(arch="modern", vocab_size=20, context_length=64, d_model=8,
                              n_layers=2, n_heads=2, n_kv_heads=1)
    model = minillm.random_model(cfg)
    cache = model.new_cache()
    assert cache.capacity == 64 and cache.k.nbytes == 0
    model.forward(np.arange(10)[None], cache)
    assert cache.k.shape[3] == 10
    model.forward(np.array([[1]]), cache)
    assert cache.k.shape[3] == 20 and cache.length == 11


def with_whole_tables(model):
    """The model as it was built before its RoPE tables grew with the text: tables of every
    position < context_length (layers.rope_tables), built at once and looked up."""
    cfg, whole = model.config, copy.copy(model)
    whole._rope_tables = {}
    for theta, scaled in model._rope_tables:  # a layer's RoPE base, and whether it is scaled
        cos, sin = rope_tables(cfg.context_length, cfg.head_dim, theta, model.dtype,
                               cfg.rope_scaling if scaled else None)
        whole._rope_tables[theta, scaled] = (cos[:, None], sin[:, None])
    whole._grow_rope = lambda end: None
    return whole


@given(st.data())
def test_rope_tables_grown_with_the_text_give_the_logits_of_whole_context_tables(data):
    """Bit for bit, on drawn batches (left-padded or not: positions as index arrays or slices)
    read uncached, then by a prefill and one token a step, so that the tables grow between
    passes."""
    cfg = data.draw(model_configs(arch="modern"))
    dtype = data.draw(st.sampled_from(["float32", "float64"]))
    model = minillm.random_model(cfg, seed=5, dtype=dtype, std=0.5)
    ragged = data.draw(st.booleans())
    tokens, pad, split = data.draw(ragged_batches(cfg.vocab_size, 3, cfg.context_length,
                                                  ragged=ragged))
    for grown, whole in [(model, with_whole_tables(model))] * 2:  # fresh tables, then grown
        np.testing.assert_array_equal(grown.forward(tokens, pad=pad),
                                      whole.forward(tokens, pad=pad))
    grown = minillm.random_model(cfg, seed=5, dtype=dtype, std=0.5)
    whole = with_whole_tables(grown)
    caches = grown.new_cache(len(tokens)), whole.new_cache(len(tokens))
    cuts = [0, split, *range(split + 1, tokens.shape[1] + 1)]
    for i, (a, b) in enumerate(zip(cuts, cuts[1:])):
        step_pad = pad if i == 0 else None
        np.testing.assert_array_equal(grown.forward(tokens[:, a:b], caches[0], pad=step_pad),
                                      whole.forward(tokens[:, a:b], caches[1], pad=step_pad))


@pytest.mark.parametrize("fast", [False, True])
def test_a_model_of_the_longest_context_allocates_only_what_its_text_uses(fast):
    """context_length 2^20: tables of the whole context would take 2 * 2^20 * head_dim float32
    values (256 MiB here); building the model and reading a 100-token text (its tables, cache,
    activations) stays under 1/256 of that, and the tables cover the text, not the context."""
    cfg = minillm.ModelConfig(arch="modern", vocab_size=64, context_length=MAX_CONTEXT_LENGTH,
                              d_model=32, n_layers=2, n_heads=2, rope_local_theta=500.0,
                              sliding_window=8, sliding_window_pattern=2)
    whole_tables = 2 * 2 * cfg.context_length * cfg.head_dim * 4  # two bases, cos and sin
    tokens = np.random.default_rng(0).integers(0, 64, size=(1, 100))
    tracemalloc.start()
    try:
        model = minillm.random_model(cfg)
        if fast:
            model = minillm.fast.accelerate(model)
        cache = model.new_cache()
        model.forward(tokens[:, :60], cache)
        for t in range(60, 100):
            logits = model.forward(tokens[:, t:t + 1], cache)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert np.isfinite(logits).all()
    assert peak < whole_tables / 256, f"peak {peak} bytes"
    assert {len(cos) for cos, _ in model._rope_tables.values()} == {120}  # 60, then doubled


def test_a_copy_sharing_the_rope_tables_reads_a_longer_text_after_the_original_grew_them():
    """copy.copy(model) shares the RoPE tables: whichever grows them, neither is left with
    tables shorter than it believes, and each gives the logits of a fresh model."""
    cfg = minillm.ModelConfig(arch="modern", vocab_size=32, context_length=64, d_model=16,
                              n_layers=1, n_heads=2)
    model = minillm.random_model(cfg, seed=0, dtype="float64")
    tokens = np.arange(40)[None] % 32
    model.forward(tokens[:, :4])  # tables for 4 positions
    twin = copy.copy(model)
    model.forward(tokens)  # the original grows the shared tables to 40
    twin.forward(tokens[:, :5])  # the copy believes it holds 4: it must not shorten them
    fresh = minillm.random_model(cfg, seed=0, dtype="float64").forward(tokens)
    np.testing.assert_array_equal(model.forward(tokens), fresh)
    np.testing.assert_array_equal(twin.forward(tokens), fresh)
