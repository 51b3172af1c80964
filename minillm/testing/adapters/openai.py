"""Any OpenAI-compatible server as something the kit can question: its /v1/completions.

    server = connect("http://127.0.0.1:8000/v1")              # the first model it serves
    reply = complete(server, "In the beginning", max_tokens=8, temperature=0, logprobs=5)
    reply.choices[0].tokens, reply.choices[0].logprobs, reply.choices[0].top

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
    choices: tuple
    prompt_tokens: int | None


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
    """POST /completions with the prompt and `fields` (max_tokens, temperature, logprobs, echo,
    seed, and any extra field the server takes); the choices in order of their index."""
    reply = request(server, "/completions", dict(model=server.model, prompt=prompt, **fields))
    choices = sorted(reply.get("choices") or [], key=lambda c: c.get("index", 0))
    return Completion(tuple(parse_choice(c) for c in choices),
                      (reply.get("usage") or {}).get("prompt_tokens"))


def complete_together(server: Server, requests: list[tuple[str, dict]]) -> list[Completion]:
    """Every (prompt, fields) request sent at once, each on its own thread (a server that
    batches computes them together); their completions in the same order."""
    with ThreadPoolExecutor(max_workers=len(requests)) as pool:
        futures = [pool.submit(complete, server, prompt, **fields) for prompt, fields in requests]
        return [future.result() for future in futures]
