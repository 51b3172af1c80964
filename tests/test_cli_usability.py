"""What a user types and reads: stop texts as typed, end tokens, prompts from a file or standard
input, long prompts, the summary line, and errors in the command line's own words."""
import io
import types

import numpy as np
import pytest

import minillm
from minillm.cli import main
from tests.test_cli import files, run_cli  # noqa: F401 (a fixture)


def greedy_text(path, prompt, n, **knobs):
    model = minillm.load(path)
    ids = model.tokenizer.encode(prompt)
    return model, ids, minillm.generate(model, ids, max_new_tokens=n, temperature=0,
                                        **knobs)[len(ids):]


def test_stop_texts_are_decoded_as_typed(files, capsys):
    model, _, new = greedy_text(files["text"], "Hi", 12)
    text = model.tokenizer.decode(new)
    stop = text[3:5]
    assert "\\" not in stop  # so that escaping it below is what decodes it
    typed = "".join(f"\\u{ord(c):04x}" for c in stop)  # "\u0041\u0062": the same text, escaped
    code, out, _ = run_cli(capsys, "generate", "--model_path", files["text"], "Hi",
                           "--max_new_tokens", 12, "--greedy", "--stop", typed)
    assert code == 0 and out == "Hi" + text[:text.index(stop)] + "\n"
    with pytest.raises(SystemExit) as exit:  # argparse's own error: one line, exit code 2
        main(["generate", "--model_path", files["text"], "Hi", "--stop", "a\\qb"])
    out, err = capsys.readouterr()
    assert exit.value.code == 2 and out == "" and err.startswith(
        "minillm generate: error: argument --stop: unknown escape \\q in \"a\\qb\"")


@pytest.mark.parametrize("typed, text", [("\\n\\n", "\n\n"), ("a\\tb", "a\tb"),
                                         ("\\\\n", "\\n"), ("\\u00e9t\\u00e9", "été"),
                                         ("plain", "plain"), ("\\r\\n", "\r\n")])
def test_the_escapes_of_a_stop_text(typed, text):
    from minillm.cli.common import escaped

    assert escaped(typed) == text


def test_the_help_prints_its_example_as_typed(capsys):
    with pytest.raises(SystemExit):
        main(["generate", "--help"])
    out = " ".join(capsys.readouterr().out.split())  # the help's lines are wrapped
    assert '--stop "\\n\\n"' in out and "\\n, \\t, \\r, \\\\ and \\uXXXX are decoded" in out


def test_the_end_token_is_not_printed_unless_asked(files, capsys):
    model, _, new = greedy_text(files["text"], "Hi", 6)
    end = new[3]  # taken as the end token: the text ends with it
    shown = model.tokenizer.decode(new[:3])
    for extra, expected in (([], shown), (["--show_special"], shown +
                                           model.tokenizer.decode([end]))):
        code, out, _ = run_cli(capsys, "generate", "--model_path", files["text"], "Hi",
                               "--max_new_tokens", 6, "--greedy", "--stop_ids", end, *extra)
        assert code == 0 and out == "Hi" + expected + "\n"


def test_the_prompt_from_standard_input_or_a_file(files, capsys, monkeypatch, tmp_path):
    _, _, new = greedy_text(files["text"], "Hi there", 5)
    expected = [" ".join(map(str, new))]
    (tmp_path / "prompt.txt").write_text("Hi there", encoding="utf-8")
    monkeypatch.setattr("sys.stdin", types.SimpleNamespace(buffer=io.BytesIO(b"Hi there")))
    outs = []
    for source in (["-"], ["--prompt_file", tmp_path / "prompt.txt"], ["Hi there"]):
        code, out, err = run_cli(capsys, "generate", "--model_path", files["text"], *source,
                                 "--max_new_tokens", 5, "--greedy")
        assert code == 0, err
        outs.append(out)
    assert outs[0] == outs[1] == outs[2] == "Hi there" + minillm.load(
        files["text"]).tokenizer.decode(new) + "\n"


