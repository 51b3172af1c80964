"""The fast path (minillm/fast/model.py) computes what the reference computes.

Every device is checked against the formula it replaces: products in every layout and block
split against x @ W.T, and whole models, fast.accelerate(model) against model: prefill and
cached decoding, float and int8, both architectures, tied heads, ragged batches, rollbacks,
the window's slide and first_layers drafts.
"""
import dataclasses
import math
import platform
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import minillm
from minillm.generate import Step, next_tokens
from minillm.fast import model as fast
from minillm.drafters import first_layers
from minillm.quantize import QuantizedWeight, quantize_param
from minillm.sampling import SamplingConfig
from minillm.testing import assert_batch_matches, assert_rollback_matches
from minillm.testing.strategies import (logits, model_configs, ragged_batches, rollback_cases,
                                        sampling_knobs)

ATOL = 1e-12  # float64; the sums are the same up to the order BLAS adds them in


@given(rows=st.sampled_from([1, 2, 3, 5, 6, 16, 17, 40]), order=st.sampled_from(["C", "F"]),
       dtype=st.sampled_from([np.float32, np.float64]), batch=st.booleans(),
       tied=st.booleans(), shape=st.sampled_from([(3000, 100), (800, 300)]))
def test_dense_product_is_x_times_w_transposed_in_every_layout(rows, order, dtype, batch, tied,
                                                               shape):
    """Every way Dense multiplies: one row; for a matrix read from memory (3000 x 100 has at
    least LARGE_MATRIX entries), two to five rows one matrix-vector product each, by blocks of
    W's rows (CACHED_MATRIX made smaller here, so that the last block is short), and six to
    sixteen in one call in the one-row layout; for a matrix held in cache (800 x 300), a few
    rows in blocks of W's rows (5 to 16 rows exceed SMALL_PRODUCT, the last block short); many
    rows in one call; row- and column-major W; with and without the column-major copy of a
    tied output layer; rows of one text (1, T, in) or a batch of one-token rows (B, 1, in)."""
    rng = np.random.default_rng(rows)
    out, inputs = shape
    w = np.asarray(rng.standard_normal(shape), dtype=dtype, order=order)
    assert (w.size >= fast.LARGE_MATRIX) == (out == 3000)
    weight = fast.Dense(w, columns=np.asfortranarray(w) if tied else None)
    x = rng.standard_normal((rows, 1, inputs) if batch else (1, rows, inputs)).astype(dtype)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fast, "CACHED_MATRIX", 700 * 100)  # blocks of 700 rows, the last 200
        y = weight.matmul(x)
    assert y.shape == x.shape[:2] + (out,) and y.dtype == dtype
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


def _tokens(data, cfg, B, T):
    return np.array(data.draw(st.lists(st.lists(st.integers(0, cfg.vocab_size - 1),
                                                min_size=T, max_size=T),
                                       min_size=B, max_size=B)))


@pytest.mark.parametrize("arch", ["classic", "modern"])
@pytest.mark.parametrize("int8", [False, "blocks", "blocks and embedding"])
@given(data=st.data())
def test_fast_model_equals_reference_model(arch, int8, data):
    """Logits of fast.accelerate(model) equal the reference's (float64, 1e-12), for a prefill
    and for cached decoding in drawn chunks, batches included, tied heads or not (drawn)."""
    cfg = data.draw(model_configs(arch=arch))
    seed = data.draw(st.integers(0, 2 ** 16))
    model_ref = minillm.random_model(cfg, seed=seed, dtype="float64")
    if int8:
        model_ref = minillm.quantize(model_ref, embeddings=int8 == "blocks and embedding")
    model_fast = fast.accelerate(model_ref)
    assert isinstance(model_fast, fast.FastModel) and not isinstance(model_ref, fast.FastModel)
    B = data.draw(st.integers(1, 3))
    T = data.draw(st.integers(1, cfg.context_length))
    tokens = _tokens(data, cfg, B, T)
    chunks, left = [], T
    while left:
        chunks.append(data.draw(st.integers(1, left)))
        left -= chunks[-1]
    for got, expected in _logits_both_ways(model_fast, model_ref, tokens, chunks):
        np.testing.assert_allclose(got, expected, rtol=0, atol=ATOL)


