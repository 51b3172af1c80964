"""The serving engine: many requests at once through one model, each exactly as if alone.

A step runs the scheduler's work (scheduler.py) through `Model.forward` in one pass, the step's
requests as the cache (batches.py; speculative rounds ride in it), then draws a token for every
request whose text is computed, with its own knobs and generator: the tokens and
log-probabilities of `generate(model, [prompt], seed=...)` alone (tests/test_serving.py).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

from ..constrain.constraint import DONE, advance, masked_logits, row_constraints
from ..generate import ends_row
from ..inputs import check_prompts
from ..knobs import default, generation_config, random_generator
from ..layers import log_softmax
from ..logprobs import score, score_positions, top_entries
from ..sampling import choose, filtered_probs
from ..stopping import start_text
from .batches import PackedBatch, PagedBatch
from .block_manager import BlockManager, blocks_for
from .scheduler import Request, Scheduler
from .speculative import Speculation, draft_rounds, end_round


class Output(NamedTuple):
    """A request's new token, whether it is finished and why ("stop": a stop token or string,
    "length": max_new_tokens); if asked, ln p of the token as drawn and under the model's own
    logits (generate's raw_logprobs), and the top_logprobs likeliest (token, ln p)."""

    request_id: int
    token: int | None
    logprob: float | None
    finished: bool
    reason: str | None = None
    raw_logprob: float | None = None
    top: tuple | None = None
    prompt: tuple = ()  # prompt tokens scored in this step (add_request's prompt_logprobs)


@dataclass
class Stats:
    """What the engine has done since it was made, and its pool's blocks now."""

    steps: int = 0  # forward passes (a step with no work runs none)
    prompt_tokens_computed: int = 0  # prompt positions computed (again after a preemption)
    prompt_tokens_reused: int = 0  # prompt positions found in the prefix cache instead
    decode_tokens: int = 0  # tokens drawn, for every request
    preemptions: int = 0  # requests sent back to wait (their blocks released) to make room
    guesses: int = 0  # speculative decoding: the guesses proposed,
    accepted: int = 0  # and those kept
    blocks_in_use: int = 0  # blocks held by a request,
    blocks_free: int = 0  # on the free list,
    blocks_cached: int = 0  # held by nobody, kept for their prefix until evicted


class Engine:
    """Requests in, tokens out, a step at a time (continuous batching over a paged KV cache).

        engine = Engine(model, block_size=16, max_batch_tokens=512)
        rid = engine.add_request(prompt_ids, max_new_tokens=50, temperature=0.8, seed=1)
        while engine.has_unfinished():
            for out in engine.step():  # Output: request_id, token, logprob, finished, reason
                ...
        engine.abort(rid)              # stop a request now (an unknown or finished id: nothing)
        engine.stats                   # Stats: steps, tokens computed and drawn, blocks now

    num_blocks: the pool's size (default: room for 16,384 positions, or the context if longer);
    max_batch_tokens: the positions a step computes at most, max_prefill_tokens the prompt ones
    beside decoding rows (None: all); prefix_caching: share full blocks between requests that
    start alike. A request that could pass the context or the pool is refused (no sliding)."""

    def __init__(self, model, block_size: int = 16, num_blocks: int | None = None,
                 max_batch_tokens: int = 512, prefix_caching: bool = True,
                 max_prefill_tokens: int | None = 128):
        cfg = model.config
        for name, value in (("block_size", block_size), ("max_batch_tokens", max_batch_tokens),
                            ("num_blocks", 1 if num_blocks is None else num_blocks),
                            ("max_prefill_tokens", max_prefill_tokens or 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: must be an integer >= 1, got {value!r}")
        num_blocks = num_blocks or blocks_for(max(cfg.context_length, 2 ** 14), block_size)
        # model.zeros: pages untouched until a block is written (the fast model's: ordinary ones)
        shape = (cfg.n_layers, num_blocks, block_size, cfg.n_kv_heads, cfg.head_dim)
        self.block_manager = BlockManager(model.zeros(shape), model.zeros(shape), prefix_caching)
        self.model, self.max_batch_tokens = model, max_batch_tokens
        self.counts = Stats()  # what has been done (stats adds the blocks now)
        self.scheduler = Scheduler(self.block_manager, max_batch_tokens, cfg.context_length,
                                   max_prefill_tokens, self.counts)
        self.requests, self.next_id = {}, 0  # id -> Request, until it finishes

    def add_request(self, prompt_ids, config=None, *, logprobs: bool = False, rng=None,
                    draft=None, k: int = default("k"), ngram: int = default("ngram"),
                    top_logprobs: int = 0, process=None, constraint=None,
                    prompt_logprobs: int | None = None, **knobs) -> int:
        """Queue a prompt (a list of ids) with the knobs of `generate`; returns its id.
        draft: decode with speculative decoding, guesses from a draft model or "ngram", k a
        round (as speculative_generate; a round's k + 1 positions must fit max_batch_tokens).
        constraint: the output's language, its mask the first filter (as in generate).
        prompt_logprobs: score every prompt token in the passes that read it (Output.prompt:
        ln p at temperature 1 and this many likeliest); max_new_tokens 0 then scores only."""
        cfg, model = self.model.config, self.model
        prompts, batch = check_prompts(prompt_ids, cfg.vocab_size, cfg.context_length)
        if batch:
            raise ValueError("prompt_ids: one prompt per request, not a batch")
        if draft is not None and prompt_logprobs is not None:
            raise ValueError("prompt_logprobs: not with draft (speculative serving)")
        config = generation_config(config, model, **knobs)
        self.scheduler.check_fits(len(prompts[0]), config.max_new_tokens)
        text = prompts[0].tolist()
        stop_text = start_text(model.tokenizer, text) if config.stop_strings else None
        speculation = None if draft is None else Speculation.make(
            draft, k, ngram, model, config.sampling, self.max_batch_tokens)
        if constraint is not None:
            constraint = row_constraints(constraint, 1, cfg.vocab_size)[0]
        request = Request(self.next_id, text, len(text), config, random_generator(config, rng),
                          logprobs, top_logprobs, process, stop_text, speculation, constraint,
                          prompt_logprobs=prompt_logprobs)
        self.requests[request.id] = request
        self.scheduler.waiting.append(request)
        self.next_id += 1
        return request.id

    def abort(self, request_id: int) -> None:
        """Stop a request now, its blocks given back; an unknown or finished id is ignored."""
        if request_id in self.requests:
            self.finish(self.requests[request_id])

    def finish(self, request: Request) -> None:
        """The request leaves: it is forgotten and its blocks go back."""
        self.scheduler.finish(self.requests.pop(request.id))

    def has_unfinished(self) -> bool:
        return bool(self.requests)

    @property
    def stats(self) -> Stats:
        """What the engine has done, and the pool's blocks now (Stats documents each count)."""
        manager = self.block_manager
        return replace(self.counts, blocks_in_use=sum(r > 0 for r in manager.refs),
                       blocks_free=len(manager.free), blocks_cached=len(manager.unheld))

    def step(self) -> list[Output]:
        """Run one step: the scheduled chunks through the model in one pass, a token for every
        request whose text is computed (a round's tokens for a speculating one); returns them."""
        work = self.scheduler.schedule()
        guesses = draft_rounds(work)  # id -> (guesses, q, states): drafted before the pass
        outputs = []
        for (request, n), z in zip(work, self._forward(work, guesses) if work else []):
            if request.id in guesses:  # a round: the kept guesses and the next token
                drawn = end_round(self, request, *guesses[request.id], z)
            else:
                outputs += self._read(request, n, z)
                if request.id not in self.requests or request.to_compute:
                    continue  # it ended with its prompt, or its prompt's next chunk waits
                drawn = [self._draw(request, z[-1])]
            for token, *scores in drawn:
                outputs.append(self._emit(request, token, *scores))
                if outputs[-1].finished:
                    break
        self.counts.steps += 1
        return outputs

    def _forward(self, work, guesses) -> list[np.ndarray]:
        """One forward pass for every request's chunk (a round's: its text's rest and guesses),
        a row each when all are as long (decoding), else end to end in one packed row; returns
        the logits of each one's last position (a round's last k + 1), (w, V) per request."""
        chunks = [r.text[r.computed:r.computed + n] + guesses.get(r.id, ([], None))[0]
                  for r, n in work]
        tables, starts = [r.table for r, _ in work], np.array([r.computed for r, _ in work])
        lengths = np.array([len(c) for c in chunks])
        logits_wanted = np.array([len(guesses[r.id][0]) + 1 if r.id in guesses else
                                  n if r.prompt_logprobs is not None else 1 for r, n in work])
        if (lengths == lengths[0]).all():
            batch = PagedBatch(self.block_manager, tables, starts, self.model.attend)
            rows = self.model.forward(np.array(chunks), batch, last=logits_wanted.max())
            return [z[len(z) - w:] for z, w in zip(rows, logits_wanted)]  # rows: (R, w, V)
        batch = PackedBatch(self.block_manager, tables, starts, lengths, self.model.attend)
        ends = np.cumsum(lengths)  # each request's last positions in the packed row
        last = np.concatenate([np.arange(e - w, e) for e, w in zip(ends, logits_wanted)])
        rows = self.model.forward(np.concatenate(chunks)[None], batch, last=last)[0]
        return np.split(rows, np.cumsum(logits_wanted)[:-1])

    def count_computed(self, request: Request, n: int) -> None:
        """Count n more positions as computed; each block they filled joins the prefix cache."""
        prompt_left = max(0, request.prompt_length - request.computed)
        request.computed += n
        self.counts.prompt_tokens_computed += min(n, prompt_left)
        self.block_manager.cache_full_blocks(request)

    def _read(self, request: Request, n: int, logits) -> list[Output]:
        """Count n more positions computed, and if asked score the prompt tokens the pass's
        logits (n, V) predict, each once (a preempted request reads its prompt again); a request
        of max_new_tokens 0 ends with its prompt."""
        scored = ()
        if request.prompt_logprobs is not None:
            scored = tuple(score_positions(logits, request.text[:request.prompt_length],
                                           request.computed, request.scored,
                                           request.prompt_logprobs))
            request.scored += len(scored)
        self.count_computed(request, n)
        ends = request.to_compute == 0 and request.config.max_new_tokens == 0
        if ends:
            self.finish(request)
        return [Output(request.id, None, None, ends, "length" if ends else None,
                       prompt=scored)] if scored or ends else []

    def _draw(self, request: Request, logits) -> tuple:
        """(the next token, and if asked its ln p as drawn and under the model's own logits and
        the top entries), as generate draws it."""
        logits = logits if request.process is None else request.process(request, logits)
        if request.constraint is not None:  # the mask, the first filter
            logits = masked_logits(logits[None], [request.constraint], [request.state])[0]
        sampling = request.config.sampling  # the penalties read only the last window's tokens
        probs = filtered_probs(logits[None], sampling, [request.text[-sampling.penalty_window:]])
        token = int(choose(probs, sampling, request.rng)[0])
        if not request.logprobs:
            return token, None, None, None
        with np.errstate(divide="ignore"):  # p = 0: ln p = -inf, never listed
            logp = log_softmax(logits) if request.logprobs == "raw" else np.log(probs[0])
        return (*score(probs, logits[None], [token])[0],
                tuple(top_entries(logp, request.top_logprobs)))

    def _emit(self, request: Request, token: int, logprob, raw_logprob, top) -> Output:
        """The text grows by `token` (with its scores, None unless asked); it may finish."""
        request.text.append(token)
        request.new_tokens += 1
        self.counts.decode_tokens += 1
        config = request.config
        texts = None if request.stop_text is None else [request.stop_text]
        stop = (config.stop_tokens or texts) and ends_row([token], [0], config, texts)[0]
        if request.constraint is not None:  # an end token ends it, whatever the stop tokens
            request.state = advance(request.constraint, request.state, token)
            stop = stop or request.state == DONE
        reason = "stop" if stop else "length" if request.new_tokens == config.max_new_tokens \
            else None
        if reason is not None:
            self.finish(request)
        return Output(request.id, token, logprob, reason is not None, reason, raw_logprob, top)
