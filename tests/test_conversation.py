"""A conversation in the KV cache: every turn's reply equals a fresh generation over the same
prompt, while only the part of the prompt the cache lacks is read."""
import contextlib

import numpy as np
import pytest

import minillm
from minillm.text.chat_template import chat_prompt_ids
from minillm.conversation import Conversation, respond
from minillm.knobs import generation_config
from minillm.window import common_prefix_length
from tests.test_chat import ASSISTANT, USER, USER_AGAIN, chatml_tokenizer

END = 257  # <|im_end|>


class CountingModel:
    """A model that records how many tokens each forward pass reads."""

    def __init__(self, model):
        self.model, self.config, self.reads = model, model.config, []

    def new_cache(self, *args, **kwargs):
        return self.model.new_cache(*args, **kwargs)

    def forward(self, tokens, cache=None, **kwargs):
        self.reads.append(np.asarray(tokens).shape[1])
        return self.model.forward(tokens, cache, **kwargs)


@pytest.mark.parametrize("context_length", [512, 48])  # 48: the window slides within turns
@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_each_turn_equals_a_fresh_generation_and_reads_only_what_is_new(context_length,
                                                                         temperature):
    tok = chatml_tokenizer()
    cfg = minillm.ModelConfig(arch="modern", vocab_size=258, context_length=context_length,
                              d_model=16, n_layers=2, n_heads=2, n_kv_heads=1)
    model = minillm.random_model(cfg, seed=3, dtype="float64")
    counting = CountingModel(model)
    knobs = dict(temperature=temperature, top_k=40, repetition_penalty=1.1)
    config = generation_config(max_new_tokens=12, **knobs, stop_tokens=[END])
    conversation = Conversation(counting)
    messages, previous = [USER], []
    for turn in range(3):
        prompt = chat_prompt_ids(tok, messages)
        counting.reads.clear()
        with (pytest.warns(UserWarning, match="longer than the model's context")
              if len(prompt) > context_length else contextlib.nullcontext()):
            reply = list(respond(conversation, prompt, config, np.random.default_rng(turn)))
            expected = minillm.generate(model, prompt, max_new_tokens=12, **knobs, seed=turn,
                                        stop_tokens=[END])
        assert reply == expected[len(prompt):]
        # The cache is as long as this turn can fill, not the whole context.
        assert conversation.cache.capacity == min(context_length, len(prompt) + 12)
        if context_length == 512 and turn:
            # The first read covers at most the prompt's new part (the last reply re-encoded,
            # the new message); the others are one token each.
            assert counting.reads[0] <= len(prompt) - len(previous) + 12
            assert counting.reads[1:] == [1] * (len(reply) - 1)
        previous = prompt
        text = tok.decode([t for t in reply if t != END])
        messages = messages + [{"role": "assistant", "content": text}, USER_AGAIN]


@pytest.mark.parametrize("context_length, where", [
    *((context, n) for context in (512, 128) for n in (1, 2, 5, 12, 41, 42, 44)),
    (128, "slide")])  # 128: the reply's 20th token slides the window (then layer calls 41, 42)
