"""minillm serve never answers 500 to a request: Hypothesis writes request bodies (every field of
both endpoints and names of its own, values of every JSON type nested, Unicode with lone
surrogates, huge and tiny numbers) and each reply is a 200 or a 4xx with OpenAI's error object.

The fuzz asks nothing of what a field does: only that the server answers every body with a
reply or a refusal, and goes on serving. The fields of structured output (response_format,
structured_outputs, guided_*, tools, tool_choice) are also drawn from values near the ones
they take (small schemas, regexes, choices, tools), so that constraints are built and run.
The named bodies below are the malformed requests that once got a 500 or went unchecked.
"""
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

httpx = pytest.importorskip("httpx")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

import minillm  # noqa: E402
from minillm.cli.common import DEFAULT_MODEL  # noqa: E402
from minillm.serve import start  # noqa: E402
from minillm.serve.bodies import MAX_DEPTH  # noqa: E402
from minillm.serve.fields import CHAT, COMPLETION  # noqa: E402
from minillm.text.chat_template import CHATML_TEMPLATE  # noqa: E402

ENDPOINTS = {"/v1/completions": COMPLETION, "/v1/chat/completions": CHAT}


@pytest.fixture(scope="module")
def server():
    with minillm.threads(1):
        model = minillm.load(DEFAULT_MODEL)
        running = start(model, name="target",
                        chat_tokenizer=model.tokenizer.with_chat_template(CHATML_TEMPLATE))
        yield running
        running.stop()


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=60) as client:
        yield client


