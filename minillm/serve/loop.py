"""The engine's one loop: a thread that steps the Engine while it has work, and sleeps otherwise.

The HTTP handlers never touch the engine. They hand a Ticket (one HTTP request: its choices,
each an engine request) to the loop through a thread-safe queue, the inbox, and wake the loop;
the loop adds the ticket's requests, steps the engine, and hands each Output back through the
ticket's own `deliver` (the handler's queue). Between two steps the loop empties its inbox:
new tickets, cancelled tickets (a client gone: its requests are aborted, their blocks freed)
and calls (work on the model that must not run beside a step: the stats, a prompt's scores).
So every request that arrives while others run joins the running batch at the next step.

    loop = EngineLoop(Engine(model)); loop.start()
    loop.has_room(n)           # from any thread: n more requests keep the queue within bound
    loop.submit(ticket)        # from any thread
    loop.cancel(ticket)        # idem; a finished or unknown ticket is ignored
    loop.call(fn, done)        # done(result, error) with fn's result, run between two steps
    loop.stop()
"""
from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field
from typing import Callable, NamedTuple


class Event(NamedTuple):
    """What a ticket receives: an Output of choice `choice` (its `top` entries as asked) and
    how many of its prompt's positions were found in the prefix cache, or an error that ends
    the ticket."""

    choice: int
    output: object = None  # minillm.serving.Output
    cached: int = 0
    error: str | None = None
    status: int = 500  # the error's: 400 a request the engine refused, 500 a fault


@dataclass
class Choice:
    """One engine request of a ticket: the prompt, the knobs of add_request, and what the
    engine is asked beside them (logprobs True or "raw", top_logprobs, process: Request)."""

    prompt: list[int]
    knobs: dict
    logprobs: bool | str = False
    top_logprobs: int = 0
    process: object = None


@dataclass
class Ticket:
    """An HTTP request's choices and `deliver(event)`, which must be safe from any thread."""

    choices: list[Choice]
    deliver: Callable[[Event], None]
    ids: list[int] = field(default_factory=list)  # the engine's ids, set by the loop


class EngineLoop:
    """max_waiting: the engine requests that may wait (submitted, not yet running) before
    has_room says no; None: no bound."""

    def __init__(self, engine, max_waiting: int | None = None):
        self.engine, self.max_waiting = engine, max_waiting
        self.lock = threading.Lock()
        self.submitted = 0  # engine requests in the inbox, not yet added (under the lock)
        self.waiting = 0  # the engine's waiting requests after the last step or inbox read
        self.inbox = queue.SimpleQueue()
        self.wakeup = threading.Condition()
        self.owners = {}  # engine id -> (ticket, choice index), until it finishes
        self.counts = {"requests": 0, "finished": 0, "aborted": 0, "errors": 0, "refused": 0}
        self.stopping = False
        self.thread = threading.Thread(target=self.run, name="minillm-engine", daemon=True)

    # -- from any thread -----------------------------------------------------------------

    def start(self) -> None:
        self.thread.start()

    def stop(self, timeout: float = 10) -> None:
        self.send(("stop",))
        self.thread.join(timeout)

    def alive(self) -> bool:
        return self.thread.is_alive() and not self.stopping

    def has_room(self, n: int) -> bool:
        """Whether n more engine requests may wait: the waiting ones and n stay within
        max_waiting, or none waits (so a request of n choices past the bound still runs
        alone). No counts a refusal."""
        with self.lock:
            waiting = self.submitted + self.waiting
            room = self.max_waiting is None or not waiting or waiting + n <= self.max_waiting
            self.counts["refused"] += not room
        return room

    def submit(self, ticket: Ticket) -> None:
        with self.lock:
            self.submitted += len(ticket.choices)
        self.send(("submit", ticket))

    def cancel(self, ticket: Ticket) -> None:
        self.send(("cancel", ticket))

    def call(self, fn, done) -> None:
        self.send(("call", fn, done))

    def send(self, message) -> None:
        self.inbox.put(message)
        with self.wakeup:
            self.wakeup.notify()

    # -- the loop's own thread -------------------------------------------------------------

    def run(self) -> None:
        while not self.stopping:
            with self.wakeup:
                self.wakeup.wait_for(lambda: not self.inbox.empty()
                                     or self.engine.has_unfinished())
            self.read_inbox()
            if self.engine.has_unfinished() and not self.stopping:
                self.step()
                self.waiting = len(self.engine.scheduler.waiting)
        for ticket, _, _ in list(self.owners.values()):
            self.fail(ticket, "the server is shutting down")

    def read_inbox(self) -> None:
        while not self.inbox.empty():
            kind, *rest = self.inbox.get()
            if kind == "submit":
                self.add(rest[0])
                with self.lock:
                    self.submitted -= len(rest[0].choices)
                    self.waiting = len(self.engine.scheduler.waiting)
            elif kind == "cancel":
                self.abort(rest[0], counted=True)
            elif kind == "call":
                fn, done = rest
                try:
                    result = fn()
                except Exception as e:
                    done(None, e)
                else:
                    done(result, None)
            else:
                self.stopping = True

    def add(self, ticket: Ticket) -> None:
        for i, choice in enumerate(ticket.choices):
            try:
                rid = self.engine.add_request(
                    choice.prompt, logprobs=choice.logprobs, top_logprobs=choice.top_logprobs,
                    process=choice.process, **choice.knobs)
            except Exception as e:  # the handler checked the request: rarely here
                self.fail(ticket, str(e), i, status=400)
                return
            ticket.ids.append(rid)
            self.owners[rid] = (ticket, i, self.engine.requests[rid])
            self.counts["requests"] += 1

    def abort(self, ticket: Ticket, counted: bool = False) -> None:
        for rid in ticket.ids:
            if self.owners.pop(rid, None) is not None:
                self.engine.abort(rid)
                self.counts["aborted"] += counted

    def fail(self, ticket: Ticket, message: str, choice: int = 0, status: int = 500) -> None:
        self.abort(ticket)
        self.counts["errors"] += 1
        ticket.deliver(Event(choice, error=message, status=status))

    def step(self) -> None:
        try:
            outputs = self.engine.step()
        except Exception as e:  # a fault of the engine: its requests fail, the server goes on
            for ticket in {id(t): t for t, _, _ in self.owners.values()}.values():
                self.fail(ticket, f"the engine failed: {type(e).__name__}: {e}")
            return
        for out in outputs:
            owner = self.owners.get(out.request_id)
            if owner is None:
                continue
            ticket, i, request = owner
            if out.finished:
                del self.owners[out.request_id]
                self.counts["finished"] += 1
            ticket.deliver(Event(i, out, request.cached_tokens))

    def stats(self) -> dict:
        """The engine's counts and the loop's (call it through `call`, between two steps)."""
        from dataclasses import asdict

        engine = self.engine
        return {**asdict(engine.stats), "running": len(engine.scheduler.running),
                "waiting": len(engine.scheduler.waiting), **self.counts}
