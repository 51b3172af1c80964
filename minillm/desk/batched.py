"""The generating widgets' texts through one serving Engine, and given up when nobody waits.

The desk keeps one Engine (minillm/serving/) stepped by one thread, `minillm serve`'s loop
(serve/loop.py: an inbox of tickets, each a few engine requests, every Output handed back
through the ticket). The four temperatures' columns and the repetition widget's two texts are
its requests, so that texts asked at the same time are computed in the same steps (continuous
batching) whoever asked them, each as `generate` alone would write it (the same seed, the same
draws; docs/SERVING.md), up to rounding: in float32 a row's logits move by about 1e-5 with the
rows computed beside it (the BLAS sums in another order), which a greedy text notices only
where its two best tokens nearly tie, but which can tip a hot draw at a near-tie to the
neighbouring token (docs/DESK.md counts how often). Prefix caching is off: a prompt's blocks
lent by an earlier request, computed in another shape, would move the same request's surprises
in their last bits when it is asked again.

A widget's request waits for its texts' tokens and asks `abandoned()` (server.py: a newer
request of the same widget has come, or the page closed the connection) as it waits, at
least every POLL seconds. Once abandoned, its ticket is cancelled: the loop aborts its engine
requests before the next step and their blocks go back to the pool, and the widget raises
Abandoned. Nothing computes a text nobody will read.

The pool holds the most one request may ask for (the work bound's positions of this model,
at most 16,384) and a text's new tokens more: any one widget's texts fit at once, and more
requests than that wait their turn in the engine (or are preempted, and computed again).
"""
from __future__ import annotations

import math
import queue

from ..logprobs import Rollout
from ..serve.loop import Choice, EngineLoop, Ticket
from ..serving import Engine
from ..serving.block_manager import blocks_for
from .fields import MAX_NEW_TOKENS, RequestError

POLL = 0.05  # seconds between two looks at whether the request is still wanted
BLOCK_SIZE = 16
MOST_POSITIONS = 2**14  # the pool's bound, whatever the work bound allows a small model


class Abandoned(RequestError):
    """The request's answer is no longer wanted: a newer request of its widget replaced it,
    or its client left."""

    def __init__(self):
        super().__init__("superseded: a newer request of this widget came, so this one was "
                         "stopped", 409)


def never() -> bool:
    return False


def engine_loop(desk) -> EngineLoop:
    """The desk's loop, made and started at its first use."""
    if desk.loop is not None:
        return desk.loop
    with desk.lock:  # the bits widget may hold it a while: only the first use waits
        if desk.loop is None:
            params = sum(math.prod(w.shape) for w in desk.model.params.values())
            positions = min(desk.max_work // params, MOST_POSITIONS) + MAX_NEW_TOKENS
            engine = Engine(desk.model, block_size=BLOCK_SIZE,
                            num_blocks=blocks_for(positions, BLOCK_SIZE), prefix_caching=False)
            desk.loop = EngineLoop(engine)
            desk.loop.start()
        return desk.loop


def rollouts(desk, prompt: list[int], texts: list[dict], abandoned=never) -> list[Rollout]:
    """One Rollout per item of `texts` (the knobs of generate for a continuation of `prompt`),
    with the log-probabilities generate's return_logprobs gives, from the desk's engine.
    Raises Abandoned, its engine requests aborted, once `abandoned()` is true."""
    loop = engine_loop(desk)
    events = queue.SimpleQueue()
    ticket = Ticket([Choice(list(prompt), knobs, logprobs=True) for knobs in texts], events.put)
    out = [Rollout(list(prompt), [], []) for _ in texts]
    unfinished = len(texts)
    loop.submit(ticket)
    while unfinished:
        if abandoned():
            loop.cancel(ticket)
            raise Abandoned()
        try:
            event = events.get(timeout=POLL)
        except queue.Empty:
            if not loop.alive():
                raise RuntimeError("the desk's engine loop has stopped") from None
            continue
        if event.error is not None:
            raise (RequestError if event.status == 400 else RuntimeError)(event.error)
        new = event.output  # a serving.Output
        if new.token is not None:
            rollout = out[event.choice]
            rollout.tokens.append(new.token)
            rollout.logprobs.append(new.logprob)
            rollout.raw_logprobs.append(new.raw_logprob)
        unfinished -= new.finished
    return out
