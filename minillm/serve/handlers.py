"""The endpoints' work, apart from the web framework: a body in, a reply or a stream out.

    service = Service(model, "target", loop)
    reply = await completions(service, body)   # a dict, or (stream) an async iterator of events

A request's body is checked first (fields.py; a long one on the tokenizing pool, since
tokenizing a long prompt must not hold up the other requests: tokens.py). Its choices become
one Ticket (loop.py) whose outputs come back through an asyncio queue of its own: the engine's thread puts each event
there with `call_soon_threadsafe`, and the handler reads them in order, decoding each choice's
text (text.py). Whoever stops reading early (a client gone: its task is cancelled) cancels
the ticket on the way out, so its requests are aborted and their blocks freed.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import NamedTuple

from ..knobs import generation_config
from . import replies
from .errors import APIError
from .fields import chat_plan, completion_plan
from .loop import Choice, Ticket
from .scores import Scorer, prompt_scores
from .text import ChoiceText
from .tokens import Tokenizing, longest_token_bytes


@dataclass
class Service:
    """What the endpoints serve: the model under its name, the loop that runs it, and the
    tokenizer whose chat template renders messages (the model's own unless given another)."""

    model: object
    name: str
    loop: object  # loop.EngineLoop
    chat_tokenizer: object = None
    created: int = field(default_factory=replies.now)

    def __post_init__(self):
        if self.chat_tokenizer is None:
            self.chat_tokenizer = self.model.tokenizer
        self.tokenizing = Tokenizing()
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


async def completions(service: Service, body):
    plan = await service.tokenizing.run(completion_plan, body, service.model, [service.name],
                                        service.longest)
    return await answer(Run(service, plan, chat=False))


async def chat_completions(service: Service, body):
    plan = await service.tokenizing.run(chat_plan, body, service.model, [service.name],
                                        service.chat_tokenizer, service.longest)
    return await answer(Run(service, plan, chat=True))


RETRY_AFTER = 1  # seconds a refused client is told to wait: a step or two of the engine


async def answer(run):
    """The run's reply (or its stream of events), its requests given to the loop now, unless
    the waiting queue is full (429)."""
    if run.plan.echo and run.plan.logprobs is not None:
        model, k = run.service.model, run.plan.logprobs
        run.prompt_scores = await run.service.call(
            lambda: [prompt_scores(model, p, k) for p in run.plan.prompts])
    if not run.service.loop.has_room(len(run.ticket.choices)):  # then given, with no await
        raise APIError(429, f"the server has {run.service.loop.max_waiting} requests waiting "
                            "already; retry later", code="too_many_requests",
                       headers={"Retry-After": str(RETRY_AFTER)})
    run.start()
    return Events(run) if run.plan.stream else await run.whole()


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

    def __init__(self, service: Service, plan, chat: bool):
        self.service, self.plan, self.chat = service, plan, chat
        self.id = replies.new_id("chatcmpl" if chat else "cmpl")
        self.created = replies.now()
        model = service.model
        self.prompt_of, choices, self.texts = [], [], []
        for p, knobs in plan.choices():
            prompt = plan.prompts[p]
            scorer = None
            if plan.logprobs:
                sampling = generation_config(None, model, **knobs).sampling
                scorer = Scorer(model, prompt, sampling, plan.logprobs)
            choices.append(Choice(prompt, knobs, plan.logprobs is not None, scorer))
            self.prompt_of.append(p)
            self.texts.append(ChoiceText(model.tokenizer, prompt, knobs["stop_strings"],
                                         knobs["stop_tokens"]))
        self.prompt_scores = None  # per prompt, with echo and logprobs
        self.new_tokens = [0] * len(choices)
        self.left = len(choices)  # choices not finished
        self.queue = asyncio.Queue()
        self.ticket = Ticket(choices, self.deliverer())

    def deliverer(self):
        here, queue = asyncio.get_running_loop(), self.queue

        def deliver(event):  # on the engine's thread
            try:
                here.call_soon_threadsafe(queue.put_nowait, event)
            except RuntimeError:  # the event loop is closed: the server is stopping
                pass
        return deliver

    # -- the outputs, in order ------------------------------------------------------------

    def start(self) -> None:
        if not self.service.loop.alive():
            raise APIError(500, "the engine's loop is not running", code="engine_stopped")
        self.service.loop.submit(self.ticket)

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
            if self.plan.logprobs is not None and out.token not in text.ends:
                entries.append((out.token, out.logprob, event.top or [], offset))
        self.left -= out.finished
        return Update(i, piece, entries, out.reason if out.finished else None)

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
        choices = [self.choice(i, texts[i], entries[i], finish[i], whole=True)
                   for i in range(len(texts))]
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
            while self.left:
                u = await self.next()
                if u.text or u.entries or u.finish:
                    yield self.chunk([self.choice(u.choice, u.text, u.entries, u.finish)])
            if self.plan.include_usage:
                yield self.chunk([], self.usage())
        except APIError as e:
            yield replies.event(e.body())
        finally:
            self.close()
        yield replies.DONE

    def choice(self, i, text, entries, finish, whole=False) -> dict:
        tokenizer, asked = self.service.model.tokenizer, self.plan.logprobs is not None
        if not self.chat:
            logprobs = replies.text_logprobs(tokenizer, entries, bool(self.plan.logprobs)) \
                if asked else None
            return replies.text_choice(i, text, logprobs, finish)
        logprobs = replies.chat_logprobs(tokenizer, entries) if asked else None
        if whole:
            return replies.chat_choice(i, text, logprobs, finish)
        return replies.chat_delta(i, {"content": text} if text else {}, logprobs, finish)

    def chunk(self, choices, use=None) -> str:
        kind = "chat.completion.chunk" if self.chat else "text_completion"
        return replies.event(replies.completion(self.id, self.created, self.service.name,
                                                choices, kind, use))

    def usage(self) -> dict:
        prompt_tokens = sum(len(p) for p in self.plan.prompts)
        return replies.usage(prompt_tokens, sum(self.new_tokens))
