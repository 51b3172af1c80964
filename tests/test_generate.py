"""Generation: cached = uncached across window slides, batches = one by one, stop tokens."""
import contextlib
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import minillm
from minillm.sampling import filtered_probs
from minillm.generate import generate, stream
from minillm.logprobs import Rollout
from minillm.testing import slide_views
from minillm.testing.strategies import model_configs

CUT = "longer than the model's context"  # the warning of a prompt read from its last W tokens


def _model(cfg, seed=3):
    return minillm.random_model(cfg, seed=seed, dtype="float64", std=0.5)


def _prompts(draw, cfg, n, max_len):
    lengths = draw(st.lists(st.integers(1, max_len), min_size=n, max_size=n))
    return [draw(st.lists(st.integers(0, cfg.vocab_size - 1), min_size=k, max_size=k))
            for k in lengths]


def reference_greedy(model, prompt, n):
    """The seed's policy written plainly: the view is the last W tokens; when the view is
    full and a token arrives, keep the newest W // 2 (the new token included)."""
    W = model.config.context_length
    text, view = list(prompt), list(prompt)[-W:]
    for _ in range(n):
        token = int(np.argmax(model.forward(np.array([view]))[0, -1]))
        text.append(token)
        view = view + [token] if len(view) < W else (view + [token])[-max(1, W // 2):]
    return text


def record_logits(monkeypatch):
    """Make generation record the logits of every step it samples from."""
    seen = []

    def recording(logits, *args):
        seen.append(np.array(logits))
        return filtered_probs(logits, *args)

    monkeypatch.setattr(sys.modules["minillm.generate"], "filtered_probs", recording)
    return seen


@pytest.mark.parametrize("arch", ["classic", "modern"])
@given(data=st.data())
def test_cached_and_uncached_generation_agree_across_window_slides(arch, data):
    cfg = data.draw(model_configs(arch=arch))
    model = _model(cfg)
    W = cfg.context_length
    prompts = _prompts(data.draw, cfg, data.draw(st.integers(1, 3)), W + 3)
    n = 3 * W  # every row's view fills the window and slides at least twice
    knobs = dict(temperature=data.draw(st.sampled_from([0.0, 0.7, 1.5])),
                 top_k=data.draw(st.sampled_from([None, 5])),
                 repetition_penalty=data.draw(st.sampled_from([None, 1.3])),
                 frequency_penalty=data.draw(st.sampled_from([None, 0.6])),
                 presence_penalty=data.draw(st.sampled_from([None, 0.8])))
    logits = {}
    for use_cache in (True, False):
        with pytest.MonkeyPatch.context() as m:
            logits[use_cache] = record_logits(m)
            with (pytest.warns(UserWarning, match=CUT) if max(map(len, prompts)) > W
                  else contextlib.nullcontext()):
                out = generate(model, prompts, max_new_tokens=n, seed=11, use_cache=use_cache,
                               **knobs)
        if use_cache:
            cached = out
    assert cached == out
    assert len(logits[True]) == len(logits[False]) == n
    for a, b in zip(logits[True], logits[False]):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-10)


@pytest.mark.parametrize("fast", [False, True])
@given(data=st.data())
def test_reading_in_chunks_changes_nothing_across_slides_and_ragged_batches(fast, data):
    """The loop reads prompts and slid windows window.READ_CHUNK tokens per forward pass.
    With chunks of 1 to 4 tokens (ragged prompts up to W + 3 tokens, every row sliding at
    least twice), every step's logits equal the uncached loop's, on the reference model and
    on the fast one."""
    cfg = data.draw(model_configs())
    model = _model(cfg)
    if fast:
        model = minillm.fast.accelerate(model)
    W = cfg.context_length
    prompts = _prompts(data.draw, cfg, data.draw(st.integers(1, 3)), W + 3)
    chunk = data.draw(st.integers(1, 4), label="READ_CHUNK")
    n = 3 * W
    logits, out = {}, {}
    for use_cache in (True, False):
        with pytest.MonkeyPatch.context() as m:
            m.setattr(sys.modules["minillm.window"], "READ_CHUNK", chunk)
            logits[use_cache] = record_logits(m)
            with (pytest.warns(UserWarning, match=CUT) if max(map(len, prompts)) > W
                  else contextlib.nullcontext()):
                out[use_cache] = generate(model, prompts, max_new_tokens=n, temperature=0.0,
                                          use_cache=use_cache)
    assert out[True] == out[False]
    for a, b in zip(logits[True], logits[False], strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-10)


@pytest.mark.parametrize("arch", ["classic", "modern"])
def test_the_window_slide_follows_the_seed_policy(arch):
    cfg = minillm.ModelConfig(arch=arch, vocab_size=30, context_length=9, d_model=12,
                              n_layers=2, n_heads=2)
    model = _model(cfg)
    for prompt in ([4], [1, 2, 3, 4, 5, 6, 7, 8, 9], list(range(14))):
        expected = reference_greedy(model, prompt, 30)
        for use_cache in (True, False):
            with (pytest.warns(UserWarning, match=CUT) if len(prompt) > 9
                  else contextlib.nullcontext()):
                assert generate(model, prompt, max_new_tokens=30, temperature=0,
                                use_cache=use_cache) == expected


@pytest.mark.parametrize("arch", ["classic", "modern"])
@given(data=st.data())
def test_ragged_batch_rows_equal_the_prompts_generated_one_by_one(arch, data):
    cfg = data.draw(model_configs(arch=arch))
    model = _model(cfg)
    W = cfg.context_length
    prompts = _prompts(data.draw, cfg, data.draw(st.integers(2, 4)), W + 2)
    # Greedy: a sampled batch draws one uniform per row, so its rows read other numbers than
    # a prompt generated alone; greedy decoding and the penalty need no randomness.
    knobs = dict(temperature=0, repetition_penalty=data.draw(st.sampled_from([None, 1.5])),
                 frequency_penalty=data.draw(st.sampled_from([None, 0.6])),
                 use_cache=data.draw(st.booleans()))
    with (pytest.warns(UserWarning, match=CUT) if max(map(len, prompts)) > W
          else contextlib.nullcontext()):
        batch = generate(model, prompts, max_new_tokens=2 * W + 1, **knobs)
        assert batch == [generate(model, p, max_new_tokens=2 * W + 1, **knobs) for p in prompts]


def test_stop_tokens_end_a_row_and_only_that_row():
    cfg = minillm.ModelConfig(arch="modern", vocab_size=40, context_length=16, d_model=16,
                              n_layers=2, n_heads=2)
    model = _model(cfg)
    prompts = [[1, 2, 3], [7, 8], [9, 10, 11, 12]]
    free = generate(model, prompts, max_new_tokens=20, temperature=1.0, seed=5)
    stop = free[0][3 + 4]  # the fifth new token of row 0
    stopped = generate(model, prompts, max_new_tokens=20, temperature=1.0, seed=5,
                       stop_tokens=[stop])
    for prompt, row, full in zip(prompts, stopped, free):
        new = full[len(prompt):]
        end = new.index(stop) + 1 if stop in new else len(new)
        assert row == full[:len(prompt) + end]  # the stop token is emitted, then no more
    assert stopped[0][-1] == stop and len(stopped[0]) <= 3 + 5


def test_generation_ends_when_every_row_has_stopped():
    cfg = minillm.ModelConfig(arch="classic", vocab_size=3, context_length=8, d_model=8,
                              n_layers=1, n_heads=2)
    model = _model(cfg)
    steps = list(stream(model, [[0], [1, 2]], max_new_tokens=500, temperature=1.0,
                        stop_tokens=[0, 1, 2]))
    assert steps == [steps[0]] and set(steps[0]) == {0, 1}


def test_stream_yields_the_tokens_generate_returns():
    cfg = minillm.ModelConfig(arch="classic", vocab_size=50, context_length=10, d_model=8,
                              n_layers=1, n_heads=2)
    model = _model(cfg)
    prompt = np.array([3, 4, 5])
    tokens = list(stream(model, prompt, max_new_tokens=25, seed=2))
    assert all(isinstance(t, int) for t in tokens)
    assert generate(model, prompt, max_new_tokens=25, seed=2) == [3, 4, 5] + tokens
    steps = list(stream(model, np.array([[3, 4, 5], [6, 7, 8]]), max_new_tokens=25, seed=2))
    assert all(sorted(s) == [0, 1] for s in steps) and len(steps) == 25


def test_stream_reads_the_prompt_at_the_first_token_not_at_the_call(monkeypatch):
    """A caller who times the first token (the bench, the CLI's progress) must see the
    prefill in it: stream checks its arguments at once but runs the model only when asked."""
    cfg = minillm.ModelConfig(arch="modern", vocab_size=50, context_length=16, d_model=8,
                              n_layers=1, n_heads=2)
    model = _model(cfg)
    calls = []
    forward = type(model).forward
    monkeypatch.setattr(type(model), "forward",
                        lambda self, *a, **k: calls.append(1) or forward(self, *a, **k))
    for use_cache in (True, False):
        calls.clear()
        tokens = stream(model, [3, 4, 5], max_new_tokens=3, use_cache=use_cache)
        assert calls == []
        next(tokens)
        assert calls
    with pytest.raises(ValueError):
        stream(model, [3, 4, 5], max_new_tokens=-1)  # the arguments, though, at once


def test_same_seed_same_text_and_rng_instead_of_seed():
    cfg = minillm.ModelConfig(arch="modern", vocab_size=60, context_length=10, d_model=8,
                              n_layers=1, n_heads=2)
    model = _model(cfg)
    a = generate(model, [1, 2], max_new_tokens=30, temperature=1.0, seed=4)
    assert a == generate(model, [1, 2], max_new_tokens=30, temperature=1.0, seed=4)
    assert a == generate(model, [1, 2], max_new_tokens=30, temperature=1.0,
                         rng=np.random.default_rng(4))
    assert a != generate(model, [1, 2], max_new_tokens=30, temperature=1.0, seed=5)
    assert generate(model, [1, 2], max_new_tokens=0) == [1, 2]


def test_float32_model_cached_equals_uncached_greedy():
    cfg = minillm.ModelConfig(arch="modern", vocab_size=64, context_length=12, d_model=16,
                              n_layers=2, n_heads=4, n_kv_heads=2)
    model = minillm.random_model(cfg, seed=0, std=0.5)
    assert generate(model, [5, 6, 7], max_new_tokens=30, temperature=0) == \
        generate(model, [5, 6, 7], max_new_tokens=30, temperature=0, use_cache=False)


@pytest.mark.parametrize("kwargs, match", [
    (dict(prompt_ids=[]), "prompt_ids"), (dict(prompt_ids=[[1], []]), r"prompt_ids\[1\]"),
    (dict(prompt_ids=[1, 99]), "prompt_ids"), (dict(prompt_ids=[-1]), "prompt_ids"),
    (dict(prompt_ids=np.array([1.5])), "prompt_ids"),
    (dict(prompt_ids=[1.5, 2.0]), "prompt_ids: token ids must be integers"),
    (dict(max_new_tokens=-1), "max_new"),
    (dict(temperature=-1.0), "temperature"), (dict(top_p=0.0), "top_p"),
    (dict(top_k=-2), "top_k"), (dict(min_p=2.0), "min_p"),
    (dict(repetition_penalty=0.0), "repetition_penalty"),
    (dict(stop_tokens=[50]), "stop_tokens")])
def test_bad_arguments_are_errors_before_the_first_token(kwargs, match):
    cfg = minillm.ModelConfig(arch="classic", vocab_size=50, context_length=8, d_model=8,
                              n_layers=1, n_heads=2)
    model = _model(cfg)
    kwargs = {"prompt_ids": [1, 2], **kwargs}
    with pytest.raises(ValueError, match=match):
        stream(model, **kwargs)  # no next(): the check happens at the call
    with pytest.raises(ValueError, match=match):
        generate(model, **kwargs)


def test_exported():
    assert minillm.generate is generate


def log_softmax(z):
    z = np.asarray(z, dtype=np.float64)
    return z - z.max(axis=-1, keepdims=True) - np.log(
        np.exp(z - z.max(axis=-1, keepdims=True)).sum(axis=-1, keepdims=True))


@pytest.mark.parametrize("arch", ["classic", "modern"])
@given(data=st.data())
def test_logprobs_equal_a_fresh_forward_pass_over_the_same_view(arch, data):
    cfg = data.draw(model_configs(arch=arch))
    model = _model(cfg)
    W = cfg.context_length
    prompts = _prompts(data.draw, cfg, data.draw(st.integers(1, 3)), W + 3)
    knobs = dict(temperature=data.draw(st.sampled_from([0.0, 0.7, 1.5])),
                 top_k=data.draw(st.sampled_from([None, 5])),
                 top_p=data.draw(st.sampled_from([None, 0.9])),
                 min_p=data.draw(st.sampled_from([None, 0.05])),
                 repetition_penalty=data.draw(st.sampled_from([None, 1.3])),
                 presence_penalty=data.draw(st.sampled_from([None, 0.7])))
    n, use_cache = 2 * W + 1, data.draw(st.booleans())  # every row slides at least once
    with (pytest.warns(UserWarning, match=CUT) if max(map(len, prompts)) > W
          else contextlib.nullcontext()):
        rollouts = generate(model, prompts, max_new_tokens=n, seed=7, use_cache=use_cache,
                            return_logprobs=True,
                            prompt_logprobs=True, **knobs)
        assert [r.tokens for r in rollouts] == generate(model, prompts, max_new_tokens=n,
                                                        seed=7, **knobs)
    for prompt, rollout in zip(prompts, rollouts):
        new = rollout.new_tokens
        assert rollout.tokens == prompt + new and len(new) == n
        assert len(rollout.logprobs) == len(rollout.raw_logprobs) == n
        views = slide_views(prompt, new, W, keep=max(1, W // 2))  # the seed's slide policy
        for i, (view, token) in enumerate(zip(views, new)):
            z = model.forward(np.array([view]))[0, -1]
            drawn_from = minillm.filtered_probs(z, **knobs, history=np.array([view]))
            assert abs(rollout.logprobs[i] - np.log(drawn_from[token])) < 1e-10
            assert abs(rollout.raw_logprobs[i] - log_softmax(z)[token]) < 1e-10
        seen = prompt[-W:]
        logp = log_softmax(model.forward(np.array([seen]))[0])
        expected = [logp[c, seen[c + 1]] for c in range(len(seen) - 1)]
        assert rollout.prompt_logprobs[:len(prompt) - len(seen) + 1] == \
            [None] * (len(prompt) - len(seen) + 1)
        np.testing.assert_allclose(rollout.prompt_logprobs[len(prompt) - len(seen) + 1:],
                                   expected, rtol=0, atol=1e-10)


def test_logprobs_of_one_prompt_and_the_default_return_value():
    cfg = minillm.ModelConfig(arch="modern", vocab_size=40, context_length=8, d_model=8,
                              n_layers=1, n_heads=2)
    model = _model(cfg)
    plain = generate(model, [1, 2, 3], max_new_tokens=6, seed=1)
    assert isinstance(plain, list) and all(isinstance(t, int) for t in plain)
    rollout = generate(model, [1, 2, 3], max_new_tokens=6, seed=1, return_logprobs=True)
    assert isinstance(rollout, Rollout)
    assert rollout.tokens == plain and rollout.prompt_logprobs is None
    greedy = generate(model, [1, 2, 3], max_new_tokens=6, temperature=0, return_logprobs=True)
    assert greedy.logprobs == [0.0] * 6 and all(lp < 0 for lp in greedy.raw_logprobs)
    assert generate(model, [1, 2, 3], max_new_tokens=0, prompt_logprobs=True).logprobs == []


def test_stream_scores_each_token_as_generate_does():
    from minillm.generate import stream

    cfg = minillm.ModelConfig(arch="modern", vocab_size=40, context_length=8, d_model=8,
                              n_layers=1, n_heads=2)
    model = _model(cfg)
    knobs = dict(top_k=5, repetition_penalty=1.2, seed=3)
    rollout = generate(model, [1, 2, 3], max_new_tokens=12, **knobs, return_logprobs=True)
    scored = list(stream(model, [1, 2, 3], max_new_tokens=12, **knobs, return_logprobs=True))
    assert [s.token for s in scored] == rollout.new_tokens
    assert [s.logprob for s in scored] == rollout.logprobs
    assert [s.raw_logprob for s in scored] == rollout.raw_logprobs
    batch = list(stream(model, [[1, 2, 3], [4, 5]], max_new_tokens=4, **knobs,
                        return_logprobs=True))
    rows = generate(model, [[1, 2, 3], [4, 5]], max_new_tokens=4, **knobs, return_logprobs=True)
    assert [step[1].logprob for step in batch] == rows[1].logprobs


@pytest.mark.parametrize("prompts", [[[1, 2, 3, 4, 5]], [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]]])
def test_a_window_slide_costs_one_forward_pass(monkeypatch, prompts):
    # Rows that slide together read their kept tokens again; the new token's own pass would
    # be thrown away, so it is not made: one forward pass per new token after the prefill.
    cfg = minillm.ModelConfig(arch="classic", vocab_size=30, context_length=6, d_model=8,
                              n_layers=1, n_heads=2)
    model = _model(cfg)
    calls = []
    forward = model.forward
    monkeypatch.setattr(model, "forward", lambda *a, **k: calls.append(1) or forward(*a, **k))
    n = 20  # the window (6) slides to 3 tokens and fills again: 6 slides
    generate(model, prompts, max_new_tokens=n, temperature=0)
    assert len(calls) == 1 + (n - 1)


@given(st.lists(st.sampled_from([-np.inf, -3.0, -1.5, -1.5, -0.5, 0.0]), min_size=1,
                max_size=30), st.integers(0, 35))
def test_top_entries_are_a_stable_sort_cut_at_k(values, k):
    """The k largest finite entries, ties to the lowest id: what a stable argsort of the whole
    row gives, found with a partition."""
    from minillm.logprobs import top_entries

    row = np.array(values)
    order = np.argsort(-row, kind="stable")[:k]
    assert top_entries(row, k) == [(int(t), float(row[t])) for t in order if np.isfinite(row[t])]