@pytest.mark.parametrize("arch", ["classic", "modern"])
@given(data=st.data())
def test_quantizing_a_fast_model_gives_the_fast_model_of_the_quantized_one(arch, data):
    """quantize(accelerate(m)) is a FastModel whose int8 products are fast.Int8, and its logits
    equal those of the reference quantize(m) (float64, 1e-12)."""
    cfg = data.draw(model_configs(arch=arch))
    model = minillm.random_model(cfg, seed=data.draw(st.integers(0, 2 ** 16)), dtype="float64")
    embeddings = data.draw(st.booleans())
    fast8 = minillm.quantize(fast.accelerate(model), embeddings=embeddings)
    ref8 = minillm.quantize(model, embeddings=embeddings)
    assert isinstance(fast8, fast.FastModel)
    assert isinstance(fast8.params["layers.0.attn.qkv.weight"], fast.Int8)
    tokens = _tokens(data, cfg, data.draw(st.integers(1, 2)), data.draw(
        st.integers(1, cfg.context_length)))
    np.testing.assert_allclose(fast8.forward(tokens), ref8.forward(tokens), rtol=0, atol=ATOL)


@given(data=st.data())
def test_ragged_batches_and_rollbacks_agree_on_the_fast_model(data):
    """The testing kit's batch and rollback checks hold on the fast model, and its logits equal
    the reference's on the same left-padded batch."""
    cfg = data.draw(model_configs())
    model = minillm.random_model(cfg, seed=data.draw(st.integers(0, 2 ** 16)), dtype="float64",
                                 std=0.5)
    model_fast = fast.accelerate(model)
    tokens, pads, split = data.draw(ragged_batches(cfg.vocab_size, 3, cfg.context_length))
    assert_batch_matches(model_fast, tokens, pads, atol=ATOL, split=split)
    np.testing.assert_allclose(model_fast.forward(tokens, pad=pads),
                               model.forward(tokens, pad=pads), rtol=0, atol=ATOL)
    case = data.draw(rollback_cases(cfg.vocab_size, max_batch=2, max_length=cfg.context_length))
    assert_rollback_matches(model_fast, *case, atol=ATOL)


@given(data=st.data())
def test_first_layers_of_a_fast_model_is_fast_and_equals_the_reference_cut(data):
    """drafters.first_layers keeps the fast model's prepared weights (shared, not copied) and
    its logits equal those of the reference model cut the same way."""
    cfg = data.draw(model_configs(arch=data.draw(st.sampled_from(["classic", "modern"]))))
    model = minillm.random_model(cfg, seed=data.draw(st.integers(0, 2 ** 16)), dtype="float64")
    n = data.draw(st.integers(1, cfg.n_layers))
    target = fast.accelerate(model)
    draft = first_layers(target, n)
    assert isinstance(draft, fast.FastModel) and draft.config.n_layers == n
    assert all(draft.params[name] is target.params[name] for name in draft.params)
    tokens = _tokens(data, cfg, 1, data.draw(st.integers(1, cfg.context_length)))
    expected = first_layers(model, n)
    for got, want in _logits_both_ways(draft, expected, tokens, [tokens.shape[1]]):
        np.testing.assert_allclose(got, want, rtol=0, atol=ATOL)


