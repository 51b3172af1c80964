"""minillm.testing.api against `minillm serve` on the shipped model, on 127.0.0.1: the checks
a server answers through its API pass, and each fails on a server that breaks its property (a
proxy in this process that perturbs minillm serve's requests or replies, streamed or not).
Every request is bounded in count and time (the adapter's timeout)."""
import json
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

import minillm  # noqa: E402
from minillm.cli.common import DEFAULT_MODEL  # noqa: E402
from minillm.serve import start  # noqa: E402
from minillm.text.chat_template import CHATML_TEMPLATE, chat_prompt_ids  # noqa: E402
import minillm.testing.adapters.openai  # noqa: E402,F401  (the replay lines name it)
from minillm.testing import api  # noqa: E402
from minillm.testing.adapters.openai import APIError, connect, request  # noqa: E402

SEEDED = {"temperature": 1.0, "seed": 1}  # minillm reports the drawn distribution's logprobs
BUDGET = 64  # the engine's max_batch_tokens: longer prompts are read in chunks


@pytest.fixture(scope="module")
def model():
    return minillm.load(DEFAULT_MODEL)


@pytest.fixture(scope="module")
def chat_tokenizer(model):
    return model.tokenizer.with_chat_template(CHATML_TEMPLATE)  # the shipped file has none


@pytest.fixture(scope="module")
def served(model, chat_tokenizer):
    with minillm.threads(1):  # the engine's thread computes inside it: one BLAS thread
        running = start(model, name="target", chat_tokenizer=chat_tokenizer,
                        max_batch_tokens=BUDGET)
        yield connect(running.url + "/v1", timeout=60)
        running.stop()


@pytest.mark.slow
def test_minillm_serve_passes_the_api_checks(served):
    reports = [api.check_api_determinism(served),
               api.check_api_batch_invariance(served, atol=1e-4, sampling=SEEDED),
               api.check_api_batch_invariance(served, prompts=api.PROMPTS[:2]),
               api.check_api_logprobs(served, atol=1e-4),
               api.check_api_sampler(served, prompt="I like to eat", draws=320, n=16)]
    print("\n" + "\n".join(map(str, reports)))
    assert all(r.supported and r.cases > 0 for r in reports)


