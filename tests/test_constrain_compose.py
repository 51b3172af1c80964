"""Constrained decoding composes with the other chapters, each step the knobs on the masked
logits of a fresh pass over the view plain generation uses: the window's slide (the
constraint follows the output, not the cache), stop strings, the log-probabilities of the
constrained distribution, a batch with a constraint per row, speculative decoding past the
context, the conversation's reply, and the engine's prefix caching and preemption."""
from __future__ import annotations

import contextlib
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import minillm
from minillm.constrain import choice, regex
from minillm.constrain.constraint import DONE, advance, allowed
from minillm.conversation import Conversation, respond
from minillm.layers import log_softmax
from minillm.sampling import SamplingConfig, filtered_probs
from minillm.serving import Engine
from minillm.serving.block_manager import blocks_for
from tests.test_chat import USER, USER_AGAIN, chatml_tokenizer
from tests.test_serving import CONSTRAINTS, DRAFT, MODEL, Letters, run

SETTINGS = settings(derandomize=True, deadline=None, max_examples=60,
                    suppress_health_check=[HealthCheck.too_slow])
W = 8
SMALL = minillm.random_model(minillm.ModelConfig(  # MODEL's vocabulary, a context of 8
    arch="modern", vocab_size=32, context_length=W, d_model=12, n_layers=2, n_heads=3,
    n_kv_heads=1, d_ff=20), seed=3, dtype="float64", std=0.5)
# Languages with long texts; the last counts ten "a"s, more than the window holds.
LONG = [r"[a-d]+", r"(?:ab|c)*[0-4]?", r"a{10}[b-d]*[0-4]"]
LONG_CONSTRAINTS = {pattern: regex(pattern, Letters()) for pattern in LONG}
KNOBS = st.sampled_from([dict(temperature=1.0), dict(temperature=0),
                         dict(temperature=0.7, top_k=3, top_p=0.9, min_p=0.05),
                         dict(temperature=1.3, repetition_penalty=1.4, presence_penalty=0.5)])
END = Letters.eos_token_ids[0]