@pytest.mark.slow  # quick run: test_fast_model_equals_reference_model
@pytest.mark.parametrize("temperature", [0, 0.8])
def test_text_is_the_same_with_the_fast_path_on_and_off(temperature):
    """The shipped model's text, greedy and sampled, through the window's slides (100 new
    tokens in a context cut to 64 positions)."""
    model = minillm.load("weights/target.npz", fast=False)
    model = dataclasses.replace(model, config=dataclasses.replace(model.config,
                                                                 context_length=64))
    if "pos_emb.weight" in model.params:
        model.params["pos_emb.weight"] = model.params["pos_emb.weight"][:64]
    prompt = model.tokenizer.encode("In the beginning")
    assert minillm.generate(fast.accelerate(model), prompt, max_new_tokens=100,
                            temperature=temperature) == \
        minillm.generate(model, prompt, max_new_tokens=100, temperature=temperature)


@given(data=st.data(), dtype=st.sampled_from(["float64", "float32"]),
       spoil=st.sampled_from([None, math.nan, math.inf, "a row of -inf"]))
def test_the_fast_models_choice_of_the_next_tokens_is_the_references(data, dtype, spoil):
    """FastModel.next_tokens (the argmax of greedy logits, no distribution built) chooses what
    the decode loop's reference choice does, for every knob (greedy or not, penalised or not):
    ties to the lowest id, the same draws from the same seed, +inf logits read as the reference
    reads them (the limit: the infinite ones share the mass), and NaN or a row of -inf refused
    with the same error."""
    z = data.draw(logits(dtype=dtype, neg_inf=spoil is not None), label="logits")  # ties
    if spoil == "a row of -inf":
        z[data.draw(st.integers(0, len(z) - 1))] = -math.inf
    elif spoil is not None:
        z[data.draw(st.integers(0, len(z) - 1)), data.draw(st.integers(0, z.shape[1] - 1))] = spoil
    knobs = data.draw(st.just(SamplingConfig(temperature=0.0)) | sampling_knobs(), label="knobs")
    row = st.lists(st.integers(-1, z.shape[1] - 1), min_size=3, max_size=3)
    seen = np.array(data.draw(st.lists(row, min_size=len(z), max_size=len(z))))  # -1: padding
    plain = minillm.random_model(minillm.ModelConfig(arch="modern", vocab_size=z.shape[1],
                                                     context_length=8, d_model=8, n_layers=1,
                                                     n_heads=2))
    chosen = []
    for model in (plain, fast.accelerate(plain)):
        step = Step(np.arange(len(z)), z, seen, knobs)
        try:
            chosen.append(next_tokens(model, step, np.random.default_rng(0)))
        except ValueError as e:
            chosen.append(str(e))
    reference, fast_choice = chosen
    if isinstance(reference, str):
        assert fast_choice == reference
    else:
        assert isinstance(fast_choice, np.ndarray) and fast_choice.tolist() == reference.tolist()
        if knobs.greedy and not knobs.penalises and spoil is None:
            assert reference.tolist() == [row.tolist().index(row.max()) for row in z]


def test_the_switch(tmp_path, monkeypatch):
    """load gives the fast model unless told (fast=False, or MINILLM_FAST=0); an explicit
    choice wins over the environment; reference() gives the plain model back."""
    cfg = minillm.ModelConfig(arch="modern", vocab_size=20, context_length=8, d_model=8,
                              n_layers=1, n_heads=2)
    plain = minillm.random_model(cfg)
    minillm.save(fast.accelerate(plain), tmp_path / "m.npz")  # written as the reference
    assert isinstance(minillm.load(tmp_path / "m.npz"), fast.FastModel)
    assert not isinstance(minillm.load(tmp_path / "m.npz", fast=False), fast.FastModel)
    monkeypatch.setenv("MINILLM_FAST", "0")
    model = minillm.load(tmp_path / "m.npz")
    assert type(model) is minillm.Model
    assert all(type(w) is np.ndarray for w in model.params.values())
    for name, w in plain.params.items():
        np.testing.assert_array_equal(model.params[name], w)
    assert isinstance(minillm.load(tmp_path / "m.npz", fast=True), fast.FastModel)
    back = fast.reference(fast.accelerate(plain))
    assert type(back) is minillm.Model
    assert all(type(w) is np.ndarray for w in back.params.values())


