"""Speculative decoding is exact: the accept/resample rule reproduces the target's distribution
for any draft, greedy speculative decoding is greedy decoding, and rollback leaves each cache as
a fresh prefill of the accepted text would."""
import contextlib

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import minillm
from minillm import drafters, speculative
from minillm.constrain import regex
from minillm.constrain.constraint import DONE, advance, allowed, guess_states, masked_logits
from minillm.drafters import ModelDrafter, NgramDrafter, drafted, lookup
from minillm.sampling import SamplingConfig
from minillm.generate import generate
from minillm.sampling import draw, filtered_probs
from minillm.speculative import accept, accept_greedy, residual, speculative_generate
from minillm.testing import check_speculative_distribution, exact_sequence_distribution
from minillm.testing.strategies import model_configs


def distributions(n):
    """Probability vectors over n tokens, zeros included."""
    weights = arrays(np.float64, n, elements=st.sampled_from([0.0, 0.0, 1e-6, 0.1, 0.5, 1.0,
                                                               2.0, 7.0]))
    return weights.filter(lambda w: w.sum() > 0).map(lambda w: w / w.sum())


# -- the rule itself, in closed form ---------------------------------------------------------

@given(st.integers(2, 8).flatmap(lambda n: st.tuples(distributions(n), distributions(n))))
def test_one_step_distribution_is_exactly_the_target(pq):
    """P(x) = q(x) min(1, p(x)/q(x)) + (1 - sum_y min(p(y), q(y))) residual(x) = p(x)."""
    p, q = pq
    kept = np.where(q > 0, q * np.minimum(1.0, p / np.where(q > 0, q, 1.0)), 0.0)
    rejected = 1.0 - np.minimum(p, q).sum()
    out = kept + rejected * residual(p, q)
    np.testing.assert_allclose(out, p, rtol=0, atol=1e-12)


@given(st.integers(2, 8).flatmap(lambda n: st.tuples(distributions(n), distributions(n))),
       st.floats(0, 0.999999))
def test_accept_keeps_with_probability_min_1_p_over_q_and_resamples_from_the_residual(pq, v):
    p, q = pq
    p2 = np.stack([p, p[::-1]])  # the second row is the bonus distribution
    for x in np.flatnonzero(q):
        ratio = p[x] / q[x]
        # kept exactly for u < p/q: an interval of length min(1, p/q)
        if ratio > 0:
            assert accept(p2, q[None], [x], [min(ratio, 1.0) * (1 - 1e-9)], v) == \
                (1, draw(p2[1], v))
        if ratio < 1:
            kept, token = accept(p2, q[None], [x], [ratio * (1 + 1e-9) + 1e-300], v)
            assert (kept, token) == (0, draw(residual(p, q), v))
            assert p[token] > q[token]  # the replacement comes from where p exceeds q


@given(st.integers(2, 6), st.integers(1, 4), st.data())
def test_greedy_accept_is_accept_on_one_hot_distributions(V, k, data):
    """At temperature 0 p and q are one-hot; accept_greedy must be accept, whatever u and v."""
    top = data.draw(st.lists(st.integers(0, V - 1), min_size=k + 1, max_size=k + 1))
    drafted = data.draw(st.lists(st.integers(0, V - 1), min_size=k, max_size=k))
    p, q = np.eye(V)[top], np.eye(V)[drafted]
    u = data.draw(st.lists(st.floats(0, 0.999999), min_size=k, max_size=k))
    v = data.draw(st.floats(0, 0.999999))
    assert accept_greedy(p.argmax(axis=-1), drafted) == accept(p, q, drafted, u, v)


@given(distributions(6), st.data())
def test_draw_is_the_inverse_cdf(probs, data):
    cdf = np.cumsum(probs)
    lower = np.concatenate([[0.0], cdf[:-1]])
    for i in np.flatnonzero(probs):  # token i owns u in [lower_i, cdf_i): an interval of p_i
        assert draw(probs, (lower[i] + cdf[i]) / 2) == i
    u = data.draw(st.floats(0, 1, exclude_max=True))
    assert probs[draw(probs, u)] > 0


