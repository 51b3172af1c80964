"""The serving chapter, proven equal to one request at a time.

- Paged KV cache: logits through the block pool, rows at their own positions, equal the
  contiguous cache's (float64, 1e-12) for drawn block sizes, texts, chunkings and rollbacks,
  both architectures and Gemma 3's options (local layers included); so do those of a packed
  pass (requests of different chunk lengths end to end in one row), reference and fast path.
- Prefix caching: the same outputs with and without it, and the shared beginning computed once.
- Continuous batching, as a Hypothesis state machine: any interleaving of add_request, step
  and abort, any knobs and seeds, any pool that fits the largest request: every request's tokens
  equal generate's run alone (logprobs within 1e-10), constrained ones too, nothing lost or
  duplicated, every block accounted for and an aborted request's blocks given back.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (Bundle, RuleBasedStateMachine, consumes, invariant, rule,
                                 run_state_machine_as_test)

import minillm
from minillm.constrain import choice, regex
from minillm.logprobs import score_prompts
from minillm.serving import Engine
from minillm.serving.batches import PackedBatch, PagedBatch
from minillm.serving.block_manager import BlockManager, blocks_for
from minillm.testing.strategies import model_configs

SETTINGS = settings(derandomize=True, deadline=None, max_examples=30,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# -- the paged KV cache ------------------------------------------------------------------------

def texts_in_a_pool(data, model, most_rows: int):
    """Drawn rows of whole-context texts, a block pool of a drawn block size, and a table per
    row holding blocks for its whole text."""
    cfg = model.config
    V, W = cfg.vocab_size, cfg.context_length
    bs = data.draw(st.integers(1, 5), label="block_size")
    rows = data.draw(st.integers(1, most_rows), label="rows")
    texts = [data.draw(st.lists(st.integers(0, V - 1), min_size=W, max_size=W))
             for _ in range(rows)]
    shape = (cfg.n_layers, rows * blocks_for(W, bs), bs, cfg.n_kv_heads, cfg.head_dim)
    pool = BlockManager(np.zeros(shape, model.dtype), np.zeros(shape, model.dtype))
    return texts, pool, [[pool.new_block() for _ in range(blocks_for(W, bs))] for _ in texts]


@SETTINGS
@given(data=st.data(), config=model_configs(context_length=24))
def test_paged_logits_equal_the_contiguous_cache(data, config):
    """Rows that each continue their own text, read in drawn chunks through the block pool,
    with a rollback (a row forgets its newest positions and reads others): every chunk's logits
    equal each row's own contiguous cache's."""
    model = minillm.random_model(config, seed=data.draw(st.integers(0, 99)), dtype="float64",
                                 std=0.5)
    texts, pool, tables = texts_in_a_pool(data, model, most_rows=3)
    V, W, B = config.vocab_size, config.context_length, len(texts)
    # Rows start at different points of their texts: a first read of each row alone.
    starts = data.draw(st.lists(st.integers(1, W // 2), min_size=B, max_size=B), label="starts")
    caches = []
    for r in range(B):
        cache = model.new_cache(1)
        alone = model.forward(np.array([texts[r][:starts[r]]]), cache)
        paged = model.forward(np.array([texts[r][:starts[r]]]),
                              PagedBatch(pool, [tables[r]], np.array([0])))
        np.testing.assert_allclose(paged, alone, rtol=0, atol=1e-12)
        caches.append(cache)
    length = np.array(starts)
    for _ in range(data.draw(st.integers(1, 3), label="chunks")):
        room = W - int(length.max())
        if room == 0:
            break
        T = data.draw(st.integers(1, room), label="T")
        if data.draw(st.booleans(), label="rollback"):  # every row forgets its newest positions
            back = data.draw(st.integers(0, int(length.min()) - 1), label="back")
            length = length - back
            for r, cache in enumerate(caches):
                kept = int(length[r])
                cache.truncate(kept)
                texts[r][kept:] = data.draw(st.lists(st.integers(0, V - 1), min_size=W - kept,
                                                     max_size=W - kept))
        chunk = np.array([texts[r][length[r]:length[r] + T] for r in range(B)])  # (B, T)
        batch = PagedBatch(pool, tables, length.copy())
        paged = model.forward(chunk, batch)  # (B, T, V)
        for r, cache in enumerate(caches):
            alone = model.forward(chunk[r:r + 1], cache)
            np.testing.assert_allclose(paged[r:r + 1], alone, rtol=0, atol=1e-12)
        length = batch.length
        np.testing.assert_array_equal(length, [c.length for c in caches])


@SETTINGS
@given(data=st.data(), config=model_configs(context_length=24))
def test_a_packed_pass_equals_each_request_alone(data, config):
    """Requests at different points of their texts computing different numbers of tokens, end
    to end in one packed row (PackedBatch), over a pass or two: every position's logits equal
    each request's own contiguous cache's, on the reference model and the fast path."""
    model = minillm.random_model(config, seed=data.draw(st.integers(0, 99)), dtype="float64",
                                 std=0.5)
    fast = data.draw(st.booleans(), label="fast")
    run = minillm.fast.accelerate(model) if fast else model
    texts, pool, tables = texts_in_a_pool(data, model, most_rows=4)
    W, R = config.context_length, len(texts)
    caches = [model.new_cache(1) for _ in range(R)]
    length = np.zeros(R, dtype=int)
    for _ in range(data.draw(st.integers(1, 2), label="passes")):
        counts = np.array([data.draw(st.integers(1, max(1, (W - n) // 2)), label="n")
                           for n in length])
        chunks = [texts[r][length[r]:length[r] + counts[r]] for r in range(R)]
        batch = PackedBatch(pool, tables, length.copy(), counts, run.attend)
        packed = run.forward(np.concatenate(chunks)[None], batch)[0]  # (T, V)
        ends = np.cumsum(counts)
        for r, cache in enumerate(caches):
            alone = model.forward(np.array([chunks[r]]), cache)[0]
            np.testing.assert_allclose(packed[ends[r] - counts[r]:ends[r]], alone, rtol=0,
                                       atol=1e-12)
        length = batch.length
        np.testing.assert_array_equal(length, [c.length for c in caches])


# -- the engine against generate ---------------------------------------------------------------

MODEL = minillm.random_model(minillm.ModelConfig(
    arch="modern", vocab_size=32, context_length=40, d_model=12, n_layers=2, n_heads=3,
    n_kv_heads=1, d_ff=20), seed=3, dtype="float64", std=0.5)
class Letters:
    """MODEL's tokenizer for constraints: ids 0-25 are the letters a-z, 26-30 the digits 0-4,
    31 ends generation."""

    eos_token_ids = (31,)

    def __len__(self):
        return 32

    def token_bytes(self, i):
        return b"<eos>" if i == 31 else bytes([97 + i] if i < 26 else [48 + i - 26])


CONSTRAINTS = [None, regex(r"[a-d]+", Letters()), choice(["abc", "abd", "ba"], Letters()),
               regex(r"(?:ab|c)*[0-4]?", Letters())]
KNOBS = st.fixed_dictionaries({}, optional={
    "temperature": st.sampled_from([0.0, 0.7, 1.0, 1.5]),
    "top_k": st.sampled_from([None, 1, 3, 10]),
    "top_p": st.sampled_from([None, 0.5, 0.9]),
    "min_p": st.sampled_from([None, 0.1]),
    "repetition_penalty": st.sampled_from([None, 1.3]),
    "stop_tokens": st.sampled_from([(), (5,), (1, 2, 3)]),
})


def alone(model, prompt, max_new_tokens, seed, knobs):
    """(tokens, logprobs) of generate with this prompt and knobs, by itself."""
    rollout = minillm.generate(model, prompt, max_new_tokens=max_new_tokens, seed=seed,
                               return_logprobs=True, **knobs)
    return rollout.new_tokens, rollout.logprobs


def run(engine, most_steps: int = 10_000) -> dict:
    """Step until done (a bound on the steps: an engine that makes no progress fails, it does
    not hang): request id -> its outputs."""
    outputs = {}
    for _ in range(most_steps):
        if not engine.has_unfinished():
            return outputs
        for out in engine.step():
            outputs.setdefault(out.request_id, []).append(out)
    raise AssertionError(f"the engine has not finished after {most_steps} steps")


def test_prefix_caching_changes_no_output_and_computes_a_shared_beginning_once():
    cfg = minillm.ModelConfig(arch="modern", vocab_size=50, context_length=600, d_model=8,
                              n_layers=2, n_heads=2, n_kv_heads=1, d_ff=12)
    model = minillm.random_model(cfg, seed=0, dtype="float64", std=0.5)
    rng = np.random.default_rng(0)
    shared = rng.integers(0, 50, 500).tolist()
    prompts = [shared + rng.integers(0, 50, 1 + i % 5).tolist() for i in range(16)]
    results = {}
    for caching in (True, False):
        engine = Engine(model, block_size=16, max_batch_tokens=600, prefix_caching=caching)
        first = engine.add_request(prompts[0], max_new_tokens=3, seed=0)
        run(engine)  # the first request fills the cache; the others find it there
        ids = [engine.add_request(p, max_new_tokens=3, seed=i) for i, p in enumerate(prompts)]
        outputs = run(engine)
        results[caching] = [[o.token for o in outputs[i]] for i in ids], engine.stats
        assert first not in outputs
    (with_cache, stats), (without, plain) = results[True], results[False]
    assert with_cache == without
    assert with_cache[0] == alone(model, prompts[0], 3, 0, {})[0]
    assert stats.prompt_tokens_reused == 16 * 496  # 31 full blocks of the shared 500 tokens
    assert plain.prompt_tokens_reused == 0
    assert stats.prompt_tokens_computed == 501 + sum(len(p) - 496 for p in prompts)
    assert plain.prompt_tokens_computed == 501 + sum(map(len, prompts))


def test_a_prompt_of_whole_cached_blocks_still_computes_its_last_token():
    """A prompt that fills whole blocks, asked again once they are cached: the second request
    reuses every block but the last, whose last token's logits give its first new token."""
    prompt, knobs = [7, 8, 9, 10, 11, 12], {"temperature": 0.9}
    engine = Engine(MODEL, block_size=3)
    for seed in (0, 1):
        rid = engine.add_request(prompt, max_new_tokens=4, seed=seed, **knobs)
        assert [o.token for o in run(engine)[rid]] == alone(MODEL, prompt, 4, seed, knobs)[0]
    assert engine.stats.prompt_tokens_reused == 3


