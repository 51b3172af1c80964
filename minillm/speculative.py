"""Speculative decoding (Leviathan et al., 2023; Chen et al., 2023): a cheap drafter guesses
k tokens, the target checks all of them in one cached forward pass, and an accept/resample
rule makes the output follow the target's distribution exactly, whatever the drafter.

For a guess x drawn from the drafter's q, with p the target's distribution at that position:

    keep x with probability min(1, p(x) / q(x))
    at the first rejection, draw the replacement from residual = max(0, p - q) / sum(max(0, p - q))
    if all k guesses are kept, the target's next row gives one more token (the bonus)

Why this is exact: a token x comes out of one step either because it was drafted and kept,
q(x) min(1, p(x)/q(x)) = min(p(x), q(x)), or because a rejection resampled it,
(1 - sum_y min(p(y), q(y))) residual(x) = max(0, p(x) - q(x)), since 1 - sum min(p, q) is the
total by which p exceeds q. The two add up to p(x). p and q are the *filtered* distributions
(temperature, top-k, top-p, min-p, repetition penalty): the rule is exact for whatever
distribution the target samples from, as long as q is the distribution the guess was drawn from.
With a constraint, p at each verified position is masked by the automaton's state after the
guesses before it, the first filter: the rule holds for that p (drafters.drafted says how
guesses the constraint does not allow are rejected).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .constrain.constraint import DONE, advance, masked_logits, row_constraints
from .drafters import drafted, make_drafter
from .generate import ends_row
from .inputs import check_prompts
from .knobs import checked, default, generation_config
from .logprobs import Rollout, score
from .sampling import SamplingConfig, choose, draw, filtered_probs
from .stopping import start_text
from .window import view_start


def residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """max(0, p - q), renormalised: where the target wants more mass than the draft gave.

    If p == q there is nothing left over (and a rejection cannot happen); p is returned.
    """
    r = np.maximum(p - q, 0.0)
    total = r.sum()
    return r / total if total > 0 else p


def accept(p: np.ndarray, q: np.ndarray, drafted, u, v: float) -> tuple[int, int]:
    """The accept/resample rule for one block of guesses: how many are kept, and the next token.

    p: (k + 1, V) the target's distributions after the text and after each guess;
    q: (k, V) the drafter's distributions the guesses were drawn from; drafted: k tokens;
    u: k uniforms in [0, 1) for the accept tests; v: one uniform for the final draw.
    """
    for i, x in enumerate(drafted):
        # keep x with probability min(1, p/q): u < p/q, written without dividing by q
        if u[i] * q[i, x] >= p[i, x]:
            return i, int(draw(residual(p[i], q[i]), v))
    return len(drafted), int(draw(p[len(drafted)], v))  # every guess kept: the bonus token


def accept_greedy(top, drafted) -> tuple[int, int]:
    """The rule at temperature 0, where every distribution is one-hot: keep guesses while each
    is the target's top token; the next token is the target's top token after the last kept.
    top: (k + 1,) the target's greedy choices after the text and after each guess.

    This is what accept() gives on one-hot p and q with top = p.argmax(-1) (p/q is 1 or 0, and
    the residual of a rejection is p itself), without the uniforms and the draws.
    """
    kept = 0
    while kept < len(drafted) and drafted[kept] == top[kept]:
        kept += 1
    return kept, int(top[kept])


@dataclass
class SpeculativeStats:
    """What one call did, counted: rounds, guesses proposed and kept, how each round's last
    token came (a rejection resampled it, or every guess was kept: the bonus), new tokens and
    forward passes. The caller times what it runs."""

    rounds: int = 0
    guesses: int = 0
    accepted: int = 0
    resampled: int = 0
    bonus: int = 0
    new_tokens: int = 0
    target_calls: int = 0
    draft_calls: int = 0

    @property
    def acceptance_rate(self) -> float:
        """Kept guesses / proposed guesses."""
        return self.accepted / self.guesses if self.guesses else 0.0

    @property
    def tokens_per_target_call(self) -> float:
        return self.new_tokens / self.target_calls if self.target_calls else 0.0


def speculative_generate(target, draft, prompt_ids, config=None, *, k=default("k"),
                         ngram=default("ngram"), rng=None, return_logprobs=False,
                         constraint=None, **knobs):
    """Prompt + new tokens from `target`, with guesses from `draft`, and the SpeculativeStats.

    draft: a Model sharing the target's vocabulary, "ngram" (prompt lookup of the last
    `ngram` tokens), or any object with propose(text, k, rng) -> (guesses, q) and a `calls`
    counter. k: guesses per round (an integer >= 1); ngram: the longest tail prompt lookup
    looks up. config and knobs: as in minillm.generate. The output has
    the distribution of minillm.generate with the same knobs; at temperature 0 it is the same
    text, token for token, window slides included. return_logprobs: a Rollout in place of
    the ids, each new token scored under the target's distributions as generate scores it.
    constraint: as in minillm.generate; the target's and a draft model's distributions masked.
    """
    stats, scores = SpeculativeStats(), ([] if return_logprobs else None)
    new = list(speculative_stream(target, draft, prompt_ids, config, k=k, ngram=ngram, rng=rng,
                                  stats=stats, scores=scores, constraint=constraint, **knobs))
    ids = [int(t) for t in prompt_ids] + new
    if scores is None:
        return ids, stats
    scores = scores[:len(new)]  # a stop may end the text before the last round's end
    return Rollout(ids, [s.logprob for s in scores], [s.raw_logprob for s in scores]), stats


def speculative_stream(target, draft, prompt_ids, config=None, *, k=default("k"),
                       ngram=default("ngram"), rng=None, stats=None, scores=None,
                       constraint=None, **knobs):
    """An iterator over the new tokens as they are accepted; `stats` (a SpeculativeStats) is
    updated as it goes, and `scores` (a list), if given, receives a ScoredToken for every
    token of a round as the round ends. Arguments are checked here, before the first token."""
    vocab = target.config.vocab_size
    config = generation_config(config, target, **knobs)
    k, ngram = checked("k", k), checked("ngram", ngram)
    if check_prompts(prompt_ids, vocab, target.config.context_length)[1]:
        raise ValueError("prompt_ids: speculative decoding takes one prompt, not a batch")
    drafter = make_drafter(draft, vocab, config.sampling, ngram,
                           getattr(target, "tokenizer", None))
    stats = SpeculativeStats() if stats is None else stats
    rng = np.random.default_rng(config.seed) if rng is None else rng  # or the caller's
    if constraint is not None:
        constraint = row_constraints(constraint, 1, vocab)[0]
    return _rounds(target, drafter, [int(t) for t in prompt_ids], config, k, rng, stats, scores,
                   constraint)


def _rounds(target, drafter, text, config, k, rng, stats, scores=None, constraint=None):
    """Rounds until a stop token, a stop string, the constraint's end or max_new_tokens; the
    bookkeeping of the window, stats and the automaton's state (it follows the output, not the
    window). scores: a list that receives a ScoredToken per new token, if given."""
    W = target.config.context_length
    texts = [start_text(target.tokenizer, text)] if config.stop_strings else None  # one row
    cache = target.new_cache(capacity=min(W, len(text) + config.max_new_tokens + k))
    start = max(0, len(text) - W)  # the view is text[start:]: a long prompt's last W tokens
    state = 0  # the constraint's automaton state, if there is one
    while stats.new_tokens < config.max_new_tokens:
        # Each position is predicted from the same view that plain generation would use:
        # the view may grow to W tokens, so at most W - view guesses fit in this block.
        room = min(k, W - (len(text) - start), config.max_new_tokens - stats.new_tokens - 1)
        new, proposed, new_logits = speculative_round(target, cache, drafter, text, start, room,
                                                      config.sampling, rng, constraint, state)
        if scores is not None:
            scores.extend(score_round(new, new_logits, text[start:], config.sampling))
        _count(stats, len(new) - 1, proposed, drafter.calls)
        for t in new:
            text.append(t)
            stats.new_tokens += 1
            yield t
            state = state if constraint is None else advance(constraint, state, t)
            if stats.new_tokens == config.max_new_tokens or state == DONE \
                    or ends_row([t], [0], config, texts)[0]:
                return
        new_start = view_start(len(text), start, W)
        if new_start != start:  # the view overflowed: keep its newest half, read it from 0
            start = new_start
            cache.reset()


def speculative_round(target, cache, drafter, text, start, k, sampling: SamplingConfig, rng,
                      constraint=None, state=0):
    """One round: draft k guesses, verify them in one target pass, accept or resample, roll
    the target's cache back. Returns the new tokens (the kept guesses, then one more), the
    number of guesses proposed, and the target's logits that predicted each new token (masked
    by the constraint, in `state` after `text`, if there is one).

    The target sees the view text[start:] (the window). Cache invariant: on entry the cache
    holds the keys and values of a prefix of the view (all of it but what is new since the
    last round); on exit, exactly the view plus the kept guesses, the last new token being
    still unread. The drafter rolls its own cache back the same way at its next proposal.
    """
    view = len(text) - start
    guesses, q, states = drafted(drafter, text, k, rng, constraint, state)  # 1. draft
    fresh = text[start + cache.length:] + guesses  # what the target's cache lacks
    logits = target.forward(np.array([fresh]), cache, last=len(guesses) + 1)[0]  # 2. verify
    if states is not None:  # the mask, the first filter of every verified position
        logits = masked_logits(logits, [constraint] * len(states), states)
    kept, token = accept_or_resample(logits, guesses, q, text, start, sampling, rng)  # 3.
    cache.truncate(view + kept)  # 4. roll back: forget the rejected guesses
    return guesses[:kept] + [token], len(guesses), logits[:kept + 1]


def accept_or_resample(logits, guesses, q, text, start, sampling: SamplingConfig, rng):
    """The guesses judged by the target's logits (k + 1, V) of the positions that predict them
    and the one after: (how many are kept, the next token: the replacement of the first
    rejected guess, or the bonus token when every guess is kept). The repetition penalty sees
    what plain generation sees: the view text[start:], then the guesses."""
    history = None
    if sampling.penalises:
        view = text[start:]
        history = [view + guesses[:i] for i in range(len(guesses) + 1)]
    p = filtered_probs(logits, sampling, history)  # (k + 1, V)
    if sampling.greedy:
        return accept_greedy(choose(p, sampling), guesses)
    return accept(p, q, guesses, rng.random(len(guesses)), rng.random())


def _count(stats: SpeculativeStats, kept: int, proposed: int, draft_calls: int) -> None:
    """Count a round: its guesses, the kept ones, and how its last token came."""
    stats.rounds += 1
    stats.target_calls += 1
    stats.guesses += proposed
    stats.accepted += kept
    if kept < proposed:
        stats.resampled += 1
    else:
        stats.bonus += 1
    stats.draft_calls = draft_calls


def score_round(new, logits, view, sampling: SamplingConfig):
    """The new tokens scored as generate scores them: under the target's distributions
    (`view`: the text the target saw before them, the penalties' history)."""
    history = [view + new[:i] for i in range(len(new))] if sampling.penalises else None
    return score(filtered_probs(logits, sampling, history), logits, new)
