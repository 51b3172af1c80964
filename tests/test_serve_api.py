"""minillm serve's endpoints and fields that operators and load tools ask for: /metrics in
Prometheus' text format, /tokenize and /detokenize as llama-server answers them, cached tokens,
ignore_eos, min_tokens, logit_bias, continuous usage in a stream, echo with max_tokens 0 (the
prompt's scores), --logprobs_mode raw_logprobs, and the engine's cap on prompt tokens beside
decoding rows. Servers on 127.0.0.1 in this process, every request bounded in time."""
import copy
import json
import re

import numpy as np
import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

import minillm  # noqa: E402
from minillm.cli.common import DEFAULT_MODEL  # noqa: E402
from minillm.layers import log_softmax  # noqa: E402
from minillm.serve import start  # noqa: E402
from minillm.serving import Engine  # noqa: E402

PROMPT = "In the beginning God created the heaven and the earth"


@pytest.fixture(scope="module")
def model():
    with minillm.threads(1):
        yield minillm.load(DEFAULT_MODEL)


@pytest.fixture(scope="module")
def comma_model(model):
    """The model with "," as its end token: greedy text from PROMPT reaches it soon. A deep
    copy: a shallow one would share the model's RoPE tables, not their length."""
    ended = copy.deepcopy(model)
    ended.tokenizer.eos_token_id = model.tokenizer.token_to_id(",")
    return ended


@pytest.fixture(scope="module")
def server(comma_model):
    running = start(comma_model, name="target")
    yield running
    running.stop()


def post(server, path, body):
    r = httpx.post(server.url + path, json=body, timeout=60)
    return r.status_code, r.json()


def complete(server, **fields):
    status, reply = post(server, "/v1/completions", {"model": "target", **fields})
    assert status == 200, reply
    return reply


def greedy(model, ids, n, ends):
    return minillm.generate(model, ids, max_new_tokens=n, temperature=0,
                            stop_tokens=ends)[len(ids):]


def test_metrics_in_prometheus_text_with_the_names_listed(server):
    complete(server, prompt=PROMPT, max_tokens=5, temperature=0, ignore_eos=True)
    r = httpx.get(server.url + "/metrics", timeout=30)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    samples = {}
    for line in r.text.splitlines():
        if not line.startswith("#"):
            name, value = re.fullmatch(r'([a-z0-9_:]+)\{model_name="target"(?:,[^}]*)?\} '
                                       r'(\S+)', line).groups()
            samples.setdefault(name, []).append(float(value))
    for name in ("minillm:num_requests_running", "minillm:num_requests_waiting",
                 "minillm:prompt_tokens_total", "minillm:generation_tokens_total",
                 "minillm:time_to_first_token_seconds_bucket",
                 "minillm:inter_token_latency_seconds_bucket", "minillm:kv_blocks_in_use",
                 "minillm:prefix_cache_hits_total", "minillm:request_success_total"):
        assert name in samples, name
    assert samples["minillm:generation_tokens_total"][0] >= 5
    assert samples["minillm:time_to_first_token_seconds_count"][0] >= 1
    assert samples["minillm:inter_token_latency_seconds_count"][0] >= 4
    assert samples["minillm:kv_blocks_in_use"] == [0.0]


def test_tokenize_and_detokenize_as_llama_server(server, model):
    status, reply = post(server, "/tokenize", {"content": PROMPT})
    assert status == 200 and reply == {"tokens": model.tokenizer.encode(PROMPT)}
    status, reply = post(server, "/tokenize", {"content": "héllo", "with_pieces": True})
    pieces = reply["tokens"]
    assert b"".join(bytes(p["piece"]) if isinstance(p["piece"], list) else
                    p["piece"].encode() for p in pieces) == "héllo".encode()
    status, reply = post(server, "/detokenize", {"tokens": model.tokenizer.encode(PROMPT)})
    assert status == 200 and reply == {"content": PROMPT}
    assert post(server, "/tokenize", {"text": "x"})[0] == 422
    assert post(server, "/detokenize", {"tokens": [-1]})[0] == 400


def test_cached_tokens_count_the_prefix_found(server):
    long = " ".join([PROMPT] * 4)  # over two blocks of 16 tokens
    first = complete(server, prompt=long, max_tokens=1)
    again = complete(server, prompt=long, max_tokens=1)
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] >= 16