def test_a_finished_chain_is_evicted_from_its_tail():
    """A finished request's cached blocks are evicted last block first, so a request that needs
    room takes the chain's tail and the next request that starts alike still finds its head."""
    first, other = [3, 4, 5, 6, 7, 8, 9, 10, 11], [20, 21, 22, 23, 24]
    engine = Engine(MODEL, block_size=2, num_blocks=6)  # `first` takes 5 blocks: 4 full
    for prompt in (first, other, first):  # `other` takes the free one and the oldest unheld
        rid = engine.add_request(prompt, max_new_tokens=1, seed=0)
        assert [o.token for o in run(engine)[rid]] == alone(MODEL, prompt, 1, 0, {})[0]
    assert engine.stats.prompt_tokens_reused == 6  # blocks 0-2 of `first`; its 4th was taken


@pytest.mark.parametrize("caching", [True, False], ids=["prefix-cache", "no-prefix-cache"])
def test_preemption_and_a_small_pool_change_no_output(caching):
    prompts = [[i % 7 + 1] * (5 + 3 * i) for i in range(5)]
    expected = [alone(MODEL, p, 8, i, {"temperature": 0.9}) for i, p in enumerate(prompts)]
    engine = Engine(MODEL, block_size=2, num_blocks=blocks_for(max(map(len, prompts)) + 8, 2),
                    max_batch_tokens=6, prefix_caching=caching)
    ids = [engine.add_request(p, max_new_tokens=8, seed=i, temperature=0.9, logprobs=True)
           for i, p in enumerate(prompts)]
    outputs = run(engine)
    assert engine.stats.preemptions > 0
    for rid, (tokens, logprobs) in zip(ids, expected):
        assert [o.token for o in outputs[rid]] == tokens
        np.testing.assert_allclose([o.logprob for o in outputs[rid]], logprobs, atol=1e-10)
    assert engine.stats.blocks_in_use == 0


