"""minillm serve's structured output: response_format (json_object, json_schema) and vLLM's
structured_outputs and guided_* fields on both endpoints, tool calls (tool_choice none, auto,
required, a named function; wrapped in <tool_call> tags for a template that writes them),
the 400s naming what cannot be honoured, a cut reply's "length", min_tokens and n with a
constraint, each constraint built once, and the openai client's parse() with a Pydantic model.
Servers on 127.0.0.1 in this process, on the shipped model; every request bounded in time."""
import json
import re
from typing import Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")
pydantic = pytest.importorskip("pydantic")
jsonschema = pytest.importorskip("jsonschema")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytest.importorskip("jinja2")

import minillm  # noqa: E402
from minillm.cli.common import DEFAULT_MODEL  # noqa: E402
from minillm.serve import start  # noqa: E402
from minillm.serve.tools import Tools, read_call  # noqa: E402
from minillm.text.chat_template import CHATML_TEMPLATE  # noqa: E402

# ChatML that names the tools (the shipped model's context is short) and asks for calls in
# <tool_call> tags, as Qwen's template does.
TOOL_TEMPLATE = (
    "{% if tools %}<|im_start|>system\nTools:{% for t in tools %} {{ t.function.name }}"
    "{% endfor %}; call one in <tool_call></tool_call><|im_end|>\n{% endif %}"
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
PERSON = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 8}, "age": {"type": "integer"},
    "kind": {"enum": ["saint", "king"]}, "alive": {"type": "boolean"}},
    "required": ["name", "kind", "alive"], "additionalProperties": False}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 10}, "unit": {"enum": ["C", "F"]}},
        "required": ["city", "unit"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "parameters": {"type": "object", "properties": {
        "zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"]}}}
HI = [{"role": "user", "content": "Hello"}]


@pytest.fixture(scope="module")
def model():
    with minillm.threads(1):
        yield minillm.load(DEFAULT_MODEL)


@pytest.fixture(scope="module")
def server(model):
    running = start(model, name="target",
                    chat_tokenizer=model.tokenizer.with_chat_template(CHATML_TEMPLATE))
    yield running
    running.stop()


@pytest.fixture(scope="module")
def tool_server(model):
    running = start(model, name="target",
                    chat_tokenizer=model.tokenizer.with_chat_template(TOOL_TEMPLATE))
    yield running
    running.stop()


def post(server, path, body):
    r = httpx.post(server.url + path, json={"model": "target", **body}, timeout=120)
    return r.status_code, r.json()


def ok(server, path, **body):
    status, reply = post(server, path, body)
    assert status == 200, reply
    return reply


def refused(server, path, **body):
    status, reply = post(server, path, body)
    assert status == 400, reply
    return reply["error"]


def is_person(value) -> bool:
    """Valid under PERSON, jsonschema the oracle."""
    return jsonschema.Draft202012Validator(PERSON).is_valid(value)


def texts(reply):
    return [c.get("text", c.get("message", {}).get("content")) for c in reply["choices"]]


# -- response_format and structured_outputs ------------------------------------------------

@pytest.mark.parametrize("path,base", [
    ("/v1/completions", {"prompt": "In the beginning"}), ("/v1/chat/completions",
                                                          {"messages": HI})])
def test_a_json_schema_reply_is_valid_on_both_endpoints(server, path, base):
    reply = ok(server, path, **base, max_tokens=120, seed=3, n=3, response_format={
        "type": "json_schema", "json_schema": {"name": "person", "schema": PERSON,
                                               "strict": True}})
    finished = [c for c in reply["choices"] if c["finish_reason"] == "stop"]
    assert finished, reply  # n > 1: each choice constrained
    for choice, text in zip(reply["choices"], texts(reply)):
        if choice["finish_reason"] == "stop":
            assert is_person(json.loads(text)), text


