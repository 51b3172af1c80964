"""Speculative decoding inside the engine: a request's round rides in the step's one pass with
every other request's tokens, and ends as speculative_generate's round alone (speculative.py).

A request added with `draft=` carries a `Speculation` (its drafter and k), and each of its steps
is a round once its prompt is read:

    1. size (the scheduler, Scheduler.chunk -> Speculation.chunk): the rest of its text and
       min(k, what the context and max_new_tokens leave) guesses, all or nothing within the
       step's budget; until the budget holds that, chunks of its prompt that leave its last
       token to the round;
    2. draft_rounds (the engine, before the pass): the drafter proposes guesses and their q
       (with a constraint, from the request's state: drafters.drafted);
    3. end_round (the engine, after the pass): the logits of the round's last k + 1
       positions, masked by the constraint, keep or resample the guesses (accept_or_resample);
       the kept guesses count as computed, the rejected positions are forgotten and the
       blocks wholly past them go back.

The same sizes, the same guesses and the same draws as speculative_generate alone, so the same
tokens and log-probabilities (tests/test_serving.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..constrain.constraint import masked_logits
from ..drafters import drafted, make_drafter
from ..knobs import checked
from ..speculative import accept_or_resample, score_round
from .block_manager import blocks_for


@dataclass(frozen=True, eq=False)
class Speculation:
    """Who guesses for a request (a drafter: propose(text, k, rng) -> (guesses, q)), and k."""

    drafter: object
    k: int

    @classmethod
    def make(cls, draft, k, ngram, model, sampling, max_batch_tokens: int) -> "Speculation":
        """The request's drafter from `draft` (a Model, "ngram" or a drafter), k checked: a
        round's k + 1 positions must fit one step."""
        k = checked("k", k)
        if k >= max_batch_tokens:
            raise ValueError(f"k: must be below max_batch_tokens ({max_batch_tokens}), got {k}")
        return cls(make_drafter(draft, model.config.vocab_size, sampling, ngram,
                                model.tokenizer), k)

    def chunk(self, request, budget: int, context_length: int) -> int:
        """How many positions the request computes within `budget` (0: it waits): a round,
        its text's rest and its guesses, or a chunk of its prompt short of its last token."""
        room = min(self.k, context_length - len(request.text),
                   request.config.max_new_tokens - request.new_tokens - 1)
        rest = request.to_compute
        return rest + room if rest + room <= budget else min(rest - 1, budget)


def draft_rounds(work) -> dict:
    """Before the pass: request id -> (guesses, q, states) of every request whose step is a
    round (it computes the rest of its text and guesses)."""
    return {r.id: drafted(r.speculation.drafter, r.text, n - r.to_compute, r.rng, r.constraint,
                          r.state)
            for r, n in work if r.speculation is not None and n >= r.to_compute}


def end_round(engine, request, guesses, q, states, logits) -> list[tuple]:
    """After the pass: the guesses judged by the logits (k + 1, V) of the positions that
    predict them and the one after, masked by `states` (None: no constraint), as
    speculative_round judges them alone; the kept ones count as computed (the next token's
    position stays unread), the blocks wholly past them go back. Returns the new tokens (the
    kept guesses, then the next one) as (token, ln p as drawn, ln p raw, None), the scores
    None unless asked."""
    sampling = request.config.sampling
    if states is not None:
        logits = masked_logits(logits, [request.constraint] * len(states), states)
    kept, token = accept_or_resample(logits, guesses, q, request.text, 0, sampling, request.rng)
    engine.counts.guesses += len(guesses)
    engine.counts.accepted += kept
    engine.count_computed(request, request.to_compute + kept)
    manager = engine.block_manager
    manager.release(request, keep=blocks_for(request.computed, manager.block_size))
    new = guesses[:kept] + [token]
    if not request.logprobs:
        return [(t, None, None, None) for t in new]
    return [(*scored, None) for scored in score_round(new, logits[:kept + 1], request.text,
                                                      sampling)]