def test_a_long_prompt_and_a_short_one_in_a_tight_pool():
    """The long prompt is read in chunks of the budget while the short one waits, then both
    decode until the long one needs the short one's blocks: the short one is preempted,
    computes its text again later, and neither output changes."""
    old_long, young_short = [3] * 30, [4, 5]
    engine = Engine(MODEL, block_size=2, num_blocks=blocks_for(30 + 4, 2), max_batch_tokens=4,
                    prefix_caching=False)
    first = engine.add_request(old_long, max_new_tokens=4, seed=0)
    engine.step()  # the long prompt's first chunk
    second = engine.add_request(young_short, max_new_tokens=4, seed=1)
    outputs = run(engine)
    assert engine.stats.preemptions > 0
    assert [o.token for o in outputs[first]] == alone(MODEL, old_long, 4, 0, {})[0]
    assert [o.token for o in outputs[second]] == alone(MODEL, young_short, 4, 1, {})[0]


@pytest.mark.parametrize("caching", [True, False], ids=["prefix-cache", "no-prefix-cache"])
def test_prompt_scores_in_the_batched_pass_equal_one_uncached_pass(caching):
    """Requests asking their prompt's scores among others, read in chunks through preemptions:
    each prompt token's ln p and top entries equal one uncached pass over the prompt
    (logprobs.score_prompts), each token scored once; with max_new_tokens 0 a request ends
    without a token."""
    prompts = [[i % 7 + 1] * (5 + 3 * i) for i in range(5)]
    engine = Engine(MODEL, block_size=2, num_blocks=blocks_for(max(map(len, prompts)) + 8, 2),
                    max_batch_tokens=6, prefix_caching=caching)
    engine.add_request(prompts[1], max_new_tokens=1)
    run(engine)  # its blocks stay cached: a prompt to score must compute them again
    ids = [engine.add_request(p, max_new_tokens=i % 2 * 8, seed=i, prompt_logprobs=2)
           for i, p in enumerate(prompts)]
    plain = [engine.add_request(p, max_new_tokens=8, seed=i) for i, p in enumerate(prompts)]
    outputs = run(engine)
    assert engine.stats.preemptions > 0
    for i, (rid, prompt) in enumerate(zip(ids, prompts)):
        got = [entry for out in outputs[rid] for entry in out.prompt]
        np.testing.assert_allclose([lp for lp, _ in got], score_prompts(MODEL, [prompt])[0][1:],
                                   atol=1e-10)
        logp = minillm.layers.log_softmax(MODEL.forward(np.array([prompt])))[0]
        for (_, top), row in zip(got, logp):
            assert [t for t, _ in top] == np.argsort(-row, kind="stable")[:2].tolist()
        drawn = [o.token for o in outputs[rid] if o.token is not None]
        assert drawn == alone(MODEL, prompt, i % 2 * 8, i, {})[0]
        assert outputs[rid][-1].finished and outputs[rid][-1].reason == "length"
        assert [o.token for o in outputs[plain[i]]] == alone(MODEL, prompt, 8, i, {})[0]