@pytest.mark.parametrize("flag", ["--prompt_file", "--text"])
def test_a_text_file_that_is_not_utf8_or_is_a_folder_is_named(files, capsys, tmp_path, flag):
    (tmp_path / "latin1.txt").write_bytes("café".encode("latin-1"))
    command = ["generate"] if flag == "--prompt_file" else ["eval"]
    code, _, err = run_cli(capsys, *command, "--model_path", files["text"], flag,
                           tmp_path / "latin1.txt")
    assert code == 2 and err == (f"minillm {command[0]}: error: {flag}: {tmp_path / 'latin1.txt'}"
                                 " is not UTF-8 text (byte 0xe9 at offset 3); save it as UTF-8\n")
    code, _, err = run_cli(capsys, *command, "--model_path", files["text"], flag, tmp_path)
    assert code == 2 and err.endswith(f"{flag}: {tmp_path} is a folder, not a text file\n")


def test_a_model_path_that_is_a_folder_or_a_gguf_file_says_what_to_do(capsys, tmp_path):
    (tmp_path / "config.json").write_text("{}")
    code, _, err = run_cli(capsys, "generate", "--model_path", tmp_path, "Hi")
    assert code == 2 and "a folder (a Hugging Face model folder?), not an .npz file; convert " \
        "it first: minillm convert" in err
    (tmp_path / "m.gguf").write_bytes(b"GGUF" + bytes(28))
    code, _, err = run_cli(capsys, "chat", "--model_path", tmp_path / "m.gguf")
    assert code == 2 and err == (f"minillm chat: error: --model_path: {tmp_path / 'm.gguf'}: "
                                 f"a GGUF file, "
                                 f"not an .npz file; convert it first: minillm convert "
                                 f"{tmp_path / 'm.gguf'} model.npz\n")


def test_a_long_prompt_is_cut_with_a_warning(files, capsys):
    model = minillm.load(files["ids"])  # context 16
    with pytest.warns(UserWarning, match="^prompt: 20 tokens, longer than the model's context "
                                         "of 16: only the last 16 are read$"):
        minillm.generate(model, list(range(1, 21)), max_new_tokens=2)
    with pytest.warns(UserWarning, match="^prompt 1: 17 tokens"):
        minillm.generate(model, [[1, 2], list(range(1, 18))], max_new_tokens=2)
    with pytest.warns(UserWarning, match="^prompt: 18 tokens"):
        minillm.speculative_generate(model, "ngram", list(range(1, 19)), max_new_tokens=2)
    code, _, err = run_cli(capsys, "generate", "--model_path", files["ids"], "--prompt_ids",
                           ",".join(map(str, range(1, 21))), "--max_new_tokens", 2)
    lines = err.splitlines()
    assert code == 0 and lines[0] == ("minillm generate: warning: prompt: 20 tokens, longer "
                                      "than the model's context of 16: only the last 16 are read")
    assert lines[1].startswith("[prompt 16 tokens read in ") and "; 2 new tokens, the last 1 " \
        "in " in lines[1]


@pytest.mark.parametrize("argv, expected", [
    (["generate", "--top_k", "-1", "Hi"], "minillm generate: error: --top_k: must be an "
                                          "integer >= 0"),
    (["next", "--frequency_penalty", "nan", "Hi"], "minillm next: error: --frequency_penalty: "
                                                   "must be a finite number"),
    (["generate", "--no_such_flag", "Hi"], "minillm generate: error: unrecognized arguments: "
                                           "--no_such_flag (see minillm generate --help)"),
    (["chat", "--model_path", "x.npz", "--nope"], "minillm chat: error: unrecognized "
                                                  "arguments: --nope (see minillm chat --help)")])
def test_errors_name_the_flag_and_the_help_of_the_subcommand(files, capsys, argv, expected):
    try:
        code = main([a if a != "Hi" else "Hi" for a in argv] + (
            ["--model_path", files["text"]] if argv[0] != "chat" else []))
    except SystemExit as exit:
        code = exit.code
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(expected) and len(err.splitlines()) == 1