def test_ignore_eos_and_min_tokens(server, model, comma_model):
    comma = comma_model.tokenizer.eos_token_id
    ids = model.tokenizer.encode(PROMPT)
    new = greedy(model, ids, 40, ends=(comma,))
    assert new[-1] == comma and len(new) < 30
    reply = complete(server, prompt=ids, max_tokens=30, temperature=0, ignore_eos=True)
    assert reply["choices"][0]["finish_reason"] == "length"
    assert reply["usage"]["completion_tokens"] == 30
    assert reply["choices"][0]["text"].startswith(  # the same greedy text, past the end
        model.tokenizer.decode(ids + new)[len(model.tokenizer.decode(ids)):])
    k = len(new) + 3
    reply = complete(server, prompt=ids, max_tokens=40, temperature=0, min_tokens=k,
                     logprobs=0)
    tokens = reply["choices"][0]["logprobs"]["tokens"]
    assert reply["usage"]["completion_tokens"] >= k and "," not in "".join(tokens[:k])


def test_logit_bias(server, model):
    target = model.tokenizer.encode(" earth")[0]
    reply = complete(server, prompt=PROMPT, max_tokens=4, temperature=0,
                     logit_bias={str(target): 100}, logprobs=0)
    assert reply["choices"][0]["logprobs"]["tokens"] == [" earth"] * 4
    ids = model.tokenizer.encode(PROMPT)
    first = greedy(model, ids, 1, ends=())[0]
    reply = complete(server, prompt=ids, max_tokens=1, temperature=0,
                     logit_bias={str(first): -100}, logprobs=0)
    assert reply["choices"][0]["logprobs"]["tokens"] != [model.tokenizer.decode([first])]


def test_continuous_usage_in_every_chunk(server):
    with httpx.stream("POST", server.url + "/v1/completions", timeout=60, json={
            "model": "target", "prompt": PROMPT, "max_tokens": 6, "ignore_eos": True,
            "stream": True, "stream_options": {"continuous_usage_stats": True}}) as r:
        chunks = [json.loads(line[6:]) for line in r.iter_lines()
                  if line.startswith("data: {")]
    counts = [c["usage"]["completion_tokens"] for c in chunks]
    assert counts == sorted(counts) and counts[-1] == 6 and len(counts) >= 3


def test_echo_with_max_tokens_0_scores_the_prompt(server, model):
    ids = model.tokenizer.encode(PROMPT)
    reply = complete(server, prompt=PROMPT, max_tokens=0, echo=True, logprobs=2)
    choice = reply["choices"][0]
    assert choice["text"] == PROMPT and choice["finish_reason"] == "length"
    assert reply["usage"]["completion_tokens"] == 0
    logp = log_softmax(model.forward(np.array([ids])))[0]  # (T, V): the model's own
    expected = [float(logp[t - 1, ids[t]]) for t in range(1, len(ids))]
    got = choice["logprobs"]["token_logprobs"]
    assert got[0] is None
    np.testing.assert_allclose(got[1:], expected, atol=1e-4)
    assert all(len(top) == 2 for top in choice["logprobs"]["top_logprobs"][1:])


def test_raw_logprobs_mode_gives_the_models_own_at_temperature_0(model):
    running = start(model, name="target", logprobs_mode="raw_logprobs")
    try:
        ids = model.tokenizer.encode(PROMPT)
        reply = complete(running, prompt=ids, max_tokens=3, temperature=0, logprobs=2)
        alone = minillm.generate(model, ids, max_new_tokens=3, temperature=0,
                                 return_logprobs=True, stop_tokens=())
        got = reply["choices"][0]["logprobs"]
        np.testing.assert_allclose(got["token_logprobs"], alone.raw_logprobs, atol=1e-4)
        assert all(v < 0 for v in got["token_logprobs"])  # not the one-hot's 0.0
        assert all(len(top) == 2 for top in got["top_logprobs"])
    finally:
        running.stop()


def test_the_prefill_cap_keeps_each_step_within_it_beside_decoding_rows(model):
    engine = Engine(model, max_batch_tokens=64, max_prefill_tokens=8)
    engine.add_request(model.tokenizer.encode(PROMPT)[:4], max_new_tokens=20, temperature=0)
    engine.step()  # the first request reads its prompt alone (no cap without decoding rows)
    engine.add_request(list(range(5, 45)), max_new_tokens=2, temperature=0)
    reads = []  # positions read by a request in a step, beside the decoding one
    while engine.has_unfinished():
        before = {r.id: r.computed for r in engine.scheduler.running}
        engine.step()
        reads += [r.computed - before.get(r.id, 0) for r in engine.scheduler.running
                  if r.computed - before.get(r.id, 0) > 1]
    assert reads and max(reads) <= 8 and sum(reads) >= 40 - 8