@pytest.mark.parametrize("tied", [True, False])
def test_loading_the_fast_model_holds_each_weight_once(tmp_path, tied):
    """minillm.load lays the file's arrays out for the fast path without holding both at once:
    the peak of traced allocations (tracemalloc sees NumPy's arrays) stays within what the
    fast model keeps (its layouts, a tied head's column-major copy) plus the weight being laid
    out, where holding the file's arrays beside their layouts takes every linear weight twice."""
    import tracemalloc

    from minillm.quantize import is_linear_weight

    cfg = minillm.ModelConfig(arch="modern", vocab_size=1024, context_length=16, d_model=128,
                              n_layers=6, n_heads=4, n_kv_heads=2, d_ff=256,
                              tie_embeddings=tied)
    model = minillm.random_model(cfg, seed=0)
    minillm.save(model, tmp_path / "m.npz")
    minillm.load(tmp_path / "m.npz")  # warm-up: imports, NumPy's own caches
    tracemalloc.start()
    loaded = minillm.load(tmp_path / "m.npz")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert isinstance(loaded, fast.FastModel)
    largest = max(w.nbytes for w in model.params.values())
    linear = sum(w.nbytes for name, w in model.params.items() if is_linear_weight(name))
    slack = 256 * 1024  # the config, names, dicts, the reader's buffers
    assert linear > largest + slack  # so that holding them twice cannot pass below
    assert peak <= loaded.nbytes + largest + slack, (peak, loaded.nbytes)
    np.testing.assert_array_equal(loaded.forward(np.arange(8)[None]),
                                  fast.accelerate(model).forward(np.arange(8)[None]))


def test_a_model_handed_over_is_left_without_parameters():
    """accelerate(model, own=True) takes the arrays: the fast model has them, laid out, and
    the model given has none left to hold them twice; without own the model is untouched."""
    cfg = minillm.ModelConfig(arch="modern", vocab_size=64, context_length=16, d_model=16,
                              n_layers=2, n_heads=4, n_kv_heads=2, d_ff=32)
    model = minillm.random_model(cfg, seed=1)
    names = set(model.params)
    expected = fast.accelerate(model).forward(np.arange(6)[None])
    assert set(model.params) == names  # without own: untouched
    taken = fast.accelerate(model, own=True)
    assert model.params == {}
    np.testing.assert_array_equal(taken.forward(np.arange(6)[None]), expected)


def test_resident_bytes_count_the_copy_of_a_tied_output_layer():
    for tie in (False, True):
        cfg = minillm.ModelConfig(arch="modern", vocab_size=50, context_length=8, d_model=12,
                                  n_layers=2, n_heads=2, tie_embeddings=tie)
        copies = cfg.vocab_size * cfg.d_model if tie else 0
        model = minillm.random_model(cfg)
        assert fast.accelerate(model).nbytes == 4 * (cfg.n_params() + copies)
        assert model.nbytes == 4 * cfg.n_params()


