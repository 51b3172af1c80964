"""The desk's server and endpoints: each widget's figures against the library computing the
same thing by another road, and every kind of bad request answered with a 4xx while the server
keeps serving."""
import http.client
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import minillm
from minillm.desk import PASSAGE
from minillm.desk.fields import MAX_BODY_BYTES, MAX_PROMPT_CHARS
from minillm.desk.server import make_server, serve_in_thread
from minillm.desk.rounds import rounds
from minillm.desk.widgets import make_desk
from minillm.study.explain import surprise

WEIGHTS = Path(__file__).resolve().parents[1] / "weights"
PROMPT = "In the beginning"


@pytest.fixture(scope="module")
def model():
    return minillm.load(WEIGHTS / "target.npz")


@pytest.fixture(scope="module")
def server(model):
    desk = make_desk(model, "target.npz", minillm.load(WEIGHTS / "draft.npz"),
                     PASSAGE.read_text(encoding="utf-8"))
    server = make_server(desk, 0)
    serve_in_thread(server)
    yield server
    server.shutdown()
    server.server_close()


def call(server, method, path, body=None, headers=None, raw=None):
    """(status, decoded JSON or bytes) of one request to the desk."""
    port = server.server_address[1]
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    sent = {"Host": f"127.0.0.1:{port}", "Content-Type": "application/json"}
    sent.update(headers or {})
    connection.request(method, path, body=data, headers=sent)
    response = connection.getresponse()
    payload = response.read()
    connection.close()
    if response.getheader("Content-Type", "").startswith("application/json"):
        return response.status, json.loads(payload)
    return response.status, payload


def post(server, path, **body):
    status, answer = call(server, "POST", path, body)
    assert status == 200, answer
    return answer


def ids_of(model, text=PROMPT):
    return model.tokenizer.encode(text)


# -- the widgets ------------------------------------------------------------------------------

@pytest.mark.parametrize("knobs", [
    dict(temperature=1.0), dict(temperature=0.7, top_p=0.9), dict(temperature=1.3, top_k=7),
    dict(temperature=1.0, min_p=0.05, repetition_penalty=1.5), dict(temperature=0.0)])
def test_next_shows_what_filtered_probs_keeps(server, model, knobs):
    drawn = [269, 260]  # " of the": the desk appends drawn tokens to the prompt
    answer = post(server, "/api/next", prompt=PROMPT, drawn=drawn, **knobs)
    ids = ids_of(model) + drawn
    logits = model.forward(np.array([ids]), last=1)[0, -1].astype(np.float64)
    kept = minillm.filtered_probs(logits, **knobs, history=[ids])
    plain = minillm.filtered_probs(logits)
    assert answer["survivors"] == int((kept > 0).sum())
    order = np.argsort(-plain, kind="stable")[:12]
    assert [t["id"] for t in answer["top"]] == order.tolist()
    np.testing.assert_allclose([t["p"] for t in answer["top"]], plain[order], rtol=1e-12)
    np.testing.assert_allclose([t["kept"] for t in answer["top"]], kept[order], rtol=1e-12)
    assert answer["rest"]["p"] == pytest.approx(1 - plain[order].sum(), abs=1e-12)
    h = -sum(p * np.log(p) for p in kept if p > 0)
    assert answer["effective_kept"] == pytest.approx(np.exp(h), rel=1e-9)
    assert answer["drawn_text"] == " of the"
    # The running total reaches 1 at the last rank; the ranked curve never rises.
    assert answer["curve"]["rank"][-1] == model.config.vocab_size
    assert answer["curve"]["total"][-1] == pytest.approx(1.0, abs=1e-9)
    assert np.all(np.diff(answer["curve"]["p"]) <= 0)


def test_draw_is_sample_next_token_with_the_seed(server, model):
    ids = ids_of(model)
    logits = model.forward(np.array([ids]), last=1)[0, -1]
    for seed in range(5):
        answer = post(server, "/api/draw", prompt=PROMPT, seed=seed, temperature=1.2,
                      top_k=50)
        want = minillm.sample_next_token(logits, temperature=1.2, top_k=50, history=[ids],
                                         rng=np.random.default_rng(seed))
        assert answer["id"] == int(want)
        assert answer["text"] == model.tokenizer.decode([int(want)])


PENALTY = st.one_of(st.none(), st.floats(-2.0, 2.0, allow_nan=False))


@pytest.mark.slow
@settings(max_examples=20, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frequency=PENALTY, presence=PENALTY,
       drawn=st.lists(st.sampled_from([269, 260, 11, 5, 1000]), max_size=12),
       seed=st.integers(0, 2**32 - 1))