def test_json_object_is_any_object(server, model):
    """Every reply begins an object and every whole one is an object; pushed to close at once
    (a bias on "}"), the reply is the empty object and ends by itself (the shipped model left
    alone may write a string for longer than any max_tokens)."""
    reply = ok(server, "/v1/chat/completions", messages=HI, max_tokens=80, seed=1, n=4,
               response_format={"type": "json_object"})
    for choice, text in zip(reply["choices"], texts(reply)):
        assert text.startswith("{")
        if choice["finish_reason"] == "stop":
            assert isinstance(json.loads(text), dict)
    (close,) = model.tokenizer.encode("}")
    reply = ok(server, "/v1/chat/completions", messages=HI, max_tokens=20, seed=1,
               logit_bias={str(close): 100}, response_format={"type": "json_object"})
    assert texts(reply) == ["{}"] and reply["choices"][0]["finish_reason"] == "stop"


def test_structured_outputs_and_the_older_guided_names(server):
    for body in ({"structured_outputs": {"choice": ["yes", "no"]}},
                 {"guided_choice": ["yes", "no"]}):
        reply = ok(server, "/v1/completions", prompt="Is it good?", max_tokens=10, n=4,
                   seed=0, **body)
        assert set(texts(reply)) <= {"yes", "no"}
        assert {c["finish_reason"] for c in reply["choices"]} == {"stop"}
    for body in ({"structured_outputs": {"regex": "[0-9]{3}-[a-c]"}},
                 {"guided_regex": "[0-9]{3}-[a-c]"}):
        reply = ok(server, "/v1/chat/completions", messages=HI, max_tokens=10, seed=2, **body)
        assert re.fullmatch("[0-9]{3}-[a-c]", texts(reply)[0])
    for body in ({"structured_outputs": {"json": PERSON}}, {"guided_json": PERSON},
                 {"guided_json": json.dumps(PERSON)}):
        reply = ok(server, "/v1/completions", prompt="A", max_tokens=120, seed=3, **body)
        assert is_person(json.loads(texts(reply)[0]))
    reply = ok(server, "/v1/completions", prompt="A", max_tokens=5, seed=3,
               response_format={"type": "text"})
    assert reply["choices"][0]["finish_reason"] == "length"  # text: nothing asked