def test_frequency_and_presence_penalties_on_the_command_line(files, capsys):
    model = minillm.load(files["ids"])
    knobs = dict(max_new_tokens=12, seed=3, frequency_penalty=3.0, presence_penalty=2.0)
    expected = minillm.generate(model, [1, 2, 3], **knobs)[3:]
    assert expected != minillm.generate(model, [1, 2, 3], max_new_tokens=12, seed=3)[3:]
    code, out, _ = run_cli(capsys, "generate", "--model_path", files["ids"], "--prompt_ids",
                           "1,2,3", "--max_new_tokens", 12, "--seed", 3, "--frequency_penalty",
                           3.0, "--presence_penalty", 2.0)
    assert code == 0 and [int(t) for t in out.split()] == [1, 2, 3] + expected
    probs = minillm.filtered_probs(
        model.forward(np.array([[1, 2, 3]]))[0, -1], frequency_penalty=3.0, presence_penalty=2.0,
        history=[1, 2, 3])
    code, out, _ = run_cli(capsys, "next", "--model_path", files["ids"], "--prompt_ids", "1,2,3",
                           "--frequency_penalty", 3.0, "--presence_penalty", 2.0, "--top", 1)
    best = int(np.argmax(probs))
    assert code == 0 and f"#{best} " in out and f"{probs[best]:7.4f}" in out
    assert "frequency_penalty 3.0, presence_penalty 2.0, penalty_window 64" in out