def answered(http, path, body):
    """The reply to `body` (an object, or raw bytes), checked: a 200 or a 4xx error object."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()  # ASCII: \\ud800 kept
    r = http.post(path, content=raw, headers={"Content-Type": "application/json"})
    assert r.status_code == 200 or 400 <= r.status_code < 500, (body, r.status_code, r.text)
    if r.status_code != 200:
        error = r.json()["error"]
        assert set(error) == {"message", "type", "param", "code"} and error["message"], error
    return r


# -- the malformed requests, by name -----------------------------------------------------------

GOOD = {"model": "target", "prompt": "In the beginning", "max_tokens": 2}
CHAT_GOOD = {"model": "target", "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]}


def chat(*messages):
    return dict(CHAT_GOOD, messages=list(messages))


NAMED = [
    # (what, path, body, status, param)
    ("a lone surrogate in a prompt", "/v1/completions", dict(GOOD, prompt="Hi \ud800"), 400,
     "prompt"),
    ("a lone surrogate as a field name", "/v1/completions", {**GOOD, "\udc00": 1}, 400,
     "\\udc00"),
    ("a lone surrogate in a message", "/v1/chat/completions",
     chat({"role": "user", "content": "\ud83d"}), 400, "messages"),
    ("deep nesting", "/v1/completions", b'{"model": "target", "prompt": ' + b"[" * 50000
     + b"]" * 50000 + b"}", 400, None),
    ("nesting past the bound", "/v1/completions",
     dict(GOOD, user=json.loads("[" * MAX_DEPTH + "]" * MAX_DEPTH)), 400, "user"),
    ("a number past a float", "/v1/completions",
     b'{"model": "target", "prompt": "x", "temperature": 1e400}', 400, None),
    ("a huge integer", "/v1/completions", dict(GOOD, top_k=10 ** 40), 400, "top_k"),
    ("temperature 1e10", "/v1/completions", dict(GOOD, temperature=1e10), 400, "temperature"),
    ("a penalty past OpenAI's", "/v1/completions", dict(GOOD, presence_penalty=3), 400,
     "presence_penalty"),
    ("a repetition penalty of 50", "/v1/completions", dict(GOOD, repetition_penalty=50), 400,
     "repetition_penalty"),
    ("a role that is none", "/v1/chat/completions", chat({"role": "wizard", "content": "x"}),
     400, "messages"),
    ("a field no message has", "/v1/chat/completions",
     chat({"role": "user", "content": "x", "tool_call_id": "a"}), 400, "messages"),
    ("an assistant's null content without tool calls", "/v1/chat/completions",
     chat({"role": "user", "content": "x"}, {"role": "assistant", "content": None}), 400,
     "messages"),
    ("a tool message without its call's id", "/v1/chat/completions",
     chat({"role": "tool", "content": "42"}), 400, "messages"),
    ("a tool message the template cannot render", "/v1/chat/completions",
     chat({"role": "user", "content": "x"}, {"role": "assistant", "content": None,
          "tool_calls": [{"id": "1", "type": "function",
                          "function": {"name": "f", "arguments": "{}"}}]},
          {"role": "tool", "tool_call_id": "1", "content": "42"}), 400, "messages"),
]


def test_the_malformed_requests_get_4xx_naming_the_field(http):
    for what, path, body, status, param in NAMED:
        r = answered(http, path, body)
        assert r.status_code == status, (what, r.text)
        assert r.json()["error"]["param"] == param, (what, r.json())


def test_the_roles_openai_sends_are_rendered(http):
    """developer is read as system; every listed role with its fields is taken."""
    r = answered(http, "/v1/chat/completions", chat(
        {"role": "developer", "content": "Be brief."}, {"role": "system", "content": "Hi."},
        {"role": "user", "content": [{"type": "text", "text": "Hello"}], "name": "ann"},
        {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"}))
    assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] in ("stop", "length")


# -- the fuzz ----------------------------------------------------------------------------------

SURROGATES = st.sampled_from(["\ud800", "\udbff", "\udc00", "\udfff"])
TEXT = st.one_of(st.text(max_size=12), st.text(max_size=12), st.text(max_size=12),
                 st.lists(st.one_of(st.text(max_size=3), SURROGATES), max_size=4).map("".join))
NUMBERS = st.one_of(st.integers(-3, 300), st.integers(), st.sampled_from([10 ** 30, -10 ** 30]),
                    st.floats(allow_nan=False, allow_infinity=False),
                    st.sampled_from([0.0, 1e-300, 1e300, -0.0, 2.5]))
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, TEXT)
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(TEXT, inner, max_size=4)), max_leaves=12)
MESSAGE = st.fixed_dictionaries(
    {"role": st.one_of(st.sampled_from(["system", "developer", "user", "assistant", "tool"]),
                       TEXT)},
    optional={"content": st.one_of(TEXT, VALUES), "name": VALUES, "tool_call_id": VALUES,
              "tool_calls": VALUES})


# Values a field's kind takes, so that the fuzz also reaches past the fields' types.
PLAUSIBLE = {"integer": st.integers(-2, 40), "boolean": st.booleans(), "string": TEXT,
             "number": st.one_of(st.floats(-3, 3), st.integers(-3, 3)), "any": VALUES,
             "stop": st.one_of(TEXT, st.lists(TEXT, max_size=5)), "array": VALUES,
             "object": st.one_of(VALUES, st.dictionaries(TEXT, st.booleans(), max_size=2),
                                 st.fixed_dictionaries({"include_usage": st.booleans()}))}
SCHEMAS = st.one_of(st.sampled_from([
    {"type": "object"}, {"type": "integer"}, {"enum": ["a", 1, None]}, {"type": "boolean"},
    {"type": "object", "properties": {"a": {"type": "string", "maxLength": 3}},
     "required": ["a"]}, {"type": "array", "items": {"type": "null"}, "maxItems": 2},
    {"anyOf": [{"const": 1}, {"type": "string", "minLength": 5, "maxLength": 2}]},
    {"type": "nope"}, {"properties": []}, {"type": "string", "pattern": "x"}, True, False]),
    VALUES)
REGEXES = st.one_of(st.sampled_from(["[0-9]+", "a|b", "(", "x{2,1}", "[^a]?", ""]), TEXT)
CHOICES = st.one_of(st.lists(st.text(max_size=3), max_size=3), VALUES)
TOOLS = st.lists(st.fixed_dictionaries({"type": st.sampled_from(["function", "x"]),
                                        "function": st.fixed_dictionaries(
                                            {"name": st.sampled_from(["f", "g"])},
                                            optional={"parameters": SCHEMAS})}), max_size=2)
# Values near those each field of structured output takes (beside those of its kind).
STRUCTURED = {
    "response_format": st.one_of(
        st.fixed_dictionaries({"type": st.sampled_from(["text", "json_object", "json_schema",
                                                        "xml"])}),
        st.fixed_dictionaries({"type": st.just("json_schema"), "json_schema":
                               st.fixed_dictionaries({"name": st.just("x"),
                                                      "schema": SCHEMAS},
                                                     optional={"strict": VALUES})})),
    "structured_outputs": st.one_of(
        st.fixed_dictionaries({}, optional={"json": SCHEMAS, "regex": REGEXES,
                                            "choice": CHOICES, "json_object": VALUES,
                                            "grammar": TEXT})),
    "guided_json": SCHEMAS, "guided_regex": REGEXES, "guided_choice": CHOICES,
    "tools": TOOLS,
    "tool_choice": st.one_of(st.sampled_from(["none", "auto", "required", "other"]),
                             st.fixed_dictionaries({"type": st.just("function"), "function":
                                                    st.fixed_dictionaries(
                                                        {"name": st.sampled_from(["f", "h"])})})),
}
PLAIN_MESSAGE = st.fixed_dictionaries({"role": st.sampled_from(["system", "user", "assistant"]),
                                       "content": st.text(max_size=12)})


@st.composite
def bodies(draw):
    path = draw(st.sampled_from(sorted(ENDPOINTS)))
    table = ENDPOINTS[path]
    body = {"model": draw(st.sampled_from(["target", "target", "target", "other"]))}
    if path == "/v1/chat/completions":
        body["messages"] = draw(st.one_of(st.lists(PLAIN_MESSAGE, min_size=1, max_size=3),
                                          st.lists(MESSAGE, max_size=3), VALUES))
    else:
        body["prompt"] = draw(st.one_of(st.text(min_size=1, max_size=12), TEXT, VALUES,
                                        st.lists(st.integers(-2, 3000), max_size=8)))
    body["max_tokens"] = draw(st.one_of(st.integers(0, 4), st.integers(1, 4), VALUES))
    names = sorted(set(table) - {"model", "max_tokens", "prompt", "messages"})
    for name in draw(st.lists(st.sampled_from(names), max_size=4, unique=True)):
        near = STRUCTURED.get(name, PLAUSIBLE[table[name]])
        body[name] = draw(st.one_of(near, near, PLAUSIBLE[table[name]], VALUES))
    body.update(draw(st.dictionaries(st.sampled_from(["best_temperature", "\ud800"]) | TEXT,
                                     VALUES, max_size=1)) if draw(st.integers(0, 4)) == 0
                else {})
    return path, body


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bodies())
def test_any_body_gets_a_reply_or_a_4xx(http, case):
    path, body = case
    answered(http, path, body)


@st.composite
def structured_bodies(draw):
    """A good body and one or two fields of structured output, near or anything."""
    path = draw(st.sampled_from(sorted(ENDPOINTS)))
    body = dict(GOOD if path == "/v1/completions" else CHAT_GOOD, max_tokens=4)
    names = sorted(set(STRUCTURED) & set(ENDPOINTS[path]))
    for name in draw(st.lists(st.sampled_from(names), min_size=1, max_size=2, unique=True)):
        body[name] = draw(st.one_of(STRUCTURED[name], STRUCTURED[name], VALUES))
    return path, body


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(structured_bodies())
def test_any_structured_output_gets_a_reply_or_a_4xx(http, case):
    path, body = case
    answered(http, path, body)


def test_the_server_still_serves_after_the_fuzz(http):
    r = answered(http, "/v1/completions", GOOD)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 2
