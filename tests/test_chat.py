"""Chat prompts: Jinja templates as transformers renders them, the built-in ChatML renderer
without jinja2, BOS in the prompt, the shared id prefix."""

import json
import re

import pytest
from hypothesis import given, strategies as st

import minillm.text.chat_template
from minillm.text.chat_template import (CHATML_TEMPLATE, ChatML, chat_format, chat_prompt_ids,
                                        render_chat)
from minillm.conversation import common_prefix_length
from minillm.plumbing.optional import install_hint
from minillm.text.tool_schema import tool_schema
from minillm.text.tokenizer import BYTE_TO_CHAR, Tokenizer, TokenizerConfig


@pytest.fixture(params=["jinja2", "built-in"])
def renderer(request, monkeypatch):
    """Each ChatML test runs with jinja2 and with the built-in renderer (jinja2 hidden)."""
    if request.param == "jinja2":
        pytest.importorskip("jinja2")
    else:
        monkeypatch.setattr(minillm.text.chat_template, "_jinja", lambda: None)
    return request.param


@pytest.fixture
def without_jinja(monkeypatch):
    monkeypatch.setattr(minillm.text.chat_template, "_jinja", lambda: None)

# SmolLM2-135M-Instruct's template, as its GGUF file and tokenizer_config.json hold it.
SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}")
SMOLLM_SYSTEM = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
                 "Hugging Face<|im_end|>\n")

USER = {"role": "user", "content": "What is 2+2?"}
ASSISTANT = {"role": "assistant", "content": "4."}
USER_AGAIN = {"role": "user", "content": "And 3+3?\nThanks"}
SYSTEM = {"role": "system", "content": "Answer briefly."}


def test_templates_are_recognized_exactly():
    assert chat_format(CHATML_TEMPLATE) == ChatML(default_system=None)
    assert chat_format(SMOLLM2_TEMPLATE) == ChatML(
        default_system="You are a helpful AI assistant named SmolLM, trained by Hugging Face")
    other_prompt = SMOLLM2_TEMPLATE.replace("named SmolLM, trained by Hugging Face", "Bob")
    assert chat_format(other_prompt) == ChatML(default_system="You are a helpful AI assistant Bob")


@pytest.mark.parametrize("messages, expected", [
    ([USER], SMOLLM_SYSTEM + "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"),
    ([SYSTEM, USER], "<|im_start|>system\nAnswer briefly.<|im_end|>\n"
                     "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"),
    ([USER, ASSISTANT], SMOLLM_SYSTEM + "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
                                        "<|im_start|>assistant\n4.<|im_end|>\n"),
    ([SYSTEM, USER, ASSISTANT], "<|im_start|>system\nAnswer briefly.<|im_end|>\n"
                                "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
                                "<|im_start|>assistant\n4.<|im_end|>\n"),
    ([USER, ASSISTANT, USER_AGAIN], SMOLLM_SYSTEM + "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
                                                    "<|im_start|>assistant\n4.<|im_end|>\n"
                                                    "<|im_start|>user\nAnd 3+3?\nThanks"
                                                    "<|im_end|>\n"),
    ([], ""),
])
def test_smollm2_conversations(renderer, messages, expected):
    assert render_chat(messages, SMOLLM2_TEMPLATE, add_generation_prompt=False) == expected
    assert render_chat(messages, SMOLLM2_TEMPLATE) == expected + "<|im_start|>assistant\n"


def test_plain_chatml_adds_no_system_message(renderer):
    assert render_chat([USER, ASSISTANT, USER_AGAIN], CHATML_TEMPLATE) == (
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4.<|im_end|>\n"
        "<|im_start|>user\nAnd 3+3?\nThanks<|im_end|>\n<|im_start|>assistant\n")
    # Only the first message decides: a system message later on is an ordinary turn.
    assert render_chat([USER, SYSTEM], SMOLLM2_TEMPLATE, False).startswith(SMOLLM_SYSTEM)


LLAMA3_TEMPLATE = ("{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + "
                   "message['role'] + '<|end_header_id|>\n\n' + message['content'] + "
                   "'<|eot_id|>' }}{% endfor %}")


@pytest.mark.parametrize("template, message", [
    (LLAMA3_TEMPLATE, "Llama 3"),
    ("{% for message in messages %}[INST] {{ message['content'] }} [/INST]{% endfor %}",
     "Mistral"),
    (CHATML_TEMPLATE.replace("{% endfor %}", "{% if tools %}x{% endif %}{% endfor %}"),
     "ChatML template with logic"),
    (CHATML_TEMPLATE + "\n", "ChatML template with logic"),
    ("{{ messages }}", "unknown template"),
    (None, "no chat template"),
])
def test_without_jinja_other_templates_are_refused_by_what_they_are(without_jinja, template,
                                                                   message):
    with pytest.raises(ValueError, match=message):
        render_chat([USER], template)
    if template is not None:
        with pytest.raises(ValueError, match=re.escape(install_hint("chat"))):
            render_chat([USER], template)


