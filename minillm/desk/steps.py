"""The serving engine step by step, read from outside: after every `Engine.step`, each request's
state and block table, each block's holders, the tokens drawn, the requests preempted.

The engine's code runs as it is: the model is wrapped to count the token positions each step
computes (`Counted`), and the waiting queue is one that notes who is put back at its head
(`Queue`): a preempted request waits at the head of the queue, every other joins at its end,
so those are the step's preemptions (as many as `stats.preemptions` counts: tests/test_desk.py).
Everything else is read from the engine's own fields: its scheduler's `running` and `waiting`,
its `requests`, each request's `table`, `computed` and `text`, its block manager's `refs`,
`unheld` and `is_cached`, and `stats`.
"""
from __future__ import annotations

import dataclasses
from collections import deque

import numpy as np


class Counted:
    """A model that counts the token positions its forward passes compute (`positions`)."""

    def __init__(self, model):
        self.model, self.positions = model, 0

    def __getattr__(self, name):
        return getattr(self.model, name)

    def forward(self, tokens, cache=None, **kwargs):
        self.positions += int(np.shape(tokens)[0] * np.shape(tokens)[1])
        return self.model.forward(tokens, cache, **kwargs)


class Queue(deque):
    """The engine's waiting queue, noting the ids of the requests put back at its head
    (`returned`): the preempted ones."""

    def __init__(self, requests=()):
        super().__init__(requests)
        self.returned = []

    def appendleft(self, request):
        self.returned.append(request.id)
        super().appendleft(request)


def snapshot(engine, requests: dict, finished: dict) -> dict:
    """Every request's state and every block's, as the engine holds them now.

    requests: {id: Request} of every request added (kept after they finish); finished: {id:
    reason} of those that finished."""
    scheduler, manager = engine.scheduler, engine.block_manager
    running = {r.id for r in scheduler.running}
    waiting = [r.id for r in scheduler.waiting]
    rows = []
    for rid, request in requests.items():
        state = ("finished" if rid in finished else "running" if rid in running else "waiting")
        rows.append({"id": rid, "state": state, "reason": finished.get(rid),
                     "computed": request.computed, "length": len(request.text),
                     "table": list(request.table),
                     "new": request.text[request.prompt_length:]})
    owners = {}
    for request in scheduler.running:
        for block in request.table:
            owners.setdefault(block, []).append(request.id)
    blocks = []
    for b, refs in enumerate(manager.refs):
        state = "held" if refs > 0 else "cached" if b in manager.unheld else "free"
        blocks.append({"block": b, "refs": refs, "owners": sorted(owners.get(b, [])),
                       "state": state, "prefix": manager.is_cached(b)})
    return {"running": [r.id for r in scheduler.running], "waiting": waiting, "requests": rows,
            "blocks": blocks, "stats": dataclasses.asdict(engine.stats)}


def run_steps(engine, max_steps: int, max_positions: int) -> tuple[list[dict], str | None]:
    """Step `engine` (whose model is Counted) until every request is done, at most `max_steps`
    steps, and no step once the positions computed could pass `max_positions`. Returns the
    snapshots (the first before any step) with each step's outputs, preemptions and positions
    computed, and why it stopped early: None, "steps" or "work"."""
    requests = dict(engine.requests)
    finished = {}
    engine.scheduler.waiting = queue = Queue(engine.scheduler.waiting)
    counter = engine.model
    shots = [dict(snapshot(engine, requests, finished), step=0, outputs=[], preempted=[],
                  positions=0)]
    stopped = None
    while engine.has_unfinished():
        if len(shots) > max_steps:
            stopped = "steps"
            break
        if counter.positions + engine.max_batch_tokens > max_positions:
            stopped = "work"
            break
        queue.returned.clear()
        before = counter.positions
        outputs = engine.step()
        for out in outputs:
            if out.finished:
                finished[out.request_id] = out.reason
        shots.append(dict(snapshot(engine, requests, finished), step=len(shots),
                          outputs=[{"request": o.request_id, "id": o.token,
                                    "finished": o.finished, "reason": o.reason}
                                   for o in outputs],
                          preempted=list(queue.returned), positions=counter.positions - before))
    return shots, stopped