def test_next_and_draw_equal_the_library_for_drawn_penalties(server, model, frequency,
                                                             presence, drawn, seed):
    # A few tokens drawn again and again: counts above 1, where f and p part ways.
    knobs = dict(temperature=0.9, frequency_penalty=frequency, presence_penalty=presence)
    answer = post(server, "/api/next", prompt=PROMPT, drawn=drawn, **knobs)
    ids = ids_of(model) + drawn
    logits = model.forward(np.array([ids]), last=1)[0, -1].astype(np.float64)
    kept = minillm.filtered_probs(logits, **knobs, history=[ids])
    order = np.argsort(-minillm.filtered_probs(logits), kind="stable")[:12]
    np.testing.assert_allclose([t["kept"] for t in answer["top"]], kept[order], rtol=1e-12)
    assert answer["rest"]["kept"] == pytest.approx(1 - kept[order].sum(), abs=1e-12)
    assert answer["survivors"] == int((kept > 0).sum())
    ranked = np.sort(kept)[::-1]  # no cut: the curve is the penalised distribution itself
    np.testing.assert_allclose(answer["curve"]["p"],
                               ranked[np.array(answer["curve"]["rank"]) - 1], rtol=1e-12)
    drawn_token = post(server, "/api/draw", prompt=PROMPT, drawn=drawn, seed=seed, **knobs)
    want = minillm.sample_next_token(logits, **knobs, history=[ids],
                                     rng=np.random.default_rng(seed))
    assert drawn_token["id"] == int(want)


@pytest.mark.slow
def test_temperatures_repeat_with_the_seed_and_read_back_their_surprise(server, model):
    body = dict(prompt=PROMPT, seed=7, max_new_tokens=20, temperatures=[0.0, 0.6, 1.0, 1.6])
    first = post(server, "/api/temperatures", **body)
    assert post(server, "/api/temperatures", **body) == first  # same seed: every column again
    ids = ids_of(model)
    for column, T in zip(first["columns"], body["temperatures"]):
        new = minillm.generate(model, ids, max_new_tokens=20, temperature=T, seed=7,
                               stop_tokens=[0])[len(ids):]
        assert [t["id"] for t in column["tokens"]] == new
        assert column["text"] == model.tokenizer.decode(new)
        # Generation's scores against one fresh forward pass over the whole text.
        assert column["surprise"] == pytest.approx(
            surprise(model, ids + new) * (len(ids + new) - 1) / len(new)
            - surprise(model, ids) * (len(ids) - 1) / len(new), rel=1e-4)
    other = post(server, "/api/temperatures", **dict(body, seed=8))
    assert other["columns"][0] == first["columns"][0]  # greedy draws nothing
    assert other["columns"][1:] != first["columns"][1:]


@pytest.mark.parametrize("penalties", [
    dict(repetition_penalty=1.8), dict(repetition_penalty=1.0, frequency_penalty=0.7),
    dict(repetition_penalty=1.0, presence_penalty=1.5),
    dict(repetition_penalty=1.2, frequency_penalty=0.3, presence_penalty=0.4)])
def test_repetition_marks_every_repeated_four_token_phrase(server, model, penalties):
    prompt = "And the LORD said to Moses,"
    answer = post(server, "/api/repetition", prompt=prompt, max_new_tokens=64, **penalties)
    ids = ids_of(model, prompt)
    for key, knobs in (("greedy", {}), ("penalised", penalties)):
        text = minillm.generate(model, ids, max_new_tokens=64, temperature=0, **knobs,
                                stop_tokens=[0])
        assert [t["id"] for t in answer[key]["tokens"]] == text[len(ids):]
        want = [any(text[i - 3:i + 1] == text[j - 3:j + 1] for j in range(3, i))
                for i in range(len(ids), len(text))]
        assert [t["repeat"] for t in answer[key]["tokens"]] == want
        assert answer[key]["repeats"] == sum(want)
    assert answer["greedy"]["repeats"] > 0  # this beginning loops under greedy decoding


def test_cache_race_gives_identical_tokens_and_counts_its_passes(server, model):
    answer = post(server, "/api/race", prompt=PROMPT, max_new_tokens=30, seed=3,
                  temperature=0.9)
    assert answer["identical"]
    assert answer["cached"]["tokens"] == answer["uncached"]["tokens"]
    ids = ids_of(model)
    assert [t["id"] for t in answer["cached"]["tokens"]] == minillm.generate(
        model, ids, max_new_tokens=30, temperature=0.9, seed=3, stop_tokens=[0])[len(ids):]
    P, n = len(ids), answer["n"]
    assert answer["cached"]["passes"] == P + n - 1
    assert answer["uncached"]["passes"] == sum(range(P, P + n))
    assert answer["formula"] == {"cached": P + n - 1, "uncached": sum(range(P, P + n))}


