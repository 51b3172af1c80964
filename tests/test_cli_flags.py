"""The flags as a user types them: both spellings of every flag, one name for the model, values
the help offers, negative numbers, errors that name the flag, contradictory flags refused in one
line, --plot checked before the work, and the files a command reads named when they are not
UTF-8."""
import json

import numpy as np
import pytest

import minillm
from minillm.cli import COMMANDS, build_parser, main
from tests.test_cli import files, run_cli  # noqa: F401 (a fixture)


def commands():
    return build_parser()._subparsers._group_actions[0].choices


def one_line_error(capsys, *argv):
    """(exit code, stderr) of a command that fails, by argparse's exit or by main's return."""
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exit:
        code = exit.code
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and "Traceback" not in err, err
    return code, err


# -- (a) both spellings of every flag ---------------------------------------------------------

@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_flag_of_every_command_parses_in_both_spellings(name):
    parser = commands()[name]
    options = {option: action for action in parser._actions for option in action.option_strings}
    longs = [option for option in options if option.startswith("--") and
             ("_" in option or "-" in option[2:])]
    assert longs or name == "fetch", name
    for option in longs:
        name_part = option[2:]
        other = "--" + (name_part.replace("_", "-") if "_" in name_part
                        else name_part.replace("-", "_"))
        assert options.get(other) is options[option], (name, option, other)


def test_the_hyphenated_flags_give_the_same_text(files, capsys):
    underscored = ["--model_path", files["ids"], "--prompt_ids", "1,2,3", "--max_new_tokens", 8,
                   "--top_p", 0.9, "--top_k", 20, "--repetition_penalty", 1.3, "--seed", 4]
    code, expected, _ = run_cli(capsys, "generate", *underscored)
    assert code == 0 and len(expected.split()) == 11
    hyphenated = [a.replace("_", "-") if str(a).startswith("--") else a for a in underscored]
    assert "--max-new-tokens" in hyphenated and "--model-path" in hyphenated
    code, out, _ = run_cli(capsys, "generate", *hyphenated)
    assert code == 0 and out == expected
    code, out, _ = run_cli(capsys, "generate", "--model-path=" + files["ids"],
                           "--prompt-ids=1,2,3", "--max-new=8", "--top-p", 0.9, "--top-k", 20,
                           "--repetition-penalty", 1.3, "--seed", 4)  # =, and abbreviated
    assert code == 0 and out == expected


def test_the_help_shows_one_spelling_and_says_the_other_parses(capsys):
    with pytest.raises(SystemExit):
        main(["generate", "--help"])
    out = capsys.readouterr().out
    assert "--max_new_tokens N" in out and "--max-new-tokens N" not in out
    assert "--max-new-tokens for --max_new_tokens" in " ".join(out.split())


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_help_shows_its_flags_with_underscores(name, capsys):
    """--help shows each long flag with _ between its words, --no_browser as --max_new_tokens
    (either spelling parses)."""
    parser = commands()[name]
    shown = [option for action in parser._actions for option in action.option_strings
             if option.startswith("--") and option not in getattr(action, "other_spellings", ())]
    assert [flag for flag in shown if "-" in flag[2:]] == [], name
    with pytest.raises(SystemExit):
        main([name, "--help"])
    out = capsys.readouterr().out
    assert all(flag in out for flag in shown if flag != "--help")


def test_every_flag_has_help_and_convert_names_every_gguf_family(capsys):
    from minillm.files.gguf_config import ARCHITECTURES

    for name, parser in commands().items():
        assert [a.dest for a in parser._actions if not a.help] == [], name
    with pytest.raises(SystemExit):
        main(["convert", "--help"])
    about = " ".join(capsys.readouterr().out.split()).split("positional arguments")[0]
    assert [arch for arch in ARCHITECTURES if f" {arch}," not in about.replace(")", ",")] == []


def test_an_error_names_the_flag_once(capsys):
    code, err = one_line_error(capsys, "generate", "--top-k", "abc")
    assert code == 2 and "argument --top_k: must be an integer >= 0" in err
    assert "--top-k" not in err


# -- (b) one name for the model -----------------------------------------------------------------

