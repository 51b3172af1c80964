"""The endpoints' work, apart from the web framework: a body in, a reply or a stream out.

    service = Service(model, "target", loop)
    reply = await completions(service, body)   # a dict, or (stream) an async iterator of events

A request's body is checked first (fields.py; a long one on the tokenizing pool, since
tokenizing a long prompt must not hold up the other requests: tokens.py), and the constraint it
asks for, if any, built (structured.py: on a thread of its own, once per pattern). Its choices
become one Ticket (loop.py) whose outputs come back through an asyncio queue of its own: the
engine's thread puts each event there with `call_soon_threadsafe`, and the handler reads them
in order, decoding each choice's text (text.py); with tools, a whole reply is read as a call
when it is one (tools.py). Whoever stops reading early (a client gone: its task is cancelled)
cancels the ticket on the way out, so its requests are aborted and their blocks freed.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import NamedTuple

from . import replies, tokens
from .errors import APIError
from .fields import chat_plan, completion_plan
from .loop import Choice, Ticket
from .metrics import Metrics
from .scores import processor
from .structured import Constraints
from .text import ChoiceText
from .tokens import Tokenizing, longest_token_bytes
from .tools import read_call


@dataclass
class Service:
    """What the endpoints serve: the model under its name, the loop that runs it, and the
    tokenizer whose chat template renders messages (the model's own unless given another)."""

    model: object
    name: str
    loop: object  # loop.EngineLoop
    chat_tokenizer: object = None
    logprobs_mode: str = "processed_logprobs"  # or "raw_logprobs": the model's own (vLLM's)
    created: int = field(default_factory=replies.now)

    def __post_init__(self):
        if self.chat_tokenizer is None:
            self.chat_tokenizer = self.model.tokenizer
        self.tokenizing, self.metrics = Tokenizing(), Metrics()
        self.constraints = Constraints()
        self.longest = max(map(longest_token_bytes, (self.model.tokenizer,
                                                      self.chat_tokenizer)))

    async def call(self, fn):
        """fn() run on the engine's thread between two steps; its result."""
        if not self.loop.alive():
            raise APIError(500, "the engine's loop is not running", code="engine_stopped")
        here = asyncio.get_running_loop()
        future = here.create_future()

        def settle(result, error):
            if not future.done():
                future.set_exception(error) if error else future.set_result(result)

        self.loop.call(fn, lambda result, error: here.call_soon_threadsafe(settle, result,
                                                                           error))
        return await future


def models(service: Service) -> dict:
    return {"object": "list", "data": [replies.model_card(service.name, service.created)]}


async def stats(service: Service) -> dict:
    return await service.call(service.loop.stats)


async def tokenize(service: Service, body) -> dict:
    return await service.tokenizing.run(tokens.tokenize, body, service.model.tokenizer)


async def detokenize(service: Service, body) -> dict:
    return await service.tokenizing.run(tokens.detokenize, body, service.model.tokenizer,
                                        service.model.config.vocab_size)


async def metrics(service: Service) -> str:
    return service.metrics.text(service.name, await stats(service))


async def completions(service: Service, body):
    arrived = time.monotonic()
    plan = await service.tokenizing.run(completion_plan, body, service.model, [service.name],
                                        service.longest)
    await constrain(service, plan, service.model.tokenizer)
    return await answer(Run(service, plan, chat=False, arrived=arrived))


async def chat_completions(service: Service, body):
    arrived = time.monotonic()
    plan = await service.tokenizing.run(chat_plan, body, service.model, [service.name],
                                        service.chat_tokenizer, service.longest)
    await constrain(service, plan, service.chat_tokenizer)
    return await answer(Run(service, plan, chat=True, arrived=arrived))


async def constrain(service: Service, plan, tokenizer) -> None:
    """The plan's choices given the Constraint it asks for (structured.py), over the tokenizer
    whose end tokens end its replies."""
    if plan.structure is not None:
        plan.knobs["constraint"] = await service.constraints.get(plan.structure, tokenizer)


RETRY_AFTER = 1  # seconds a refused client is told to wait: a step or two of the engine


async def answer(run):
    """The run's reply (or its stream of events), its requests given to the loop now, unless
    the waiting queue is full (429)."""
    if run.plan.echo and run.plan.logprobs is not None:
        run.prompt_scores = [await prompt_scores(run.service, p, run.plan.logprobs)
                             for p in run.plan.prompts]
    if run.plan.scoring_only:  # echo with max_tokens 0: nothing for the engine to draw
        return Events(run) if run.plan.stream else await run.whole()
    if not run.service.loop.has_room(len(run.ticket.choices)):  # then given, with no await
        raise APIError(429, f"the server has {run.service.loop.max_waiting} requests waiting "
                            "already; retry later", code="too_many_requests",
                       headers={"Retry-After": str(RETRY_AFTER)})
    run.start()
    return Events(run) if run.plan.stream else await run.whole()


async def prompt_scores(service: Service, prompt, k: int) -> list:
    """Per prompt token (its ln p given the tokens before it, the top k there; None and none
    for the first): an engine request of its own with max_new_tokens 0, scored in the batched
    passes that read it (Output.prompt), its blocks then cached for the generation."""
    if not service.loop.alive():
        raise APIError(500, "the engine's loop is not running", code="engine_stopped")
    events = asyncio.Queue()
    ticket = Ticket([Choice(list(prompt), {"max_new_tokens": 0, "prompt_logprobs": k})],
                    deliverer(events))
    service.loop.submit(ticket)
    scores = [(None, [])]
    try:
        while True:
            event = await events.get()
            if event.error is not None:
                raise APIError(event.status, event.error)
            scores += event.output.prompt
            if event.output.finished:
                return scores
    finally:
        service.loop.cancel(ticket)  # a client gone midway: nothing left running


def deliverer(queue: asyncio.Queue):
    """deliver(event) for a Ticket: from the engine's thread into `queue`, on this loop."""
    here = asyncio.get_running_loop()

    def deliver(event):  # on the engine's thread
        try:
            here.call_soon_threadsafe(queue.put_nowait, event)
        except RuntimeError:  # the event loop is closed: the server is stopping
            pass
    return deliver


class Events:
    """A run's server-sent events; closing them, even before the first, cancels the run."""

    def __init__(self, run):
        self.run, self.events = run, run.stream()

    def __aiter__(self):
        return self.events

    async def aclose(self):
        await self.events.aclose()
        self.run.close()


class Update(NamedTuple):
    """A choice's progress after one output: new text, log-probability entries (token,
    logprob, top, offset), and the finish reason when it is done."""

    choice: int
    text: str
    entries: list
    finish: str | None


class Run:
    """One request's choices while their outputs come."""

    def __init__(self, service: Service, plan, chat: bool, arrived: float):
        self.service, self.plan, self.chat, self.arrived = service, plan, chat, arrived
        self.id = replies.new_id("chatcmpl" if chat else "cmpl")
        self.created = replies.now()
        model = service.model
        self.raw = service.logprobs_mode == "raw_logprobs"
        logprobs = False if plan.logprobs is None else "raw" if self.raw else True
        self.prompt_of, choices, self.texts = [], [], []
        for p, knobs in plan.choices():
            prompt = plan.prompts[p]
            process = processor(plan.logit_bias, plan.min_tokens, knobs["stop_tokens"],
                                knobs.get("constraint"))
            choices.append(Choice(prompt, knobs, logprobs, plan.logprobs or 0, process))
            self.prompt_of.append(p)
            self.texts.append(ChoiceText(model.tokenizer, prompt, knobs["stop_strings"],
                                         knobs["stop_tokens"]))
        self.prompt_scores = None  # per prompt, with echo and logprobs
        self.new_tokens, self.cached = [0] * len(choices), [0] * len(choices)
        self.last_token = [None] * len(choices)  # when each choice's last token came
        self.left = 0 if plan.scoring_only else len(choices)  # choices not finished
        self.queue = asyncio.Queue()
        self.ticket = Ticket(choices, deliverer(self.queue))

    # -- the outputs, in order ------------------------------------------------------------

    def start(self) -> None:
        if not self.service.loop.alive():
            raise APIError(500, "the engine's loop is not running", code="engine_stopped")
        self.service.loop.submit(self.ticket)
        self.service.metrics.prompt_tokens += sum(len(c.prompt) for c in self.ticket.choices)

    async def next(self) -> Update:
        event = await self.queue.get()
        if event.error is not None:
            self.left = 0  # the loop has aborted the ticket's requests
            raise APIError(event.status, event.error)
        i, out, text = event.choice, event.output, self.texts[event.choice]
        entries = []
        offset = self.echo_length(i) + text.decoded
        piece = text.add(out.token, out.finished)
        if out.token is not None:
            self.new_tokens[i] += 1
            self.cached[i] = event.cached
            self.timed(i, out)
            if self.plan.logprobs is not None and out.token not in text.ends:
                logprob = out.raw_logprob if self.raw else out.logprob
                entries.append((out.token, logprob, list(out.top or ()), offset))
        self.left -= out.finished
        return Update(i, piece, entries, out.reason if out.finished else None)

    def timed(self, i: int, out) -> None:
        """The metrics of a token of choice i that has just come."""
        metrics, now = self.service.metrics, time.monotonic()
        metrics.generation_tokens += 1
        if self.last_token[i] is None:
            metrics.ttft.observe(now - self.arrived)
        else:
            metrics.itl.observe(now - self.last_token[i])
        self.last_token[i] = now
        if out.finished:
            metrics.finished[out.reason] = metrics.finished.get(out.reason, 0) + 1
            metrics.e2e.observe(now - self.arrived)

    def close(self) -> None:
        if self.left:
            self.service.loop.cancel(self.ticket)
            self.left = 0

    # -- echo -------------------------------------------------------------------------------

    def echo_length(self, i: int) -> int:
        return len(self.texts[i].prompt_text) if self.plan.echo else 0

    def echoed(self, i: int) -> tuple[str, list]:
        """The prompt's text and its log-probability entries, for echo."""
        if not self.plan.echo:
            return "", []
        text, p = self.texts[i], self.prompt_of[i]
        entries = [] if self.prompt_scores is None else [
            (t, lp, top, at) for t, (lp, top), at in zip(self.plan.prompts[p],
                                                        self.prompt_scores[p],
                                                        text.prompt_offsets)]
        return text.prompt_text, entries

    # -- the two answers --------------------------------------------------------------------

    async def whole(self) -> dict:
        texts, entries, finish = [], [], [None] * len(self.texts)
        for i in range(len(self.texts)):
            echo, scores = self.echoed(i)
            texts.append(echo)
            entries.append(scores)
        try:
            while self.left:
                update = await self.next()
                texts[update.choice] += update.text
                entries[update.choice] += update.entries
                finish[update.choice] = update.finish or finish[update.choice]
        finally:
            self.close()
        choices = [self.choice(i, texts[i], entries[i], finish[i] or "length", whole=True)
                   for i in range(len(texts))]  # no finish: echo's scores only
        kind = "chat.completion" if self.chat else "text_completion"
        return replies.completion(self.id, self.created, self.service.name, choices, kind,
                                  self.usage())

    async def stream(self):
        try:
            for i in range(len(self.texts)):
                echo, scores = self.echoed(i)
                if self.chat:
                    yield self.chunk([replies.chat_delta(i, {"role": "assistant",
                                                             "content": ""})])
                elif echo or scores:
                    yield self.chunk([self.choice(i, echo, scores, None)])
            held = {}  # with tools, each choice's reply so far: read as a call once whole
            while self.left:
                u = await self.next()
                if self.plan.tools is not None:
                    u = self.held(held, u)
                if u.text or u.entries or u.finish:
                    use = self.usage() if self.plan.continuous_usage else None
                    yield self.chunk([self.choice(u.choice, u.text, u.entries, u.finish)], use)
            if self.plan.scoring_only:
                for i in range(len(self.texts)):
                    yield self.chunk([self.choice(i, "", [], "length")])
            if self.plan.include_usage:
                yield self.chunk([], self.usage())
        except APIError as e:
            yield replies.event(e.body())
        finally:
            self.close()
        yield replies.DONE

    @staticmethod
    def held(held: dict, u: Update) -> Update:
        """A reply that may be a tool call, sent whole once it is done (nothing before)."""
        text, entries = held.get(u.choice, ("", []))
        held[u.choice] = (text + u.text, entries + u.entries)
        return Update(u.choice, *held.pop(u.choice), u.finish) if u.finish else \
            Update(u.choice, "", [], None)

    def choice(self, i, text, entries, finish, whole=False) -> dict:
        tokenizer, asked = self.service.model.tokenizer, self.plan.logprobs is not None
        if not self.chat:
            logprobs = replies.text_logprobs(tokenizer, entries, bool(self.plan.logprobs)) \
                if asked else None
            return replies.text_choice(i, text, logprobs, finish)
        logprobs = replies.chat_logprobs(tokenizer, entries) if asked else None
        call = None
        if self.plan.tools is not None and finish == "stop":  # a whole reply: is it a call?
            content, call = read_call(text, self.plan.tools)
            if call is not None:
                text, finish = content, "tool_calls"
        if whole:
            return replies.chat_choice(i, text, logprobs, finish, call)
        delta = {"content": text} if text else {}
        if call is not None:
            delta["tool_calls"] = [{"index": 0, **call}]
        return replies.chat_delta(i, delta, logprobs, finish)

    def chunk(self, choices, use=None) -> str:
        kind = "chat.completion.chunk" if self.chat else "text_completion"
        return replies.event(replies.completion(self.id, self.created, self.service.name,
                                                choices, kind, use))

    def usage(self) -> dict:
        """The tokens counted, and the prompt's found in the prefix cache (each prompt's, as
        its first choice found them)."""
        prompt_tokens = sum(len(p) for p in self.plan.prompts)
        cached = sum(self.cached[i * self.plan.n] for i in range(len(self.plan.prompts)))
        return replies.usage(prompt_tokens, sum(self.new_tokens), cached)