def test_without_jinja_tools_are_refused(without_jinja):
    with pytest.raises(ValueError, match="jinja2"):
        render_chat([USER], CHATML_TEMPLATE, tools=[{"name": "f"}])


@pytest.mark.parametrize("bad", [{"role": "user"}, {"role": "user", "content": ["a"]},
                                 ("user", "hi")])
def test_without_jinja_malformed_messages_are_refused(without_jinja, bad):
    with pytest.raises(ValueError, match="message"):
        render_chat([bad], CHATML_TEMPLATE)


def test_messages_must_be_dicts_with_a_role():
    for bad in (("user", "hi"), {"content": "hi"}):
        with pytest.raises(ValueError, match="message"):
            render_chat([bad], CHATML_TEMPLATE)


# ---------------------------------------------------------------------- Jinja

@pytest.fixture
def jinja():
    return pytest.importorskip("jinja2")


def test_jinja_renders_templates_with_logic(jinja):
    assert render_chat([USER, ASSISTANT], LLAMA3_TEMPLATE, bos_token="<B>") == (
        "<B><|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n4.<|eot_id|>")


def test_jinja_environment_is_transformers(jinja):
    # trim_blocks and lstrip_blocks: a block tag's own line leaves no trace.
    assert render_chat([USER], "  {% if true %}\nA\n  {% endif %}\nB") == "A\nB"
    # loopcontrols, tojson without HTML escaping and with its options, the generation tag.
    template = ("{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}"
                "{{ m | tojson(indent=1, sort_keys=True) }}{% endfor %}"
                "{% generation %}<{{ tools[0].name }}>{% endgeneration %}")
    assert render_chat([{"role": "user", "content": "<&>"}, USER], template,
                       tools=[{"name": "f"}]) == (
        '{\n "content": "<&>",\n "role": "user"\n}<f>')
    # strftime_now, and a message's None values dropped as transformers drops them.
    assert render_chat([], "{{ strftime_now('%Y') | length }}") == "4"
    assert render_chat([{"role": "user", "content": None}],
                       "{{ 'content' in messages[0] }}") == "False"


def test_jinja_raise_exception_is_a_value_error(jinja):
    template = "{{ raise_exception('System role not supported') }}"
    with pytest.raises(ValueError, match="System role not supported"):
        render_chat([USER], template)


def test_jinja_sandbox_refuses_unsafe_code(jinja):
    with pytest.raises(ValueError, match="unsafe"):
        render_chat([USER], "{{ ''.__class__.__mro__[1].__subclasses__() }}")
    with pytest.raises(ValueError, match="unsafe"):
        render_chat([USER], "{{ messages.append(1) }}")  # immutable


def chatml_tokenizer():
    vocab = {BYTE_TO_CHAR[b]: b for b in range(256)}
    added = [{"id": 256, "content": "<|im_start|>", "special": True},
             {"id": 257, "content": "<|im_end|>", "special": True}]
    config = TokenizerConfig(bos_token="<|im_start|>", eos_token="<|im_end|>",
                             add_bos_token=True, chat_template=SMOLLM2_TEMPLATE)
    return Tokenizer(vocab, [], added, config=config)


def test_chat_prompt_ids_use_the_tokenizers_template_and_add_no_bos(renderer):
    tok = chatml_tokenizer()
    ids = chat_prompt_ids(tok, [SYSTEM, USER])
    assert ids == tok.encode(render_chat([SYSTEM, USER], SMOLLM2_TEMPLATE))
    assert ids[0] == 256 and ids[1] != 256  # the template's <|im_start|>, no BOS before it
    assert ids.count(257) == 2 and tok.eos_token_ids == (257,)


def test_chat_prompt_ids_add_bos_when_the_template_does_not(jinja):
    vocab = {BYTE_TO_CHAR[b]: b for b in range(256)}
    added = [{"id": 256, "content": "<s>", "special": True},
             {"id": 257, "content": "</s>", "special": True}]
    phi3 = ("{% for message in messages %}{{'<|' + message['role'] + '|>\n' + message['content']"
            " + '<|end|>\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}"
            "{% endif %}")
    for template, add_bos, first in ((phi3, True, [256]), (phi3, False, []),
                                     ("{{ bos_token }}" + phi3, True, [256])):
        config = TokenizerConfig(bos_token="<s>", eos_token="</s>", add_bos_token=add_bos,
                                 chat_template=template)
        tok = Tokenizer(vocab, [], added, config=config)
        ids = chat_prompt_ids(tok, [USER])
        assert ids == first + tok.encode("<|user|>\nWhat is 2+2?<|end|>\n<|assistant|>\n")


