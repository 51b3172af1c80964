"""Any OpenAI-compatible server as something the kit can question: its /v1/completions.

    server = connect("http://127.0.0.1:8000/v1")              # the first model it serves
    reply = complete(server, "In the beginning", max_tokens=8, temperature=0, logprobs=5)
    reply.choices[0].tokens, reply.choices[0].logprobs, reply.choices[0].top
    streamed = complete(server, "In the beginning", stream=True, max_tokens=8)  # the same shape
    answer = chat(server, [{"role": "user", "content": "Hi"}], max_tokens=8, logprobs=5)

A server cannot be asked for logits, only for what its API returns: text, the tokens as
strings, each token's log-probability and the k most likely tokens at each position
(`logprobs: k`, the completions endpoint's legacy shape, which minillm serve, vLLM,
llama-cpp-python's server and OpenAI's own answer). minillm.testing.api's checks are built on
these. HTTP goes through the standard library (urllib), so the adapter needs no package of its
own; requests go only where `url` says (a test server on 127.0.0.1), each bounded by
`timeout`.
"""
from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass


@dataclass(frozen=True)
class Server:
    """Where a server listens (`url`, ending in /v1), the model to name, seconds per request."""

    url: str
    model: str
    timeout: float = 60.0
    api_key: str = "unused"


@dataclass(frozen=True)
class Choice:
    """One choice of a completion: its text, its tokens (as the server spells them), each
    token's log-probability (None where the server gives none, as for an echoed prompt's
    first token) and the top log-probabilities at each position ({token: logprob} or None)."""

    text: str
    tokens: tuple
    logprobs: tuple
    top: tuple
    finish_reason: str | None


@dataclass(frozen=True)
class Completion:
    """A reply's choices and the prompt's length in tokens (usage); for a streamed reply, when
    its first and last pieces of text or tokens came (time.monotonic()); a whole reply came
    at once (first = last)."""

    choices: tuple
    prompt_tokens: int | None
    first: float | None = None
    last: float | None = None


class APIError(Exception):
    """The server answered with an error status; `status` and its message."""

    def __init__(self, status: int, message: str):
        super().__init__(f"HTTP {status}: {message}")
        self.status, self.message = status, message


def request(server_or_url, path: str, body: dict | None = None, timeout: float = 60.0,
            api_key: str = "unused") -> dict:
    """GET (body None) or POST JSON to url + path; the reply's JSON, or APIError."""
    url = server_or_url.url if isinstance(server_or_url, Server) else server_or_url
    if isinstance(server_or_url, Server):
        timeout, api_key = server_or_url.timeout, server_or_url.api_key
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url.rstrip("/") + path, data, {
        "Content-Type": "application/json", "Authorization": f"Bearer {api_key}"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as reply:
            return json.load(reply)
    except urllib.error.HTTPError as error:
        text = error.read().decode(errors="replace")
        try:
            text = json.loads(text)["error"]["message"]
        except (ValueError, KeyError, TypeError):
            pass
        raise APIError(error.code, str(text)[:500]) from None


def connect(url: str, model: str | None = None, timeout: float = 60.0) -> Server:
    """A Server at `url` (e.g. http://127.0.0.1:8000/v1); model: the first that /models lists
    when not given."""
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"url: an http(s) address ending in /v1, got {url!r}")
    if model is None:
        models = request(url, "/models", timeout=timeout).get("data") or []
        if not models:
            raise ValueError(f"url: {url}/models lists no model; give model=")
        model = models[0]["id"]
    return Server(url.rstrip("/"), model, timeout)


def parse_choice(choice: dict) -> Choice:
    lp = choice.get("logprobs") or {}
    tokens = tuple(lp.get("tokens") or ())
    return Choice(choice.get("text", ""), tokens,
                  tuple(lp.get("token_logprobs") or (None,) * len(tokens)),
                  tuple(lp.get("top_logprobs") or (None,) * len(tokens)),
                  choice.get("finish_reason"))