def test_draw_never_lands_on_trailing_zeros():
    """u * total reaching the total (u = 1 here) must still give a token of nonzero mass."""
    probs = np.array([[0.5, 0.5, 0.0, 0.0], [0.25, 0.0, 0.75, 0.0]])
    np.testing.assert_array_equal(draw(probs, np.array([1.0, 1.0])), [1, 2])
    np.testing.assert_array_equal(draw(probs, np.array([0.4, 0.9])), [0, 2])
    assert draw(probs[0], 1.0) == 1


# -- end to end, against the exact distribution of whole continuations ----------------------

VOCAB, NEW = 4, 3
TARGET = minillm.random_model(minillm.ModelConfig(
    arch="modern", vocab_size=VOCAB, context_length=16, d_model=8, n_layers=2, n_heads=2,
    n_kv_heads=1, d_ff=12), seed=10, dtype="float64", std=1.0)
DRAFT = minillm.random_model(minillm.ModelConfig(
    arch="classic", vocab_size=VOCAB, context_length=16, d_model=4, n_layers=1, n_heads=1),
    seed=11, dtype="float64", std=1.0)
# A nearly flat draft: its unfiltered softmax differs most from its top-k-filtered one.
FLAT_DRAFT = minillm.random_model(DRAFT.config, seed=11, dtype="float64", std=0.3)
PROMPT = [1, 2]
KNOBS = {
    "plain": dict(temperature=1.0),
    "filtered": dict(temperature=0.8, top_k=3, top_p=0.9, min_p=0.05),
    "penalty": dict(temperature=1.2, repetition_penalty=1.5),
    "counted": dict(temperature=1.1, frequency_penalty=0.8, presence_penalty=0.6),
}


def follows_the_target(draft, knobs, runs=3000, k=2):
    """minillm.testing's chi-square check at the 0.1% level (a correct sampler fails with
    probability 1e-3) of speculative_generate's continuations of NEW tokens against the
    target's exact distribution. Raises AssertionError when they do not follow it."""
    def sample_fn(seed):
        out, _ = speculative_generate(TARGET, draft, PROMPT, max_new_tokens=NEW, k=k, seed=seed,
                                      **knobs)
        return out[len(PROMPT):]

    exact = exact_sequence_distribution(TARGET, PROMPT, NEW, **knobs)
    check_speculative_distribution(sample_fn, exact, runs=runs, seed=1234)


@pytest.mark.parametrize("name", [  # "filtered", all the filters at once, in the quick run
    pytest.param(name, marks=() if name == "filtered" else pytest.mark.slow)
    for name in sorted(KNOBS)])
def test_output_follows_the_target_distribution_whatever_the_draft(name):
    follows_the_target(DRAFT, KNOBS[name])


@pytest.mark.slow
def test_ngram_drafter_keeps_the_target_distribution():
    follows_the_target("ngram", KNOBS["filtered"])


class UnfilteredQDrafter(ModelDrafter):
    """A wrong drafter: it samples from the filtered q but reports the unfiltered softmax."""

    def propose(self, text, k, rng):
        guesses, q = super().propose(text, k, rng)
        raw = np.zeros_like(q)
        for i in range(len(guesses)):
            logits = self.model.forward(np.array([text + guesses[:i]]))[0, -1]
            raw[i] = filtered_probs(logits, temperature=self.sampling.temperature)
        return guesses, raw