def test_a_prompt_being_scored_lets_others_join_and_reads_at_most_the_prefill_cap():
    """A long prompt to score reads max_prefill_tokens positions a step and holds no one up:
    a short request added after it joins at once and draws its tokens before the scoring ends
    (a long prompt to generate from is read alone, so that one waits)."""
    long_prompt, short = [5, 6, 7] * 12, [1, 2]
    for scored, short_waits in ((2, False), (None, True)):
        engine = Engine(MODEL, block_size=4, max_batch_tokens=8, max_prefill_tokens=3)
        first = engine.add_request(long_prompt, max_new_tokens=0 if scored else 1,
                                   prompt_logprobs=scored)
        second = engine.add_request(short, max_new_tokens=2)
        steps = []
        while engine.has_unfinished():
            steps.append(engine.step())
        ends = {o.request_id: i for i, step in enumerate(steps) for o in step if o.finished}
        assert (ends[second] > ends[first]) == short_waits
        if scored:
            read = [len(o.prompt) for step in steps for o in step if o.request_id == first]
            assert max(read) <= 3 and sum(read) == len(long_prompt) - 1
            assert read[0] == 1  # half the cap while the short request waits


DRAFT = minillm.random_model(minillm.ModelConfig(
    arch="modern", vocab_size=32, context_length=40, d_model=8, n_layers=1, n_heads=2,
    n_kv_heads=1, d_ff=8), seed=4, dtype="float64", std=0.5)