def test_end_of_turn_tokens_the_template_writes_stop_a_reply():
    vocab = {BYTE_TO_CHAR[b]: b for b in range(256)}
    added = [{"id": 256, "content": "<|begin_of_text|>", "special": True},
             {"id": 257, "content": "<|end_of_text|>", "special": True},
             {"id": 258, "content": "<|eot_id|>", "special": True},
             {"id": 259, "content": "<|eom_id|>", "special": True}]
    config = TokenizerConfig(bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>",
                             chat_template=LLAMA3_TEMPLATE)
    assert Tokenizer(vocab, [], added, config=config).eos_token_ids == (257, 258)


def turn_tokenizer(template=None):
    """Bytes, <bos>, <eos> and Gemma's turn markers; ``template``: its chat template."""
    vocab = {BYTE_TO_CHAR[b]: b for b in range(256)}
    added = [{"id": 256 + i, "content": text, "special": True}
             for i, text in enumerate(["<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"])]
    config = TokenizerConfig(bos_token="<bos>", eos_token="<eos>", add_bos_token=True,
                             chat_template=template)
    return Tokenizer(vocab, [], added, config=config)


# A template in Gemma's shape (not Gemma's own: tests/peers hold that one).
TURNS_TEMPLATE = ("{% for m in messages %}{{ '<start_of_turn>' + m['role'] + '\n' + m['content']"
                  " + '<end_of_turn>\n' }}{% endfor %}"
                  "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}")


def test_a_template_given_to_a_tokenizer_without_one_renders_and_stops_at_its_turn_end(jinja):
    bare = turn_tokenizer()
    tok = bare.with_chat_template(TURNS_TEMPLATE)
    assert bare.chat_template is None and bare.eos_token_ids == (257,)  # the copy only changed
    assert tok.chat_template == TURNS_TEMPLATE and tok.eos_token_ids == (257, 259)
    assert chat_prompt_ids(tok, [USER]) == [256] + tok.encode(
        "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n")
    with pytest.raises(ValueError, match="no chat template"):
        chat_prompt_ids(bare, [USER])


def test_common_prefix_length_examples():
    assert common_prefix_length([], [1, 2]) == 0
    assert common_prefix_length([1, 2, 3], [1, 2, 3, 4]) == 3
    assert common_prefix_length([1, 2, 3, 4], [1, 2]) == 2
    assert common_prefix_length([1, 2, 3], [1, 5, 3]) == 1


@given(st.lists(st.integers(0, 3), max_size=8), st.lists(st.integers(0, 3), max_size=8))
def test_common_prefix_length_is_the_longest_shared_start(a, b):
    n = common_prefix_length(a, b)
    assert a[:n] == b[:n]
    assert n == min(len(a), len(b)) or a[n] != b[n]


def test_a_growing_chat_keeps_its_prompt_as_prefix(renderer):
    # The next turn's prompt starts with the previous prompt and the reply, so the cache for
    # all of it can be kept when the reply's ids are the ids its text encodes to.
    tok = chatml_tokenizer()
    first = chat_prompt_ids(tok, [USER])
    reply = tok.encode(ASSISTANT["content"]) + [257]
    second = chat_prompt_ids(tok, [USER, ASSISTANT, USER_AGAIN])
    assert common_prefix_length(first + reply, second) == len(first + reply)


# -- a reply ends by itself; the chat command's sampling defaults ---------------------------

END = 257  # chatml_tokenizer's <|im_end|>, its one end token


def ending_chat_model():
    """(model, prompt): a random model with chatml_tokenizer and a chat prompt, which it
    answers with a few tokens and <|im_end|>, then (let run on) an invented next turn, greedy
    and sampled with seed 2 alike: END's embedding, which is also its output row, is made
    twice that of the fourth token it drew greedily before, so END outscores that token."""
    cfg = minillm.ModelConfig(arch="modern", vocab_size=258, context_length=256, d_model=16,
                              n_layers=1, n_heads=2)
    model = minillm.random_model(cfg, seed=1, dtype="float64", std=0.5)
    tok = chatml_tokenizer()
    prompt = chat_prompt_ids(tok, [USER])
    fourth = minillm.generate(model, prompt, max_new_tokens=4, temperature=0)[-1]  # no stop
    model.params["tok_emb.weight"][END] = 2 * model.params["tok_emb.weight"][fourth]
    model.tokenizer = tok
    return model, prompt