class GreedyDrafter:
    """A wrong drafter: it decodes greedily (its argmax) but reports its softmax q, a
    distribution it did not draw the guesses from. Uncached, to stay short."""

    def __init__(self, model, sampling: SamplingConfig):
        self.model, self.sampling, self.calls = model, sampling, 0

    def propose(self, text, k, rng):
        W, guesses = self.model.config.context_length, []
        q = np.zeros((k, self.model.config.vocab_size))
        for i in range(k):
            logits = self.model.forward(np.array([(text + guesses)[-W:]]))[0, -1]
            q[i] = filtered_probs(logits, temperature=self.sampling.temperature)
            guesses.append(int(np.argmax(q[i])))
            self.calls += 1
        return guesses, q


@pytest.mark.parametrize("drafter, knobs", [
    (ModelDrafter, dict(temperature=1.0, top_k=2)),
    (UnfilteredQDrafter, dict(temperature=1.0, top_k=2)),
    (GreedyDrafter, dict(temperature=1.0))], ids=["honest", "unfiltered_q", "greedy_guess"])
@pytest.mark.slow
def test_negative_controls_a_wrong_q_is_detected(drafter, knobs):
    """The same test with the correct drafter passes (here with top-k; without it in
    test_output_follows_the_target_distribution_whatever_the_draft), and with a q that is not
    the distribution the guesses came from it fails."""
    if drafter is ModelDrafter:
        follows_the_target(drafter(FLAT_DRAFT, SamplingConfig(**knobs)), knobs)
    else:
        with pytest.raises(AssertionError, match="do not follow the target"):
            follows_the_target(drafter(FLAT_DRAFT, SamplingConfig(**knobs)), knobs)


@pytest.mark.slow
def test_negative_control_always_accepting_is_detected(monkeypatch):
    def always_accept(p, q, drafted, u, v):
        return len(drafted), draw(p[len(drafted)], v)

    monkeypatch.setattr(speculative, "accept", always_accept)
    with pytest.raises(AssertionError, match="do not follow the target"):
        follows_the_target(DRAFT, KNOBS["plain"])


# -- with a constraint: both distributions masked, the rule still exact ----------------------

class Pieces:
    """TARGET's tokenizer for constraints: ids 0, 1, 2 are the texts "a", "b", "ab"; 3 ends
    generation."""

    eos_token_ids = (3,)

    def __len__(self):
        return VOCAB

    def token_bytes(self, i):
        return [b"a", b"b", b"ab", b"<eos>"][i]


END = Pieces.eos_token_ids[0]
# The end token masked unless the text ends in "a", and "b" after "ab": most steps mask some
# of the draft's q; a weaker mask would let the negative controls below pass unseen.
MASKED = regex("b?(?:a|ba)+", Pieces())
# Prompt lookup's first guess after it is the end token, not allowed at the start: the test
# sees guesses rejected by p = 0.
LOOKUP_PROMPT = [2, 3, 0, 2]


def exact_constrained_distribution(constraint, knobs, n=NEW) -> np.ndarray:
    """exact_sequence_distribution's array (V,) * n for constrained outputs: the knobs on the
    masked logits of fresh forward passes, every output enumerated; one that ends before n
    tokens is padded with end tokens (nothing else ever follows one, so no two collide)."""
    config, exact = SamplingConfig(**knobs), np.zeros((VOCAB,) * n)

    def walk(new, state, p):
        if state == DONE or len(new) == n:
            exact[tuple(new + [END] * (n - len(new)))] += p
            return
        z = TARGET.forward(np.array([LOOKUP_PROMPT + new]))[0, -1]
        probs = filtered_probs(masked_logits(z[None], [constraint], [state])[0], config,
                               [LOOKUP_PROMPT + new])
        for t in map(int, np.flatnonzero(probs)):
            walk(new + [t], advance(constraint, state, t), p * probs[t])

    walk([], 0, 1.0)
    return exact