@settings(SETTINGS, max_examples=80)  # cheap, and constrained rounds are a few of each
@given(requests=st.lists(st.tuples(st.lists(st.integers(0, 31), min_size=1, max_size=12),
                                   st.sampled_from([None, "ngram", "model"]),
                                   st.integers(1, 4), st.integers(0, 3), KNOBS,
                                   st.sampled_from(CONSTRAINTS)),
                         min_size=1, max_size=4),
       block_size=st.integers(1, 5), budget=st.integers(5, 16))
def test_speculative_requests_equal_speculative_generate_alone(requests, block_size, budget):
    """Requests decoding with a drafter (a draft model or prompt lookup) beside plain ones,
    constrained or not: each speculating request's tokens and logprobs equal
    speculative_generate's alone (the same guesses, the same masks, the same draws), the plain
    ones generate's; every block comes back."""
    engine = Engine(MODEL, block_size=block_size, max_batch_tokens=budget)
    expected = {}
    for prompt, draft, k, seed, knobs, constraint in requests:
        drafter = DRAFT if draft == "model" else draft
        if constraint is not None:
            knobs = {**knobs, "constraint": constraint}
        rid = engine.add_request(prompt, max_new_tokens=10, seed=seed, logprobs=True,
                                 draft=drafter, k=k, **knobs)
        if draft is None:
            expected[rid] = alone(MODEL, prompt, 10, seed, knobs)
        else:
            rollout, _ = minillm.speculative_generate(MODEL, drafter, prompt, k=k,
                                                      max_new_tokens=10, seed=seed,
                                                      return_logprobs=True, **knobs)
            expected[rid] = rollout.new_tokens, rollout.logprobs
    outputs = run(engine)
    for rid, (tokens, logprobs) in expected.items():
        assert [o.token for o in outputs[rid]] == tokens
        np.testing.assert_allclose([o.logprob for o in outputs[rid]], logprobs, atol=1e-10)
    assert engine.stats.blocks_in_use == 0
    if any(draft for _, draft, _, _, _, _ in requests):
        assert engine.stats.guesses >= engine.stats.accepted