@pytest.mark.parametrize("knobs", [dict(temperature=0), dict(temperature=1.0, seed=2)])
def test_a_conversation_ends_each_reply_by_itself(knobs):
    """With no stop_tokens a reply ends at the model's end token (its tokenizer's
    <|im_end|>), as generate's does; stop_tokens=() runs on into an invented next turn."""
    from minillm.conversation import Conversation, respond

    model, prompt = ending_chat_model()
    free = minillm.generate(model, prompt, max_new_tokens=12, stop_tokens=(),
                            **knobs)[len(prompt):]
    assert len(free) == 12 and free.count(END) == 1  # the reply, then the invented turn
    reply = list(respond(Conversation(model), prompt, max_new_tokens=12, **knobs))
    assert reply == free[:free.index(END) + 1] and len(reply) > 2
    assert minillm.generate(model, prompt, max_new_tokens=12, **knobs)[len(prompt):] == reply
    assert list(respond(Conversation(model), prompt, max_new_tokens=12, stop_tokens=(),
                        **knobs)) == free


def test_the_chat_command_samples_with_the_chat_defaults_and_stops_at_the_end_token(
        tmp_path, monkeypatch, capsys):
    """No knob flag: CHAT_DEFAULTS (llama.cpp's chain, a repetition penalty, a longer reply) and
    the tokenizer's end tokens; the flags turn each filter off again."""
    import io

    import minillm.conversation as conversation
    from minillm.cli import main
    from minillm.knobs import CHAT_DEFAULTS, SamplingConfig, generation_config

    model, _ = ending_chat_model()
    minillm.save(model, tmp_path / "chat.npz")
    real, configs = conversation.respond, []

    def respond(*args, **kwargs):
        configs.append(args[2])
        return real(*args, **kwargs)

    monkeypatch.setattr(conversation, "respond", respond)
    for flags in ([], ["--temperature", "1", "--top_k", "0", "--top_p", "1", "--min_p", "0"]):
        monkeypatch.setattr("sys.stdin", io.StringIO("What is 2+2?\n\n"))
        assert main(["chat", "--model_path", str(tmp_path / "chat.npz"), *flags]) == 0
    assert configs[0] == generation_config(None, model, **CHAT_DEFAULTS, stop_tokens=[END])
    assert configs[1].sampling == SamplingConfig(repetition_penalty=1.1)  # every filter off
    assert configs[0].stop_tokens == configs[1].stop_tokens == (END,)
    err = capsys.readouterr().err
    assert "new tokens" in err and "200 new tokens" not in err  # each reply ended by itself


# ---------------------------------------------------------------- Python functions as tools

def multiply(x: float, y: float = 1.0) -> float:
    """
    A function that multiplies two numbers

    Args:
        x: The first number to multiply
        y: The second number, its
            description over two lines

    Returns:
        The product
    """
    return x * y


def test_a_function_is_described_by_its_hints_and_docstring():
    """The example of transformers' get_json_schema docstring, with a default and a return
    (tests/peers/test_tool_schema_peer.py: equal to transformers' on many more)."""
    assert tool_schema(multiply) == {"type": "function", "function": {
        "name": "multiply", "description": "A function that multiplies two numbers",
        "parameters": {"type": "object", "properties": {
            "x": {"type": "number", "description": "The first number to multiply"},
            "y": {"type": "number", "description": "The second number, its description over "
                                                   "two lines"}},
            "required": ["x"]},
        "return": {"type": "number", "description": "The product"}}}


def test_functions_among_the_tools_render_as_their_schemas(jinja):
    schema = {"type": "function", "function": {"name": "given", "parameters": {}}}
    text = render_chat([USER], "{{ tools | tojson }}", tools=[schema, multiply])
    assert text == json.dumps([schema, tool_schema(multiply)], ensure_ascii=False)


def test_a_tool_that_is_neither_a_schema_nor_a_function_is_refused(jinja):
    with pytest.raises(ValueError, match="^tools: each tool must be a JSON schema"):
        render_chat([USER], "{{ tools }}", tools=["multiply"])

    def undescribed(x: int):
        """Nothing about x."""
    with pytest.raises(ValueError, match="^tool undescribed: the docstring's Args: has no "
                                         "description of 'x'$"):
        render_chat([USER], "{{ tools }}", tools=[undescribed])