def follows_the_constrained_target(draft, knobs, runs=3000, k=2):
    """follows_the_target with a constraint, MASKED: the same chi-square at the 0.1% level (a
    correct sampler fails with probability 1e-3; the seeds are fixed, so every run gives the
    same verdict), against the enumerated constrained distribution."""
    def sample_fn(seed):
        out, _ = speculative_generate(TARGET, draft, LOOKUP_PROMPT, max_new_tokens=NEW, k=k,
                                      seed=seed, constraint=MASKED, **knobs)
        new = out[len(LOOKUP_PROMPT):]
        return new + [END] * (NEW - len(new))

    exact = exact_constrained_distribution(MASKED, knobs)
    assert abs(exact.sum() - 1) < 1e-12
    check_speculative_distribution(sample_fn, exact, runs=runs, seed=1234)


@pytest.mark.parametrize("draft, name", [
    ("model", "plain"),  # in the quick run; the others slow
    *(pytest.param(d, n, marks=pytest.mark.slow) for d, n in (
        ("model", "filtered"), ("model", "penalty"), ("ngram", "plain"), ("ngram", "filtered")))])
def test_constrained_output_follows_the_masked_target_distribution(draft, name):
    """The draft model masked as the target (it guesses only allowed tokens), or prompt lookup
    unmasked (its guesses checked: one not allowed is rejected by p = 0): whole outputs follow
    the target's constrained distribution."""
    follows_the_constrained_target(DRAFT if draft == "model" else "ngram", KNOBS[name])


class UnmaskedQDrafter(ModelDrafter):
    """A wrong drafter: it draws its guesses under the mask but reports the unmasked q."""

    def propose(self, text, k, rng, constraint=None, state=0):
        guesses, q = super().propose(text, k, rng, constraint, state)
        for i in range(len(guesses)):
            logits = self.model.forward(np.array([text + guesses[:i]]))[0, -1]
            q[i] = filtered_probs(logits, self.sampling, [text + guesses[:i]])
        return guesses, q


class UnmaskedDrafter(ModelDrafter):
    """An honest drafter that ignores the constraint: it draws from its unmasked q and says
    so; its guesses the constraint does not allow are rejected by p = 0."""

    def propose(self, text, k, rng, constraint=None, state=0):
        return super().propose(text, k, rng)


def cut_before(constraint, state, guesses):
    """A wrong guess_states: it cuts the guesses before the first one not allowed, so the
    position's token comes from p instead of the rejection's residual (exact only when q is
    a point mass)."""
    states = [state]
    for token in guesses:
        if states[-1] == DONE or not allowed(constraint, states[-1], VOCAB)[token]:
            break
        states.append(advance(constraint, states[-1], token))
    return states


@pytest.mark.parametrize("drafter, cut, passes", [
    (ModelDrafter, guess_states, True), (UnmaskedQDrafter, guess_states, False),
    (UnmaskedDrafter, guess_states, True), (UnmaskedDrafter, cut_before, False)],
    ids=["honest", "unmasked_q", "unmasked_draft", "unmasked_draft_cut_before"])
@pytest.mark.slow
def test_negative_controls_a_wrong_q_or_a_cut_before_the_guess_is_detected(drafter, cut, passes,
                                                                          monkeypatch):
    """The same test passes with the masked draft, and with an unmasked one whose guesses
    not allowed are rejected by p = 0; it fails with a q that is not the distribution the
    guesses came from, and when a guess not allowed is cut before it is verified."""
    monkeypatch.setattr(drafters, "guess_states", cut)
    drafter = drafter(FLAT_DRAFT, SamplingConfig(**KNOBS["plain"]))
    if passes:
        follows_the_constrained_target(drafter, KNOBS["plain"])
    else:
        with pytest.raises(AssertionError, match="do not follow the target"):
            follows_the_constrained_target(drafter, KNOBS["plain"])


