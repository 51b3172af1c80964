"""The tiled causal attention of minillm/fast/attention.py computes what `layers.attention`
computes.

`fast_attention.causal_attention(q, k, v, mask)` scores each block of queries against only the
keys it may see, a block of keys at a time, with a running softmax. Both get the mask a forward
pass builds (`layers.positions_and_mask`, `layers.sliding_window`). Hypothesis draws the shapes
(batch, key heads, query heads per key head), the offset of a cache (`start`, as in decoding
and after a slide), left padding per row, a local layer's window, keys stored transposed or
plain, and block sizes small enough that every kind of edge occurs: a tile on the causal
diagonal, a tile all hidden from some query (padding, or keys past it, or before its window),
a last block shorter than the others.
"""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from minillm.fast import model as fast
from minillm.fast import attention as fast_attention
from minillm.layers import attention
from minillm.layers import positions_and_mask, sliding_window

ATOL = 1e-12  # float64: the same sums, split in blocks and rescaled by exp(m - m')


def mask_of(q, start, pad):
    """The mask a forward pass builds for these queries after `start` cached tokens."""
    return positions_and_mask(q.shape[0], q.shape[2], start, pad)[1]


def reference(q, k, v, start, pad):
    return attention(q, k, v, mask_of(q, start, pad))


def inputs(rng, B, K, group, T, start, d, dtype=np.float64, transposed_keys=False):
    """q (B, K*group, T, d), k and v (B, K, start + T, d). transposed_keys: the keys as views of
    a larger array stored transposed, (B, K, d, S + 3): strides other than a plain array's."""
    S = start + T
    q = rng.standard_normal((B, K * group, T, d)).astype(dtype)
    v = rng.standard_normal((B, K, S, d)).astype(dtype)
    if transposed_keys:
        stored = rng.standard_normal((B, K, d, S + 3)).astype(dtype)
        k = stored[..., :S].swapaxes(-1, -2)
    else:
        k = rng.standard_normal((B, K, S, d)).astype(dtype)
    return q, k, v


@given(data=st.data())
def test_tiled_causal_attention_equals_reference(data):
    B = data.draw(st.integers(1, 3), label="B")
    K = data.draw(st.integers(1, 3), label="key heads")
    group = data.draw(st.integers(1, 3), label="query heads per key head")
    T = data.draw(st.integers(1, 40), label="T")
    start = data.draw(st.sampled_from([0, 0, 1, 7, 31]), label="start")
    d = data.draw(st.sampled_from([1, 2, 8]), label="d")
    padded = data.draw(st.booleans(), label="padded")
    pad = None
    if padded:  # any count of the row's first positions, up to all but the last one
        pad = np.array(data.draw(st.lists(st.integers(0, start + T - 1), min_size=B,
                                          max_size=B), label="pad"))
    rows = data.draw(st.integers(1, 9), label="QUERY_ROWS")
    keys = data.draw(st.integers(1, 12), label="keys per block")
    layout = data.draw(st.booleans(), label="transposed keys")
    # Scores far past exp's range either way: the sums must be taken again with the running
    # maximum, where a term overflows, and where all of a query's scores lie far below 0 (its
    # sums would underflow).
    loud = data.draw(st.sampled_from([1.0, 1.0, 40.0, 400.0]), label="score scale")
    q, k, v = inputs(np.random.default_rng(T * 100 + start), B, K, group, T, start, d,
                     transposed_keys=layout)
    q *= loud
    mask = mask_of(q, start, pad)
    # A local layer's window (Gemma 3): the keys from `first` on, the window in the mask, so
    # that an earlier query may see a key a later one may not.
    window = data.draw(st.sampled_from([None, None, 1, 4, 12]), label="window")
    if window is not None:
        first, mask = sliding_window(mask, start, T, window)
        k, v = k[..., first:, :], v[..., first:, :]
    expected = attention(q, k, v, mask)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fast_attention, "QUERY_ROWS", rows)
        patch.setattr(fast_attention, "SCORE_ENTRIES", B * K * group * min(rows, T) * keys)
        got = fast_attention.causal_attention(q, k, v, mask)
    assert got.shape == expected.shape and got.dtype == np.float64
    np.testing.assert_allclose(got, expected, rtol=0, atol=ATOL)


@pytest.mark.parametrize("start, T", [(0, 150), (2900, 70), (2900, 130), (3000, 1)])
def test_default_blocks_equal_reference_over_a_long_cache(start, T):
    """The constants as shipped: several query blocks (150 > QUERY_ROWS), a tile per key head;
    70 queries after 2,900 cached tokens (one tile for every head), and 130 (a tile per key
    head), whose keys are more than one block; a decoding step."""
    q, k, v = inputs(np.random.default_rng(start), 1, 2, 2, T, start, 16, transposed_keys=True)
    got = fast_attention.causal_attention(q, k, v, mask_of(q, start, None))
    np.testing.assert_allclose(got, reference(q, k, v, start, None), rtol=0, atol=ATOL)


def test_without_a_mask_every_key_is_seen():
    """mask None means what it means in layers.attention: nothing hidden, nothing skipped."""
    q, k, v = inputs(np.random.default_rng(3), 2, 2, 2, 7, 4, 8)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fast_attention, "QUERY_ROWS", 3)
        patch.setattr(fast_attention, "SCORE_ENTRIES", 2 * 4 * 3 * 5)
        got = fast_attention.causal_attention(q, k, v)
    np.testing.assert_allclose(got, attention(q, k, v), rtol=0, atol=ATOL)


