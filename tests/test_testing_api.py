"""minillm.testing.api against `minillm serve` on the shipped model, on 127.0.0.1: the four
checks a server answers through its API pass, and each fails on a server that breaks its
property (a proxy in this process that perturbs minillm serve's replies). Every request is
bounded in count and time (the adapter's timeout)."""
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

import minillm  # noqa: E402
from minillm.cli.common import DEFAULT_MODEL  # noqa: E402
from minillm.serve import start  # noqa: E402
import minillm.testing.adapters.openai  # noqa: E402,F401  (the replay lines name it)
from minillm.testing import api  # noqa: E402
from minillm.testing.adapters.openai import APIError, connect, request  # noqa: E402

SEEDED = {"temperature": 1.0, "seed": 1}  # minillm reports the drawn distribution's logprobs


@pytest.fixture(scope="module")
def served():
    with minillm.threads(1):  # the engine's thread computes inside it: one BLAS thread
        running = start(minillm.load(DEFAULT_MODEL), name="target")
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
    """A server in this process in front of minillm serve that passes each /completions body
    through `edit_body` and each reply through `edit_reply`."""

    def __init__(self, served, edit_body=lambda b: b, edit_reply=lambda body, reply: reply):
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = edit_body(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                try:
                    status, reply = 200, edit_reply(body, request(served, self.path[3:], body))
                except APIError as error:
                    status, reply = error.status, {"error": {"message": error.message}}
                reply = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

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