@pytest.mark.parametrize("argv", [
    ["generate", "Hi"], ["next", "Hi"], ["chat"], ["eval"], ["desk", "--no-browser"],
    ["inspect"], ["export", "{out}", "--to", "hf"], ["quantize", "{out}/q.npz"]])
@pytest.mark.parametrize("spelling", ["--model_path", "--model-path"])
def test_every_command_takes_the_model_as_model_path(capsys, tmp_path, argv, spelling):
    argv = [a.format(out=tmp_path) for a in argv]
    code, err = one_line_error(capsys, *argv, spelling, tmp_path / "absent.npz")
    assert code == 2 and err.startswith(f"minillm {argv[0]}: error: --model_path: no such file "
                                        f"or fetched model: {tmp_path / 'absent.npz'}")


def test_the_desk_takes_model_path_and_keeps_model_as_its_older_name(capsys, monkeypatch):
    import minillm.cli.desk as desk
    from minillm.cli.common import UsageError

    loads = []

    def load_model(path, flag="--model_path", **kwargs):
        loads.append((path, flag))
        raise UsageError("stop here")

    monkeypatch.setattr(desk, "load_model", load_model)
    for flag in ("--model_path", "--model-path", "--model"):
        assert main(["desk", flag, "m.npz", "--no-browser"]) == 2
    assert loads == [("m.npz", "--model_path"), ("m.npz", "--model_path"), ("m.npz", "--model")]
    capsys.readouterr()
    code, err = one_line_error(capsys, "desk", "--model_path", "a.npz", "--model", "b.npz")
    assert code == 2 and err == ("minillm desk: error: --model_path: not with --model, its "
                                 "older name; give the model once\n")
    with pytest.raises(SystemExit):
        main(["desk", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--model_path PATH_OR_NAME" in out and "the same as --model_path" in out


def test_the_file_commands_take_model_path_in_place_of_their_first_argument(files, capsys,
                                                                            tmp_path):
    code, expected, _ = run_cli(capsys, "inspect", files["ids"])
    code, out, _ = run_cli(capsys, "inspect", "--model-path", files["ids"])
    assert code == 0 and out == expected
    assert run_cli(capsys, "quantize", "--model_path", files["ids"], tmp_path / "q.npz")[0] == 0
    assert run_cli(capsys, "quantize", files["ids"], tmp_path / "p.npz")[0] == 0
    with np.load(tmp_path / "q.npz") as q, np.load(tmp_path / "p.npz") as p:
        assert q.files == p.files and all(np.array_equal(q[n], p[n]) for n in q.files)
    code, err = one_line_error(capsys, "quantize", "--model_path", files["ids"], files["ids"],
                               tmp_path / "r.npz")
    assert code == 2 and "--model_path: the model is given twice" in err
    code, err = one_line_error(capsys, "quantize", "--model_path", files["ids"])
    assert code == 2 and "output: missing" in err
    pytest.importorskip("safetensors")
    assert run_cli(capsys, "export", "--model_path", files["ids"], tmp_path / "hf", "--to",
                   "hf")[0] == 0
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["vocab_size"] == 258


# -- (c), (d) the seed and the stop texts -------------------------------------------------------

@pytest.mark.parametrize("typed", ["none", "None"])
def test_seed_none_as_the_help_offers_it_is_a_fresh_seed(files, capsys, monkeypatch, typed):
    import importlib

    seen = []
    monkeypatch.setattr(importlib.import_module("minillm.generate"), "stream",
                        lambda model, prompt, **knobs: seen.append(knobs) or iter([]))
    code, _, _ = run_cli(capsys, "generate", "--model_path", files["ids"], "--prompt_ids", "1",
                         "--seed", typed)
    assert code == 0 and seen[0]["seed"] is None
    with pytest.raises(SystemExit):
        main(["generate", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "(None: fresh entropy) (default: 0; none or None: a fresh seed each run)" in out


def test_every_none_the_help_offers_is_taken(files, capsys):
    """top_k, top_p, min_p and the penalties say "0 or None: off" (or 1): none turns them off."""
    code, expected, _ = run_cli(capsys, "generate", "--model_path", files["ids"], "--prompt_ids",
                                "1,2", "--max_new_tokens", 6)
    code, out, _ = run_cli(capsys, "generate", "--model_path", files["ids"], "--prompt_ids",
                           "1,2", "--max_new_tokens", 6, "--top_k", "none", "--top_p", "None",
                           "--min_p", "none", "--repetition_penalty", "none",
                           "--frequency_penalty", "none", "--presence_penalty", "none")
    assert code == 0 and out == expected
    code, err = one_line_error(capsys, "generate", "--temperature", "none", "Hi")
    assert code == 2 and "argument --temperature: must be a number >= 0" in err


@pytest.mark.parametrize("argv, message", [
    (["--seed", "-1"], "argument --seed: must be an integer >= 0, or none for a fresh seed each "
                       "run, got '-1'"),
    (["--seed", "1.5"], "argument --seed: must be an integer >= 0"),
    (["--stop", ""], "argument --stop: empty text; a stop text needs at least one character"),
    (["--stop=", "--greedy"], "argument --stop: empty text")])
def test_the_seed_and_stop_errors_name_their_flag(files, capsys, argv, message):
    code, err = one_line_error(capsys, "generate", "--model_path", files["text"], "Hi", *argv)
    assert code == 2 and message in err and "stop_strings" not in err


# -- (e) negative and non-finite numbers --------------------------------------------------------

def test_negative_numbers_are_values_of_their_flags(files, capsys):
    model = minillm.load(files["ids"])
    knobs = dict(max_new_tokens=10, seed=2, presence_penalty=-1.5, frequency_penalty=-0.1)
    expected = minillm.generate(model, [1, 2, 3], **knobs)
    code, out, _ = run_cli(capsys, "generate", "--model_path", files["ids"], "--prompt_ids",
                           "1,2,3", "--max_new_tokens", 10, "--seed", 2, "--presence_penalty",
                           "-1.5", "--frequency-penalty", "-1e-1")
    assert code == 0 and [int(t) for t in out.split()] == expected


@pytest.mark.parametrize("flag, value", [("--presence_penalty", "-inf"),
                                         ("--presence_penalty", "inf"),
                                         ("--frequency-penalty", "-inf"),
                                         ("--temperature", "inf"), ("--top_p", "nan"),
                                         ("--min_p", "-nan")])
def test_a_number_that_is_not_finite_is_refused_by_its_flag(capsys, tmp_path, flag, value):
    """Before the model is loaded: the model named here does not exist."""
    for command in ("generate", "next"):
        code, err = one_line_error(capsys, command, "--model_path", tmp_path / "absent.npz",
                                   "Hi", flag, value)
        assert code == 2 and err == (f"minillm {command}: error: {flag}: must be a finite "
                                     f"number, got {float(value)}\n")


# -- (f) convert's files ------------------------------------------------------------------------

def test_convert_names_a_missing_or_unreadable_config_in_one_line(capsys, tmp_path):
    out = tmp_path / "o.npz"
    code, err = one_line_error(capsys, "convert", tmp_path / "w.safetensors", out, "--config",
                               "missing.json")
    assert code == 2 and err == "minillm convert: error: --config: no such file: missing.json\n"
    code, err = one_line_error(capsys, "convert", tmp_path / "w.safetensors", out, "--config",
                               tmp_path)
    assert code == 2 and err == f"minillm convert: error: --config: {tmp_path} is a folder, " \
                                "not a text file\n"
    (tmp_path / "broken.json").write_text("{", encoding="utf-8")
    code, err = one_line_error(capsys, "convert", tmp_path / "w.safetensors", out, "--config",
                               tmp_path / "broken.json")
    assert code == 2 and err.startswith(f"minillm convert: error: --config: "
                                        f"{tmp_path / 'broken.json'} is not valid JSON (")
    code, err = one_line_error(capsys, "convert", tmp_path / "w.safetensors", out, "--naming",
                               "mine.json")
    assert code == 2 and err == "minillm convert: error: --naming: no such file: mine.json\n"


def test_a_config_file_that_is_not_utf8_is_named(tmp_path):
    from minillm.files import config_from_json_file

    (tmp_path / "config.json").write_bytes(b'{"model_type": "caf\xe9"}')
    with pytest.raises(ValueError, match=r"config.json is not UTF-8 text \(byte 0xe9 at offset "
                                         r"19\)"):
        config_from_json_file(tmp_path / "config.json")


@pytest.mark.parametrize("name", ["config.json", "tokenizer.json", "tokenizer_config.json"])
def test_convert_names_a_folders_file_that_is_not_utf8(capsys, tmp_path, name):
    folder = tmp_path / "hf"
    folder.mkdir()
    for each in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (folder / each).write_text("{}", encoding="utf-8")
    (folder / name).write_bytes(b'{"x": "caf\xe9"}')
    code, err = one_line_error(capsys, "convert", folder, tmp_path / "o.npz")
    assert code == 2 and err == (f"minillm convert: error: {folder / name} is not UTF-8 text "
                                 "(byte 0xe9 at offset 10); save it as UTF-8\n")
    if name != "config.json":  # left out with --no_tokenizer: not read, not checked
        code, err = one_line_error(capsys, "convert", folder, tmp_path / "o.npz",
                                   "--no-tokenizer")
        assert code == 2 and name not in err


# -- (g) --plot checked before the work ---------------------------------------------------------

def test_plot_without_matplotlib_is_refused_before_the_model_loads(files, capsys, monkeypatch,
                                                                   tmp_path):
    import sys

    import minillm.cli.generate as generate

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now fails
    monkeypatch.setattr(generate, "load_model", lambda *a, **k: pytest.fail("loaded the model"))
    code, err = one_line_error(capsys, "generate", "--model_path", files["text"], "Hi", "--plot",
                               tmp_path / "x.png")
    assert code == 2 and err.startswith("minillm generate: error: --plot needs matplotlib: pip "
                                        "install matplotlib (or pip install -e ")


def test_plot_into_a_missing_folder_is_refused_before_the_model_loads(files, capsys,
                                                                      monkeypatch, tmp_path):
    import minillm.cli.generate as generate

    pytest.importorskip("matplotlib")
    monkeypatch.setattr(generate, "load_model", lambda *a, **k: pytest.fail("loaded the model"))
    code, err = one_line_error(capsys, "generate", "Hi", "--plot", tmp_path / "no" / "x.png")
    assert code == 2 and err == (f"minillm generate: error: --plot: no folder {tmp_path / 'no'} "
                                 f"to write {tmp_path / 'no' / 'x.png'} into\n")


# -- (h) contradictory flags --------------------------------------------------------------------

@pytest.mark.parametrize("argv, message", [
    (["--temperature", "0.5", "--greedy"], "--greedy: not with --temperature 0.5; --greedy is "
                                           "--temperature 0, give one"),
    (["--greedy", "--temp", "1"], "--greedy: not with --temp 1;"),
    (["--logprobs", "--explain"], "--explain: not with --logprobs;"),
    (["--logprobs", "--plot", "x.png"], "--plot: not with --logprobs;"),
    (["--explain", "--draft", "ngram"], "--explain: not with --draft ngram:"),
    (["--no-cache", "--draft", "ngram"], "--no-cache: not with --draft ngram: speculative "
                                         "decoding always uses the KV cache"),
    (["--draft", "ngram", "--draft_model", "d.npz"], "--draft: not with --draft_model; give one "
                                                      "drafter"),
    (["--draft_k", "3"], "--draft_k: guesses need a drafter")])
def test_contradictory_flags_are_refused_in_one_line_naming_both(files, capsys, monkeypatch,
                                                                 argv, message):
    import minillm.cli.generate as generate

    monkeypatch.setattr(generate, "load_model", lambda *a, **k: pytest.fail("loaded the model"))
    code, err = one_line_error(capsys, "generate", "--model_path", files["text"], "Hi", *argv)
    assert code == 2 and err == f"minillm generate: error: {message}" + err[
        len("minillm generate: error: ") + len(message):]


@pytest.mark.parametrize("argv", [["--greedy"], ["--greedy", "--temperature", "0"],
                                  ["--temperature", "0"]])
def test_greedy_alone_or_with_temperature_0_is_greedy(files, capsys, argv):
    model = minillm.load(files["ids"])
    code, out, _ = run_cli(capsys, "generate", "--model_path", files["ids"], "--prompt_ids",
                           "1,2", "--max_new_tokens", 6, *argv)
    assert code == 0 and [int(t) for t in out.split()] == minillm.generate(
        model, [1, 2], max_new_tokens=6, temperature=0)