def test_a_reply_interrupted_midway_keeps_what_the_cache_holds(context_length, where,
                                                                monkeypatch):
    """Ctrl-C (a KeyboardInterrupt) in the middle of a forward pass, the prompt's or a decode
    step's (`where`: the n-th layer's MLP, some layers' keys already written), or just as the
    window slides: the conversation keeps the tokens its cache holds, and the next turn, the
    cut reply kept as the model's, reads only the rest and equals a fresh generation."""
    tok = chatml_tokenizer()
    cfg = minillm.ModelConfig(arch="modern", vocab_size=258, context_length=context_length,
                              d_model=16, n_layers=2, n_heads=2, n_kv_heads=1)
    model = minillm.random_model(cfg, seed=3, dtype="float64")
    counting = CountingModel(model)
    conversation = Conversation(counting)
    config = generation_config(max_new_tokens=30, temperature=0.9, stop_tokens=())
    calls, mlp = [], model._mlp

    def interrupted(*args):
        calls.append(1)
        if len(calls) == where:
            raise KeyboardInterrupt
        return mlp(*args)

    def reset():  # the window slid; Ctrl-C before the cache starts again
        raise KeyboardInterrupt

    if where == "slide":
        monkeypatch.setattr(conversation.cache, "reset", reset)
    else:
        monkeypatch.setattr(model, "_mlp", interrupted)
    prompt, reply = chat_prompt_ids(tok, [USER]), []
    with pytest.raises(KeyboardInterrupt):
        for token in respond(conversation, prompt, config, np.random.default_rng(0)):
            reply.append(token)
    monkeypatch.undo()
    held = list(conversation.cached)
    # The cache holds what the conversation says it holds; just after a slide, nothing of the
    # window's text yet (its old text, forgotten at the next turn).
    assert conversation.cache.length == len(held) or where == "slide" and held == []
    if context_length == 512:  # the text read so far, but the token of a step cut midway
        assert held == (prompt + reply)[:len(held)]
        assert len(held) == (0 if len(calls) <= cfg.n_layers else len(prompt + reply) - 1)
    text = tok.decode(reply, skip_special_tokens=True)
    messages = [USER, {"role": "assistant", "content": text}, USER_AGAIN]
    prompt = chat_prompt_ids(tok, messages)
    view = prompt[-context_length:]
    counting.reads.clear()
    with (pytest.warns(UserWarning, match="longer than the model's context")
          if len(prompt) > context_length else contextlib.nullcontext()):
        again = list(respond(conversation, prompt, config, np.random.default_rng(1)))
        expected = minillm.generate(model, prompt, config, rng=np.random.default_rng(1))
    assert again == expected[len(prompt):]
    kept = common_prefix_length(held, view)
    assert counting.reads[0] == len(view) - min(kept, len(view) - 1)  # only what is new
    if context_length == 512 and held:  # the first prompt was read: none of it again
        assert kept >= len(chat_prompt_ids(tok, [USER]))


def test_a_conversation_that_changes_its_past_reads_it_again():
    tok = chatml_tokenizer()
    cfg = minillm.ModelConfig(arch="modern", vocab_size=258, context_length=256, d_model=16,
                              n_layers=1, n_heads=2)
    model = minillm.random_model(cfg, seed=4, dtype="float64")
    config = generation_config(max_new_tokens=5, temperature=0, stop_tokens=[END])
    conversation = Conversation(model)
    list(respond(conversation, chat_prompt_ids(tok, [USER, ASSISTANT, USER_AGAIN]), config,
                 None))
    edited = chat_prompt_ids(tok, [USER_AGAIN])  # a different first message
    reply = list(respond(conversation, edited, config, None))
    assert reply == minillm.generate(model, edited, max_new_tokens=5, temperature=0,
                                     stop_tokens=[END])[len(edited):]


def test_the_chat_command_streams_each_reply_and_reuses_the_cache(tmp_path, monkeypatch,
                                                                  capsys):
    import io

    from minillm.cli import main

    cfg = minillm.ModelConfig(arch="modern", vocab_size=258, context_length=512, d_model=16,
                              n_layers=1, n_heads=2)
    model = minillm.random_model(cfg, seed=5)
    model.tokenizer = chatml_tokenizer()
    path = tmp_path / "chat.npz"
    minillm.save(model, path)
    monkeypatch.setattr("sys.stdin", io.StringIO("What is 2+2?\nAnd 3+3?\n\n"))
    assert main(["chat", "--model_path", str(path), "--temperature", "0",
                 "--max_new_tokens", "6"]) == 0
    out, err = capsys.readouterr()
    stats = [line for line in err.splitlines() if line.startswith("[")]
    assert len(stats) == 2 and "0 reused" in stats[0] and "0 reused" not in stats[1]
    prompt = chat_prompt_ids(model.tokenizer, [USER])
    first = minillm.generate(minillm.load(path), prompt, max_new_tokens=6, temperature=0,
                             stop_tokens=[END])
    assert out.startswith(model.tokenizer.decode(first[len(prompt):], skip_special_tokens=True))
    assert out.count("\n") >= 2