def reference(model, prompt, new, constraint, knobs) -> list[tuple[float, float]]:
    """(logprob, raw logprob) of every new token as a fresh uncached pass over the view of
    plain generation gives them (the prompt's last W tokens, then the newest W // 2 after a
    slide), the logits masked in the constraint's state after the whole output so far: the
    knobs on the masked logits, and ln softmax of the masked logits at temperature 1."""
    W, sampling = model.config.context_length, SamplingConfig(**knobs)
    text, start, state, scores = list(prompt), max(0, len(prompt) - W), 0, []
    for t in new:
        view = text[start:]
        z = model.forward(np.array([view]))[0, -1]
        if constraint is not None:
            z = np.where(allowed(constraint, state, len(z)), z, -np.inf)
            state = advance(constraint, state, t)
        p = filtered_probs(z, sampling, [view])
        scores.append((float(np.log(p[t])), float(log_softmax(z)[t])))
        text.append(t)
        if len(text) - start > W:  # the window slides: its newest half, read again
            start = len(text) - max(1, W // 2)
    return scores


def assert_scores(rollout, expected):
    np.testing.assert_allclose(rollout.logprobs, [e[0] for e in expected], rtol=0, atol=1e-9)
    np.testing.assert_allclose(rollout.raw_logprobs, [e[1] for e in expected], rtol=0,
                               atol=1e-9)


def in_language(pattern, new) -> bool:
    """A whole output (ended by its end token) matches; one cut short begins a match."""
    c, state = LONG_CONSTRAINTS[pattern], 0
    for t in new:
        state = advance(c, state, t)  # raises on a token not allowed
    text = b"".join(Letters().token_bytes(t) for t in new if t != END).decode()
    return state != DONE or re.fullmatch(pattern, text) is not None


# -- the window ---------------------------------------------------------------------------

@SETTINGS
@given(prompt=st.lists(st.integers(0, 30), min_size=W, max_size=W),
       pattern=st.sampled_from(LONG), knobs=KNOBS, seed=st.integers(0, 99))
def test_past_the_context_the_constraint_follows_the_output_not_the_cache(prompt, pattern,
                                                                          knobs, seed):
    """A prompt that fills the window: the first new token slides it, and every few tokens
    after. The output stays in the language (ten "a"s counted though the window holds
    eight), cached and uncached generation agree, and every score is the reference's: the
    mask in the state of the whole output, the model's view the window's."""
    c = LONG_CONSTRAINTS[pattern]
    cached, uncached = (minillm.generate(SMALL, prompt, max_new_tokens=24, seed=seed,
                                         constraint=c, return_logprobs=True,
                                         use_cache=use_cache, **knobs)
                        for use_cache in (True, False))
    assert cached.new_tokens == uncached.new_tokens and in_language(pattern, cached.new_tokens)
    assert_scores(cached, reference(SMALL, prompt, cached.new_tokens, c, knobs))
    if pattern.startswith("a{10}"):
        assert cached.new_tokens[:10] == [0] * 10


@SETTINGS
@given(prompt=st.lists(st.integers(0, 30), min_size=1, max_size=W),
       pattern=st.sampled_from(LONG), draft=st.sampled_from(["ngram", "model"]),
       k=st.integers(1, 4), knobs=KNOBS, seed=st.integers(0, 99))
def test_speculative_decoding_past_the_context_scores_as_generate(prompt, pattern, draft, k,
                                                                  knobs, seed):
    """speculative_generate with a constraint across window slides: its scores are the
    reference's (the target's masked distributions), greedy its text is generate's."""
    c, drafter = LONG_CONSTRAINTS[pattern], DRAFT if draft == "model" else draft
    rollout, _ = minillm.speculative_generate(SMALL, drafter, prompt, max_new_tokens=20, k=k,
                                              seed=seed, constraint=c, return_logprobs=True,
                                              **knobs)
    assert in_language(pattern, rollout.new_tokens)
    assert_scores(rollout, reference(SMALL, prompt, rollout.new_tokens, c, knobs))
    if knobs.get("temperature") == 0:
        assert rollout.tokens == minillm.generate(SMALL, prompt, max_new_tokens=20,
                                                  constraint=c, **knobs)


# -- log-probabilities ----------------------------------------------------------------------

def test_logprobs_are_the_constrained_distributions_and_raw_ones_the_masked_softmax():
    """logprobs: ln of the knobs on the masked logits at the drawn token; raw_logprobs: ln
    softmax of the masked logits, the model's distribution restricted to the allowed tokens
    and renormalized (generate's Step logits are the masked ones). At temperature 1 with no
    other knob the two are one, and below 0 where the mask took mass away."""
    c = CONSTRAINTS[1]
    for knobs in (dict(temperature=1.0), dict(temperature=0.6, top_k=2)):
        rollout = minillm.generate(MODEL, [1, 2, 3], max_new_tokens=8, seed=4, constraint=c,
                                   return_logprobs=True, **knobs)
        assert_scores(rollout, reference(MODEL, [1, 2, 3], rollout.new_tokens, c, knobs))
        text, state = [1, 2, 3], 0
        for t, raw in zip(rollout.new_tokens, rollout.raw_logprobs):
            p = np.exp(log_softmax(MODEL.forward(np.array([text]))[0, -1]))  # the model's own
            assert abs(raw - np.log(p[t] / p[allowed(c, state, len(p))].sum())) < 1e-10
            text, state = text + [t], advance(c, state, t)
        if knobs == dict(temperature=1.0):
            np.testing.assert_allclose(rollout.logprobs, rollout.raw_logprobs, atol=1e-12)
        else:
            assert rollout.logprobs != rollout.raw_logprobs


# -- a batch -------------------------------------------------------------------------------

@SETTINGS
@given(rows=st.lists(st.tuples(st.lists(st.integers(0, 30), min_size=1, max_size=10),
                               st.sampled_from(CONSTRAINTS)), min_size=2, max_size=4),
       knobs=KNOBS, seed=st.integers(0, 99))
def test_a_batch_with_a_constraint_per_row_equals_each_row_alone(rows, knobs, seed):
    """Ragged prompts, a different constraint per row and free rows (None): each row's
    scores are its own reference's (its distributions those of the row alone), greedy its
    tokens generate's alone; stream yields the same tokens."""
    prompts, constraints = [p for p, _ in rows], [c for _, c in rows]
    batch = minillm.generate(MODEL, prompts, max_new_tokens=10, seed=seed,
                             constraint=constraints, return_logprobs=True, **knobs)
    for prompt, c, rollout in zip(prompts, constraints, batch):
        assert_scores(rollout, reference(MODEL, prompt, rollout.new_tokens, c, knobs))
        if knobs.get("temperature") == 0:
            assert rollout.tokens == minillm.generate(MODEL, prompt, max_new_tokens=10,
                                                      constraint=c, **knobs)
    streamed = [[] for _ in prompts]
    for step in minillm.stream(MODEL, prompts, max_new_tokens=10, seed=seed,
                               constraint=constraints, **knobs):
        for r, t in step.items():
            streamed[r].append(t)
    assert streamed == [rollout.new_tokens for rollout in batch]


# -- stop strings ---------------------------------------------------------------------------

CHAT = minillm.random_model(minillm.ModelConfig(
    arch="modern", vocab_size=258, context_length=48, d_model=16, n_layers=2, n_heads=2,
    n_kv_heads=1), seed=3, dtype="float64")
CHAT.tokenizer = chatml_tokenizer()
GREETING = choice(["hello world", "hi there"], CHAT.tokenizer)


@pytest.mark.parametrize("seed", range(4))
def test_a_stop_string_inside_allowed_text_ends_it(seed):
    """Both texts of the language hold a stop string (" w", "th"): the output ends with the
    token that completes it, before the constraint's end token, in generate, in
    speculative_generate and in the engine ("stop"); without one there, at the end token
    ("stop" too); cut by max_new_tokens, "length"."""
    tok, prompt, stops = CHAT.tokenizer, CHAT.tokenizer.encode("Say:"), [" w", "th"]
    knobs = dict(constraint=GREETING, seed=seed, temperature=1.5, stop_strings=stops)
    new = minillm.generate(CHAT, prompt, **knobs)[len(prompt):]
    text = tok.decode(new)
    assert text in ("hello w", "hi th")  # the stop string's last character, then nothing
    spec, _ = minillm.speculative_generate(CHAT, "ngram", prompt, k=3, **knobs)
    assert tok.decode(spec[len(prompt):]) in ("hello w", "hi th")
    engine = Engine(CHAT, block_size=4)
    ids = [engine.add_request(prompt, max_new_tokens=n, **{**knobs, "stop_strings": s})
           for n, s in ((20, stops), (20, ["zz"]), (3, ["zz"]))]
    outputs = run(engine)
    by_stop, by_end, by_length = ([o.token for o in outputs[i]] for i in ids)
    assert by_stop == new and outputs[ids[0]][-1].reason == "stop"
    assert tok.decode(by_end[:-1]) in ("hello world", "hi there") and by_end[-1] == 257
    assert outputs[ids[1]][-1].reason == "stop"
    assert len(by_length) == 3 and outputs[ids[2]][-1].reason == "length"


# -- the conversation -------------------------------------------------------------------------

@pytest.mark.parametrize("context_length", [512, 48])  # 48: the window slides within turns
def test_each_constrained_reply_equals_a_fresh_constrained_generation(context_length):
    from minillm.text.chat_template import chat_prompt_ids

    tok = chatml_tokenizer()
    cfg = minillm.ModelConfig(arch="modern", vocab_size=258, context_length=context_length,
                              d_model=16, n_layers=2, n_heads=2, n_kv_heads=1)
    model = minillm.random_model(cfg, seed=3, dtype="float64")
    number = regex(r"[0-9]{1,3}", tok)
    conversation, messages = Conversation(model), [USER]
    for turn in range(3):
        prompt = chat_prompt_ids(tok, messages)
        knobs = dict(max_new_tokens=6, temperature=0.9, seed=turn, constraint=number)
        with (pytest.warns(UserWarning, match="longer than the model's context")
              if len(prompt) > context_length else contextlib.nullcontext()):
            reply = list(respond(conversation, prompt, **knobs))
            expected = minillm.generate(model, prompt, **knobs)[len(prompt):]
        assert reply == expected
        assert re.fullmatch(r"[0-9]{1,3}", tok.decode([t for t in reply if t != 257]))
        messages = messages + [{"role": "assistant", "content": tok.decode(reply[:-1])},
                               USER_AGAIN]


# -- the engine: prefix caching and preemption ----------------------------------------------

@pytest.mark.parametrize("caching", [True, False], ids=["prefix-cache", "no-prefix-cache"])
def test_preemption_and_the_prefix_cache_change_no_constrained_output(caching):
    """Constrained requests sharing a beginning in a pool too small for all of them: some are
    preempted and compute their text again, some find the shared blocks cached; each output,
    tokens and logprobs, is generate's alone."""
    shared = [7, 8, 9, 10, 11, 12]
    prompts = [shared + [i % 7 + 1] * (1 + 3 * i) for i in range(5)]
    knobs = [dict(temperature=0.9, constraint=CONSTRAINTS[1 + i % 3]) for i in range(5)]
    engine = Engine(MODEL, block_size=2, num_blocks=blocks_for(max(map(len, prompts)) + 8, 2),
                    max_batch_tokens=6, prefix_caching=caching)
    ids = [engine.add_request(p, max_new_tokens=8, seed=i, logprobs=True, **kw)
           for i, (p, kw) in enumerate(zip(prompts, knobs))]
    outputs = run(engine)
    assert engine.stats.preemptions > 0
    assert (engine.stats.prompt_tokens_reused > 0) == caching
    for i, rid in enumerate(ids):
        want = minillm.generate(MODEL, prompts[i], max_new_tokens=8, seed=i,
                                return_logprobs=True, **knobs[i])
        assert [o.token for o in outputs[rid]] == want.new_tokens
        np.testing.assert_allclose([o.logprob for o in outputs[rid]], want.logprobs,
                                   atol=1e-10)
    assert engine.stats.blocks_in_use == 0
