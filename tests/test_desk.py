"""The desk's server and endpoints: each widget's figures against the library computing the
same thing by another road, and every kind of bad request answered with a 4xx while the server
keeps serving."""
import dataclasses
import http.client
import json
import math
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import minillm
from minillm.constrain import choice, json_schema, regex
from minillm.constrain.constraint import DONE, advance
from minillm.desk import PASSAGE, masks, widgets
from minillm.desk.batched import engine_loop
from minillm.desk.fields import MAX_BODY_BYTES, MAX_PROMPT_CHARS, MAX_WORK, checked
from minillm.desk.packing import pack, packed_bytes, stored_bytes, unpack
from minillm.desk.server import make_server, serve_in_thread
from minillm.desk.rounds import rounds
from minillm.desk.widgets import make_desk, parameters
from minillm.serving import Engine
from minillm.study.explain import Watched, surprise

WEIGHTS = Path(__file__).resolve().parents[1] / "weights"
PROMPT = "In the beginning"


@pytest.fixture(scope="module")
def model():
    return minillm.load(WEIGHTS / "target.npz")


def serve(desk):
    server = make_server(desk, 0)
    serve_in_thread(server)
    return server


@pytest.fixture(scope="module")
def server(model):
    desk = make_desk(model, "target.npz", minillm.load(WEIGHTS / "draft.npz"),
                     PASSAGE.read_text(encoding="utf-8"))
    server = serve(desk)
    yield server
    server.shutdown()
    server.server_close()


TIGHT = 600  # token positions of the shipped model a request of the tight desk may compute


@pytest.fixture(scope="module")
def tight(model):
    """A desk whose bound on work is TIGHT positions of the shipped model: what the default
    bound is to SmolLM2, a model a hundred times larger."""
    desk = make_desk(model, "target.npz", minillm.load(WEIGHTS / "draft.npz"),
                     PASSAGE.read_text(encoding="utf-8"))
    desk.max_work = TIGHT * parameters(model)
    server = serve(desk)
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


def test_the_same_request_writes_the_same_columns_to_the_last_bit(server):
    """A prompt of several of the engine's blocks, asked twice: the second request is computed
    as the first was (no prefix cache lending it blocks computed in another shape), so even the
    surprises repeat exactly."""
    body = dict(prompt=PASSAGE.read_text(encoding="utf-8")[:300], seed=11, max_new_tokens=24)
    first = post(server, "/api/temperatures", **body)
    assert post(server, "/api/temperatures", **body) == first


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


WIDTHS = (32, 8, 6, 5, 4, 3, 2)


def test_bits_squeeze_every_matrix(server, model):
    ids = ids_of(model)
    answers = {b: post(server, "/api/bits", prompt=PROMPT, bits=b, max_new_tokens=16)
               for b in WIDTHS}
    greedy = minillm.generate(model, ids, max_new_tokens=16, temperature=0,
                              stop_tokens=[0])[len(ids):]
    assert [t["id"] for t in answers[32]["tokens"]] == greedy
    passage = model.tokenizer.encode(PASSAGE.read_text())[:model.config.context_length]
    assert answers[32]["surprise"] == pytest.approx(surprise(model, passage), rel=1e-9)
    squeezed = minillm.quantize(model, skip=(), bits=2, embeddings=True)
    assert answers[2]["surprise"] == pytest.approx(surprise(squeezed, passage), rel=1e-9)
    assert answers[2]["resident"] == squeezed.nbytes  # held here: one byte per value
    # Stored: each width's integers packed, ceil(rows * cols * b / 8) bytes a matrix, with its
    # float32 scales; norms and the like at four bytes; the float model four bytes a parameter.
    n = parameters(model)
    assert answers[32]["bytes"] == 4 * n < model.nbytes  # no second copy of the tied layer
    for b in WIDTHS[1:]:
        squeezed = minillm.quantize(model, skip=(), bits=b, embeddings=True)
        matrices = [w for w in squeezed.params.values() if hasattr(w, "q")]
        values = sum(math.ceil(w.q.size * b / 8) for w in matrices)
        scales = sum(4 * w.q.shape[0] for w in matrices)
        floats = 4 * (n - sum(w.q.size for w in matrices))
        assert answers[b]["stored"] == {"values": values, "scales": scales, "floats": floats,
                                        "total": values + scales + floats}
        assert answers[b]["bytes"] == values + scales + floats
    sizes = [answers[b]["bytes"] for b in WIDTHS]
    assert sizes == sorted(sizes, reverse=True) and len(set(sizes)) == len(sizes)


@settings(max_examples=30)
@given(bits=st.integers(2, 8), shape=st.tuples(st.integers(1, 9), st.integers(1, 40)),
       seed=st.integers(0, 2**16))
def test_packing_holds_every_value_in_b_bits(bits, shape, seed):
    qmax = 2 ** (bits - 1) - 1
    q = np.random.default_rng(seed).integers(-qmax, qmax + 1, size=shape).astype(np.int8)
    data = pack(q, bits)
    assert data.dtype == np.uint8 and data.size == math.ceil(q.size * bits / 8)
    np.testing.assert_array_equal(unpack(data, bits, shape), q)
    assert packed_bytes(q, bits) == data.size