def test_bits_squeeze_every_matrix(server, model):
    ids = ids_of(model)
    answers = {b: post(server, "/api/bits", prompt=PROMPT, bits=b, max_new_tokens=16)
               for b in (32, 8, 2)}
    greedy = minillm.generate(model, ids, max_new_tokens=16, temperature=0,
                              stop_tokens=[0])[len(ids):]
    assert [t["id"] for t in answers[32]["tokens"]] == greedy
    passage = model.tokenizer.encode(PASSAGE.read_text())[:model.config.context_length]
    assert answers[32]["surprise"] == pytest.approx(surprise(model, passage), rel=1e-9)
    squeezed = minillm.quantize(model, skip=(), bits=2, embeddings=True)
    assert answers[2]["surprise"] == pytest.approx(surprise(squeezed, passage), rel=1e-9)
    assert answers[2]["bytes"] == squeezed.nbytes
    assert answers[8]["bytes"] < answers[32]["bytes"] == model.nbytes


def test_rounds_read_from_proposals():
    # Round 1 keeps 2 of 3 guesses and resamples; round 2 keeps both and earns a bonus;
    # round 3 has no guess (prompt lookup found nothing).
    ids = [1, 2, 10, 11, 99, 20, 21, 22, 30]
    played = rounds([(2, [10, 11, 12]), (5, [20, 21]), (8, [])], ids)
    assert [[g["fate"] for g in r["guesses"]] for r in played] == [
        ["accepted", "accepted", "rejected"], ["accepted", "accepted"], []]
    assert [[(e["id"], e["kind"]) for e in r["extra"]] for r in played] == [
        [(99, "resampled")], [(22, "bonus")], [(30, "target")]]


@pytest.mark.parametrize("drafter,temperature", [("model", 0.0), ("ngram", 0.0),
                                                 ("model", 0.8), ("ngram", 0.8)])
def test_speculative_rounds_add_up_to_the_text(server, model, drafter, temperature):
    prompt = "And the LORD said to Moses,"
    answer = post(server, "/api/speculative", prompt=prompt, drafter=drafter, k=4,
                  temperature=temperature, seed=2, max_new_tokens=40)
    played = [t["id"] for r in answer["rounds"] for t in
              [g for g in r["guesses"] if g["fate"] == "accepted"] + r["extra"]]
    assert played == [t["id"] for t in answer["tokens"]]
    # The rounds read back from the proposals agree with the library's own counts.
    assert answer["accepted"] == pytest.approx(answer["acceptance_rate"] * answer["proposed"])
    assert len(answer["rounds"]) == answer["target_calls"]
    assert answer["saved"] == answer["new_tokens"] - answer["target_calls"]
    if temperature == 0:  # greedy speculative decoding is greedy decoding, token for token
        ids = ids_of(model, prompt)
        want = minillm.generate(model, ids, max_new_tokens=40, temperature=0,
                                stop_tokens=[0])[len(ids):]
        assert played == want


def test_info_and_the_page(server):
    status, info = call(server, "GET", "/api/info")
    assert status == 200 and info["vocabulary"] == 2048 and info["draft"]
    status, page = call(server, "GET", "/")
    assert status == 200 and b"<title>" in page
    for name in ("desk.js", "desk.css"):
        status, body = call(server, "GET", f"/static/{name}")
        assert status == 200 and body


# -- bad input --------------------------------------------------------------------------------