class Proxy:
    """A server in this process in front of minillm serve that passes each POST body through
    `edit_body`, each reply through `edit_reply` and each chunk of a streamed reply through
    `edit_chunk`; `one_at_a_time` serves one request at a time (a server that does not batch);
    `counters` False hides minillm serve's /debug/stats (a server that has none)."""

    def __init__(self, served, edit_body=lambda b: b, edit_reply=lambda body, reply: reply,
                 edit_chunk=lambda body, chunk: chunk, one_at_a_time=False, counters=True):
        lock = threading.Lock() if one_at_a_time else None
        root = served.url[:-len("/v1")]

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                if not counters and self.path.startswith("/debug"):
                    return self.answer(404, {"error": {"message": "not found"}})
                self.answer(200, request(root, self.path))

            def do_POST(self):
                body = edit_body(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                if lock is None:
                    return self.forward(body)
                with lock:
                    self.forward(body)

            def forward(self, body):
                if body.get("stream"):
                    return self.stream(body)
                try:
                    status, reply = 200, edit_reply(body, request(served, self.path[3:], body))
                except APIError as error:
                    status, reply = error.status, {"error": {"message": error.message}}
                self.answer(status, reply)

            def answer(self, status, reply):
                reply = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def stream(self, body):  # HTTP/1.0: the reply ends when the connection closes
                upstream = urllib.request.Request(
                    served.url + self.path[3:], json.dumps(body).encode(),
                    {"Content-Type": "application/json"})
                with urllib.request.urlopen(upstream, timeout=60) as reply:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.end_headers()
                    for line in reply:
                        text = line.decode()
                        if text.startswith("data: {"):
                            chunk = edit_chunk(body, json.loads(text[6:]))
                            text = f"data: {json.dumps(chunk)}\n"
                        self.wfile.write(text.encode())
                        self.wfile.flush()

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.server = connect(f"http://127.0.0.1:{self.httpd.server_port}/v1", served.model,
                               timeout=60)

    def __enter__(self):
        return self.server

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def shift_echo(body, reply):
    """The echoed prompt's entries moved one position on, as if each were scored by the
    distribution after it."""
    if body.get("echo"):
        lp = reply["choices"][0]["logprobs"]
        lp["token_logprobs"] = [None] + lp["token_logprobs"][2:] + [lp["token_logprobs"][-1]]
    return reply


def test_a_shifted_echo_fails_the_logprob_check_with_its_replay_line(served):
    with Proxy(served, edit_reply=shift_echo) as shifted:
        with pytest.raises(AssertionError, match="differ by up to") as e:
            api.check_api_logprobs(shifted)
        assert "1 cases ran" in str(e.value)
        last = str(e.value).splitlines()[-1]
        assert last.startswith("replay: minillm.testing.api.check_api_logprobs(")
        with pytest.raises(AssertionError, match="differ by up to"):  # the line replays it
            eval(last[len("replay: "):], {"minillm": minillm})


def test_a_sampler_that_ignores_the_temperature_fails_the_sampler_check(served):
    def cold(body):  # draws at temperature 0.3 while the top list is asked for at 0.8
        return dict(body, temperature=0.3) if body.get("logprobs") == 1 else body

    with Proxy(served, edit_body=cold) as wrong:
        with pytest.raises(AssertionError, match="draws do not follow") as e:
            api.check_api_sampler(wrong, draws=300)
    assert "drawn" in str(e.value) and "300 draws" in str(e.value)


def test_a_batch_that_changes_a_row_fails_batch_invariance(served):
    nudged = []

    def nudge(body, reply):  # the second reply of the first prompt (the one among others)
        if body["prompt"] == api.PROMPTS[0] and body["max_tokens"] == 16:
            nudged.append(1)
            if len(nudged) == 2:
                lp = reply["choices"][0]["logprobs"]
                lp["token_logprobs"][3] += 1e-3
        return reply

    with Proxy(served, edit_reply=nudge) as wrong:
        with pytest.raises(AssertionError, match=r"differ by up to 0\.001") as e:
            api.check_api_batch_invariance(wrong, atol=1e-4, sampling=SEEDED)
    assert "among 7 concurrent" in str(e.value)


def test_a_server_that_refuses_echo_is_reported_unsupported_not_passed(served):
    def no_echo(body):
        if body.get("echo"):
            body = dict(body, n=10**6)  # minillm serve refuses it: a 400
        return body

    with Proxy(served, edit_body=no_echo) as refusing:
        report = api.check_api_logprobs(refusing)
    assert not report.supported and "refused" in report.reason and "unsupported" in str(report)


# -- the checks servers' own suites run, and item by item a fault each catches ---------------

def ids_of(model):
    return lambda text: model.tokenizer.encode(text, add_special_tokens=True)


@pytest.mark.slow
def test_minillm_serve_passes_the_checks_servers_suites_run(served, model, chat_tokenizer):
    reports = [api.check_api_streaming(served),
               api.check_api_streaming(served, sampling=SEEDED),
               api.check_api_stop(served),
               api.check_api_n(served, seed_rule="seed + i", atol=1e-4),
               api.check_api_n(served),
               api.check_api_token_prompts(served, tokenize=ids_of(model)),
               api.check_api_chat(served, lambda m: chat_prompt_ids(chat_tokenizer, m)),
               api.check_api_prefix_caching(served, budget=BUDGET)]
    print("\n" + "\n".join(map(str, reports)))
    assert all(r.supported and r.cases > 0 for r in reports)
    assert "prompt tokens reused" in reports[-1].worst and not reports[-1].worst.startswith("0 ")


def test_a_stream_that_loses_a_character_fails_the_streaming_check(served):
    seen = []

    def lose(body, chunk):  # the third piece of text loses its last character
        for c in chunk["choices"]:
            if c.get("text"):
                seen.append(1)
                if len(seen) == 3:
                    c["text"] = c["text"][:-1]
        return chunk

    with Proxy(served, edit_chunk=lose) as wrong:
        with pytest.raises(AssertionError, match="texts differ from character") as e:
            api.check_api_streaming(wrong, prompts=api.PROMPTS[:1])
    assert str(e.value).splitlines()[-1].startswith("replay: minillm.testing.api."
                                                    "check_api_streaming(")


def test_a_server_that_reads_only_the_first_stop_fails_the_stop_check(served):
    def first_only(body):
        return dict(body, stop=body["stop"][:1]) if body.get("stop") else body

    with Proxy(served, edit_body=first_only) as wrong:
        with pytest.raises(AssertionError, match="first contains a stop") as e:
            api.check_api_stop(wrong, prompts=api.PROMPTS[:1])
    assert "left out" in str(e.value)


def test_a_stop_kept_in_the_text_fails_unless_the_server_says_it_keeps_it(served):
    def keep(body, reply):  # the text runs on past the stop, as if only the tokens stopped
        if body.get("stop") and reply["choices"][0]["finish_reason"] == "stop":
            whole = request(served, "/completions", dict(body, stop=None))["choices"][0]["text"]
            cut = len(reply["choices"][0]["text"])
            stop = next(s for s in body["stop"] if whole.startswith(s, cut))
            reply["choices"][0]["text"] += stop
        return reply

    with Proxy(served, edit_reply=keep) as keeping:
        with pytest.raises(AssertionError, match="the stop left out"):
            api.check_api_stop(keeping, prompts=api.PROMPTS[:1], streams=(False,))
        report = api.check_api_stop(keeping, prompts=api.PROMPTS[:1], streams=(False,),
                                    include_stop=True)
    assert report.supported and report.cases == 3


def test_choices_copied_from_the_first_fail_the_n_check_both_ways(served):
    def copy_first(body, reply):
        first = reply["choices"][0]
        reply["choices"] = [dict(first, index=i) for i in range(len(reply["choices"]))]
        return reply

    with Proxy(served, edit_reply=copy_first) as wrong:
        with pytest.raises(AssertionError, match="not distinct draws"):
            api.check_api_n(wrong)
        with pytest.raises(AssertionError, match="seed 1 \\+ 1"):
            api.check_api_n(wrong, seed_rule="seed + i", atol=1e-4)


def test_a_server_that_ignores_n_is_reported_unsupported(served):
    with Proxy(served, edit_body=lambda body: dict(body, n=1)) as ignoring:
        report = api.check_api_n(ignoring)
    assert not report.supported and "asked n=4, the reply has 1 choice" in report.reason


def test_token_prompts_read_without_their_first_id_fail_the_token_prompt_check(served, model):
    def drop_first(body):
        prompt = body["prompt"]
        return dict(body, prompt=prompt[1:]) if isinstance(prompt, list) else body

    with Proxy(served, edit_body=drop_first) as wrong:
        with pytest.raises(AssertionError, match="prompt tokens"):
            api.check_api_token_prompts(wrong, tokenize=ids_of(model))


def test_a_chat_endpoint_that_drops_the_system_message_fails_the_chat_check(served,
                                                                          chat_tokenizer):
    def no_system(body):
        if "messages" in body:
            body = dict(body, messages=[m for m in body["messages"] if m["role"] != "system"])
        return body

    with Proxy(served, edit_body=no_system) as wrong:
        with pytest.raises(AssertionError, match="chat vs completions") as e:
            api.check_api_chat(wrong, lambda m: chat_prompt_ids(chat_tokenizer, m))
    assert "sky" in str(e.value)  # the conversation with a system message


def test_a_cache_hit_that_changes_a_reply_fails_the_prefix_caching_check(served):
    asked = set()

    def stale(body, reply):  # a prompt asked before comes back a little changed
        key = json.dumps(body["prompt"])
        if key in asked:
            reply["choices"][0]["logprobs"]["token_logprobs"][1] += 1e-3
        asked.add(key)
        return reply

    with Proxy(served, edit_reply=stale) as wrong:
        with pytest.raises(AssertionError, match="again after others sharing its prefix"):
            api.check_api_prefix_caching(wrong)


# -- whether a batch check saw a batch ----------------------------------------------------

def test_batch_invariance_says_whether_the_requests_overlapped(served):
    batched = api.check_api_batch_invariance(served, prompts=api.PROMPTS[:1])
    assert batched.note.startswith("batched: 1 of 1") and "counters" in batched.note
    with Proxy(served, one_at_a_time=True) as serial:
        alone = api.check_api_batch_invariance(serial, prompts=api.PROMPTS[:1])
    assert alone.note.startswith("not batched: nothing overlapped") and "counters" in str(alone)
    with Proxy(served, counters=False) as hidden:  # no counters: when the streamed tokens came
        timed = api.check_api_batch_invariance(hidden, prompts=api.PROMPTS[:1])
    assert timed.note.startswith("batched") and "interleaved" in timed.note


def test_the_sampler_check_reports_its_power_and_picks_a_prompt_with_it(served):
    report = api.check_api_sampler(served, draws=320, n=16)
    assert "power" in report.note and report.note.startswith("prompt ")
    chosen = report.note.split("'")[1]
    assert chosen in api.SAMPLER_PROMPTS
    weak = api.check_api_sampler(served, prompt="1, 2, 3, 4,", draws=64, n=16, power=0.99)
    assert "under the 0.99 asked" in weak.note


def test_a_sampler_failure_that_fits_the_other_convention_says_so(served):
    # minillm serve states the drawn distribution: read as the model's own ("raw"), the draws
    # fail, and follow what "filtered" says
    with pytest.raises(AssertionError, match="try stated='filtered'"):
        api.check_api_sampler(served, prompt="She opened the door and", top_p=0.5, draws=160,
                              n=16, stated="raw")