def test_the_chat_command_refuses_a_model_without_a_chat_template(tmp_path, capsys):
    from minillm.cli import main

    assert main(["chat", "--model_path", "weights/target.npz"]) == 2
    assert capsys.readouterr().err == (
        "minillm chat: error: --model_path: weights/target.npz has no chat template in its "
        "tokenizer; give one with --template FILE (a Jinja chat template)\n")
    assert main(["chat", "--model_path", "weights/target.npz", "--template", "no.jinja"]) == 2
    assert capsys.readouterr().err == ("minillm chat: error: --template: cannot read no.jinja: "
                                       "No such file or directory\n")
    (tmp_path / "latin1.jinja").write_bytes("{{ '\u00e9' }}".encode("latin-1"))
    assert main(["chat", "--model_path", "weights/target.npz", "--template",
                 str(tmp_path / "latin1.jinja")]) == 2
    assert capsys.readouterr().err == (f"minillm chat: error: --template: "
                                       f"{tmp_path / 'latin1.jinja'} is not UTF-8 text\n")


def test_the_chat_command_renders_with_a_template_file_and_stops_at_its_turn_end(
        tmp_path, monkeypatch, capsys):
    import io
    import types

    import minillm.conversation as conversation
    from minillm.cli import main
    from tests.test_chat import TURNS_TEMPLATE, turn_tokenizer

    pytest.importorskip("jinja2")
    cfg = minillm.ModelConfig(arch="modern", vocab_size=260, context_length=512, d_model=16,
                              n_layers=1, n_heads=2)
    model = minillm.random_model(cfg, seed=5)
    model.tokenizer = turn_tokenizer()  # no template of its own
    minillm.save(model, tmp_path / "m.npz")
    (tmp_path / "turns.jinja").write_text(TURNS_TEMPLATE, encoding="utf-8")
    real, calls = conversation.respond, []

    def respond(*args, **kwargs):
        calls.append(types.SimpleNamespace(prompt=list(args[1]), config=args[2]))
        return real(*args, **kwargs)

    monkeypatch.setattr(conversation, "respond", respond)
    monkeypatch.setattr("sys.stdin", io.StringIO("What is 2+2?\n\n"))
    assert main(["chat", "--model_path", str(tmp_path / "m.npz"), "--template",
                 str(tmp_path / "turns.jinja"), "--temperature", "0",
                 "--max_new_tokens", "3"]) == 0
    tokenizer = turn_tokenizer(TURNS_TEMPLATE)
    assert calls[0].prompt == chat_prompt_ids(tokenizer, [USER])
    assert calls[0].config.stop_tokens == (257, 259)  # <eos>, and <end_of_turn> it writes


@pytest.fixture
def chat_model_path(tmp_path):
    cfg = minillm.ModelConfig(arch="modern", vocab_size=258, context_length=512, d_model=16,
                              n_layers=1, n_heads=2)
    model = minillm.random_model(cfg, seed=5)
    model.tokenizer = chatml_tokenizer()
    minillm.save(model, tmp_path / "chat.npz")
    return str(tmp_path / "chat.npz")


def test_ctrl_c_stops_the_reply_keeps_it_and_ctrl_c_at_the_prompt_leaves(chat_model_path,
                                                                         monkeypatch, capsys):
    import types

    import minillm.conversation as conversation
    from minillm.cli import main

    real, prompts = conversation.respond, []

    def respond(*args, **kwargs):  # Ctrl-C arrives after the first reply's second token
        prompts.append(list(args[1]))
        for i, token in enumerate(real(*args, **kwargs)):
            if len(prompts) == 1 and i == 2:
                raise KeyboardInterrupt
            yield token

    lines = iter(["What is 2+2?\n", "And 3+3?\n"])

    def readline():  # after the two messages, Ctrl-C at the prompt
        line = next(lines, None)
        if line is None:
            raise KeyboardInterrupt
        return line

    monkeypatch.setattr(conversation, "respond", respond)
    monkeypatch.setattr("sys.stdin", types.SimpleNamespace(readline=readline,
                                                           isatty=lambda: False))
    assert main(["chat", "--model_path", chat_model_path, "--temperature", "0",
                 "--max_new_tokens", "6"]) == 130
    out, err = capsys.readouterr()
    stats = [line for line in err.splitlines() if line.startswith("[")]
    assert len(stats) == 2 and stats[0].startswith("[reply stopped; ")
    assert "reply stopped" not in stats[1] and "2 new tokens" in stats[0]
    model = minillm.load(chat_model_path)
    first = minillm.generate(model, prompts[0], max_new_tokens=2, temperature=0)[-2:]
    shown = model.tokenizer.decode(first)  # the two tokens shown, kept as the reply
    assert out.startswith(shown + "\n")
    assert prompts[1] == chat_prompt_ids(model.tokenizer, [
        USER, {"role": "assistant", "content": shown}, {"role": "user", "content": "And 3+3?"}])
    # The cache kept the first prompt and the reply so far: the next turn reads only the rest.
    reused = int(stats[1].split(" reused")[0].rsplit(" ", 1)[1])
    assert reused == common_prefix_length(prompts[0] + first, prompts[1]) > len(prompts[0])