def test_a_guess_not_allowed_is_the_last_verified_and_an_end_token_ends_the_guesses():
    """guess_states: "ab" then "b" (not allowed after "ab") ends the guesses, verified; so
    does an end token, after which nothing is verified. Prompt lookup's guesses are cut the
    same way (drafted)."""
    c = MASKED
    after_a, after_ab = advance(c, 0, 0), advance(c, 0, 2)
    assert guess_states(c, 0, [2, 1, 0]) == [0, after_ab, DONE]
    assert guess_states(c, after_a, [END, 0]) == [after_a, DONE]
    assert guess_states(c, 0, []) == [0]
    # Prompt lookup guesses "a", "ab", "b" (what followed the earlier end token): "b" after
    # "aab" is the last verified.
    guesses, q, states = drafted(NgramDrafter(VOCAB), [END, 0, 2, 1, END], 3,
                                 np.random.default_rng(0), c, 0)
    assert guesses == [0, 2, 1] and states == [0, after_a, advance(c, after_a, 2), DONE]
    assert q.shape == (3, VOCAB)


# -- greedy: the same text, token for token ---------------------------------------------------

@given(st.data())
def test_greedy_speculative_equals_greedy_target(data):
    cfg = data.draw(model_configs(context_length=data.draw(st.integers(3, 12))))
    target = minillm.random_model(cfg, seed=data.draw(st.integers(0, 99)), dtype="float64",
                                  std=1.0)
    draft_cfg = data.draw(model_configs(context_length=data.draw(st.integers(3, 12))))
    draft_cfg.vocab_size = cfg.vocab_size
    draft = data.draw(st.sampled_from(["ngram", "model"]))
    if draft == "model":
        draft = minillm.random_model(minillm.ModelConfig.from_dict(draft_cfg.to_dict()), seed=5,
                                     dtype="float64", std=1.0)
    prompt = data.draw(st.lists(st.integers(0, cfg.vocab_size - 1), min_size=1, max_size=15))
    new = data.draw(st.integers(1, 3 * cfg.context_length))  # crosses the window slide
    k = data.draw(st.integers(1, 5))
    # The penalties' history must follow the slides too.
    penalties = data.draw(st.sampled_from([{}, dict(repetition_penalty=1.3),
                                           dict(frequency_penalty=0.9, presence_penalty=0.4)]))
    with (pytest.warns(UserWarning, match="longer than the model's context")
          if len(prompt) > cfg.context_length else contextlib.nullcontext()):
        expected = generate(target, prompt, max_new_tokens=new, temperature=0, **penalties)
        out, stats = speculative_generate(target, draft, prompt, max_new_tokens=new, k=k,
                                          temperature=0, **penalties)
    assert out == expected
    assert stats.new_tokens == new and stats.accepted <= stats.guesses


def test_stop_tokens_and_limit_are_exact_inside_an_accepted_block():
    text = [0, 1, 2, 3] * 3
    expected = generate(TARGET, text, max_new_tokens=20, temperature=0)
    stop = expected[len(text) + 5]
    out, _ = speculative_generate(TARGET, "ngram", text, max_new_tokens=20, k=4, temperature=0,
                                  stop_tokens=[stop])
    assert out[-1] == stop and stop not in out[len(text):-1]
    assert out == expected[:len(out)]
    for limit in range(1, 7):
        out, stats = speculative_generate(TARGET, DRAFT, text, max_new_tokens=limit, k=4,
                                          temperature=0)
        assert len(out) == len(text) + limit == len(text) + stats.new_tokens


# -- rollback: every cache equals a fresh prefill of the accepted text ------------------------

