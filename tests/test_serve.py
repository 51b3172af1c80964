"""minillm serve: OpenAI's API over the serving engine, on the loopback address only.

Every server here runs in this process, started on a free port by a fixture and stopped after
it; every client loop is bounded in count and time. What is proven:
- many concurrent streaming clients all finish, each greedy text equal to the same request
  sent alone and to minillm.generate, no token lost or duplicated, and they ran batched;
- a client that disconnects, streaming or not, has its request aborted and its blocks freed
  while the others go on; a fault of the model fails its request (500) and the server goes on;
- every kind of bad input gets an OpenAI-style error object with its status, and the server
  keeps serving;
- the official `openai` client: completions and chat, streamed and not, log-probabilities
  (top_logprobs equal to the distribution computed directly), seeds, stop sequences, n,
  the end tokens.
"""
import asyncio
import copy
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

import minillm  # noqa: E402
from minillm.cli.common import DEFAULT_MODEL  # noqa: E402
from minillm.sampling import filtered_probs  # noqa: E402
from minillm.serve import start  # noqa: E402
from minillm.serve.fields import MAX_BODY_BYTES, MAX_CHOICES, MAX_TOKENS  # noqa: E402
from minillm.serve.text import ChoiceText  # noqa: E402
from minillm.text.chat_template import CHATML_TEMPLATE, chat_prompt_ids  # noqa: E402

WORDS = ("In the beginning God created the heaven and the earth . And the earth was without "
         "form and void , and darkness was upon the face of the deep").split()
FAULT = 2047  # a prompt holding this id makes the faulty model's forward pass raise


@pytest.fixture(scope="module")
def model():
    with minillm.threads(1):
        yield minillm.load(DEFAULT_MODEL)


@pytest.fixture(scope="module")
def chat_tokenizer(model):
    return model.tokenizer.with_chat_template(CHATML_TEMPLATE)  # the shipped file has none


@pytest.fixture(scope="module")
def server(model, chat_tokenizer):
    running = start(model, name="target", chat_tokenizer=chat_tokenizer)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0,
                         timeout=60)


class Slow:
    """The model with each forward pass `delay` seconds slower (so that a request is still
    running when its client goes away), raising on a prompt that holds FAULT."""

    def __init__(self, model, delay):
        self.model, self.delay = model, delay

    def __getattr__(self, name):
        return getattr(self.model, name)

    def forward(self, tokens, *args, **kwargs):
        if (np.asarray(tokens) == FAULT).any():
            raise RuntimeError("a planted fault")
        time.sleep(self.delay)
        return self.model.forward(tokens, *args, **kwargs)


@pytest.fixture
def slow_server(model):
    running = start(Slow(model, 0.02), name="target")
    yield running
    running.stop()


# -- helpers ---------------------------------------------------------------------------------

def prompts(count):
    """Texts of different lengths, some starting alike (the prefix cache shares them)."""
    return [" ".join(WORDS[(i * 5) % 17:(i * 5) % 17 + 2 + (i * 7) % 13]) + f" {i}"
            for i in range(count)]


def greedy(model, ids, max_tokens, ends=None):
    """minillm.generate's greedy new tokens, ending at the model's end tokens."""
    ends = model.tokenizer.eos_token_ids if ends is None else ends
    return minillm.generate(model, ids, max_new_tokens=max_tokens, temperature=0,
                            stop_tokens=ends)[len(ids):]


def new_text(tokenizer, ids, new, ends=()):
    """The text the new tokens add after the prompt, an end token left out."""
    new = [t for t in new if t not in ends]
    whole = tokenizer.decode(list(ids) + new, skip_special_tokens=True)
    return whole[len(tokenizer.decode(list(ids), skip_special_tokens=True)):]


def events(lines):
    """The JSON of each `data:` line of a stream; [DONE] must come once, last."""
    data = [line[len("data: "):] for line in lines if line]
    assert all(line.startswith("data: ") for line in lines if line)
    assert data[-1] == "[DONE]" and data.count("[DONE]") == 1
    return [json.loads(d) for d in data[:-1]]


def stats(server):
    return httpx.get(server.url + "/debug/stats", timeout=30).json()


