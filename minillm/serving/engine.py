"""The serving engine: many requests at once through one model, each exactly as if alone.

    engine = Engine(model, block_size=16, max_batch_tokens=512)
    rid = engine.add_request(prompt_ids, max_new_tokens=50, temperature=0.8, seed=1)
    while engine.has_unfinished():
        for out in engine.step():      # out.request_id, out.token, out.logprob, out.finished
            ...

A step asks the scheduler (scheduler.py) for its work, runs it through `Model.forward` in one
pass with the block pool as the cache (blocks.py: a row per request when all compute as many
tokens, else their chunks end to end in one packed row; a speculative round's guesses ride in
it), then draws a token for every request whose text is now computed, with its own knobs and
random generator, and lets finished requests go.
Each request's tokens and log-probabilities are those of `generate(model, [prompt], seed=...,
**knobs)` run alone (tests/test_serving.py): the same logits (up to rounding, float64), the
same draws. A request is refused when its prompt and new tokens could pass the context (the
engine does not slide the window) or the pool.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..generate import ends_row
from ..inputs import check_prompts
from ..knobs import default, generation_config, random_generator
from ..logprobs import score
from ..sampling import choose, filtered_probs
from ..speculative import accept_or_resample, make_drafter, score_round
from ..stopping import start_text
from .batches import PackedBatch, PagedBatch
from .blocks import BlockPool, blocks_for
from .prefix_cache import PrefixCache
from .scheduler import Request, give_back_past, release, schedule


class Output(NamedTuple):
    """What a request produced in a step: its new token, whether it is finished and why
    ("stop": a stop token or string, "length": max_new_tokens, "abort"), and when asked ln p of
    the token under the distribution it was drawn from and under the model's own logits (T = 1,
    no knob: generate's raw_logprobs)."""

    request_id: int
    token: int | None
    logprob: float | None
    finished: bool
    reason: str | None = None
    raw_logprob: float | None = None


@dataclass
class Stats:
    """Counts since the engine was made, and the pool now."""

    steps: int = 0
    prompt_tokens_computed: int = 0  # prompt positions computed (again after a preemption)
    prompt_tokens_reused: int = 0  # prompt positions found in the prefix cache
    decode_tokens: int = 0  # tokens drawn
    preemptions: int = 0
    guesses: int = 0  # speculative decoding: guesses proposed
    accepted: int = 0  # and kept
    blocks_in_use: int = 0  # held by a request
    blocks_free: int = 0  # on the free list
    blocks_cached: int = 0  # held by nobody, kept for their prefix until evicted