class CheckedModel:
    """Wraps a model; before each cached forward pass, checks that the cache's rows equal a
    fresh prefill of the tokens the model has been given and not rolled back."""

    def __init__(self, model):
        self.model, self.config, self.fed, self.checks = model, model.config, [], 0

    def new_cache(self, *args, **kwargs):
        self.fed = []
        return self.model.new_cache(*args, **kwargs)

    def forward(self, tokens, cache=None, **kwargs):
        n = cache.length
        del self.fed[n:]
        if n:
            fresh = self.model.new_cache()
            self.model.forward(np.array([self.fed]), fresh)
            for layer in range(self.config.n_layers):
                for kept, expected in zip(cache.keys_values(layer), fresh.keys_values(layer)):
                    np.testing.assert_allclose(kept, expected, atol=1e-12)
            self.checks += 1
        self.fed += list(tokens[0])
        return self.model.forward(tokens, cache, **kwargs)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_rollback_leaves_caches_as_a_fresh_prefill_would(temperature):
    target, draft = CheckedModel(TARGET), CheckedModel(DRAFT)
    _, stats = speculative_generate(target, ModelDrafter(draft, SamplingConfig(temperature)),
                                    PROMPT, max_new_tokens=40, k=3, temperature=temperature)
    assert 0 < stats.accepted < stats.guesses  # some guesses were rejected and rolled back
    assert target.checks > 5 and draft.checks > 5


def test_lookup_finds_the_latest_earlier_occurrence():
    assert lookup([5, 6, 7, 9, 5, 6, 8, 1, 5, 6], 2, n=2) == [8, 1]
    assert lookup([1, 2, 3], 2, n=3) == []
    assert lookup([4, 4], 3, n=2) == [4]


def test_bad_arguments():
    with pytest.raises(ValueError, match="k: must be"):
        speculative_generate(TARGET, DRAFT, PROMPT, k=0)
    with pytest.raises(ValueError, match="vocabulary"):
        other = minillm.random_model(minillm.ModelConfig(
            arch="classic", vocab_size=VOCAB + 1, context_length=8, d_model=4, n_layers=1,
            n_heads=1))
        speculative_generate(TARGET, other, PROMPT)
    with pytest.raises(ValueError, match="draft"):
        speculative_generate(TARGET, "bigram", PROMPT)


# -- the command line -------------------------------------------------------------------------

def test_cli_speculative_prints_the_greedy_text_and_the_stats(tmp_path, capsys):
    from minillm.cli import main

    minillm.save(TARGET, tmp_path / "t.npz")
    minillm.save(DRAFT, tmp_path / "d.npz")
    expected = generate(TARGET, PROMPT, max_new_tokens=12, temperature=0)
    for draft in (["--draft_model", tmp_path / "d.npz", "--draft_k", "3"], ["--draft", "ngram"]):
        code = main(["generate", "--model_path", str(tmp_path / "t.npz"), "--prompt_ids", "1,2",
                     "--greedy", "--max_new_tokens", "12", *map(str, draft)])
        out, err = capsys.readouterr()
        assert code == 0 and [int(t) for t in out.split()] == expected
        assert "tokens per target pass" in err


def test_cli_speculative_bad_input_is_one_line(tmp_path, capsys):
    from minillm.cli import main

    minillm.save(TARGET, tmp_path / "t.npz")
    other = minillm.random_model(minillm.ModelConfig(
        arch="classic", vocab_size=VOCAB + 3, context_length=8, d_model=4, n_layers=1, n_heads=1))
    minillm.save(other, tmp_path / "o.npz")
    base = ["generate", "--model_path", str(tmp_path / "t.npz"), "--prompt_ids", "1"]
    for extra, message in ((["--draft_model", str(tmp_path / "o.npz")], "vocabulary"),
                           (["--draft_model", str(tmp_path / "nope.npz")], "no such file"),
                           (["--draft", "ngram", "--draft_k", "0"], "k: must be"),
                           (["--draft", "ngram", "--no_cache"], "always uses the KV cache")):
        code = main(base + extra)
        out, err = capsys.readouterr()
        assert code == 2 and len(err.strip().splitlines()) == 1 and message in err