def test_a_step_is_one_pass_with_speculating_requests_among_plain_ones(monkeypatch):
    """A round of speculative decoding rides in the step's one forward pass with the other
    requests' tokens (its guesses' logits read from that pass): one target pass per step,
    and each request's tokens those it gets alone."""
    passes = []
    forward = MODEL.forward
    engine = Engine(MODEL, block_size=3, max_batch_tokens=32)
    prompts = [([1, 2, 3], None), ([4, 5, 4, 5, 4], "ngram"), ([7, 8, 9, 7], DRAFT)]
    ids = [engine.add_request(p, max_new_tokens=8, seed=5, draft=d, k=3) for p, d in prompts]
    monkeypatch.setattr(MODEL, "forward", lambda *a, **kw: passes.append(1) or forward(*a, **kw))
    outputs = run(engine)
    monkeypatch.undo()
    assert len(passes) == engine.stats.steps
    assert engine.stats.guesses > 0
    assert [o.token for o in outputs[ids[0]]] == alone(MODEL, [1, 2, 3], 8, 5, {})[0]
    for rid, (prompt, draft) in zip(ids[1:], prompts[1:]):
        spec, _ = minillm.speculative_generate(MODEL, draft, prompt, k=3, max_new_tokens=8,
                                               seed=5, return_logprobs=True)
        assert [o.token for o in outputs[rid]] == spec.new_tokens


def test_outputs_carry_generates_raw_logprobs_when_asked():
    """raw_logprob: ln softmax(z)[token] at temperature 1, as generate's raw_logprobs, for a
    plain request and a speculating one; None when logprobs were not asked."""
    knobs = {"temperature": 0.7, "top_k": 5, "repetition_penalty": 1.3}
    engine = Engine(MODEL, block_size=3)
    plain = engine.add_request([1, 2, 3], max_new_tokens=6, seed=2, logprobs=True, **knobs)
    ngram = engine.add_request([4, 5, 4, 5], max_new_tokens=6, seed=3, logprobs=True,
                               draft="ngram", k=2, **knobs)
    unasked = engine.add_request([1, 2, 3], max_new_tokens=6, seed=2, **knobs)
    outputs = run(engine)
    want = minillm.generate(MODEL, [1, 2, 3], max_new_tokens=6, seed=2, return_logprobs=True,
                            **knobs)
    spec, _ = minillm.speculative_generate(MODEL, "ngram", [4, 5, 4, 5], k=2, max_new_tokens=6,
                                           seed=3, return_logprobs=True, **knobs)
    for rid, rollout in ((plain, want), (ngram, spec)):
        assert [o.token for o in outputs[rid]] == rollout.new_tokens
        np.testing.assert_allclose([o.raw_logprob for o in outputs[rid]], rollout.raw_logprobs,
                                   atol=1e-10)
        assert rollout.raw_logprobs != rollout.logprobs  # the knobs moved the drawn ones
    assert {o.raw_logprob for o in outputs[unasked]} == {None}


def test_bad_requests_are_refused_with_their_reason():
    engine = Engine(MODEL, block_size=4, num_blocks=3)
    with pytest.raises(ValueError, match="does not slide"):
        engine.add_request([1] * 35, max_new_tokens=10)
    with pytest.raises(ValueError, match="more than the pool's 3 blocks"):
        engine.add_request([1] * 10, max_new_tokens=5)
    with pytest.raises(ValueError, match="not a batch"):
        engine.add_request([[1, 2], [3]])
    with pytest.raises(ValueError, match="ids must be in"):
        engine.add_request([99])
    with pytest.raises(ValueError, match="block_size"):
        Engine(MODEL, block_size=0)
    small = Engine(MODEL, max_batch_tokens=4)
    with pytest.raises(ValueError, match=r"k: must be below max_batch_tokens \(4\), got 4"):
        small.add_request([1, 2], max_new_tokens=5, draft="ngram", k=4)
    for k in (0, True, 2.0):  # the knob's own rule, the same message as speculative_generate's
        with pytest.raises(ValueError, match="k: must be an integer >= 1"):
            small.add_request([1, 2], max_new_tokens=5, draft="ngram", k=k)
    small.add_request([1, 2], max_new_tokens=5, draft="ngram", k=np.int64(3))  # as it accepts