def test_packing_writes_the_low_bits_end_to_end(monkeypatch):
    # -1 3 0 -2 at 3 bits: 111 011 000 110, then zeros to the byte's end.
    assert pack(np.array([-1, 3, 0, -2], np.int8), 3).tolist() == [0b11101100, 0b01100000]
    monkeypatch.setattr("minillm.desk.packing.CHUNK", 8)  # chunks meet on a byte boundary
    q = np.arange(-7, 8, dtype=np.int8).repeat(3)  # 45 values
    assert packed_bytes(q, 4) == pack(q, 4).size == 23


def test_stored_bytes_of_the_squeezed_model(model):
    squeezed = minillm.quantize(model, skip=(), bits=5, embeddings=True)
    stored = stored_bytes(squeezed)
    matrices = [w for w in squeezed.params.values() if hasattr(w, "q")]
    assert stored["values"] == sum(pack(w.q, 5).size for w in matrices)
    for w in matrices:  # the packed stream gives back the very integers the model multiplies
        np.testing.assert_array_equal(unpack(pack(w.q, 5), 5, w.q.shape), w.q)


class EndsAtOnce:
    """The shipped model with its end-of-text token (0) made the favourite everywhere."""

    def __init__(self, model):
        self.model = model

    def __getattr__(self, name):
        return getattr(self.model, name)

    def forward(self, tokens, cache=None, **kwargs):
        logits = self.model.forward(tokens, cache, **kwargs).copy()
        logits[..., 0] += 100.0
        return logits


def test_shown_text_leaves_special_tokens_out(model):
    desk = make_desk(EndsAtOnce(model), "ends", None, PASSAGE.read_text(encoding="utf-8"))
    special = model.tokenizer.decode([0])
    assert special == "<|endoftext|>"
    for path, body in (("/api/bits", dict(prompt=PROMPT, bits=32)),
                       ("/api/temperatures", dict(prompt=PROMPT))):
        answer = widgets.ROUTES[path](desk, checked(path, body))
        for shown in answer.get("columns", [answer]):
            assert [t["id"] for t in shown["tokens"]] == [0]  # the end token was drawn
            assert shown["tokens"][0]["text"] == special  # the token itself keeps its name
            assert shown["text"] == ""  # the text shown leaves it out


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


# -- serving many requests --------------------------------------------------------------------

def default_prompts(model):
    from minillm.desk.fields import serving_prompts

    return [ids_of(model, text) for text in serving_prompts()]


def engine_steps(model, prompts, n=6, block_size=4, num_blocks=18, budget=16, prefix=True):
    """Each step of the same requests run through minillm.serving.Engine directly: who runs and
    who waits, each request's positions computed and block table, the outputs, the stats and
    every block's count of holders; the first before any step."""
    engine = Engine(model, block_size=block_size, num_blocks=num_blocks,
                    max_batch_tokens=budget, prefix_caching=prefix)
    requests = {}
    for i, ids in enumerate(prompts):
        rid = engine.add_request(ids, max_new_tokens=n, temperature=0.0, seed=i,
                                 stop_tokens=[0])
        requests[rid] = engine.requests[rid]

    def shot(outputs):
        return {"running": [r.id for r in engine.scheduler.running],
                "waiting": [r.id for r in engine.scheduler.waiting],
                "tables": {rid: (r.computed, list(r.table)) for rid, r in requests.items()},
                "outputs": [(o.request_id, o.token, o.finished) for o in outputs],
                "stats": dataclasses.asdict(engine.stats), "refs": list(engine.block_manager.refs)}

    shots = [shot([])]
    while engine.has_unfinished():
        shots.append(shot(engine.step()))
    return shots


def as_shot(step):
    """The desk's step in engine_steps' form."""
    return {"running": step["running"], "waiting": step["waiting"],
            "tables": {r["id"]: (r["computed"], r["table"]) for r in step["requests"]},
            "outputs": [(o["request"], o["id"], o["finished"]) for o in step["outputs"]],
            "stats": step["stats"], "refs": [b["refs"] for b in step["blocks"]]}


