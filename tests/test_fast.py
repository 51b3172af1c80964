"""The fast path (minillm/fast.py) computes what the reference computes.

Every device is checked against the formula it replaces: products in every layout and block
split against x @ W.T, and whole models with the fast path on against the same models with it
off, prefill and cached decoding, float and int8, both architectures.
"""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import minillm
from minillm import fast
from minillm.testing.strategies import model_configs

ATOL = 1e-12  # float64; the sums are the same up to the order BLAS adds them in


@given(rows=st.sampled_from([1, 2, 3, 5, 16, 17, 40]), order=st.sampled_from(["C", "F"]),
       dtype=st.sampled_from([np.float32, np.float64]), batch=st.booleans(),
       tied=st.booleans())
def test_dense_product_is_x_times_w_transposed_in_every_layout(rows, order, dtype, batch, tied):
    """One row; two to five rows one matrix-vector product each (3000 x 100 has at least
    LARGE_MATRIX entries), by blocks of W's rows (CACHED_MATRIX made smaller here, so that
    the last block is short); a few rows in blocks of W's rows (3000 x 100 by 4 to 16
    rows exceeds SMALL_PRODUCT, the last block short); many rows in one call; row- and
    column-major W;
    with and without the column-major copy of a tied output layer; rows of one text
    (1, T, in) or a batch of one-token rows (B, 1, in)."""
    rng = np.random.default_rng(rows)
    w = np.asarray(rng.standard_normal((3000, 100)), dtype=dtype, order=order)
    assert w.size >= fast.LARGE_MATRIX
    weight = fast.Dense(w, columns=np.asfortranarray(w) if tied else None)
    x = rng.standard_normal((rows, 1, 100) if batch else (1, rows, 100)).astype(dtype)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fast, "CACHED_MATRIX", 700 * 100)  # blocks of 700 rows, the last 200
        y = weight.matmul(x)
    assert y.shape == x.shape[:2] + (3000,) and y.dtype == dtype
    expected = x.astype(np.float64) @ w.astype(np.float64).T
    np.testing.assert_allclose(y, expected, rtol=0, atol=1e-4 if dtype == np.float32 else ATOL)


def test_layouts_keep_values_and_put_large_down_projections_row_major():
    rng = np.random.default_rng(0)
    down = rng.standard_normal((32, 8192))  # 2^18 entries, more inputs than outputs
    up = rng.standard_normal((8192, 32))
    small = rng.standard_normal((8, 16))
    assert fast.laid_out(down).flags.c_contiguous
    assert fast.laid_out(up).flags.f_contiguous and fast.laid_out(small).flags.f_contiguous
    for w in (down, up, small):
        assert np.array_equal(fast.laid_out(w), w)


def _logits_both_ways(model_fast, model_ref, tokens, chunks):
    """Full forward, then the same tokens through a cache in the given chunks."""
    pairs = [(model_fast.forward(tokens), model_ref.forward(tokens))]
    caches = model_fast.new_cache(tokens.shape[0]), model_ref.new_cache(tokens.shape[0])
    start = 0
    for size in chunks:
        piece = tokens[:, start:start + size]
        pairs.append((model_fast.forward(piece, caches[0]), model_ref.forward(piece, caches[1])))
        start += size
    return pairs


@pytest.mark.parametrize("arch", ["classic", "modern"])
@pytest.mark.parametrize("int8", [False, "blocks", "blocks and embedding"])
@given(data=st.data())
def test_fast_model_equals_reference_model(arch, int8, data):
    """Logits with the fast path on equal the reference's (float64, 1e-12), for a prefill and
    for cached decoding in drawn chunks, batches included."""
    cfg = data.draw(model_configs(arch=arch))
    seed = data.draw(st.integers(0, 2 ** 16))
    model_ref = minillm.random_model(cfg, seed=seed, dtype="float64", fast=False)
    model_fast = minillm.random_model(cfg, seed=seed, dtype="float64", fast=True)
    if int8:
        embeddings = int8 == "blocks and embedding"
        model_ref = minillm.quantize(model_ref, embeddings=embeddings)
        model_fast = minillm.quantize(model_fast, embeddings=embeddings)
    assert model_fast.fast and not model_ref.fast
    B = data.draw(st.integers(1, 3))
    T = data.draw(st.integers(1, cfg.context_length))
    tokens = np.array(data.draw(st.lists(st.lists(st.integers(0, cfg.vocab_size - 1),
                                                  min_size=T, max_size=T),
                                         min_size=B, max_size=B)))
    chunks, left = [], T
    while left:
        chunks.append(data.draw(st.integers(1, left)))
        left -= chunks[-1]
    for got, expected in _logits_both_ways(model_fast, model_ref, tokens, chunks):
        np.testing.assert_allclose(got, expected, rtol=0, atol=ATOL)


def test_greedy_text_is_the_same_with_the_fast_path_on_and_off():
    model = minillm.load("weights/target.npz")
    reference = minillm.Model(model.config, dict(model.params), model.tokenizer, fast=False)
    prompt = model.tokenizer.encode("In the beginning")
    assert minillm.generate(model, prompt, max_new_tokens=40, temperature=0) == \
        minillm.generate(reference, prompt, max_new_tokens=40, temperature=0)


def test_the_switch(monkeypatch):
    cfg = minillm.ModelConfig(arch="modern", vocab_size=20, context_length=8, d_model=8,
                              n_layers=1, n_heads=2)
    assert minillm.random_model(cfg).fast
    monkeypatch.setenv("MINILLM_FAST", "0")
    model = minillm.random_model(cfg)
    assert not model.fast
    assert all(model.weights[name] is w for name, w in model.params.items())
    assert minillm.random_model(cfg, fast=True).fast  # an explicit choice wins


def test_resident_bytes_count_the_copy_of_a_tied_output_layer():
    for tie in (False, True):
        cfg = minillm.ModelConfig(arch="modern", vocab_size=50, context_length=8, d_model=12,
                                  n_layers=2, n_heads=2, tie_embeddings=tie)
        copies = cfg.vocab_size * cfg.d_model if tie else 0
        assert minillm.random_model(cfg, fast=True).nbytes == 4 * (cfg.n_params() + copies)
        assert minillm.random_model(cfg, fast=False).nbytes == 4 * cfg.n_params()
