"""minillm serve under traffic: a bounded waiting queue (429 with Retry-After past it), request
headers and bodies that must arrive in time (else the connection is closed), and a client that
leaves mid-body logged in one line. Servers on 127.0.0.1 in this process, every wait bounded.
"""
import json
import logging
import socket
import threading
import time

import numpy as np
import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

import minillm  # noqa: E402
from minillm.cli.common import DEFAULT_MODEL  # noqa: E402
from minillm.serve import start  # noqa: E402


@pytest.fixture(scope="module")
def model():
    with minillm.threads(1):
        yield minillm.load(DEFAULT_MODEL)


class Slow:
    """The model, each forward pass `delay` seconds slower: requests stay queued a while."""

    def __init__(self, model, delay):
        self.model, self.delay = model, delay

    def __getattr__(self, name):
        return getattr(self.model, name)

    def forward(self, *args, **kwargs):
        time.sleep(self.delay)
        return self.model.forward(*args, **kwargs)


def body(prompt, max_tokens=4, **more):
    return {"model": "target", "prompt": prompt, "max_tokens": max_tokens, **more}


def test_past_max_waiting_a_429_with_retry_after_and_then_service(model):
    # A step reads 8 prompt tokens; a prompt of 24 is read alone, so the others wait.
    server = start(Slow(model, 0.05), name="target", max_waiting=3, max_batch_tokens=8)
    try:
        prompt = list(range(5, 29))
        replies = [None] * 12

        def send(i):
            replies[i] = httpx.post(server.url + "/v1/completions", json=body(prompt),
                                    timeout=120)
        threads = [threading.Thread(target=send, args=(i,)) for i in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(150)
        codes = sorted(r.status_code for r in replies)
        assert set(codes) == {200, 429} and codes.count(200) >= 3, codes
        refused = next(r for r in replies if r.status_code == 429)
        assert refused.headers["Retry-After"].isdigit()
        error = refused.json()["error"]
        assert error["code"] == "too_many_requests" and error["type"] == "rate_limit_error"
        stats = httpx.get(server.url + "/debug/stats", timeout=30).json()
        assert stats["refused"] == codes.count(429) and stats["waiting"] == 0
        # n choices count n: a request of 4 choices waits beside none and is let in.
        r = httpx.post(server.url + "/v1/completions", json=body(prompt, n=4), timeout=120)
        assert r.status_code == 200 and len(r.json()["choices"]) == 4
    finally:
        server.stop()


def closed_within(sock, seconds):
    """Whether the server closed the connection within `seconds` (what it sent, if anything)."""
    sock.settimeout(seconds)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except socket.timeout:
        return False, data
    return True, data


def test_slow_headers_and_slow_bodies_are_cut_off(model):
    server = start(model, name="target", header_timeout=0.5, read_timeout=0.5)
    try:
        with socket.create_connection(("127.0.0.1", server.port)) as s:  # slowloris
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            closed, data = closed_within(s, 30)
            assert closed and data == b""
        raw = json.dumps(body("In the beginning")).encode()
        with socket.create_connection(("127.0.0.1", server.port)) as s:  # a body that stalls
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                      b"application/json\r\nContent-Length: %d\r\n\r\n" % len(raw) + raw[:10])
            closed, data = closed_within(s, 30)
            assert closed and data.startswith(b"HTTP/1.1 408"), data[:200]
            assert b"request_timeout" in data
        with httpx.Client(base_url=server.url, timeout=30) as client:  # kept alive: it serves
            for _ in range(2):
                assert client.post("/v1/completions", json=body("In the")).status_code == 200
    finally:
        server.stop()


class Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.records = []

    def emit(self, record):
        self.records.append(record)


def test_a_client_that_leaves_mid_body_logs_one_line(model):
    server = start(model, name="target", log_level="info")
    lines = Lines()
    logger = logging.getLogger("uvicorn.error")
    logger.addHandler(lines)
    try:
        for _ in range(3):
            with socket.create_connection(("127.0.0.1", server.port)) as s:
                s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length:"
                          b" 100\r\n\r\n{\"model\":")
                time.sleep(0.2)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and sum("left" in r.getMessage()
                                                  for r in lines.records) < 3:
            time.sleep(0.05)
        left = [r for r in lines.records if "left before its body" in r.getMessage()]
        assert len(left) == 3
        assert all(r.exc_info is None and "\n" not in r.getMessage() for r in lines.records)
        assert httpx.post(server.url + "/v1/completions", json=body("In the"),
                          timeout=30).status_code == 200
    finally:
        logger.removeHandler(lines)
        server.stop()


# -- tokenizing: bounded before it starts, O(n log n) merging ---------------------------------

def pairwise_merge(symbols, merges):
    """Byte-level BPE's rule as written: join every occurrence of the lowest-ranked adjacent
    pair, left to right, and again (quadratic in a word's length: the reference)."""
    while len(symbols) > 1:
        found = [merges.find(a, b) for a, b in zip(symbols, symbols[1:])]
        best = min(found)
        if best == merges.nothing:
            return symbols
        pair, i, out = symbols[found.index(best)], 0, []
        pair = (pair, symbols[found.index(best) + 1])
        while i < len(symbols):
            if tuple(symbols[i:i + 2]) == pair:
                out.append(best % (1 << 32))
                i += 2
            else:
                out.append(symbols[i])
                i += 1
        symbols = out
    return symbols


def test_the_heap_merge_equals_the_pairwise_rule_on_long_words(model):
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from minillm.text.bpe import merge_word

    merges = model.tokenizer.ranks  # the shipped byte-level BPE's MergeTable
    byte_symbols = merges.byte_symbols()

    @settings(max_examples=60, deadline=None)
    @given(st.text(alphabet="aeht ns\n.é", min_size=1, max_size=400))
    def check(word):
        symbols = [byte_symbols[b] for b in word.encode() if byte_symbols[b] is not None]
        assert merge_word(symbols, merges) == pairwise_merge(symbols, merges)
    check()


def test_a_text_past_what_the_context_can_hold_is_refused_before_tokenizing(model):
    server = start(model, name="target")
    try:
        longest = server.service.longest
        prompt = "x" * (longest * model.config.context_length + 1)
        r = httpx.post(server.url + "/v1/completions", json=body(prompt), timeout=60)
        assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
        assert "at least" in r.json()["error"]["message"]
    finally:
        server.stop()


def test_the_command_line_states_the_servers_defaults():
    from minillm.cli import serve as command
    from minillm.serve import app, server

    assert (command.MAX_WAITING, command.READ_TIMEOUT) == (server.MAX_WAITING,
                                                           app.READ_TIMEOUT)