def test_first_layers_is_the_target_cut_short_and_shares_its_weights():
    from minillm.drafters import first_layers

    cfg = minillm.ModelConfig(arch="modern", vocab_size=30, context_length=16, d_model=8,
                              n_layers=3, n_heads=2)
    target = minillm.random_model(cfg, seed=2, dtype="float64")
    draft = first_layers(target, 2)
    assert draft.config.n_layers == 2 and "layers.2.mlp.down.weight" not in draft.params
    assert all(draft.params[name] is target.params[name] for name in draft.params)
    reference = minillm.Model(draft.config, dict(draft.params))
    tokens = np.array([[3, 1, 4, 1, 5]])
    np.testing.assert_allclose(draft.forward(tokens), reference.forward(tokens), atol=1e-12)
    greedy = minillm.generate(target, [3, 1, 4], max_new_tokens=20, temperature=0)
    ids, stats = speculative_generate(target, draft, [3, 1, 4], max_new_tokens=20, k=3,
                                      temperature=0)
    assert ids == greedy and stats.draft_calls > 0
    with pytest.raises(ValueError, match="n_layers"):
        first_layers(target, 4)


def test_a_draft_model_must_share_the_targets_tokenizer():
    from minillm.text.tokenizer import BYTE_TO_CHAR, Tokenizer

    cfg = minillm.ModelConfig(arch="modern", vocab_size=258, context_length=16, d_model=8,
                              n_layers=1, n_heads=2)
    bytes_only = {BYTE_TO_CHAR[b]: b for b in range(256)}
    target, draft = (minillm.random_model(cfg, seed=s) for s in (1, 2))
    target.tokenizer = Tokenizer(bytes_only, [["a", "b"]])
    draft.tokenizer = Tokenizer(bytes_only, [["a", "b"]])  # equal, another object
    speculative_generate(target, draft, [1, 2, 3], max_new_tokens=4, temperature=0)
    draft.tokenizer = Tokenizer(bytes_only, [["b", "a"]])  # other merges
    with pytest.raises(ValueError, match="tokenizer differs from the target's"):
        speculative_generate(target, draft, [1, 2, 3], max_new_tokens=4, temperature=0)
    draft.tokenizer = None
    with pytest.warns(UserWarning, match="carries no tokenizer"):
        speculative_generate(target, draft, [1, 2, 3], max_new_tokens=4, temperature=0)


@pytest.mark.parametrize("temperature", [0.0, 0.8])
@pytest.mark.parametrize("context_length", [64, 12])  # 12: the window slides
def test_speculative_logprobs_equal_a_fresh_forward_pass_over_each_view(temperature,
                                                                       context_length):
    from minillm.layers import log_softmax
    from minillm.sampling import SamplingConfig, filtered_probs

    cfg = minillm.ModelConfig(arch="modern", vocab_size=30, context_length=context_length,
                              d_model=8, n_layers=2, n_heads=2)
    target = minillm.random_model(cfg, seed=5, dtype="float64")
    draft = minillm.random_model(cfg, seed=6, dtype="float64")
    knobs = dict(temperature=temperature, top_k=6, repetition_penalty=1.3)
    rollout, _ = speculative_generate(target, draft, [1, 2, 3], max_new_tokens=20, k=3, **knobs,
                                      seed=2,
                                      return_logprobs=True)
    assert len(rollout.logprobs) == len(rollout.raw_logprobs) == 20
    if temperature == 0:
        assert rollout.tokens == minillm.generate(target, [1, 2, 3], max_new_tokens=20, **knobs)
        assert rollout.logprobs == [0.0] * 20
    text, start, W = [1, 2, 3], 0, context_length
    for i, t in enumerate(rollout.new_tokens):
        view = text[start:]
        logits = target.forward(np.array([view]))[0, -1]
        p = filtered_probs(logits, SamplingConfig(**knobs), [view])
        assert abs(rollout.raw_logprobs[i] - log_softmax(logits)[t]) < 1e-10
        assert abs(rollout.logprobs[i] - np.log(p[t])) < 1e-10
        text.append(t)
        if len(text) - start > W:
            start = len(text) - max(1, W // 2)