class EngineAgainstAlone(RuleBasedStateMachine):
    """Requests arrive, steps run, requests are aborted, in any order; each finished request
    must equal generate alone, and the pool must account for every block."""

    requests = Bundle("requests")

    def __init__(self):
        super().__init__()
        self.engine = None
        self.expected, self.got, self.aborted = {}, {}, set()

    @rule(block_size=st.integers(1, 6), budget=st.integers(1, 12), spare=st.integers(0, 6),
          caching=st.booleans())
    def start(self, block_size, budget, spare, caching):
        if self.engine is None:  # the pool fits the largest request (40 positions) and spare
            self.engine = Engine(MODEL, block_size=block_size, max_batch_tokens=budget,
                                 num_blocks=blocks_for(40, block_size) + spare,
                                 prefix_caching=caching)

    @rule(target=requests, prompt=st.lists(st.integers(0, 31), min_size=1, max_size=20),
          shared=st.booleans(), n=st.integers(1, 12), seed=st.integers(0, 3), knobs=KNOBS,
          constraint=st.sampled_from(CONSTRAINTS))
    def add(self, prompt, shared, n, seed, knobs, constraint):
        if self.engine is None:
            self.start(3, 8, 2, True)
        if shared:  # a common beginning, for the prefix cache to find
            prompt = [7, 8, 9, 10, 11, 12, 13] + prompt
        if constraint is not None:  # its output in the language, as generate's alone
            knobs = {**knobs, "constraint": constraint}
        rid = self.engine.add_request(prompt, max_new_tokens=n, seed=seed, logprobs=True,
                                      **knobs)
        self.expected[rid] = alone(MODEL, prompt, n, seed, knobs)
        self.got[rid] = []
        return rid

    @rule()
    def step(self):
        if self.engine is None:
            return
        for out in self.engine.step():
            assert out.request_id not in self.aborted
            assert not (self.got[out.request_id] and self.got[out.request_id][-1].finished)
            self.got[out.request_id].append(out)

    @rule(rid=consumes(requests))
    def abort(self, rid):
        self.engine.abort(rid)
        if not (self.got[rid] and self.got[rid][-1].finished):
            self.aborted.add(rid)

    @invariant()
    def blocks_are_accounted_for(self):
        if self.engine is None:
            return
        scheduler, pool = self.engine.scheduler, self.engine.block_manager
        held = [b for r in scheduler.running + list(scheduler.waiting) for b in r.table]
        assert all(not r.table for r in scheduler.waiting)  # a waiting request holds nothing
        assert sorted(set(held)) == [b for b in range(pool.num_blocks) if pool.refs[b] > 0]
        for b in set(held):
            assert pool.refs[b] == held.count(b)
        cached = len(pool.unheld)
        assert len(pool.free) + cached + len(set(held)) == pool.num_blocks

    @invariant()
    def what_came_out_is_what_generate_gives(self):
        for rid, outs in self.got.items():
            tokens, logprobs = self.expected[rid]
            assert [o.token for o in outs] == tokens[:len(outs)]
            np.testing.assert_allclose([o.logprob for o in outs], logprobs[:len(outs)],
                                       atol=1e-10)

    def teardown(self):
        if self.engine is None:
            return
        for _ in range(1000):  # a bound: no progress fails instead of hanging
            if not self.engine.has_unfinished():
                break
            self.step()
        assert not self.engine.has_unfinished(), "no progress in 1000 steps"
        for rid, outs in self.got.items():
            if rid not in self.aborted:  # every request finished, with all its tokens
                assert [o.token for o in outs] == self.expected[rid][0]
                assert outs[-1].finished and not any(o.finished for o in outs[:-1])
        assert self.engine.stats.blocks_in_use == 0


def test_any_interleaving_equals_each_request_alone():
    run_state_machine_as_test(EngineAgainstAlone, settings=settings(
        derandomize=True, deadline=None, max_examples=40, stateful_step_count=30,
        suppress_health_check=[HealthCheck.too_slow]))
