"""Continuous batching: which requests compute how many tokens in the next step.

A request has a text (its prompt, then the tokens drawn) and `computed`, how many of its
positions have keys and values in its blocks: 1 left to compute when decoding, more while
reading its prompt. Each step, within `max_batch_tokens`:

    1. every running request that is decoding computes its one token;
    2. running requests still reading their prompt take its next chunk (chunked prefill);
    3. waiting requests join, oldest first, each with a first chunk (after reusing the cached
       blocks its text starts with), while the budget and the blocks last;
prompt chunks (2, 3) taking at most `max_prefill_tokens` beside decoding rows. When a chunk
finds no blocks (block_manager.py), the newest running request is preempted.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from .block_manager import blocks_for


@dataclass(eq=False)
class Request:
    """One request: its text so far and where its keys and values are."""

    id: int
    text: list  # prompt + tokens drawn so far
    prompt_length: int
    config: object  # a GenerationConfig
    rng: np.random.Generator
    logprobs: bool | str = False  # "raw": Output.top from the model's own logits, not the knobs'
    top_logprobs: int = 0  # with logprobs, each Output lists this many most likely tokens
    process: object = None  # (request, logits) -> logits, before the knobs: a caller's bias
    stop_text: object = None  # the new text decoded so far, when stop strings are watched
    speculation: object = None  # speculative decoding's drafter and k (speculative.py)
    constraint: object = None  # its output's language (minillm.constrain), and
    state: int = 0  # the automaton's state after the tokens drawn so far
    prompt_logprobs: int | None = None  # score the prompt's tokens, with this many top entries,
    scored: int = 1  # up to here (the first token has no score)
    table: list = field(default_factory=list)  # block ids, position p in table[p // bs]
    computed: int = 0  # positions [0, computed) are in the blocks
    new_tokens: int = 0
    cached_tokens: int = 0  # prompt positions found in the prefix cache when it last joined

    @property
    def to_compute(self) -> int:
        """Tokens still to compute: 1 when decoding, more while reading the prompt."""
        return len(self.text) - self.computed


class Scheduler:
    """The waiting queue (oldest first) and the running requests (in the order they joined),
    and the blocks they hold; it counts its preemptions and reused prompt positions in `counts`
    (the engine's Stats)."""

    def __init__(self, block_manager, max_batch_tokens: int, context_length: int,
                 max_prefill_tokens: int | None, counts):
        self.block_manager, self.counts = block_manager, counts
        self.max_batch_tokens, self.context_length = max_batch_tokens, context_length
        self.max_prefill_tokens = max_prefill_tokens or max_batch_tokens
        self.waiting, self.running = deque(), []

    def check_fits(self, prompt_length: int, max_new_tokens: int) -> None:
        """Refuse a request that could pass the context (the engine does not slide) or the pool."""
        longest, manager = prompt_length + max_new_tokens, self.block_manager
        if longest > self.context_length:
            raise ValueError(f"prompt_ids: {prompt_length} tokens and max_new_tokens "
                             f"{max_new_tokens} pass the context of {self.context_length}: "
                             "the engine does not slide the window")
        if blocks_for(longest, manager.block_size) > manager.num_blocks:
            raise ValueError(f"prompt_ids: {longest} positions need more than the pool's "
                             f"{manager.num_blocks} blocks of {manager.block_size}")

    def finish(self, request: Request) -> None:
        """The request leaves (finished or aborted); its blocks go back."""
        (self.running if request in self.running else self.waiting).remove(request)
        self.block_manager.release(request)

    def schedule(self) -> list[tuple[Request, int]]:
        """The next step's work: (request, how many of its tokens to compute), its blocks taken.
        Running requests go in the order they joined, so the newest (preempted when blocks run
        out) is never one already given work. Waiting requests join until one is left with part
        of its prompt unread: a prompt read in chunks is read alone, so that its blocks are
        cached before the next requests come (a prompt being scored reuses none: it holds no
        one up)."""
        budget, work = self.max_batch_tokens, []
        manager = self.block_manager
        decoding = any(r.to_compute == 1 for r in self.running)
        prefill = min(budget, self.max_prefill_tokens) if decoding else budget  # <= budget
        for request in list(self.running):  # oldest first: the decoding ones come first
            if request not in self.running or budget == 0:  # preempted, or no budget left
                break
            reading = request.to_compute > 1
            n = self.chunk(request, prefill if reading else budget)
            if n and self.make_room(request, n):  # else it waits, or gave way itself
                work.append((request, n))
                budget, prefill = budget - n, min(budget - n, prefill - n * reading)
        while self.waiting and prefill > 0 and all(n >= r.to_compute or r.prompt_logprobs
                                                   is not None for r, n in work):
            request = self.waiting[0]
            manager.reuse_prefix(request)
            n = self.chunk(request, prefill)
            if n == 0 or not manager.allocate(request, n):
                manager.release(request)  # no room: it waits, holding nothing
                break
            self.running.append(self.waiting.popleft())
            request.cached_tokens = min(request.computed, request.prompt_length)
            self.counts.prompt_tokens_reused += request.cached_tokens
            work.append((request, n))
            prefill -= n  # (<= the budget left)
        return work

    def chunk(self, request: Request, budget: int) -> int:
        """How many positions `request` computes in a step within `budget` (0: it waits): the
        next chunk of its text, a speculating request's round (speculative.py), and a prompt
        being scored (the logits of each of its positions held) at most max_prefill_tokens, half
        of that while others wait to join."""
        if request.speculation is not None:
            return request.speculation.chunk(request, budget, self.context_length)
        if request.prompt_logprobs is not None:
            budget = min(budget, max(1, self.max_prefill_tokens // (1 + bool(self.waiting))))
        return min(request.to_compute, budget)

    def make_room(self, request: Request, n: int) -> bool:
        """Take the blocks `request` needs for n more positions, preempting the newest running
        request while too few are left: its blocks go back, and it waits at the head of the
        queue to compute its whole text again. False if `request` itself gave way."""
        while not self.block_manager.allocate(request, n):
            newest = self.running.pop()
            self.block_manager.release(newest)
            self.waiting.appendleft(newest)
            self.counts.preemptions += 1
            if newest is request:
                return False
        return True