def wait_until(condition, seconds=20):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def ok_request(server):
    r = httpx.post(server.url + "/v1/completions", timeout=30, json={
        "model": "target", "prompt": "In the beginning", "max_tokens": 4, "temperature": 0})
    return r.status_code == 200 and len(r.json()["choices"][0]["text"]) > 0


# -- the endpoints -----------------------------------------------------------------------------

def test_health_models_and_the_host_check(server):
    assert httpx.get(server.url + "/health").json() == {"status": "ok"}
    listed = httpx.get(server.url + "/v1/models").json()
    assert listed["object"] == "list" and [m["id"] for m in listed["data"]] == ["target"]
    assert httpx.get(server.url + "/v1/models/target").json()["id"] == "target"
    assert httpx.get(server.url + "/v1/models/other").status_code == 404
    r = httpx.get(server.url + "/health", headers={"Host": "evil.example"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "host_not_allowed"


def test_completion_equals_generate_with_usage_and_echo(server, model):
    tok = model.tokenizer
    ids = tok.encode("In the beginning God", add_special_tokens=True)
    new = greedy(model, ids, 20)
    for prompt in ("In the beginning God", ids):
        r = httpx.post(server.url + "/v1/completions", timeout=30, json={
            "model": "target", "prompt": prompt, "max_tokens": 20, "temperature": 0})
        reply = r.json()
        assert r.status_code == 200 and reply["object"] == "text_completion"
        assert reply["choices"][0]["text"] == new_text(tok, ids, new)
        assert reply["choices"][0]["finish_reason"] == "length"
        assert reply["usage"] == {"prompt_tokens": len(ids), "completion_tokens": 20,
                                  "total_tokens": len(ids) + 20,
                                  "prompt_tokens_details": {"cached_tokens": 0}}
    r = httpx.post(server.url + "/v1/completions", timeout=30, json={
        "model": "target", "prompt": ids, "max_tokens": 20, "temperature": 0, "echo": True,
        "logprobs": 2})
    choice = r.json()["choices"][0]
    assert choice["text"] == tok.decode(ids) + new_text(tok, ids, new)
    lp = choice["logprobs"]
    assert "".join(lp["tokens"]) == choice["text"] and len(lp["tokens"]) == len(ids) + 20
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert lp["text_offset"] == [len("".join(lp["tokens"][:i])) for i in range(len(ids) + 20)]
    # The prompt's scores are the model's own (temperature 1), as generate's prompt_logprobs.
    scored = minillm.generate(model, ids, max_new_tokens=1, temperature=0,
                              return_logprobs=True, prompt_logprobs=True)
    np.testing.assert_allclose(lp["token_logprobs"][1:len(ids)], scored.prompt_logprobs[1:],
                               atol=1e-5)
    # Greedy: the distribution drawn from is one-hot, each new token has ln p = 0.
    assert lp["token_logprobs"][len(ids):] == [0.0] * 20
    assert all(list(top.values()) == [0.0] for top in lp["top_logprobs"][len(ids):])


def test_chat_renders_the_template_and_ends_at_the_end_tokens(server, model, chat_tokenizer):
    messages = [{"role": "system", "content": "You answer briefly."},
                {"role": "user", "content": [{"type": "text", "text": "Who made the earth?"}]}]
    ids = chat_prompt_ids(chat_tokenizer, [messages[0], {"role": "user",
                                                         "content": "Who made the earth?"}])
    new = greedy(model, ids, 24)
    r = httpx.post(server.url + "/v1/chat/completions", timeout=30, json={
        "model": "target", "messages": messages, "max_tokens": 24, "temperature": 0})
    reply = r.json()
    assert reply["object"] == "chat.completion"
    assert reply["choices"][0]["message"] == {"role": "assistant",
                                              "content": new_text(model.tokenizer, ids, new)}
    assert reply["usage"]["prompt_tokens"] == len(ids)
    assert reply["usage"]["completion_tokens"] == len(new)


def test_a_model_without_a_chat_template_says_how_to_give_one(slow_server):
    r = httpx.post(slow_server.url + "/v1/chat/completions", timeout=30, json={
        "model": "target", "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 400 and "--template" in r.json()["error"]["message"]


# -- under load ------------------------------------------------------------------------------

async def stream_all(url, bodies):
    """Send every body at once as a streaming completion; each stream's lines."""
    limits = httpx.Limits(max_connections=len(bodies), max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:
        async def one(body):
            async with client.stream("POST", "/v1/completions", json=body) as r:
                assert r.status_code == 200
                return [line async for line in r.aiter_lines()]
        return await asyncio.wait_for(asyncio.gather(*map(one, bodies)), 90)


@pytest.mark.parametrize("count", [16, pytest.param(64, marks=pytest.mark.slow)])
def test_many_concurrent_streams_each_equal_alone(server, model, count):
    tok = model.tokenizer
    texts = prompts(count)
    limits = [8 + (i * 11) % 33 for i in range(count)]
    bodies = [{"model": "target", "prompt": t, "max_tokens": m, "temperature": 0,
               "stream": True, "logprobs": 0, "stream_options": {"include_usage": True}}
              for t, m in zip(texts, limits)]
    before = stats(server)
    started = time.monotonic()
    streams = asyncio.run(stream_all(server.url, bodies))
    seconds = time.monotonic() - started
    after = stats(server)
    seen_ids = set()
    for text, limit, lines in zip(texts, limits, streams):
        chunks = events(lines)
        ids = tok.encode(text, add_special_tokens=True)
        new = greedy(model, ids, limit)
        assert len({c["id"] for c in chunks}) == 1 and chunks[0]["id"] not in seen_ids
        seen_ids.add(chunks[0]["id"])
        *parts, usage = chunks
        assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == len(new)
        choices = [c["choices"][0] for c in parts]
        assert [c["finish_reason"] for c in choices].count(None) == len(choices) - 1
        assert choices[-1]["finish_reason"] in ("length", "stop")
        streamed = "".join(c["text"] for c in choices)
        tokens = [t for c in choices for t in (c["logprobs"] or {"tokens": []})["tokens"]]
        ends = tok.eos_token_ids
        assert streamed == new_text(tok, ids, new, ends)  # equal to minillm.generate
        assert len(tokens) == len([t for t in new if t not in ends])  # none lost or doubled
        assert "".join(tokens) == streamed
    # They ran together: on average at least 4 tokens a step (alone, each request would take a
    # step per token; the longest takes 30 or 40 steps however they arrive).
    tokens = after["decode_tokens"] - before["decode_tokens"]
    assert tokens == sum(usage for usage in (
        events(lines)[-1]["usage"]["completion_tokens"] for lines in streams))
    assert after["steps"] - before["steps"] < tokens / 4, (after, before)
    assert after["running"] == after["waiting"] == after["blocks_in_use"] == 0
    # Each equals the same request sent alone (a sample of them, one at a time).
    for text, limit, lines in list(zip(texts, limits, streams))[::8]:
        alone = httpx.post(server.url + "/v1/completions", timeout=30, json={
            "model": "target", "prompt": text, "max_tokens": limit, "temperature": 0}).json()
        streamed = "".join(c["choices"][0]["text"] for c in events(lines)[:-1])
        assert alone["choices"][0]["text"] == streamed
    print(f"{count} streams in {seconds:.1f} s")


def test_a_client_that_disconnects_is_aborted_and_its_blocks_freed(slow_server, model):
    url, tok = slow_server.url, model.tokenizer
    other = {"model": "target", "prompt": "Jesus wept.", "max_tokens": 30, "temperature": 0,
             "stream": True}
    lines = []

    def other_client():
        with httpx.stream("POST", url + "/v1/completions", json=other, timeout=60) as r:
            lines.extend(r.iter_lines())

    long = {"model": "target", "prompt": "In the beginning", "max_tokens": 200,
            "temperature": 0, "stream": True}
    thread = threading.Thread(target=other_client)
    with httpx.Client(base_url=url, timeout=60) as client:
        with client.stream("POST", "/v1/completions", json=long) as r:
            thread.start()
            chunks = 0
            for line in r.iter_lines():
                chunks += line.startswith("data: ")
                if chunks == 3:
                    break  # and go away mid-stream: the response and connection close
    wait_until(lambda: stats(slow_server)["aborted"] == 1)
    thread.join(60)
    ids = tok.encode("Jesus wept.")
    assert "".join(c["choices"][0]["text"] for c in events(lines)) == new_text(
        tok, ids, greedy(model, ids, 30))
    # Not streamed: a client that gives up waiting is aborted too.
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(url + "/v1/completions", json=dict(long, stream=False), timeout=0.5)
    wait_until(lambda: stats(slow_server)["aborted"] == 2)
    s = stats(slow_server)
    assert s["running"] == s["waiting"] == s["blocks_in_use"] == 0
    assert s["finished"] == 1 and s["decode_tokens"] < 30 + 2 * 100  # the long ones stopped
    assert ok_request(slow_server)


def test_a_fault_of_the_model_fails_its_request_and_the_server_goes_on(slow_server):
    r = httpx.post(slow_server.url + "/v1/completions", timeout=30, json={
        "model": "target", "prompt": [5, 6, FAULT], "max_tokens": 5})
    assert r.status_code == 500
    assert "a planted fault" in r.json()["error"]["message"]
    assert r.json()["error"]["type"] == "server_error"
    assert ok_request(slow_server)
    s = stats(slow_server)
    assert s["errors"] == 1 and s["blocks_in_use"] == 0 and s["running"] == 0


# -- bad input ---------------------------------------------------------------------------------

GOOD = {"model": "target", "prompt": "In the beginning", "max_tokens": 4}
BAD = [
    # (what, path, body or raw bytes, status, param)
    ("malformed JSON", "/v1/completions", b'{"model": "target",', 400, None),
    ("not UTF-8", "/v1/completions", b'{"model": "\xff"}', 400, None),
    ("NaN", "/v1/completions", b'{"model": "target", "prompt": "x", "temperature": NaN}',
     400, None),
    ("not an object", "/v1/completions", [1, 2], 422, None),
    ("unknown field", "/v1/completions", dict(GOOD, best_temperature=1), 422,
     "best_temperature"),
    ("wrong type", "/v1/completions", dict(GOOD, max_tokens="4"), 422, "max_tokens"),
    ("a bool for a number", "/v1/completions", dict(GOOD, temperature=True), 422,
     "temperature"),
    ("missing prompt", "/v1/completions", {"model": "target"}, 422, "prompt"),
    ("missing messages", "/v1/chat/completions", {"model": "target"}, 422, "messages"),
    ("a message without a role", "/v1/chat/completions",
     {"model": "target", "messages": [{"content": "hi"}]}, 422, "messages"),
    ("an image part", "/v1/chat/completions", {"model": "target", "messages": [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
     400, "messages"),
    ("temperature < 0", "/v1/completions", dict(GOOD, temperature=-1), 400, "temperature"),
    ("top_p > 1", "/v1/completions", dict(GOOD, top_p=1.5), 400, "top_p"),
    ("top_k < 0", "/v1/completions", dict(GOOD, top_k=-3), 400, "top_k"),
    ("min_p > 1", "/v1/completions", dict(GOOD, min_p=2), 400, "min_p"),
    ("repetition_penalty 0", "/v1/completions", dict(GOOD, repetition_penalty=0), 400,
     "repetition_penalty"),
    ("max_tokens 0", "/v1/completions", dict(GOOD, max_tokens=0), 400, "max_tokens"),
    ("max_tokens over the bound", "/v1/completions", dict(GOOD, max_tokens=MAX_TOKENS + 1),
     400, "max_tokens"),
    ("max_tokens past the context", "/v1/completions", dict(GOOD, max_tokens=300), 400,
     "max_tokens"),
    ("n over the bound", "/v1/completions", dict(GOOD, n=MAX_CHOICES + 1), 400, "n"),
    ("n times prompts over the bound", "/v1/completions",
     dict(GOOD, prompt=["a", "b", "c"], n=6), 400, "n"),
    ("negative seed", "/v1/completions", dict(GOOD, seed=-1), 400, "seed"),
    ("five stops", "/v1/completions", dict(GOOD, stop=list("abcde")), 400, "stop"),
    ("an empty stop", "/v1/completions", dict(GOOD, stop=[""]), 400, "stop"),
    ("logprobs over the bound", "/v1/completions", dict(GOOD, logprobs=21), 400,
     "logprobs"),
    ("top_logprobs without logprobs", "/v1/chat/completions",
     {"model": "target", "messages": [{"role": "user", "content": "hi"}],
      "top_logprobs": 2}, 400, "top_logprobs"),
    ("a logit bias past 100", "/v1/completions", dict(GOOD, logit_bias={"5": 101}), 400,
     "logit_bias"),
    ("a logit bias of a token outside the vocabulary", "/v1/completions",
     dict(GOOD, logit_bias={"99999": 1}), 400, "logit_bias"),
    ("min_tokens past max_tokens", "/v1/completions", dict(GOOD, min_tokens=5), 400,
     "min_tokens"),
    ("stream_options without stream", "/v1/completions",
     dict(GOOD, stream_options={"include_usage": True}), 400, "stream_options"),
    ("a token id outside the vocabulary", "/v1/completions", dict(GOOD, prompt=[1, 99999]),
     400, "prompt"),
    ("an empty prompt", "/v1/completions", dict(GOOD, prompt=""), 400, "prompt"),
    ("a prompt longer than the context", "/v1/completions",
     dict(GOOD, prompt=list(range(1, 301))), 400, "prompt"),
    ("a text longer than the context", "/v1/completions",
     dict(GOOD, prompt="and the earth " * 200), 400, "prompt"),
    ("unknown model", "/v1/completions", dict(GOOD, model="gpt-4o"), 404, "model"),
    ("unknown path", "/v1/engines", dict(GOOD), 404, None),
    ("a huge body", "/v1/completions", b"{" + b" " * MAX_BODY_BYTES + b"}", 413, None),
]


def test_bad_requests_get_error_objects_and_the_server_goes_on(server):
    for what, path, body, status, param in BAD:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        r = httpx.post(server.url + path, content=raw, timeout=30,
                       headers={"Content-Type": "application/json"})
        assert r.status_code == status, (what, r.text)
        error = r.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}, what
        assert error["param"] == param and error["message"], (what, error)
        if param == "prompt" and "longer" in what:
            assert error["code"] == "context_length_exceeded"
    # A body over the bound without a Content-Length (chunked) is cut off as it comes.
    chunks = (b" " * 65536 for _ in range(MAX_BODY_BYTES // 65536 + 2))
    r = httpx.post(server.url + "/v1/completions", content=chunks, timeout=30)
    assert r.status_code == 413
    assert httpx.get(server.url + "/v1/completions").status_code == 405
    assert ok_request(server)
    assert httpx.get(server.url + "/health").json() == {"status": "ok"}


# -- the openai client -----------------------------------------------------------------------

def test_openai_completions_streamed_and_not(client, model):
    ids = model.tokenizer.encode("And the earth was")
    expected = new_text(model.tokenizer, ids, greedy(model, ids, 16))
    reply = client.completions.create(model="target", prompt="And the earth was",
                                      max_tokens=16, temperature=0)
    assert reply.choices[0].text == expected and reply.choices[0].finish_reason == "length"
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (len(ids), 16)
    chunks = list(client.completions.create(model="target", prompt="And the earth was",
                                            max_tokens=16, temperature=0, stream=True))
    assert "".join(c.choices[0].text for c in chunks) == expected
    assert [c.choices[0].finish_reason for c in chunks][-1] == "length"


def test_openai_chat_streamed_and_not(client, model, chat_tokenizer):
    messages = [{"role": "user", "content": "What was in the beginning?"}]
    ids = chat_prompt_ids(chat_tokenizer, messages)
    expected = new_text(model.tokenizer, ids, greedy(model, ids, 20))
    reply = client.chat.completions.create(model="target", messages=messages, max_tokens=20,
                                           temperature=0)
    assert reply.choices[0].message.content == expected
    assert reply.choices[0].message.role == "assistant"
    chunks = list(client.chat.completions.create(
        model="target", messages=messages, max_tokens=20, temperature=0, stream=True,
        stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == expected
    assert chunks[-1].usage.completion_tokens == 20 and chunks[-1].choices == []


def test_openai_logprobs_and_top_logprobs(client, model, chat_tokenizer):
    messages = [{"role": "user", "content": "Who created the heaven?"}]
    ids = chat_prompt_ids(chat_tokenizer, messages)
    knobs = dict(temperature=0.9, top_k=20, repetition_penalty=1.2)
    reply = client.chat.completions.create(
        model="target", messages=messages, max_tokens=12, seed=3, logprobs=True,
        top_logprobs=5, temperature=0.9, extra_body={"top_k": 20, "repetition_penalty": 1.2})
    content = reply.choices[0].logprobs.content
    alone = minillm.generate(model, ids, max_new_tokens=12, seed=3, return_logprobs=True,
                             stop_tokens=model.tokenizer.eos_token_ids, **knobs)
    new = alone.new_tokens
    assert [bytes(c.bytes) for c in content] == [model.tokenizer.token_bytes(t) for t in new]
    np.testing.assert_allclose([c.logprob for c in content], alone.logprobs, atol=1e-4)
    for j, entry in enumerate(content):
        # The distribution this token was drawn from, computed directly: the knobs over the
        # logits of the text so far, that text the penalties' history.
        text = ids + new[:j]
        logits = model.forward(np.array([text]))[:, -1]
        with np.errstate(divide="ignore"):
            logp = np.log(filtered_probs(logits, history=np.array([text]), **knobs)[0])
        best = np.argsort(-logp, kind="stable")[:5]
        assert [bytes(t.bytes) for t in entry.top_logprobs] == [
            model.tokenizer.token_bytes(int(t)) for t in best]
        np.testing.assert_allclose([t.logprob for t in entry.top_logprobs], logp[best],
                                   atol=1e-4)
    # /v1/completions' legacy shape, streamed: the tokens spell the text.
    chunks = list(client.completions.create(model="target", prompt="In the beginning",
                                            max_tokens=10, logprobs=3, seed=1, stream=True))
    tokens = [t for c in chunks for t in c.choices[0].logprobs.tokens]
    assert "".join(tokens) == "".join(c.choices[0].text for c in chunks)
    assert len(tokens) == 10
    tops = [t for c in chunks for t in c.choices[0].logprobs.top_logprobs]
    assert all(1 <= len(top) <= 3 for top in tops)


def test_openai_seeds(client):
    def text(seed, n=1):
        reply = client.completions.create(model="target", prompt="And God said", n=n,
                                          max_tokens=20, temperature=1.0, seed=seed)
        return [c.text for c in sorted(reply.choices, key=lambda c: c.index)]

    assert text(7) == text(7)  # the same seed, the same text
    assert text(7) != text(8)
    three = text(7, n=3)
    assert three[0] == text(7)[0]  # choice i draws with seed + i
    assert three[1] == text(8)[0] and len(set(three)) == 3


def test_openai_stop_sequences(client, model):
    ids = model.tokenizer.encode("In the beginning")
    full = new_text(model.tokenizer, ids, greedy(model, ids, 30))
    for stop in (["world"], ["e wor", "nothing"], "Man,"):
        first = min(full.find(s) for s in ([stop] if isinstance(stop, str) else stop)
                    if s in full)
        reply = client.completions.create(model="target", prompt="In the beginning",
                                          max_tokens=30, temperature=0, stop=stop)
        assert reply.choices[0].text == full[:first]
        assert reply.choices[0].finish_reason == "stop"
        chunks = list(client.completions.create(model="target", prompt="In the beginning",
                                                max_tokens=30, temperature=0, stop=stop,
                                                stream=True))
        assert "".join(c.choices[0].text for c in chunks) == full[:first]
    messages = [{"role": "user", "content": "hi"}]
    reply = client.chat.completions.create(model="target", messages=messages, max_tokens=30,
                                           temperature=0, stop=[" "])
    assert " " not in reply.choices[0].message.content


def test_openai_errors(client):
    with pytest.raises(openai.NotFoundError) as e:
        client.completions.create(model="gpt-4o", prompt="x")
    assert e.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="target", prompt="x", max_tokens=100_000)
    assert e.value.param == "max_tokens"
    with pytest.raises(openai.UnprocessableEntityError):
        client.completions.create(model="target", prompt="x", extra_body={"nonsense": 1})


def test_replies_end_at_the_models_end_tokens(model):
    """A model whose tokenizer names "," its end token stops there, as OpenAI's servers stop at
    the model's EOS: the token is counted, not shown."""
    comma = model.tokenizer.token_to_id(",")
    ended = copy.copy(model)
    ended.tokenizer = copy.copy(model.tokenizer)
    ended.tokenizer.eos_token_id = comma
    running = start(ended, name="target")
    try:
        ids = model.tokenizer.encode("In the beginning")
        new = greedy(model, ids, 40, ends=(comma,))
        assert new[-1] == comma and len(new) < 40
        reply = httpx.post(running.url + "/v1/completions", timeout=30, json={
            "model": "target", "prompt": ids, "max_tokens": 40, "temperature": 0}).json()
        assert reply["choices"][0]["text"] == new_text(model.tokenizer, ids, new[:-1])
        assert reply["choices"][0]["finish_reason"] == "stop"
        assert reply["usage"]["completion_tokens"] == len(new)
    finally:
        running.stop()


# -- the text of a stream ----------------------------------------------------------------------

def test_a_stream_never_sends_text_a_stop_string_takes_back(model):
    tok = model.tokenizer
    prompt = tok.encode("In")
    new = tok.encode(" the beginning God created the heaven and the earth")
    for stops in (["the earth"], ["heaven and", "created"], ["n"], ["nothing"]):
        text = ChoiceText(tok, prompt, stops)
        sent = ""
        for i, token in enumerate(new):
            sent += text.add(token, i == len(new) - 1)
            whole = tok.decode(new)
            cut = min([whole.find(s) for s in stops if s in whole], default=len(whole))
            assert whole[:cut].startswith(sent)  # never more than the final text
        assert sent == whole[:cut]


# -- the command -------------------------------------------------------------------------------

def run_python(code, timeout=60):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ, PYTHONWARNINGS="ignore"))


def test_the_core_never_imports_the_web_stack():
    done = run_python("import sys, minillm, minillm.serving, minillm.cli, minillm.serve\n"
                      "print(sorted(m for m in ('starlette', 'uvicorn', 'fastapi', 'httpx') "
                      "if m in sys.modules))")
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr


def test_without_the_web_stack_the_command_says_how_to_install_it():
    done = run_python("import sys; sys.modules['starlette'] = None\n"
                      "from minillm.cli import main; sys.exit(main(['serve']))")
    assert done.returncode == 2
    assert done.stderr.startswith("minillm serve: error: ") and done.stderr.count("\n") == 1
    assert '[serve]"' in done.stderr and "pip install" in done.stderr


@pytest.mark.slow  # a process of its own: Python, NumPy and the web stack imported again
def test_the_command_serves_until_interrupted():
    process = subprocess.Popen([sys.executable, "-m", "minillm", "serve", "--port", "0"],
                               stderr=subprocess.PIPE, text=True)
    try:
        line = process.stderr.readline()
        assert line.startswith("minillm serve: target at http://127.0.0.1:"), line
        url = line.split(" at ")[1].split("/v1")[0]

        def healthy():
            try:
                return httpx.get(url + "/health", timeout=5).status_code == 200
            except httpx.TransportError:
                return False
        wait_until(healthy, 60)
        reply = httpx.post(url + "/v1/completions", timeout=30, json={
            "model": "target", "prompt": "In the beginning", "max_tokens": 3}).json()
        assert reply["usage"]["completion_tokens"] == 3
    finally:
        process.send_signal(2)  # SIGINT: Ctrl-C
        _, err = process.communicate(timeout=30)
    assert process.returncode == 130 and "Traceback" not in err  # as every command's Ctrl-C


def test_the_command_refuses_a_bad_port_before_loading():
    done = run_python("import sys; from minillm.cli import main; "
                      "sys.exit(main(['serve', '--port', '70000']))")
    assert done.returncode == 2 and done.stderr.startswith("minillm serve: error: --port:")