def test_a_conversation_longer_than_the_context_is_cut_with_a_warning(capsys, monkeypatch,
                                                                      tmp_path):
    """conversation.respond says, as generate does of a long prompt, that it reads only the
    last window; minillm chat shows it as one warning line."""
    import warnings

    from minillm.conversation import Conversation, respond
    from tests.test_chat import chatml_tokenizer

    cfg = minillm.ModelConfig(arch="modern", vocab_size=258, context_length=16, d_model=16,
                              n_layers=1, n_heads=2)
    model = minillm.random_model(cfg, seed=5)
    with pytest.warns(UserWarning, match="^conversation: 20 tokens, longer than the model's "
                                         "context of 16: only the last 16 are read$"):
        list(respond(Conversation(model), list(range(1, 21)), max_new_tokens=2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a conversation that fits: no warning
        list(respond(Conversation(model), list(range(1, 17)), max_new_tokens=2))
    model.tokenizer = chatml_tokenizer()
    minillm.save(model, tmp_path / "chat.npz")
    monkeypatch.setattr("sys.stdin", io.StringIO("Hello there, how are you?\n\n"))
    assert main(["chat", "--model_path", str(tmp_path / "chat.npz"), "--temperature", "0",
                 "--max_new_tokens", "2"]) == 0
    err = capsys.readouterr().err
    assert err.startswith("minillm chat: warning: conversation: ") and (
        "tokens, longer than the model's context of 16: only the last 16 are read\n" in err)


def test_special_tokens_are_printed_only_with_show_special(capsys, tmp_path):
    """The prompt's <bos> and every special token drawn stay out of the text, as llama.cpp
    prints it; --show_special prints each one, the end token included."""
    from tests.test_chat import turn_tokenizer

    cfg = minillm.ModelConfig(arch="modern", vocab_size=260, context_length=64, d_model=16,
                              n_layers=1, n_heads=2)
    model = minillm.random_model(cfg, seed=2, std=0.5)
    model.tokenizer = turn_tokenizer()  # <bos> first in every prompt, as Gemma's
    path = tmp_path / "m.npz"
    minillm.save(model, path)
    prompt = model.tokenizer.encode("Hi", add_special_tokens=True)
    new = minillm.generate(model, prompt, max_new_tokens=40, temperature=0,
                           stop_tokens=())[len(prompt):]
    special = set(model.tokenizer.special_tokens.values())
    assert prompt[0] == 256 and special & set(new)  # drawn as well: <eos>, a turn marker
    tok = model.tokenizer
    for extra, shown in (([], tok.decode(prompt + new, skip_special_tokens=True)),
                         (["--show_special"], tok.decode(prompt + new))):
        code, out, _ = run_cli(capsys, "generate", "--model_path", path, "Hi", "--greedy",
                               "--max_new_tokens", 40, "--stop_ids", "", *extra)
        assert code == 0 and out == shown + "\n"
    assert out.startswith("<bos>Hi")
    code, out, _ = run_cli(capsys, "generate", "--model_path", path, "Hi", "--explain",
                           "--max_new_tokens", 2)  # the marked text too starts with the prompt
    assert code == 0 and out.startswith("Hi[")


def chat_model_file(folder, name="chat.npz"):
    from tests.test_chat import chatml_tokenizer

    cfg = minillm.ModelConfig(arch="modern", vocab_size=260, context_length=256, d_model=16,
                              n_layers=1, n_heads=2)
    model = minillm.random_model(cfg, seed=5)
    model.tokenizer = chatml_tokenizer()  # SmolLM2's template; <|im_end|> (257) ends a turn
    minillm.save(model, folder / name)
    return folder / name, model


def test_a_chat_model_that_ends_its_turn_at_once_is_told_of_chat(capsys, monkeypatch,
                                                                  tmp_path):
    """generate reads a prompt as text to continue; a chat model given one may end its turn
    at once (SmolLM2's first token is <|im_end|>): a note on stderr then names --chat and
    minillm chat. --chat reads the prompt as a user's message and prints the reply alone,
    drawn from the chat's knobs."""
    from minillm.cli import generate
    from minillm.knobs import CHAT_DEFAULTS
    from minillm.text.chat_template import chat_prompt_ids

    path, model = chat_model_file(tmp_path)
    real, drawn = generate.token_stream, {}

    def ended_at_once(model, prompt, args, stats=None):  # the model's turn ends at once
        drawn["prompt"] = prompt
        return iter(drawn.get("tokens", [257]))

    monkeypatch.setattr(generate, "token_stream", ended_at_once)
    code, out, err = run_cli(capsys, "generate", "--model_path", path, "What is 2+2?")
    assert code == 0 and out == "What is 2+2?\n"
    assert err.splitlines()[-1] == (
        f"minillm generate: note: {path} is a chat model and ended its turn at once "
        f"(<|im_end|> after 1 new token); --chat reads the prompt as a user's message, and "
        f"minillm chat --model_path {path} converses")
    drawn["tokens"] = [72, 105, 33, 10, 257]  # the turn ends later: no note
    assert len(drawn["tokens"]) > generate.EARLY_END
    assert "note" not in run_cli(capsys, "generate", "--model_path", path, "Hi")[2]
    monkeypatch.setattr(generate, "token_stream", real)
    prompt = chat_prompt_ids(model.tokenizer, [{"role": "user", "content": "What is 2+2?"}])
    for flags, knobs in (([], CHAT_DEFAULTS), (["--temperature", "0"], dict(temperature=0))):
        code, out, err = run_cli(capsys, "generate", "--model_path", path, "What is 2+2?",
                                 "--chat", "--max_new_tokens", 8, *flags)
        new = minillm.generate(model, prompt, **dict(knobs, max_new_tokens=8))[len(prompt):]
        assert code == 0 and out == model.tokenizer.decode(new, skip_special_tokens=True) + "\n"
        assert f"[prompt {len(prompt)} tokens" in err and "note" not in err
    code, _, err = run_cli(capsys, "generate", "--chat", "In the beginning")
    assert code == 2 and err == ("minillm generate: error: --chat: target.npz has no chat "
                                 "template; it continues text as it is (leave out --chat)\n")
    code, _, err = run_cli(capsys, "generate", "--model_path", path, "--chat", "--prompt_ids",
                           "1,2")
    assert code == 2 and "--chat: not with --prompt_ids" in err


def test_chat_without_a_model_takes_the_fetched_chat_model_or_says_how_to_fetch_one(
        capsys, monkeypatch, tmp_path):
    from minillm.files.registry import MODELS

    monkeypatch.setenv("MINILLM_CACHE", str(tmp_path))
    monkeypatch.setattr("sys.stdin", io.StringIO("What is 2+2?\n\n"))
    source = MODELS["smollm2-135m-instruct"]
    code, out, err = run_cli(capsys, "chat")
    assert code == 2 and out == "" and err == (
        "minillm chat: error: --model_path: no chat model given, and none fetched yet; fetch "
        f"one with: minillm fetch smollm2-135m-instruct (a {source.size / 1e6:.0f} MB "
        f"download, converted in seconds to a {source.npz_size / 1e6:.0f} MB file), or give "
        "--model_path (the shipped model does not chat)\n")
    path, _ = chat_model_file(tmp_path, "smollm2-135m-instruct-int8.npz")  # int8: found too
    monkeypatch.setattr("sys.stdin", io.StringIO("What is 2+2?\n\n"))
    code, out, err = run_cli(capsys, "chat", "--max_new_tokens", 3)
    assert code == 0 and out.count("\n") == 1
    assert err.splitlines()[0] == (f"minillm chat: smollm2-135m-instruct ({path}; --model_path "
                                   "chooses another)")
    assert err.splitlines()[1].startswith("[109 prompt tokens, 0 reused")


def test_inspect_shows_the_chat_template_and_the_end_tokens(capsys, tmp_path):
    from tests.test_chat import TURNS_TEMPLATE, turn_tokenizer

    path, model = chat_model_file(tmp_path)
    code, out, _ = run_cli(capsys, "inspect", path)
    template = model.tokenizer.chat_template
    assert code == 0 and out.endswith(
        "tokenizer: 258 tokens\n"
        f"  chat template   yes, {len(template):,} characters (minillm chat runs it)\n"
        "  end tokens      <|im_end|> 257\n"
        "  BOS             <|im_start|> 256, first in every prompt\n")
    model.tokenizer = turn_tokenizer()  # Gemma's shape: no template of its own
    minillm.save(model, tmp_path / "base.npz")
    code, out, _ = run_cli(capsys, "inspect", tmp_path / "base.npz")
    assert out.endswith("  chat template   none: minillm chat needs --template FILE\n"
                        "  end tokens      <eos> 257\n"
                        "  BOS             <bos> 256, first in every prompt\n")
    model.tokenizer = turn_tokenizer(TURNS_TEMPLATE)  # the template's turn end stops too
    minillm.save(model, tmp_path / "turns.npz")
    code, out, _ = run_cli(capsys, "inspect", tmp_path / "turns.npz")
    assert "  end tokens      <eos> 257, <end_of_turn> 259\n" in out


def test_chat_gives_every_reply_the_constraint_of_its_flag(capsys, monkeypatch, tmp_path):
    """minillm chat builds the constraint over its template's tokenizer (<|im_end|> ends a
    whole reply) and hands it to every turn's respond; here respond is generate with it, as
    conversation.respond's keyword does."""
    import minillm.conversation as conversation
    from minillm.constrain import Constraint

    path, model = chat_model_file(tmp_path)
    seen = []

    def respond(chat, prompt, config, rng, **kwargs):
        seen.append(kwargs)
        new = minillm.generate(chat.model, prompt, config, **kwargs)[len(prompt):]
        yield from new

    monkeypatch.setattr(conversation, "respond", respond)
    for flags, replies in ((["--choice", "yes", "--choice", "no"], {"yes", "no"}),
                           (["--regex", "[0-9]{2}"], None), ([], None)):
        seen.clear()
        monkeypatch.setattr("sys.stdin", io.StringIO("Hi\nAgain\n\n"))
        code, out, err = run_cli(capsys, "chat", "--model_path", path, "--seed", 1, *flags)
        assert code == 0 and len(seen) == 2, err
        if not flags:
            assert seen == [{}, {}]
            continue
        constraint = seen[0]["constraint"]
        assert isinstance(constraint, Constraint) and seen[1]["constraint"] is constraint
        assert 257 in constraint.index.vocabulary.ends  # the template's end of turn
        lines = out.splitlines()
        assert len(lines) == 2 and all(line in replies if replies else
                                       len(line) == 2 and line.isdigit() for line in lines)