def complete(server: Server, prompt, **fields) -> Completion:
    """POST /completions with the prompt (a text or token ids) and `fields` (max_tokens,
    temperature, logprobs, echo, seed, stream, and any extra field the server takes); the
    choices in order of their index. With stream=True the server-sent chunks are joined into
    the same Completion."""
    body = dict(model=server.model, prompt=prompt, **fields)
    if fields.get("stream"):
        return streamed(server, "/completions", body, parse_choice)
    reply = request(server, "/completions", body)
    came = time.monotonic()
    choices = sorted(reply.get("choices") or [], key=lambda c: c.get("index", 0))
    return Completion(tuple(parse_choice(c) for c in choices),
                      (reply.get("usage") or {}).get("prompt_tokens"), came, came)


def parse_chat_choice(choice: dict) -> Choice:
    """A chat choice (a whole message or a stream's delta) in a completion choice's shape."""
    message = choice.get("message") or choice.get("delta") or {}
    items = (choice.get("logprobs") or {}).get("content") or []
    return Choice(message.get("content") or "", tuple(i["token"] for i in items),
                  tuple(i.get("logprob") for i in items),
                  tuple({t["token"]: t["logprob"] for t in i.get("top_logprobs") or []} or None
                        for i in items), choice.get("finish_reason"))


def chat(server: Server, messages: list, **fields) -> Completion:
    """POST /chat/completions; logprobs=k asks for the top k (the chat endpoint's logprobs:
    true, top_logprobs: k); the choices as complete's."""
    k = fields.pop("logprobs", None)
    if k is not None:
        fields.update(logprobs=True, top_logprobs=k)
    body = dict(model=server.model, messages=messages, **fields)
    if fields.get("stream"):
        return streamed(server, "/chat/completions", body, parse_chat_choice)
    reply = request(server, "/chat/completions", body)
    choices = sorted(reply.get("choices") or [], key=lambda c: c.get("index", 0))
    return Completion(tuple(parse_chat_choice(c) for c in choices),
                      (reply.get("usage") or {}).get("prompt_tokens"))


def streamed(server: Server, path: str, body: dict, parse) -> Completion:
    """POST a stream=True body and read its server-sent events (`data: {json}` lines until
    `data: [DONE]`): each choice's text and log-probability lists joined in order, its last
    finish reason; an error event is an APIError."""
    req = urllib.request.Request(server.url + path, json.dumps(body).encode(), {
        "Content-Type": "application/json", "Authorization": f"Bearer {server.api_key}"})
    parts, usage, first, last = {}, None, None, None
    try:
        with urllib.request.urlopen(req, timeout=server.timeout) as reply:
            for line in reply:
                line = line.decode().strip()
                if not line.startswith("data:") or line[5:].strip() == "[DONE]":
                    continue
                chunk = json.loads(line[5:])
                if "error" in chunk:
                    raise APIError(500, str(chunk["error"].get("message", chunk["error"])))
                usage = chunk.get("usage") or usage
                for c in chunk.get("choices") or []:
                    piece = parse(c)
                    if piece.text or piece.tokens:
                        first, last = first or time.monotonic(), time.monotonic()
                    parts.setdefault(c.get("index", 0), []).append(piece)
    except urllib.error.HTTPError as error:
        raise APIError(error.code, error.read().decode(errors="replace")[:500]) from None
    choices = tuple(Choice("".join(p.text for p in pieces),
                           sum((p.tokens for p in pieces), ()),
                           sum((p.logprobs for p in pieces), ()),
                           sum((p.top for p in pieces), ()),
                           next((p.finish_reason for p in reversed(pieces) if p.finish_reason),
                                None))
                    for _, pieces in sorted(parts.items()))
    return Completion(choices, (usage or {}).get("prompt_tokens"), first, last)


def counters(server: Server, path: str = "/debug/stats") -> dict | None:
    """The server's own counters at its root + `path` (minillm serve's /debug/stats: steps,
    decode_tokens, prompt_tokens_reused, ...), or None where it has none."""
    root = server.url[:-len("/v1")] if server.url.endswith("/v1") else server.url
    try:
        found = request(root, path, timeout=server.timeout, api_key=server.api_key)
    except (APIError, urllib.error.URLError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def complete_together(server: Server, requests: list[tuple[str, dict]]) -> list[Completion]:
    """Every (prompt, fields) request sent at once, each on its own thread (a server that
    batches computes them together); their completions in the same order."""
    with ThreadPoolExecutor(max_workers=len(requests)) as pool:
        futures = [pool.submit(complete, server, prompt, **fields) for prompt, fields in requests]
        return [future.result() for future in futures]