def common_start(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def test_serving_steps_are_the_engines_own(server, model):
    answer = post(server, "/api/serving")  # the defaults: four prompts, blocks of 4, 18 blocks
    prompts = default_prompts(model)
    want = engine_steps(model, prompts)
    assert [as_shot(step) for step in answer["steps"]] == want
    assert answer["stopped"] is None and [s["step"] for s in answer["steps"]] == list(
        range(len(want)))
    assert [r["prompt_tokens"] for r in answer["requests"]] == [len(p) for p in prompts]
    # Each request's text is what generate writes for it alone (greedy).
    last = answer["steps"][-1]["requests"]
    for row, ids in zip(last, prompts):
        alone = minillm.generate(model, ids, max_new_tokens=6, temperature=0,
                                 stop_tokens=[0])[len(ids):]
        assert row["state"] == "finished" and row["new"] == alone
        assert row["text"] == model.tokenizer.decode(alone)
    drawn = [(o["request"], o["text"]) for s in answer["steps"] for o in s["outputs"]]
    assert drawn == [(o[0], model.tokenizer.decode([o[1]])) for s in want for o in s["outputs"]]


def test_serving_shows_the_shared_prefix(server, model):
    answer = post(server, "/api/serving")
    prompts = default_prompts(model)
    shared = min(common_start(prompts[0], p) for p in prompts[1:3]) // 4  # full blocks alike
    assert shared >= 4 and common_start(prompts[0], prompts[3]) < 4  # not a block alike
    seen = False
    for step in answer["steps"]:
        rows = {r["id"]: r for r in step["requests"]}
        if all(rows[i]["state"] == "running" for i in range(3)):
            first = rows[0]["table"][:shared]
            assert all(rows[i]["table"][:shared] == first for i in (1, 2))
            for b in first:  # the beginning's blocks: held by all three, cached by their key
                block = step["blocks"][b]
                assert block["owners"][:3] == [0, 1, 2] and block["refs"] >= 3
                assert block["prefix"]
            seen = True
        for block in step["blocks"]:  # the fourth prompt shares nothing with the others
            assert not (3 in block["owners"] and len(block["owners"]) > 1)
    assert seen
    final = answer["steps"][-1]["stats"]
    assert final["prompt_tokens_reused"] >= 2 * 4 * shared
    # Without prefix caching nothing is shared, nothing reused, and no output changes.
    plain = post(server, "/api/serving", prefix_caching=False, num_blocks=64)
    assert all(b["refs"] <= 1 and not b["prefix"] and b["state"] != "cached"
               for step in plain["steps"] for b in step["blocks"])
    assert plain["steps"][-1]["stats"]["prompt_tokens_reused"] == 0
    assert [r["new"] for r in plain["steps"][-1]["requests"]] == [
        r["new"] for r in answer["steps"][-1]["requests"]]
    assert [as_shot(s) for s in plain["steps"]] == engine_steps(model, prompts, num_blocks=64,
                                                                 prefix=False)


def test_serving_shows_each_preemption(server, model):
    answer = post(server, "/api/serving")  # 18 blocks are too few for all four at once
    steps = answer["steps"]
    assert steps[-1]["stats"]["preemptions"] > 0
    for before, step in zip(steps, steps[1:]):
        assert len(step["preempted"]) == (step["stats"]["preemptions"]
                                          - before["stats"]["preemptions"])
        for rid in step["preempted"]:
            assert rid in before["running"]
            row = next(r for r in step["requests"] if r["id"] == rid)
            if row["state"] == "waiting":  # it gave every block back
                assert row["table"] == [] and row["computed"] == 0


def test_serving_blocks_add_up_at_every_step(server):
    answer = post(server, "/api/serving", block_size=3, num_blocks=20, max_batch_tokens=7,
                  max_new_tokens=9)
    bs = answer["block_size"]
    for step in answer["steps"]:
        blocks = step["blocks"]
        assert len(blocks) == answer["num_blocks"]
        for b in blocks:
            assert b["refs"] == len(b["owners"])
            assert (b["state"] == "held") == (b["refs"] > 0)
        stats = step["stats"]
        assert [stats["blocks_in_use"], stats["blocks_free"], stats["blocks_cached"]] == [
            sum(b["state"] == state for b in blocks) for state in ("held", "free", "cached")]
        assert step["positions"] <= answer["max_batch_tokens"]
        for row in step["requests"]:
            if row["state"] == "running":
                assert len(row["table"]) == -(-row["computed"] // bs)
                assert all(row["id"] in blocks[b]["owners"] for b in row["table"])
            else:
                assert row["table"] == []
    assert sum(s["positions"] for s in answer["steps"]) == answer["positions"]


def test_serving_stops_at_the_work_bound(tight, model):
    # Four prompts the bound admits (their 420 positions without a preemption fit) but a pool
    # so small, and no prefix cache, that preemptions compute them again and again (1,485
    # positions to the end): the steps stop before the bound is passed.
    passage = PASSAGE.read_text()
    prompts = [passage[:300], passage[300:600], passage[:280], passage[600:880]]
    answer = post(tight, "/api/serving", prompts=prompts, num_blocks=34, block_size=4,
                  max_batch_tokens=32, max_new_tokens=16, prefix_caching=False)
    assert answer["stopped"] == "work"
    assert TIGHT - 32 < answer["positions"] <= TIGHT
    assert answer["steps"][-1]["stats"]["preemptions"] > 0
    assert any(r["state"] != "finished" for r in answer["steps"][-1]["requests"])
    status, refused = call(tight, "POST", "/api/serving", {"prompts": [passage[:600]] * 4,
                                                     "num_blocks": 64, "block_size": 16})
    assert status == 422 and "work:" in refused["error"] and "fewer" in refused["error"]


# -- the work a request may ask for -----------------------------------------------------------

# -- the mask ---------------------------------------------------------------------------------

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                           "alive": {"type": "boolean"}},
          "required": ["name", "alive"]}
MASKS = [("json_schema", None, 0.8, 0), ("json_schema", None, 0.0, 0),
         ("regex", None, 0.8, 1), ("choice", "yes\nno\nperhaps", 1.3, 2),
         ("regex", r"[0-9]{1,3}( [a-z]+)?", 1.0, 3),
         ("json_schema", '{"type": "array", "items": {"enum": ["a", "bc"]}, "maxItems": 3}',
          0.7, 4)]


def constraint_for(model, kind, spec):
    """The constraint as a user of the library makes it, without the desk."""
    spec = masks.DEFAULTS[kind] if spec is None else spec
    if kind == "json_schema":
        return spec, json_schema(json.loads(spec), model.tokenizer)
    if kind == "regex":
        return spec, regex(spec, model.tokenizer)
    return spec, choice(spec.split("\n"), model.tokenizer)