class Engine:
    """Requests in, tokens out, a step at a time (continuous batching over a paged KV cache)."""

    def __init__(self, model, block_size: int = 16, num_blocks: int | None = None,
                 max_batch_tokens: int = 512, prefix_caching: bool = True):
        cfg = model.config
        for name, value in (("block_size", block_size), ("max_batch_tokens", max_batch_tokens),
                            ("num_blocks", 1 if num_blocks is None else num_blocks)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: must be an integer >= 1, got {value!r}")
        if num_blocks is None:  # room for 16,384 positions, or one whole context if longer
            num_blocks = blocks_for(max(cfg.context_length, 2 ** 14), block_size)
        self.model = model
        shape = (cfg.n_layers, num_blocks, block_size, cfg.n_kv_heads, cfg.head_dim)
        self.pool = BlockPool(model.zeros(shape), model.zeros(shape),
                              list(range(num_blocks))[::-1], [0] * num_blocks)
        self.prefix = PrefixCache() if prefix_caching else None
        self.max_batch_tokens = max_batch_tokens
        self.running, self.waiting = [], deque()
        self.requests = {}  # id -> Request, until it finishes
        self.next_id, self.counts = 0, Stats()

    # -- requests in and out -------------------------------------------------------------------
    def add_request(self, prompt_ids, config=None, *, logprobs: bool = False, rng=None,
                    draft=None, k: int = default("k"), ngram: int = default("ngram"),
                    **knobs) -> int:
        """Queue a prompt (a list of ids) with the knobs of `generate`; returns its id.
        draft: decode with speculative decoding, guesses from a draft model or "ngram", k a
        round (as speculative_generate; a round's k + 1 positions must fit max_batch_tokens)."""
        cfg = self.model.config
        prompts, batch = check_prompts(prompt_ids, cfg.vocab_size, cfg.context_length)
        if batch:
            raise ValueError("prompt_ids: one prompt per request, not a batch")
        config = generation_config(config, self.model, **knobs)
        longest = len(prompts[0]) + config.max_new_tokens
        if longest > cfg.context_length:
            raise ValueError(f"prompt_ids: {len(prompts[0])} tokens and max_new_tokens "
                             f"{config.max_new_tokens} pass the context of "
                             f"{cfg.context_length}: the engine does not slide the window")
        if blocks_for(longest, self.pool.block_size) > self.pool.num_blocks:
            raise ValueError(f"prompt_ids: {longest} positions need more than the pool's "
                             f"{self.pool.num_blocks} blocks of {self.pool.block_size}")
        text = prompts[0].tolist()
        request = Request(self.next_id, text, len(text), config, random_generator(config, rng),
                          logprobs)
        if draft is not None:
            if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k < self.max_batch_tokens:
                raise ValueError(f"k: must be an integer in [1, max_batch_tokens - 1 = "
                                 f"{self.max_batch_tokens - 1}], got {k!r}")
            request.drafter = make_drafter(draft, cfg.vocab_size, config.sampling, ngram,
                                           self.model.tokenizer)
            request.k = k
        if config.stop_strings:
            request.stop_text = start_text(self.model.tokenizer, text)
        self.requests[request.id] = request
        self.waiting.append(request)
        self.next_id += 1
        return request.id

    def abort(self, request_id: int) -> None:
        """Stop a request now; its blocks go back to the pool. An unknown or finished id is
        ignored."""
        request = self.requests.pop(request_id, None)
        if request is None:
            return
        (self.running if request in self.running else self.waiting).remove(request)
        release(self, request)

    def has_unfinished(self) -> bool:
        return bool(self.running or self.waiting)

    @property
    def stats(self) -> Stats:
        """The counts, and the pool's blocks as they are now."""
        s, refs = self.counts, self.pool.refs
        s.blocks_in_use = sum(1 for r in refs if r > 0)
        s.blocks_free = len(self.pool.free)
        s.blocks_cached = 0 if self.prefix is None else len(self.prefix.unused)
        return s

    # -- a step ------------------------------------------------------------------------------

    def step(self) -> list[Output]:
        """Run one step: the scheduled chunks through the model in one pass, a token for every
        request whose text is computed (a round's for a speculating one); returns them."""
        work = schedule(self)
        guesses = {r.id: r.drafter.propose(r.text, n - r.todo, r.rng)  # a round drafts first
                   for r, n in work if r.rounds(n)}  # id -> (guesses, q)
        outputs = self._forward(work, guesses) if work else []
        self.counts.steps += 1
        return outputs

    def _forward(self, work, guesses) -> list[Output]:
        """One forward pass for every request's chunk (a round's: its text's rest and guesses),
        a row each when all are as long (decoding), else end to end in one packed row; the
        logits of each one's last position (a round's last k + 1) decide its tokens."""
        texts = [r.text[r.computed:r.computed + n] + guesses.get(r.id, ([], None))[0]
                 for r, n in work]
        tables, starts = [r.table for r, _ in work], np.array([r.computed for r, _ in work])
        counts = np.array([len(t) for t in texts])
        wants = np.array([len(guesses[r.id][0]) + 1 if r.id in guesses else 1 for r, _ in work])
        if (counts == counts[0]).all():
            batch = PagedBatch(self.pool, tables, starts, self.model.attend)
            rows = self.model.forward(np.array(texts), batch, last=wants.max())  # (R, w, V)
            logits = [z[len(z) - w:] for z, w in zip(rows, wants)]
        else:  # the logits of each request's last `want` tokens in the row
            batch = PackedBatch(self.pool, tables, starts, counts, self.model.attend)
            ends = np.cumsum(counts)
            last = np.concatenate([np.arange(e - w, e) for e, w in zip(ends, wants)])
            rows = self.model.forward(np.concatenate(texts)[None], batch, last=last)[0]
            logits = np.split(rows, np.cumsum(wants)[:-1])  # per request (w, V)
        outputs = []
        for (request, n), z in zip(work, logits):
            if request.id in guesses:
                outputs += self._round(request, *guesses[request.id], z)
                continue
            self._computed(request, n)
            if request.computed == len(request.text):  # its text all computed: its next token
                outputs.append(self._draw(request, z[-1]))
        return outputs

    def _computed(self, request: Request, n: int) -> None:
        """Count n more positions as computed; each block they filled joins the prefix cache."""
        start, request.computed = request.computed, request.computed + n
        self.counts.prompt_tokens_computed += max(0, min(request.computed,
                                                         request.prompt_length) - start)
        if self.prefix is None:
            return
        bs = self.pool.block_size
        for b in range(len(request.block_keys), request.computed // bs):
            previous = request.block_keys[-1] if request.block_keys else None
            request.block_keys.append(self.prefix.store(request.table[b], previous,
                                                        request.text[b * bs:(b + 1) * bs]))

    def _draw(self, request: Request, logits) -> Output:
        """The request's next token from the logits of its last position, as generate draws
        it: the knobs over the text so far, the request's own generator."""
        knobs = request.config.sampling
        probs = filtered_probs(logits[None], knobs, np.array([request.text]))  # (1, V)
        token = int(choose(probs, knobs, request.rng)[0])
        scored = score(probs, logits[None], [token])[0] if request.logprobs else None
        return self._emit(request, token, scored)

    def _round(self, request: Request, guesses, q, logits) -> list[Output]:
        """A round of speculative decoding ends as in speculative_generate alone: the guesses
        judged by the pass's logits (k + 1, V), the kept ones and the next token emitted, the
        rejected positions forgotten, the blocks wholly past the kept text given back."""
        knobs, before = request.config.sampling, list(request.text)
        kept, token = accept_or_resample(logits, guesses, q, request.text, 0, knobs, request.rng)
        self.counts.guesses += len(guesses)
        self.counts.accepted += kept
        self._computed(request, request.todo + kept)  # the new token's position stays unread
        give_back_past(self, request)
        new = guesses[:kept] + [token]
        scores = score_round(new, logits[:kept + 1], before, knobs) if request.logprobs else None
        outputs = []
        for i, token in enumerate(new):
            outputs.append(self._emit(request, token, scores and scores[i]))
            if outputs[-1].finished:
                break
        return outputs

    def _emit(self, request: Request, token: int, scored) -> Output:
        """The text grows by `token` (scored: its ScoredToken, if asked); it may finish."""
        request.text.append(token)
        request.new_tokens += 1
        self.counts.decode_tokens += 1
        config = request.config
        reason = None
        if config.stop_tokens or request.stop_text is not None:
            texts = None if request.stop_text is None else [request.stop_text]
            if ends_row([token], [0], config, texts)[0]:
                reason = "stop"
        if reason is None and request.new_tokens == config.max_new_tokens:
            reason = "length"
        if reason is not None:
            self.running.remove(request)
            del self.requests[request.id]
            release(self, request)
        logprob, raw = (None, None) if scored is None else scored[1:]
        return Output(request.id, token, logprob, reason is not None, reason, raw)