TEMPORARIES = """
import resource, sys
import numpy as np
import minillm
from minillm.fast import model as fast
if sys.argv[1] == "fast":
    cfg = minillm.ModelConfig(arch="modern", vocab_size=32, context_length=8, d_model=16,
                              n_layers=1, n_heads=2, n_kv_heads=1, d_ff=32)
    fast.accelerate(minillm.random_model(cfg))
np.ones(3 * 2 ** 18, np.float32)  # a 3 MiB temporary, made and freed once before counting
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    np.ones(3 * 2 ** 18, np.float32)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_the_fast_path_keeps_freed_memory_for_the_next_temporary():
    """Ten 3 MiB temporaries (a SmolLM2 chunk's MLP activation), each freed before the next is
    made: glibc by default maps each afresh, its pages faulted in one by one; once a model is
    accelerated (fast.keep_freed_memory) they reuse the pages of the first."""
    faults = {how: int(subprocess.run([sys.executable, "-c", TEMPORARIES, how], check=True,
                                      capture_output=True, text=True).stdout)
              for how in ("reference", "fast")}
    # Without it each fresh mapping faults at least once (the kernel may map more than 4 KiB
    # a fault); with it, not one temporary in ten does.
    assert faults["fast"] < 10 <= faults["reference"], faults


def huge_page_advice() -> bool:
    """Whether NumPy asks for transparent huge pages for its large new arrays now."""
    advise = np._core.multiarray._set_madvise_hugepage
    state = advise(True)
    advise(state)
    return state


def test_ordinary_pages_turns_the_huge_page_advice_off_and_gives_it_back():
    """Inside fast.ordinary_pages NumPy does not ask the system for transparent huge pages;
    its setting is as before once the block is left, after an error too."""
    original = huge_page_advice()
    try:
        for before in (True, False):
            np._core.multiarray._set_madvise_hugepage(before)
            with fast.ordinary_pages():
                assert huge_page_advice() is False
            assert huge_page_advice() == before
            with pytest.raises(KeyError), fast.ordinary_pages():
                raise KeyError("an error inside")
            assert huge_page_advice() == before
    finally:
        np._core.multiarray._set_madvise_hugepage(original)


@pytest.mark.parametrize("int8", [False, True])
def test_only_a_product_with_a_large_output_is_made_in_ordinary_pages(monkeypatch, int8):
    """A product whose output reaches NumPy's huge-page threshold (the logits of every
    position, a long chunk's MLP activations) runs in fast.ordinary_pages; a smaller one (a
    decoding step's) leaves NumPy's setting alone; the values are x @ W.T either way."""
    entered = []
    real = fast.ordinary_pages

    def noted():
        entered.append(True)
        return real()

    monkeypatch.setattr(fast, "ordinary_pages", noted)
    monkeypatch.setattr(fast, "HUGE_PAGE_ADVICE", 64 * 48 * 4)  # a (64, 48) float32 output
    rng = np.random.default_rng(0)
    w = rng.standard_normal((48, 20)).astype(np.float32)
    name = "layers.0.mlp.up.weight"
    weight = fast.prepare({name: quantize_param(name, w) if int8 else w}, False)[name]
    for rows, large in ((63, False), (64, True), (1, False)):
        x = rng.standard_normal((1, rows, 20)).astype(np.float32)
        entered.clear()
        y = weight.matmul(x)
        assert entered == ([True] if large else []), rows
        expected = (QuantizedWeight(weight.q, weight.scale, weight.bits).matmul(x) if int8
                    else x @ w.T)
        np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


def test_a_serving_engine_on_the_fast_model_makes_its_pool_in_ordinary_pages(monkeypatch):
    """The fast model's engine makes its block pool without NumPy's huge-page advice
    (Model.pool_pages); the reference model's as NumPy makes any array; the setting is as
    before once the pool is made."""
    from minillm.serving import Engine, block_manager
    advice, made = [], block_manager.BlockManager.__init__

    def noted(self, *args):
        advice.append(huge_page_advice())
        made(self, *args)

    monkeypatch.setattr(block_manager.BlockManager, "__init__", noted)
    original = huge_page_advice()
    try:
        np._core.multiarray._set_madvise_hugepage(True)
        model = minillm.random_model(minillm.ModelConfig(arch="modern", vocab_size=32,
                                                         d_model=16, n_layers=1, n_heads=2,
                                                         d_ff=32, context_length=32))
        Engine(model, num_blocks=4)
        Engine(fast.accelerate(model), num_blocks=4)
        assert advice == [True, False] and huge_page_advice() is True
    finally:
        np._core.multiarray._set_madvise_hugepage(original)