def allowed_by_walking(model, automaton, state):
    """{token: the state it leads to}: every token whose bytes walk on from `state` (special
    tokens and empty ones never), the end token (to DONE) where the state accepts; token by
    token, with the automaton's own walk."""
    tokenizer = model.tokenizer
    special = set(tokenizer.special_tokens.values())
    out = {}
    for t in range(len(tokenizer)):
        data = tokenizer.token_bytes(t)
        if t not in special and data and automaton.walk(data, state) >= 0:
            out[t] = automaton.walk(data, state)
    if automaton.accepting[state]:
        out.update({t: DONE for t in tokenizer.eos_token_ids})
    return out


@pytest.mark.parametrize("kind,spec,temperature,seed", MASKS)
def test_mask_shows_each_step_of_the_constrained_generate(server, model, kind, spec,
                                                          temperature, seed):
    prompt = "A man of the land of Uz, as JSON:"
    body = dict(prompt=prompt, kind=kind, temperature=temperature, seed=seed, max_new_tokens=40)
    if spec is not None:
        body["spec"] = spec
    answer = post(server, "/api/mask", **body)
    spec, c = constraint_for(model, kind, spec)
    assert answer["spec"] == spec
    ids = ids_of(model, prompt)
    out = minillm.generate(model, ids, max_new_tokens=40, temperature=temperature, seed=seed,
                           stop_tokens=[0], constraint=c)
    new = out[len(ids):]
    assert [t["id"] for t in answer["tokens"]] == new  # generate's own text
    assert len(answer["steps"]) == len(new)
    automaton = c.automaton
    assert answer["states"] == len(automaton.accepting)
    assert answer["accepting"] == [s for s in range(answer["states"]) if automaton.accepting[s]]
    V, state = model.config.vocab_size, 0
    for i, step in enumerate(answer["steps"]):
        # The state is where the output's bytes so far lead, read by the automaton alone.
        state = automaton.walk(b"".join(model.tokenizer.token_bytes(t) for t in new[:i]))
        assert step["state"] == state and step["accepting"] == bool(automaton.accepting[state])
        walks = allowed_by_walking(model, automaton, state)
        assert step["allowed"] == len(walks)
        z = model.forward(np.array([ids + new[:i]]), last=1)[0, -1].astype(np.float64)
        p = minillm.filtered_probs(z)
        masked = np.full(V, -np.inf)
        masked[list(walks)] = z[list(walks)]
        kept = minillm.filtered_probs(masked, temperature=temperature)
        order = np.argsort(-p, kind="stable")
        assert [e["id"] for e in step["top"]] == order[:8].tolist()
        assert step["allowed_p"] == pytest.approx(p[list(walks)].sum(), rel=1e-4, abs=1e-9)
        for entry in step["top"] + step["kept_top"] + [step["token"]]:
            t = entry["id"]
            assert entry["allowed"] == (t in walks)
            assert entry["next"] == walks.get(t)  # None: masked; DONE: the end
            assert entry["p"] == pytest.approx(p[t], rel=1e-4, abs=1e-9)
            assert entry["kept"] == pytest.approx(kept[t], rel=1e-4, abs=1e-9)
            assert entry["rank"] == int(np.flatnonzero(order == t)[0]) + 1
            assert entry["allowed"] or entry["kept"] == 0.0  # a masked token: probability 0
        # The most likely tokens after the mask, each allowed, in order.
        shown = [e["kept"] for e in step["kept_top"]]
        assert shown == sorted(shown, reverse=True) and all(e["allowed"]
                                                            for e in step["kept_top"])
        assert len(step["kept_top"]) == min(8, int((kept > 0).sum()))
        assert step["token"]["id"] == new[i] and step["after"] == walks[new[i]]
    text = answer["text"]
    assert answer["done"] == (answer["steps"][-1]["after"] == DONE)
    if answer["done"]:  # a whole text of the language, and the end token last
        assert new[-1] == 0 and answer["whole"]
        if kind == "regex":
            assert re.fullmatch(spec, text, re.ASCII)
        elif kind == "choice":
            assert text in spec.split("\n")
        else:
            json.loads(text)
    if kind == "json_schema" and spec == masks.DEFAULTS["json_schema"]:
        assert answer["done"]  # the default schema finishes within 40 tokens here
        value = json.loads(text)
        assert set(value) == {"name", "alive"} and len(value["name"]) <= 8