@pytest.mark.parametrize("T", [3, 20])
def test_a_mask_broadcast_over_the_batch_is_every_texts_mask(T):
    """A mask of shape (1, 1, 1, T, S), or (T, S), given for a batch of 3 texts hides the same
    keys from each (the docstring's "broadcastable"), tiled per text or in one tile."""
    q, k, v = inputs(np.random.default_rng(4), 3, 2, 2, T, 5, 8)
    causal = mask_of(q, 5, None)  # (T, S)
    expected = attention(q, k, v, causal)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fast_attention, "QUERY_ROWS", 4)
        for mask in (causal, causal[None, None, None]):
            np.testing.assert_allclose(fast_attention.causal_attention(q, k, v, mask), expected,
                                       rtol=0, atol=ATOL)


@pytest.mark.parametrize("loud", [1.0, 30.0, 300.0])
def test_float32_stays_float32(loud):
    """float32 in, float32 out, as close to the exact (float64) attention as the reference in
    float32 is, also for scores of a few hundred (e^300 overflows float32: the shift must
    move), where rounding the scores alone moves the reference by 5e-5."""
    q, k, v = inputs(np.random.default_rng(0), 2, 2, 3, 80, 5, 8, dtype=np.float32)
    q *= np.float32(loud)
    pad = np.array([0, 6])
    got = fast_attention.causal_attention(q, k, v, mask_of(q, 5, pad))
    assert got.dtype == np.float32
    exact = reference(*(x.astype(np.float64) for x in (q, k, v)), 5, pad)
    float32_error = np.abs(reference(q, k, v, 5, pad) - exact).max()
    assert np.abs(got - exact).max() <= 2 * float32_error + 1e-6


def test_scores_held_at_once_are_bounded_and_values_are_read_in_place(monkeypatch):
    """Every tile of scores holds at most max(SCORE_ENTRIES, B H QUERY_ROWS^2) entries,
    however long the text; the values each tile reads are views of v, or (a block of many
    queries) of the one [V, 1] made for the call, not copies per tile."""
    B, K, group, T, d = 1, 2, 2, 600, 4
    q, k, v = inputs(np.random.default_rng(1), B, K, group, T, 0, d, transposed_keys=True)
    monkeypatch.setattr(fast_attention, "QUERY_ROWS", 16)
    monkeypatch.setattr(fast_attention, "SCORE_ENTRIES", 4096)
    bound = max(fast_attention.SCORE_ENTRIES, B * K * group * 16 ** 2)
    sizes, values = [], []
    scores, sums = fast_attention._scores, fast_attention._sums
    monkeypatch.setattr(fast_attention, "_scores",
                        lambda *a: sizes.append(scores(*a).size) or scores(*a))
    monkeypatch.setattr(fast_attention, "_sums",
                        lambda weights, v, *a: values.append(v) or sums(weights, v, *a))
    got = fast_attention.causal_attention(q, k, v, mask_of(q, 0, None))
    assert max(sizes) <= bound < B * K * group * T * T // 2
    first = values[0]
    assert all(block.base is first.base for block in values)  # slices of one array
    if first.shape[-1] == d + 1:  # [V, 1]: copied once, its last column the ones
        assert first.base.shape == v.shape[:-1] + (d + 1,) and np.all(first.base[..., d] == 1)
    else:
        assert np.shares_memory(first, v)
    # Only the keys a block may see are scored: about half of the T x T square.
    assert sum(sizes) / (B * K * group) < 0.6 * T * T
    np.testing.assert_allclose(got, reference(q, k, v, 0, None), rtol=0, atol=ATOL)


def test_ordinary_scores_are_summed_once(monkeypatch):
    """Scores of the size models produce stay in exp's range without a shift: the sums are
    taken once, never again with the running maximum (which would double the work)."""
    q, k, v = inputs(np.random.default_rng(5), 2, 2, 3, 300, 40, 64, dtype=np.float32)
    again = []
    running = fast_attention._running_softmax
    monkeypatch.setattr(fast_attention, "_running_softmax",
                        lambda *a: again.append(1) or running(*a))
    got = fast_attention.causal_attention(q, k, v, mask_of(q, 40, np.array([0, 9])))
    assert not again
    np.testing.assert_allclose(got, reference(q, k, v, 40, np.array([0, 9])), rtol=0, atol=1e-5)


@pytest.mark.parametrize("transposed_keys", [True, False])
def test_a_decoding_step_does_not_copy_the_cached_keys_or_values(transposed_keys):
    """One query against 4,096 cached positions: the memory NumPy allocates during the call
    (tracemalloc sees every array's buffer) stays far below one copy of the keys, for
    keys stored transposed and plain."""
    import tracemalloc

    q, k, v = inputs(np.random.default_rng(2), 1, 3, 3, 1, 4095, 64, dtype=np.float32,
                     transposed_keys=transposed_keys)
    fast_attention.causal_attention(q, k, v)  # warm-up: NumPy's own caches
    tracemalloc.start()
    fast_attention.causal_attention(q, k, v)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < k.nbytes / 8, (peak, k.nbytes)


def test_the_fast_model_attends_with_the_tiles(monkeypatch):
    """fast.accelerate(model) computes its attention with causal_attention (tests/test_fast.py
    proves its logits equal the reference model's)."""
    import minillm

    calls = []
    tiled = fast_attention.causal_attention
    monkeypatch.setattr(fast, "causal_attention", lambda *a: calls.append(1) or tiled(*a))
    cfg = minillm.ModelConfig(arch="modern", vocab_size=64, context_length=32, d_model=16,
                              n_layers=2, n_heads=4, n_kv_heads=2, d_ff=32)
    model = minillm.random_model(cfg, seed=0, dtype="float64")
    tokens = np.arange(20)[None] % 64
    np.testing.assert_allclose(fast.accelerate(model).forward(tokens), model.forward(tokens),
                               rtol=0, atol=ATOL)
    assert len(calls) == cfg.n_layers