BAD = [
    ("POST", "/api/next", {"prompt": PROMPT, "bogus": 1}, None, 400, "bogus: unknown field"),
    ("POST", "/api/next", {"prompt": PROMPT, "top_p": 1.5}, None, 400, "top_p: must be in"),
    ("POST", "/api/next", {"prompt": PROMPT, "temperature": "hot"}, None, 400,
     "temperature: must be a number"),
    ("POST", "/api/next", {"prompt": PROMPT, "top_k": True}, None, 400, "top_k: must be an"),
    ("POST", "/api/next", {"prompt": PROMPT, "top_k": 2.5}, None, 400, "top_k: must be an"),
    ("POST", "/api/next", {"prompt": PROMPT, "frequency_penalty": 2.5}, None, 400,
     "frequency_penalty: must be in [-2, 2]"),
    ("POST", "/api/draw", {"prompt": PROMPT, "presence_penalty": "high"}, None, 400,
     "presence_penalty: must be a number"),
    ("POST", "/api/repetition", {"prompt": PROMPT, "presence_penalty": -0.5}, None, 400,
     "presence_penalty: must be in [0, 2]"),
    ("POST", "/api/repetition", {"prompt": PROMPT, "penalty_window": 8}, None, 400,
     "penalty_window: unknown field"),
    ("POST", "/api/next", {"prompt": PROMPT, "drawn": [5000]}, None, 400, "drawn: token id"),
    ("POST", "/api/next", {"prompt": ""}, None, 400, "prompt: empty"),
    ("POST", "/api/next", {"prompt": "x" * (MAX_PROMPT_CHARS + 1)}, None, 400,
     "prompt: at most"),
    ("POST", "/api/next", {"prompt": "word " * 300}, None, 400, "exceed the context"),
    ("POST", "/api/next", [1, 2], None, 400, "must be a JSON object"),
    ("POST", "/api/next", None, b"{not json", 400, "not valid JSON"),
    ("POST", "/api/next", None, b"\xff\xfe", 400, "not valid JSON"),
    ("POST", "/api/next", None, b'{"prompt": "a", "top_p": NaN}', 400, "top_p: must be a"),
    ("POST", "/api/temperatures", {"prompt": PROMPT, "temperatures": [1, 2]}, None, 400,
     "temperatures: must hold 4"),
    ("POST", "/api/bits", {"prompt": PROMPT, "bits": 7}, None, 400, "bits: must be one of"),
    ("POST", "/api/race", {"prompt": PROMPT, "max_new_tokens": 10**6}, None, 400,
     "max_new_tokens: must be in"),
    ("POST", "/api/nothing", {}, None, 404, "no such endpoint"),
    ("GET", "/nothing", None, None, 404, "no such page"),
    ("GET", "/static/../server.py", None, None, 404, "no such page"),
    ("GET", "/static/%2e%2e/server.py", None, None, 404, "no such page"),
    ("GET", "/static/../../weights/target.npz", None, None, 404, "no such page"),
    ("GET", "/../../../etc/passwd", None, None, 404, "no such page"),
]


@pytest.mark.parametrize("method,path,body,raw,status,message", BAD)
def test_bad_requests_get_a_4xx_with_a_json_error(server, method, path, body, raw, status,
                                                  message):
    got, answer = call(server, method, path, body, raw=raw)
    assert got == status
    assert message in answer["error"]


def test_huge_bodies_are_refused_unread(server):
    got, answer = call(server, "POST", "/api/next", raw=b" " * (MAX_BODY_BYTES + 1))
    assert got == 413 and "at most" in answer["error"]


@pytest.mark.parametrize("headers", [{"Host": "evil.example:80"}, {"Host": "127.0.0.1"},
                                     {"Host": "127.0.0.1.evil.example"}])
def test_requests_for_another_host_are_refused(server, headers):
    for method, path in (("GET", "/"), ("GET", "/api/info"), ("POST", "/api/next")):
        got, answer = call(server, method, path, {"prompt": PROMPT}, headers=headers)
        assert got == 403 and "Host" in answer["error"]


def test_posts_from_another_origin_are_refused(server):
    got, answer = call(server, "POST", "/api/next", {"prompt": PROMPT},
                       headers={"Origin": "http://evil.example"})
    assert got == 403 and "Origin" in answer["error"]
    port = server.server_address[1]
    got, _ = call(server, "POST", "/api/next", {"prompt": PROMPT},
                  headers={"Origin": f"http://127.0.0.1:{port}"})
    assert got == 200


def test_the_server_keeps_serving_after_errors(server):
    for method, path, body, raw, *_ in BAD:
        call(server, method, path, body, raw=raw)
    assert post(server, "/api/next", prompt=PROMPT)["survivors"] == 2048


def test_listens_on_the_local_address_only(server):
    assert server.server_address[0] == "127.0.0.1"


def test_the_command_serves_the_page_and_prints_its_address():
    root = Path(__file__).resolve().parents[1]
    process = subprocess.Popen([sys.executable, "-m", "minillm", "desk", "--port", "0",
                                "--no-browser"], cwd=root, stderr=subprocess.PIPE, text=True,
                               env=dict(os.environ, PYTHONPATH=str(root)))
    try:
        line = process.stderr.readline()
        port = int(re.search(r"http://127\.0\.0\.1:(\d+)/", line).group(1))
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        connection.request("GET", "/api/info")
        info = json.loads(connection.getresponse().read())
        assert info["model"] == "target.npz" and info["draft"]  # the shipped pair
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_the_command_names_a_missing_model(capsys):
    from minillm.cli import main

    assert main(["desk", "--model", "no-such-model", "--no-browser"]) == 2
    assert "--model: no such file or fetched model: no-such-model" in capsys.readouterr().err