@settings(max_examples=15, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(options=st.lists(st.text("abn yes", min_size=1, max_size=6), min_size=1, max_size=4,
                        unique=True),
       temperature=st.sampled_from([0.0, 0.7, 1.0, 2.0]), seed=st.integers(0, 2**16),
       n=st.integers(1, 12))
def test_mask_steps_chain_into_a_text_of_the_choices(model, options, temperature, seed, n):
    """Whatever the choices and knobs: the walk goes from state to state as `advance` says,
    every token drawn was allowed and had the probability after the mask, what the mask
    leaves sums to 1, and the text is one of the choices (ended) or the start of one (cut)."""
    desk = make_desk(model, "target.npz")
    request = checked("/api/mask", dict(prompt=PROMPT, kind="choice", spec="\n".join(options),
                                        temperature=temperature, seed=seed, max_new_tokens=n))
    answer = widgets.ROUTES["/api/mask"](desk, request)
    c = choice(options, model.tokenizer)
    ids = ids_of(model)
    new = minillm.generate(model, ids, max_new_tokens=n, temperature=temperature, seed=seed,
                           stop_tokens=[0], constraint=c)[len(ids):]
    assert [t["id"] for t in answer["tokens"]] == new
    state = 0
    for step in answer["steps"]:
        assert step["state"] == state and step["token"]["allowed"]
        assert step["token"]["kept"] > 0
        assert sum(e["kept"] for e in step["kept_top"]) <= 1 + 1e-9
        state = step["after"]
        assert state == advance(c, step["state"], step["token"]["id"])
    assert answer["done"] == (state == DONE)
    text = answer["text"]
    assert text in options if answer["done"] else any(o.startswith(text) for o in options)
    assert answer["whole"] == (answer["done"] or text in options)


def test_mask_keeps_its_last_constraints_built(model):
    desk = make_desk(model, "target.npz")
    request = checked("/api/mask", dict(prompt=PROMPT, max_new_tokens=3))
    first = widgets.ROUTES["/api/mask"](desk, request)
    built = desk.constraints[("json_schema", masks.DEFAULTS["json_schema"])]
    again = widgets.ROUTES["/api/mask"](desk, dict(request, temperature=0.0))
    assert desk.constraints[("json_schema", masks.DEFAULTS["json_schema"])] is built
    assert again["rows_built"] >= first["rows_built"]  # the index's rows, built as reached
    for n in range(masks.CACHED + 2):
        widgets.ROUTES["/api/mask"](desk, checked("/api/mask", dict(
            prompt=PROMPT, kind="regex", spec=f"[a-z]{{{n + 1}}}", max_new_tokens=2)))
    assert len(desk.constraints) == masks.CACHED
    assert ("regex", f"[a-z]{{{masks.CACHED + 2}}}") in desk.constraints


def race_positions(P, n):
    return (P + n - 1) + (n * P + n * (n - 1) // 2)


def test_race_is_bounded_by_positions_times_parameters(tight, model):
    P = len(ids_of(model))
    n = max(m for m in range(1, 65) if race_positions(P, m) <= TIGHT)
    status, answer = call(tight, "POST", "/api/race", {"prompt": PROMPT,
                                                       "max_new_tokens": n + 1})
    assert status == 422
    assert f"{race_positions(P, n + 1):,} token positions" in answer["error"]
    assert f"at most {n} new tokens" in answer["error"]
    assert f"about {TIGHT:,} positions of this model" in answer["error"]
    done = post(tight, "/api/race", prompt=PROMPT, max_new_tokens=n)
    assert done["cached"]["passes"] + done["uncached"]["passes"] == race_positions(P, n)
    # The bound is positions times parameters: the same desk with the default bound takes it.
    assert race_positions(P, n + 1) * parameters(model) <= MAX_WORK


@pytest.mark.parametrize("path,body,positions", [  # P: the prompt's tokens
    ("/api/bits", dict(prompt="word " * 100, bits=4, max_new_tokens=64),
     lambda P: P + 63 + 255),  # the text, then the passage's first 256 tokens
    ("/api/temperatures", dict(prompt="word " * 100, max_new_tokens=64), lambda P: 4 * (P + 63)),
    ("/api/repetition", dict(prompt="word " * 100, max_new_tokens=64), lambda P: 2 * (P + 63)),
    ("/api/speculative", dict(prompt="word " * 100, drafter="ngram", k=8),
     lambda P: P + 24 * 9)])  # 24 rounds at most (the default tokens): 8 guesses and 1 more
def test_every_widget_is_bounded(model, path, body, positions):
    positions = positions(len(ids_of(model, body["prompt"])))
    desk = make_desk(model, "target.npz", None, PASSAGE.read_text(encoding="utf-8"))
    desk.max_work = 300 * parameters(model)  # the shipped model's context holds 256 positions
    with pytest.raises(widgets.RequestError) as refused:
        widgets.ROUTES[path](desk, checked(path, body))
    assert refused.value.status == 422
    assert str(refused.value).startswith(f"work: this request computes {positions:,} token "
                                         "positions of a model of 1,369,728 parameters")


def test_the_mask_is_bounded_before_its_constraint_is_built(model):
    desk = make_desk(model, "target.npz")
    desk.max_work = 100 * parameters(model)  # one pass of the text: the window would hold it
    body = dict(prompt="word " * 100, max_new_tokens=64, kind="regex", spec="[a-z]+")
    P = len(ids_of(model, body["prompt"]))
    with pytest.raises(widgets.RequestError) as refused:
        widgets.ROUTES["/api/mask"](desk, checked("/api/mask", body))
    assert refused.value.status == 422
    assert str(refused.value).startswith(f"work: this request computes {P + 63:,} token "
                                         "positions of a model of 1,369,728 parameters")
    assert desk.constraints == {}  # refused before any work


def test_each_widget_charges_the_positions_it_computes(model, monkeypatch):
    watched = Watched(model)
    desk = make_desk(watched, "watched", None, PASSAGE.read_text(encoding="utf-8"))
    charged = []
    monkeypatch.setattr(widgets, "charge",
                        lambda desk, positions, what, draft_positions=0: charged.append(positions))
    exact = [("/api/next", dict(prompt=PROMPT, drawn=[269, 260])),
             ("/api/draw", dict(prompt=PROMPT)),
             ("/api/temperatures", dict(prompt=PROMPT, max_new_tokens=20)),
             ("/api/repetition", dict(prompt=PROMPT, max_new_tokens=30)),
             ("/api/race", dict(prompt=PROMPT, max_new_tokens=25)),
             ("/api/bits", dict(prompt=PROMPT, bits=32, max_new_tokens=10)),
             ("/api/serving", dict(prefix_caching=False, num_blocks=64)),
             ("/api/mask", dict(prompt=PROMPT, kind="regex", spec="[a-z ]*",
                                max_new_tokens=20))]  # never ends early: the space
    at_most = [("/api/speculative", dict(prompt=PROMPT, drafter="ngram", k=5)),
               ("/api/serving", dict()),  # reused positions are not computed, preempted again
               ("/api/mask", dict(prompt=PROMPT))]  # the JSON ends before its 32 tokens
    for path, body in exact + at_most:
        watched.passes = 0
        answer = widgets.ROUTES[path](desk, checked(path, body))
        if (path, body) in exact:
            assert watched.passes == charged[-1], path
        elif path == "/api/serving":  # what it charged first, then its steps stay under the bound
            assert answer["positions"] == watched.passes
        else:
            assert watched.passes <= charged[-1], path


def test_the_default_bound_leaves_the_shipped_model_free(server, model):
    status, info = call(server, "GET", "/api/info")
    assert info["max_work"] == MAX_WORK and info["parameters"] == parameters(model)
    assert info["max_positions"] == MAX_WORK // parameters(model)
    W = model.config.context_length
    largest = max(race_positions(W - n, n) for n in range(1, 65))
    assert largest < info["max_positions"]
    assert 3000 < MAX_WORK // 134_515_008 < 4000  # SmolLM2-135M's parameters: ~3,700 positions


def test_info_and_the_page(server):
    status, info = call(server, "GET", "/api/info")
    assert status == 200 and info["vocabulary"] == 2048 and info["draft"]
    assert info["mask"]["kinds"] == ["json_schema", "regex", "choice"]
    assert info["mask"]["defaults"] == masks.DEFAULTS and info["mask"]["prompt"]
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
    ("POST", "/api/serving", {"prompts": []}, None, 400, "prompts: must be a list of 1 to 4"),
    ("POST", "/api/serving", {"prompts": ["a"] * 5}, None, 400,
     "prompts: must be a list of 1 to 4"),
    ("POST", "/api/serving", {"prompts": ["a", 3]}, None, 400, "prompts[1]: must be a string"),
    ("POST", "/api/serving", {"prompts": [PROMPT, " "]}, None, 400, "prompts[1]: empty"),
    ("POST", "/api/serving", {"num_blocks": 2}, None, 400, "num_blocks: prompt 1 needs 10 "
     "blocks of 4 positions"),
    ("POST", "/api/serving", {"prefix_caching": "yes"}, None, 400,
     "prefix_caching: must be true or false"),
    ("POST", "/api/serving", {"max_new_tokens": 17}, None, 400, "max_new_tokens: must be in"),
    ("POST", "/api/serving", {"block_size": 0}, None, 400, "block_size: must be in"),
    ("POST", "/api/mask", {"prompt": PROMPT, "kind": "regex", "spec": "(ab"}, None, 400,
     "spec: regex '(ab', at 3: a group is not closed"),
    ("POST", "/api/mask", {"prompt": PROMPT, "kind": "regex", "spec": "[z-a]"}, None, 400,
     "spec: regex '[z-a]', at 4: a bad range in a class"),
    ("POST", "/api/mask", {"prompt": PROMPT, "kind": "regex", "spec": "(" * 900 + ")" * 900},
     None, 400, "spec: nested too deeply to be read (regex)"),
    ("POST", "/api/mask", {"prompt": PROMPT, "spec": '{"type": "string", "format": "date"}'},
     None, 400, "spec: json_schema: the keyword 'format' is not supported"),
    ("POST", "/api/mask", {"prompt": PROMPT, "spec": '{"type": "object",'}, None, 400,
     "spec: json_schema: not JSON text"),
    ("POST", "/api/mask", {"prompt": PROMPT, "spec": '{"enum": []}'}, None, 400,
     "spec: json_schema: enum must be a non-empty list"),
    ("POST", "/api/mask", {"prompt": PROMPT, "kind": "choice", "spec": "\n\n"}, None, 400,
     "spec: choice: type the options, one a line"),
    ("POST", "/api/mask", {"prompt": PROMPT, "kind": "grammar"}, None, 400,
     "kind: must be one of ['json_schema', 'regex', 'choice']"),
    ("POST", "/api/mask", {"prompt": PROMPT, "spec": "x" * 2001}, None, 400,
     "spec: at most 2000 characters"),
    ("POST", "/api/mask", {"prompt": PROMPT, "top": 0}, None, 400, "top: must be in [1, 20]"),
    ("POST", "/api/nothing", {}, None, 404, "no such endpoint"),
    ("GET", "/nothing", None, None, 404, "no such page"),
    ("GET", "/static/../server.py", None, None, 404, "no such page"),
    ("GET", "/static/%2e%2e/server.py", None, None, 404, "no such page"),
    ("GET", "/static/../../weights/target.npz", None, None, 404, "no such page"),
    ("GET", "/../../../etc/passwd", None, None, 404, "no such page"),
    ("GET", "/api/next", None, None, 405, "GET is not allowed here; POST it"),
    ("GET", "/api/serving", None, None, 405, "GET is not allowed here; POST it"),
    ("POST", "/", {}, None, 405, "POST is not allowed here; GET it"),
    ("POST", "/api/info", {}, None, 405, "POST is not allowed here; GET it"),
    ("PUT", "/api/race", {}, None, 405, "PUT is not allowed here"),
    ("DELETE", "/static/desk.js", None, None, 405, "DELETE is not allowed here"),
    ("DELETE", "/nothing", None, None, 404, "no such page"),
]


@pytest.mark.parametrize("method,path,body,raw,status,message", BAD)
def test_bad_requests_get_a_4xx_with_a_json_error(server, method, path, body, raw, status,
                                                  message):
    got, answer = call(server, method, path, body, raw=raw)
    assert got == status
    assert message in answer["error"]


def test_a_wrong_method_names_the_right_one(server):
    port = server.server_address[1]
    for method, path, allow in (("GET", "/api/next", "POST"), ("POST", "/", "GET, HEAD"),
                                ("PATCH", "/api/bits", "POST")):
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        connection.request(method, path, headers={"Host": f"127.0.0.1:{port}"})
        response = connection.getresponse()
        assert response.status == 405 and response.getheader("Allow") == allow
        assert response.getheader("Content-Type") == "application/json"
        assert "not allowed here" in json.loads(response.read())["error"]
        connection.close()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    connection.request("HEAD", "/", headers={"Host": f"127.0.0.1:{port}"})
    response = connection.getresponse()
    assert response.status == 200 and response.read() == b""
    assert int(response.getheader("Content-Length")) > 1000  # the page's, not sent


def raw(server, data: bytes):
    """(status, headers, JSON body) of bytes sent as they are, before any handler of the desk
    reads them: what http.server itself answers."""
    port = server.server_address[1]
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, json.loads(body)


@pytest.mark.parametrize("data,status,message", [
    (b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n", 414, "over 64 KiB"),
    (b"GET / HTTP/1.1\r\nX-Long: " + b"a" * 70_000 + b"\r\n\r\n", 431, "Line too long"),
    (b"GET / HTTP/1.1\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(120)) + b"\r\n", 431,
     "Too many headers"),
    (b"GET /a b HTTP/1.1\r\n\r\n", 400, "Bad request syntax"),
    (b"BREW / HTTP/1.1\r\nHost: x\r\n\r\n", 501, "Unsupported method ('BREW')")])
def test_http_servers_own_refusals_are_json_too(server, data, status, message):
    got, headers, body = raw(server, data)
    assert got == status and headers["Content-Type"] == "application/json"
    assert message in body["error"]
    assert post(server, "/api/next", prompt=PROMPT)["survivors"] == 2048  # and it goes on


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
        lines, match = [], None  # a warning may come first: read on to the address
        while len(lines) < 50 and (line := process.stderr.readline()):
            lines.append(line)
            if match := re.search(r"http://127\.0\.0\.1:(\d+)/", line):
                break
        assert match, lines
        port = int(match.group(1))
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


# -- abandoned requests: the engine stops computing what nobody reads -------------------------

class Gated:
    """The model, each forward pass waiting for the test's go (`go`), or free once opened: the
    test decides when the engine's steps run."""

    def __init__(self, model):
        self.model, self.gate, self.opened = model, threading.Semaphore(0), False

    def __getattr__(self, name):
        return getattr(self.model, name)

    def forward(self, tokens, cache=None, **kwargs):
        if not self.opened:
            self.gate.acquire()
        return self.model.forward(tokens, cache, **kwargs)

    def go(self):
        self.gate.release()

    def open(self):
        self.opened = True
        self.gate.release(1000)


@pytest.fixture
def gated(model):
    """A desk on a gated model, its server and its engine's loop."""
    desk = make_desk(Gated(model), "gated", None, PASSAGE.read_text(encoding="utf-8"))
    server = serve(desk)
    yield desk.model, server, engine_loop(desk)
    desk.model.open()
    server.shutdown()
    server.server_close()


def steps_until(gate, condition, most=2000):
    """Let the engine's passes run one at a time until `condition()` holds (a bound on the
    passes: a request that never gets there fails the test, it does not hang it)."""
    for _ in range(most):
        if condition():
            return
        gate.go()
        time.sleep(0.01)
    raise AssertionError("the engine never reached the state awaited")


def running_alone(loop, ids):
    """Whether the engine's requests are exactly `ids`, all running, each with a token drawn."""
    running = list(loop.engine.scheduler.running)
    return set(loop.owners) == set(ids) and {r.id for r in running} == set(ids) \
        and not loop.engine.scheduler.waiting and all(r.new_tokens > 0 for r in running)


def in_thread(server, path, body, headers=None):
    """Send a request from a thread; returns the thread and the dict its answer lands in."""
    answer = {}
    thread = threading.Thread(target=lambda: answer.update(
        reply=call(server, "POST", path, body, headers=headers)), daemon=True)
    thread.start()
    return thread, answer


def engine_stats(loop) -> dict:
    done = threading.Event()
    result = {}
    loop.call(loop.stats, lambda value, error: (result.update(value), done.set()))
    assert done.wait(60)
    return result


def test_a_newer_request_of_a_widget_aborts_the_older_in_the_engine(gated, server, model):
    """Four quick "New seed" clicks: each request's four columns run in the engine until the
    next request of the widget comes and aborts them; only the last runs to its end, its blocks
    given back, its answer that of the same request sent alone."""
    gate, desk_server, loop = gated
    body = dict(prompt=PROMPT, max_new_tokens=40)
    sent = []
    for n in range(1, 5):  # seeds 1, 2, 3, 4: the clicks
        sent.append(in_thread(desk_server, "/api/temperatures", dict(body, seed=n),
                              {"X-Desk-Request": f"page temperatures {n}"}))
        # The columns of this click alone in the engine, each with a token drawn: the older
        # click's are aborted, none waits.
        steps_until(gate, lambda: running_alone(loop, range(4 * (n - 1), 4 * n)))
    gate.open()
    for thread, _ in sent:
        thread.join(60)
    replies = [answer["reply"] for _, answer in sent]
    assert [status for status, _ in replies] == [409, 409, 409, 200]
    assert "superseded" in replies[0][1]["error"]
    stats = engine_stats(loop)
    alone = post(server, "/api/temperatures", **dict(body, seed=4))
    final = replies[-1][1]
    drawn = sum(len(column["tokens"]) for column in final["columns"])
    assert {k: stats[k] for k in ("requests", "aborted", "finished", "errors")} == \
        {"requests": 16, "aborted": 12, "finished": 4, "errors": 0}
    assert stats["decode_tokens"] >= drawn + 12  # the aborted columns had begun
    assert stats["blocks_in_use"] == 0 and stats["running"] == stats["waiting"] == 0
    for got, want in zip(final["columns"], alone["columns"]):
        assert got["tokens"] == want["tokens"] and got["text"] == want["text"]
        assert got["surprise"] == pytest.approx(want["surprise"], rel=1e-6)


def test_a_client_that_leaves_has_its_engine_requests_aborted(gated):
    gate, desk_server, loop = gated
    port = desk_server.server_address[1]
    body = json.dumps(dict(prompt=PROMPT, max_new_tokens=40)).encode()
    client = socket.create_connection(("127.0.0.1", port))
    client.sendall(b"POST /api/repetition HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                   b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                   % (port, len(body), body))
    steps_until(gate, lambda: running_alone(loop, [0, 1]))  # greedy and penalised, begun
    assert engine_stats_now(loop) > 0
    client.close()  # the page's fetch aborted
    steps_until(gate, lambda: loop.counts["aborted"] == 2)
    gate.open()
    stats = engine_stats(loop)
    assert stats["finished"] == 0 and stats["running"] == stats["waiting"] == 0
    assert stats["blocks_in_use"] == 0
    assert post(desk_server, "/api/repetition", prompt=PROMPT)["greedy"]["tokens"]  # serving on


def engine_stats_now(loop) -> int:
    """The blocks the engine's requests hold, read while its loop waits on the gate."""
    return sum(1 for r in loop.engine.block_manager.refs if r > 0)


def test_a_request_superseded_while_it_waits_for_a_worker_never_runs(model):
    watched = Watched(model)
    desk = make_desk(watched, "watched", None, PASSAGE.read_text(encoding="utf-8"))
    server = serve(desk)
    workers = server.RequestHandlerClass.workers
    try:
        workers.acquire()
        workers.acquire()  # both workers busy: the race requests queue
        body = dict(prompt=PROMPT, max_new_tokens=12)
        first, first_answer = in_thread(server, "/api/race", dict(body, seed=1),
                                        {"X-Desk-Request": "page race 1"})
        second, second_answer = in_thread(server, "/api/race", dict(body, seed=2),
                                          {"X-Desk-Request": "page race 2"})
        first.join(60)  # it leaves the queue without a worker
        assert first_answer["reply"][0] == 409
        assert watched.passes == 0
    finally:
        workers.release()
        workers.release()
    second.join(60)
    status, answer = second_answer["reply"]
    assert status == 200
    assert watched.passes == answer["cached"]["passes"] + answer["uncached"]["passes"]
    server.shutdown()
    server.server_close()


def test_a_request_older_than_its_widgets_latest_is_refused(server):
    headers = {"X-Desk-Request": "older-page repetition 7"}
    assert call(server, "POST", "/api/repetition", {"prompt": PROMPT}, headers=headers)[0] == 200
    for n in (7, 3):
        got, answer = call(server, "POST", "/api/repetition", {"prompt": PROMPT},
                           headers={"X-Desk-Request": f"older-page repetition {n}"})
        assert got == 409 and "superseded" in answer["error"]
    got, _ = call(server, "POST", "/api/repetition", {"prompt": PROMPT},
                  headers={"X-Desk-Request": "other-page repetition 3"})  # another page's
    assert got == 200
    for bad in ("page repetition", "page repetition -1", "a b c d", "x " * 100 + "1"):
        got, answer = call(server, "POST", "/api/next", {"prompt": PROMPT},
                           headers={"X-Desk-Request": bad})
        assert got == 400 and answer["error"].startswith("X-Desk-Request: expected")


def test_the_desk_imports_no_web_stack():
    """The desk reuses `minillm serve`'s engine loop, not its web framework."""
    code = ("import sys, minillm.desk.server; "
            "print(sorted({'starlette', 'uvicorn', 'fastapi'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[1], check=True).stdout
    assert out.strip() == "[]"