def test_on_a_terminal_the_chat_says_how_to_leave_and_prompts(chat_model_path, monkeypatch,
                                                               capsys):
    import types

    from minillm.cli import main

    lines = iter(["\n"])  # an empty line: the chat ends
    monkeypatch.setattr("sys.stdin", types.SimpleNamespace(readline=lambda: next(lines),
                                                           isatty=lambda: True))
    assert main(["chat", "--model_path", chat_model_path]) == 0
    assert capsys.readouterr().err == ("[an empty line or Ctrl-D ends the chat; Ctrl-C stops a "
                                       "reply]\n> ")


def test_the_chat_says_when_a_reply_was_cut_at_max_new_tokens(chat_model_path, monkeypatch,
                                                               capsys):
    """The summary names --max_new_tokens when it ended the reply; not when an end token or a
    --stop text did, even at the last token allowed."""
    import io

    import minillm.conversation as conversation
    from minillm.cli import main

    def chat(*flags, reply=None):
        if reply is not None:  # the model's reply, as given
            monkeypatch.setattr(conversation, "respond", lambda *args, **kwargs: iter(reply))
        monkeypatch.setattr("sys.stdin", io.StringIO("What is 2+2?\n\n"))
        assert main(["chat", "--model_path", chat_model_path, "--temperature", "0",
                     "--max_new_tokens", "3", *flags]) == 0
        return [line for line in capsys.readouterr().err.splitlines() if line.startswith("[")]

    model = minillm.load(chat_model_path)
    prompt = chat_prompt_ids(model.tokenizer, [USER])
    new = minillm.generate(model, prompt, max_new_tokens=3, temperature=0)[len(prompt):]
    assert END not in new
    [cut] = chat()
    assert cut.endswith(" 0 reused from the cache; 3 new tokens, cut at --max_new_tokens, "
                        + cut.rsplit(", ", 1)[1])
    text = model.tokenizer.decode(new)
    assert "\\" not in text and "\ufffd" not in text
    [stopped] = chat("--stop", text)  # the last token completes the stop text
    assert "3 new tokens, " in stopped and "cut" not in stopped
    [ended] = chat(reply=[new[0], new[1], END])  # the last token allowed is the end token
    assert "3 new tokens, " in ended and "cut" not in ended


def test_the_chat_ends_a_reply_at_a_stop_text_and_keeps_the_text_before_it(chat_model_path,
                                                                           monkeypatch, capsys):
    import io

    from minillm.cli import main

    model = minillm.load(chat_model_path)
    prompt = chat_prompt_ids(model.tokenizer, [USER])
    reply = model.tokenizer.decode(minillm.generate(model, prompt, max_new_tokens=12,
                                                    temperature=0, stop_tokens=[END])[len(prompt):])
    stop = reply[4:6]  # a text inside the reply: it ends there, and is not printed
    assert len(stop) == 2 and "\\" not in stop and END not in model.tokenizer.encode(reply)
    monkeypatch.setattr("sys.stdin", io.StringIO("What is 2+2?\n\n"))
    assert main(["chat", "--model_path", chat_model_path, "--temperature", "0",
                 "--max_new_tokens", "12", "--stop", stop]) == 0
    assert capsys.readouterr().out == reply[:reply.index(stop)] + "\n"


def test_help_shows_how_to_make_and_use_a_conversation():
    """help(Conversation) shows a short example (Conversation(model), then respond at every
    turn), and the example runs."""
    import pydoc
    import textwrap

    shown = pydoc.plain(pydoc.render_doc(Conversation))
    assert "Conversation(model)" in shown and "respond(chat, prompt" in shown
    example = textwrap.dedent(Conversation.__doc__.split("what the cache lacks.", 1)[1])
    names = {}
    exec(compile(example, "Conversation.__doc__", "exec"), names)
    assert len(names["reply"]) == 5 and names["chat"].cached[:3] == [1, 2, 3]
