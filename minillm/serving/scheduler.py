"""Continuous batching: which requests compute how many tokens in the next step.

A request has a text (its prompt, then the tokens drawn so far) and `computed`, how many of its
positions have keys and values in its blocks; it still has to compute text[computed:]. A
request decoding has exactly one token left (the last one drawn); a request reading its prompt
has more. Each step, within `max_batch_tokens`:

    1. every running request that is decoding computes its one token;
    2. running requests still reading their prompt take the next chunk of it (chunked prefill);
    3. waiting requests join, oldest first, each with a first chunk, while the budget and the
       free blocks last (a joining request first reuses the cached blocks its text starts with).

A request's chunk needs blocks for its new positions. When the pool has none left (no free
block, no cached block nobody holds), the newest running request is preempted: its blocks are
released and it waits again at the head of the queue, to compute its whole text anew when it
rejoins (its full blocks may still be cached by then). Requests leave the running set as soon
as they finish. Invariants, after every step: a block is held by exactly `refs[b]` tables; the
blocks held, free and cached-unheld add up to the pool; a waiting request holds no block.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .blocks import blocks_for


@dataclass(eq=False)
class Request:
    """One request: its text so far and where its keys and values are."""

    id: int
    text: list  # prompt + tokens drawn so far
    prompt_length: int
    config: object  # a GenerationConfig
    rng: np.random.Generator
    logprobs: bool = False
    stop_text: object = None  # the new text decoded so far, when stop strings are watched
    drafter: object = None  # speculative decoding: who guesses (speculative.make_drafter)
    k: int = 0  # guesses per round
    table: list = field(default_factory=list)  # block ids, position p in table[p // bs]
    block_keys: list = field(default_factory=list)  # prefix-cache key of each full block
    computed: int = 0  # positions [0, computed) are in the blocks
    new_tokens: int = 0

    @property
    def todo(self) -> int:
        """Tokens still to compute: 1 when decoding, more while reading the prompt."""
        return len(self.text) - self.computed

    def chunk(self, budget: int, context_length: int) -> int:
        """How many positions this request computes in a step within `budget` (0: it waits).
        Without a drafter, the next chunk of its text. With one, a round of speculative
        decoding as speculative_generate runs it alone: the rest of its text and a round's
        guesses, min(k, what the context and max_new_tokens leave), all or nothing; until the
        budget holds that, chunks of its prompt that leave its last token to the round."""
        if self.drafter is None:
            return min(self.todo, budget)
        room = min(self.k, context_length - len(self.text),
                   self.config.max_new_tokens - self.new_tokens - 1)
        return self.todo + room if self.todo + room <= budget else min(self.todo - 1, budget)

    def rounds(self, n: int) -> bool:
        """Whether computing n positions is a round of speculative decoding (chunk)."""
        return self.drafter is not None and n >= self.todo


def schedule(engine) -> list[tuple[Request, int]]:
    """The next step's work: (request, how many of its tokens to compute), every block it needs
    taken. Running requests go in the order they joined, which puts the decoding ones first
    (a request joins with its prompt, and every request that joined before it has finished its
    prompt, or joined in the same step and goes before it), so the newest request, the one
    preempted when blocks run out, is never one already given work in this step. Waiting
    requests join while the budget and the blocks allow, until one of them (or a running one)
    is left with part of its prompt unread: a prompt read in chunks is read without others
    joining, so that the blocks it shares with the next requests are cached before they come."""
    budget = engine.max_batch_tokens
    work = []
    W = engine.model.config.context_length
    for request in list(engine.running):  # oldest first: the decoding ones come first
        if request not in engine.running or budget == 0:  # preempted, or no budget left
            break
        n = request.chunk(budget, W)
        if n and make_room(engine, request, n):  # else it waits, or gave way itself
            work.append((request, n))
            budget -= n
    while engine.waiting and budget > 0 and all(n >= r.todo for r, n in work):
        request = engine.waiting[0]
        reuse_prefix(engine, request)
        n = request.chunk(budget, W)
        if n == 0 or blocks_for(request.computed + n, engine.pool.block_size) \
                - len(request.table) > blocks_available(engine):
            release(engine, request)  # no room: it waits, holding nothing
            break
        engine.waiting.popleft()
        engine.running.append(request)
        engine.counts.prompt_tokens_reused += min(request.computed, request.prompt_length)
        take_blocks(engine, request, n)
        work.append((request, n))
        budget -= n
    return work


def make_room(engine, request: Request, n: int) -> bool:
    """Take the blocks `request` needs for n more positions, preempting the newest running
    requests while the pool is short; False if `request` itself had to give way."""
    need = blocks_for(request.computed + n, engine.pool.block_size) - len(request.table)
    while need > blocks_available(engine):
        newest = engine.running[-1]
        preempt(engine, newest)
        if newest is request:
            return False
    take_blocks(engine, request, n)
    return True


def take_blocks(engine, request: Request, n: int) -> None:
    """Blocks for positions up to computed + n, from the free list or, when it is empty, by
    evicting the least recently used cached block nobody holds."""
    while len(request.table) < blocks_for(request.computed + n, engine.pool.block_size):
        request.table.append(new_block(engine))


def preempt(engine, request: Request) -> None:
    """Give every block back; the request waits at the head of the queue and will compute its
    whole text again."""
    engine.running.remove(request)
    release(engine, request)
    engine.waiting.appendleft(request)
    engine.counts.preemptions += 1


# -- blocks: who holds which ---------------------------------------------------------------

def blocks_available(engine) -> int:
    """Blocks that can be handed out: free, or cached and held by nobody."""
    return len(engine.pool.free) + (0 if engine.prefix is None else len(engine.prefix.unused))

def new_block(engine) -> int:
    """A block for new positions: a free one, else the least recently used cached one."""
    if not engine.pool.free:
        engine.pool.free.append(engine.prefix.evict())
    return engine.pool.allocate()

def reuse_prefix(engine, request: Request) -> None:
    """Point a joining request's table at the cached blocks its text starts with."""
    if engine.prefix is None or request.table:
        return
    bs = engine.pool.block_size
    for block in engine.prefix.lookup(request.text, bs):
        if engine.pool.refs[block] == 0:
            del engine.prefix.unused[block]
        engine.pool.hold(block)
        request.table.append(block)
        request.block_keys.append(engine.prefix.keys[block])
    request.computed = len(request.table) * bs

def give_back_past(engine, request: Request) -> None:
    """Give back the blocks wholly past the request's computed positions (a speculative
    round's rejected guesses): only this request held them, and none is in the prefix cache."""
    while len(request.table) > blocks_for(request.computed, engine.pool.block_size):
        block = request.table.pop()
        engine.pool.release(block)
        engine.pool.free.append(block)

def release(engine, request: Request) -> None:
    """Give back every block of the request: a block nobody holds any more is free, or
    stays cached for its prefix; the request will compute its text from the start."""
    for block in request.table:
        if engine.pool.release(block):
            if engine.prefix is not None and block in engine.prefix.keys:
                engine.prefix.unused[block] = True  # the most recently used end
            else:
                engine.pool.free.append(block)
    request.table, request.block_keys, request.computed = [], [], 0