FIELD_SCHEMAS = st.sampled_from([
    {"type": "string", "maxLength": 6}, {"type": "integer"}, {"type": "boolean"},
    {"type": "null"}, {"enum": ["x", 2, None]}, {"const": "k"},
    {"type": "array", "items": {"type": "boolean"}, "maxItems": 2},
    {"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 2}]}])


@st.composite
def flat_schemas(draw):
    names = draw(st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=1, max_size=3,
                          unique=True))
    return {"type": "object", "properties": {n: draw(FIELD_SCHEMAS) for n in names},
            "required": draw(st.lists(st.sampled_from(names), unique=True)),
            "additionalProperties": False}


@settings(max_examples=10, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(schema=flat_schemas(), seed=st.integers(0, 2 ** 20))
def test_every_finished_reply_validates_under_its_schema(server, schema, seed):
    reply = ok(server, "/v1/completions", prompt="In the beginning", max_tokens=60, n=2,
               seed=seed, response_format={"type": "json_schema",
                                           "json_schema": {"name": "s", "schema": schema}})
    for choice in reply["choices"]:
        assert choice["finish_reason"] in ("stop", "length")
        if choice["finish_reason"] == "stop":
            jsonschema.validate(json.loads(choice["text"]), schema)


def test_a_stream_of_a_constrained_reply(server):
    with httpx.stream("POST", server.url + "/v1/chat/completions", timeout=120, json={
            "model": "target", "messages": HI, "max_tokens": 120, "seed": 3, "stream": True,
            "structured_outputs": {"json": PERSON}}) as r:
        chunks = [json.loads(line[6:]) for line in r.iter_lines()
                  if line.startswith("data: {")]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop" and is_person(json.loads(text))


def test_a_reply_cut_by_max_tokens_ends_with_length(server):
    reply = ok(server, "/v1/completions", prompt="A", max_tokens=4, seed=3,
               response_format={"type": "json_schema",
                                "json_schema": {"name": "p", "schema": PERSON}})
    assert reply["choices"][0]["finish_reason"] == "length"
    assert reply["choices"][0]["text"].startswith("{")


def test_min_tokens_gives_way_where_only_the_end_is_allowed(server, model):
    reply = ok(server, "/v1/completions", prompt="A", max_tokens=20, min_tokens=10, n=3,
               seed=0, logprobs=0, guided_choice=["yes", "no"])
    for choice in reply["choices"]:  # ended at "yes"/"no" after fewer than min_tokens
        assert choice["text"] in ("yes", "no") and choice["finish_reason"] == "stop"
    reply = ok(server, "/v1/completions", prompt="A", max_tokens=12, min_tokens=6, seed=0,
               guided_regex="a+", logprobs=0)  # the end allowed from "a" on: kept off till 6
    assert re.fullmatch("a{6,}", reply["choices"][0]["text"])


def test_what_cannot_be_honoured_is_a_400_naming_it(server):
    schema = {"type": "object", "patternProperties": {"^x": {}}}
    error = refused(server, "/v1/completions", prompt="A", response_format={
        "type": "json_schema", "json_schema": {"name": "p", "schema": schema}})
    assert error["param"] == "response_format" and "patternProperties" in error["message"]
    error = refused(server, "/v1/chat/completions", messages=HI,
                    structured_outputs={"json": {"type": "strin"}})
    assert error["param"] == "structured_outputs" and "strin" in error["message"]
    error = refused(server, "/v1/completions", prompt="A", guided_regex="(ab")
    assert error["param"] == "guided_regex"
    error = refused(server, "/v1/completions", prompt="A",
                    structured_outputs={"grammar": "root ::= x"})
    assert "grammar" in error["message"]
    error = refused(server, "/v1/completions", prompt="A", guided_choice=["a"],
                    response_format={"type": "json_object"})
    assert error["param"] == "guided_choice"  # two ways of constraining: the second named
    assert refused(server, "/v1/completions", prompt="A",
                   response_format={"type": "xml"})["param"] == "response_format"
    assert refused(server, "/v1/completions", prompt="A", response_format={
        "type": "json_schema", "json_schema": {"schema": PERSON}})["param"] == \
        "response_format"  # no name
    assert refused(server, "/v1/completions", prompt="A", guided_choice=[])["param"] == \
        "guided_choice"
    deep = {"type": "integer"}
    for _ in range(4):  # each level's pattern holds the one below several times
        deep = {"type": "object", "properties": {f"p{i}": deep for i in range(6)}}
    error = refused(server, "/v1/completions", prompt="A", guided_json=deep)
    assert "too large" in error["message"] and error["param"] == "guided_json"
    assert post(server, "/v1/completions", {"prompt": "A", "max_tokens": 1})[0] == 200


def test_each_constraint_is_built_once(server):
    built = server.service.constraints.built
    schema = {"type": "object", "properties": {"once": {"type": "boolean"}},
              "required": ["once"]}
    for _ in range(3):
        ok(server, "/v1/completions", prompt="A", max_tokens=20, seed=1,
           guided_json=schema)
    keys = [k for k in built if k[1] is not None and "once" in k[1]]
    assert len(keys) == 1


# -- tools -------------------------------------------------------------------------------

def call_of(reply):
    choice = reply["choices"][0]
    assert choice["finish_reason"] == "tool_calls", choice
    (call,) = choice["message"]["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_")
    return call["function"]["name"], json.loads(call["function"]["arguments"])


@pytest.mark.parametrize("which", ["tool_server", "server"])
def test_required_and_named_tool_choice_give_one_call(which, request):
    running = request.getfixturevalue(which)
    reply = ok(running, "/v1/chat/completions", messages=HI, max_tokens=120, seed=1,
               tools=[WEATHER, TIME], tool_choice="required", logprobs=True)
    name, arguments = call_of(reply)
    tool = next(t for t in (WEATHER, TIME) if t["function"]["name"] == name)
    jsonschema.validate(arguments, tool["function"]["parameters"])
    raw = "".join(t["token"] for t in reply["choices"][0]["logprobs"]["content"])
    wrapped = which == "tool_server"  # the template writes <tool_call>: the call is wrapped
    assert raw.startswith("<tool_call>\n{") == wrapped and raw.startswith("{") != wrapped
    reply = ok(running, "/v1/chat/completions", messages=HI, max_tokens=120, seed=2,
               tools=[WEATHER, TIME],
               tool_choice={"type": "function", "function": {"name": "get_time"}})
    assert call_of(reply)[0] == "get_time"
    assert reply["choices"][0]["message"]["content"] is None


def test_a_stream_sends_the_call_whole(tool_server):
    with httpx.stream("POST", tool_server.url + "/v1/chat/completions", timeout=120, json={
            "model": "target", "messages": HI, "max_tokens": 120, "seed": 1, "stream": True,
            "tools": [TIME], "tool_choice": "required"}) as r:
        chunks = [json.loads(line[6:]) for line in r.iter_lines()
                  if line.startswith("data: {")]
    last = chunks[-1]["choices"][0]
    assert last["finish_reason"] == "tool_calls"
    (call,) = last["delta"]["tool_calls"]
    assert call["index"] == 0 and json.loads(call["function"]["arguments"])["zone"] in (
        "UTC", "CET")


def test_none_ignores_the_tools_and_auto_is_free(tool_server):
    plain = ok(tool_server, "/v1/chat/completions", messages=HI, max_tokens=1)
    none = ok(tool_server, "/v1/chat/completions", messages=HI, max_tokens=1, tools=[WEATHER],
              tool_choice="none")
    auto = ok(tool_server, "/v1/chat/completions", messages=HI, max_tokens=8, seed=0,
              tools=[WEATHER])
    assert none["usage"]["prompt_tokens"] == plain["usage"]["prompt_tokens"]
    assert auto["usage"]["prompt_tokens"] > plain["usage"]["prompt_tokens"]  # shown
    assert auto["choices"][0]["finish_reason"] == "length"
    assert "tool_calls" not in auto["choices"][0]["message"]
    for body in ({"tools": [WEATHER], "tool_choice": {"type": "function",
                                                      "function": {"name": "nope"}}},
                 {"tool_choice": "required"}, {"tools": [{"type": "function"}]},
                 {"tools": [WEATHER], "tool_choice": "required",
                  "response_format": {"type": "json_object"}}):
        assert post(tool_server, "/v1/chat/completions", {"messages": HI, **body})[0] == 400
    bad = dict(WEATHER, function=dict(WEATHER["function"], parameters={
        "type": "object", "properties": {"x": {"type": "string", "format": "date"}}}))
    error = refused(tool_server, "/v1/chat/completions", messages=HI, tools=[bad],
                    tool_choice="required")
    assert error["param"] == "tools" and "format" in error["message"]


def test_auto_answers_a_reply_that_reads_as_a_call_as_one(tool_server):
    """A reply held by a regex to a call in the template's syntax, with text before it."""
    call = '{"name": "get_time", "arguments": {"zone": "CET"}}'
    text = "Let me see. <tool_call>\n" + call + "\n</tool_call>"
    for stream in (False, True):
        body = {"model": "target", "messages": HI, "max_tokens": 120, "seed": 0,
                "tools": [TIME], "guided_regex": re.escape(text).replace("\\\n", "\n"),
                "stream": stream}
        if stream:
            with httpx.stream("POST", tool_server.url + "/v1/chat/completions", json=body,
                              timeout=120) as r:
                last = [json.loads(line[6:]) for line in r.iter_lines()
                        if line.startswith("data: {")][-1]["choices"][0]
            message, finish = last["delta"], last["finish_reason"]
        else:
            choice = ok(tool_server, "/v1/chat/completions", **body)["choices"][0]
            message, finish = choice["message"], choice["finish_reason"]
        assert finish == "tool_calls" and message["content"] == "Let me see."
        (got,) = message["tool_calls"]
        assert got["function"] == {"name": "get_time", "arguments": '{"zone": "CET"}'}


def test_auto_reads_a_call_as_vllms_tool_parsers_do():
    tools = Tools([WEATHER], "auto", wrapped=True)
    content, call = read_call('Sure. <tool_call>\n{"name": "get_weather", "arguments": '
                              '{"city": "Oslo", "unit": "C"}}\n</tool_call>', tools)
    assert content == "Sure." and call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Oslo", "unit": "C"}
    for text in ('<tool_call>{"name": "other", "arguments": {}}</tool_call>',
                 "<tool_call>{not json</tool_call>", "no call here",
                 '{"name": "get_weather", "arguments": {}}'):  # bare, for a wrapping template
        assert read_call(text, tools) == (text, None)
    bare = Tools([WEATHER], "auto", wrapped=False)
    assert read_call(' {"name": "get_weather", "arguments": {}} ', bare)[1] is not None


# -- the openai client -------------------------------------------------------------------

class Verse(pydantic.BaseModel):
    """A flat model: what the schema subset reads (nested models need $defs and $ref)."""

    book: str = pydantic.Field(max_length=12)
    chapter: int
    mood: Literal["glad", "sad"]
    holy: bool
    words: list[str] = pydantic.Field(max_length=2)


def test_the_openai_clients_parse_with_a_pydantic_model(server):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0,
                           timeout=120)
    parsed = []
    for seed in range(6):  # the tiny model's strings may run long: a cut reply raises
        try:
            reply = client.chat.completions.parse(
                model="target", messages=HI, response_format=Verse, max_tokens=120,
                seed=seed)
        except openai.LengthFinishReasonError:
            continue
        assert reply.choices[0].finish_reason == "stop"
        parsed.append(reply.choices[0].message.parsed)
    assert parsed and all(isinstance(v, Verse) for v in parsed)
    with pytest.raises(openai.LengthFinishReasonError):
        client.chat.completions.parse(model="target", messages=HI, response_format=Verse,
                                      max_tokens=3, seed=0)
    reply = client.chat.completions.create(  # vLLM's fields, as the client sends them
        model="target", messages=HI, max_tokens=5, seed=0,
        extra_body={"structured_outputs": {"choice": ["alpha", "beta"]}})
    assert reply.choices[0].message.content in ("alpha", "beta")


def test_builds_wait_in_a_bounded_queue_and_outlive_a_client_gone(monkeypatch):
    """At most MAX_BUILDING distinct constraints wait for the build thread (then a 429); a
    client that leaves while its constraint builds leaves it built for the next."""
    import asyncio
    import threading

    from minillm.serve import structured
    from minillm.serve.errors import APIError

    release, calls = threading.Event(), []

    def slow_build(wanted, tokenizer):
        calls.append(wanted.pattern)
        release.wait(30)
        return wanted.pattern

    monkeypatch.setattr(structured, "build", slow_build)

    async def scenario():
        built = structured.Constraints()
        specs = [structured.Spec(f"a{i}", None, "guided_regex")
                 for i in range(structured.MAX_BUILDING + 1)]
        waiting = [asyncio.ensure_future(built.get(s, None)) for s in specs[:-1]]
        await asyncio.sleep(0.05)
        with pytest.raises(APIError) as refused:
            await built.get(specs[-1], None)
        assert refused.value.status == 429 and refused.value.headers["Retry-After"] == "1"
        waiting[0].cancel()  # its client is gone
        release.set()
        assert await asyncio.gather(*waiting[1:]) == [s.pattern for s in specs[1:-1]]
        assert await built.get(specs[0], None) == "a0"  # built once, though its asker left
        assert await built.get(specs[-1], None) == specs[-1].pattern  # room again
        return [s.pattern for s in specs]

    asked = asyncio.run(scenario())
    assert sorted(calls) == sorted(asked)  # each built once
