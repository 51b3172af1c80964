"""The `minillm generate` and `minillm next` commands: real runs and every bad input."""
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import minillm
from minillm.cli import main
from tests.helpers import byte_tokenizer

ROOT = Path(__file__).resolve().parents[1]
VOCAB = 258  # the byte tokenizer below: 256 bytes, one merge, one special token


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("models")
    cfg = minillm.ModelConfig(arch="modern", vocab_size=VOCAB, context_length=16, d_model=16,
                              n_layers=2, n_heads=2)
    model = minillm.random_model(cfg, seed=1, std=0.3)
    minillm.save(model, folder / "ids.npz")
    model.tokenizer = byte_tokenizer()
    minillm.save(model, folder / "text.npz")
    (folder / "broken.npz").write_bytes(b"not a zip archive at all")
    return {name: str(folder / f"{name}.npz") for name in ("ids", "text", "broken")}


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_generate_streams_the_same_tokens_as_the_library(files, capsys):
    model = minillm.load(files["ids"])
    expected = minillm.generate(model, [1, 2, 3], max_new_tokens=20, seed=3)  # same defaults
    for extra in ([], ["--no_cache"]):
        code, out, err = run_cli(capsys, "generate", "--model_path", files["ids"],
                                 "--prompt_ids", "1,2,3", "--max_new_tokens", 20, "--seed", 3,
                                 *extra)
        assert code == 0
        assert [int(t) for t in out.split()] == expected
        assert len(err.strip().splitlines()) == 1 and "20 new tokens" in err and "tokens/s" in err
    code, out, _ = run_cli(capsys, "generate", "--model_path", files["ids"], "--prompt_ids",
                           "4 5", "--greedy", "--max_new_tokens", 12, "--top_k", 3)
    assert [int(t) for t in out.split()] == minillm.generate(model, [4, 5], max_new_tokens=12,
                                                             temperature=0)


def test_generate_text_through_the_tokenizer_and_its_stop_token(files, capsys):
    model = minillm.load(files["text"])
    prompt = model.tokenizer.encode("Hi there")
    expected = minillm.generate(model, prompt, max_new_tokens=15, top_k=20, seed=1,
                                stop_tokens=[257])
    code, out, _ = run_cli(capsys, "generate", "--model_path", files["text"], "Hi there",
                           "--max_new_tokens", 15, "--top_k", 20, "--seed", 1)
    assert code == 0 and out == model.tokenizer.decode(expected) + "\n"
    code, out2, _ = run_cli(capsys, "generate", "--model_path", files["text"], "--prompt",
                            "Hi there", "--max_new_tokens", 15, "--top_k", 20, "--seed", 1,
                            "--stop_ids", "257")
    assert code == 0 and out2 == out


def test_generate_stops_at_a_stop_text_and_does_not_print_it(files, capsys):
    model = minillm.load(files["text"])
    prompt = model.tokenizer.encode("Hi there")
    free = model.tokenizer.decode(minillm.generate(model, prompt, max_new_tokens=30, temperature=0)
                                  [len(prompt):])
    stops = [free[12:14], free[20:23]]
    shown = free[:min(i for i in (free.find(stop) for stop in stops) if i >= 0)]
    expected = minillm.generate(model, prompt, max_new_tokens=30, temperature=0,
                                stop_strings=stops)
    for extra in ([], ["--no_cache"], ["--draft", "ngram"]):
        code, out, err = run_cli(capsys, "generate", "--model_path", files["text"], "Hi there",
                                 "--max_new_tokens", 30, "--greedy", "--stop", stops[0],
                                 "--stop", stops[1], *extra)
        assert code == 0 and out == "Hi there" + shown + "\n"
        assert f"; {len(expected) - len(prompt)} new tokens" in err
    code, out, _ = run_cli(capsys, "generate", "--model_path", files["text"], "Hi there",
                           "--max_new_tokens", 30, "--greedy", "--stop", "not in the text")
    assert code == 0 and out == "Hi there" + free + "\n"


def test_generate_prints_the_logprobs_table(files, capsys):
    model = minillm.load(files["text"])
    prompt = model.tokenizer.encode("Hi")
    rollout = minillm.generate(model, prompt, max_new_tokens=8, temperature=0.7, seed=4,
                               return_logprobs=True,
                               prompt_logprobs=True)
    code, out, err = run_cli(capsys, "generate", "--model_path", files["text"], "Hi",
                             "--max_new_tokens", 8, "--temperature", 0.7, "--seed", 4,
                             "--logprobs")
    assert code == 0 and "8 tokens" in err
    header, *rows = [line.split("\t") for line in out.splitlines()]
    assert header == ["kind", "token", "logprob", "raw", "text"]
    assert [r[0] for r in rows] == ["prompt"] * len(prompt) + ["new"] * 8
    assert [int(r[1]) for r in rows] == rollout.tokens
    assert rows[0][2:4] == ["-", "-"] and rows[1][2] == "-"
    np.testing.assert_allclose([float(r[3]) for r in rows[1:]],
                               rollout.prompt_logprobs[1:] + rollout.raw_logprobs, atol=1e-6)
    np.testing.assert_allclose([float(r[2]) for r in rows[len(prompt):]], rollout.logprobs,
                               atol=1e-6)
    assert [json.loads(r[4]) for r in rows] == [model.tokenizer.decode([t])
                                                for t in rollout.tokens]
    code, out, _ = run_cli(capsys, "generate", "--model_path", files["ids"], "--prompt_ids",
                           "1,2", "--max_new_tokens", 3, "--logprobs")
    assert code == 0 and [line.split("\t")[4] for line in out.splitlines()[1:]] == ["-"] * 5


def test_logprobs_with_a_drafter_are_the_targets_scores(files, capsys):
    """Speculative decoding's table: the same tokens at temperature 0, each scored under the
    target's distributions, as plain generation prints them."""
    tables = {}
    for draft in ([], ["--draft", "ngram"], ["--draft_model", files["text"], "--draft_k", 2]):
        code, out, err = run_cli(capsys, "generate", "--model_path", files["text"], "Hi hi hi",
                                 "--max_new_tokens", 10, "--temperature", 0, "--logprobs",
                                 *draft)
        assert code == 0, err
        tables[len(draft)] = [line.split("\t") for line in out.splitlines()]
    plain = tables[0]
    for table in (tables[2], tables[4]):
        assert [r[:2] + r[4:] for r in table] == [r[:2] + r[4:] for r in plain]
        for got, want in zip(table[1:], plain[1:]):
            for a, b in zip(got[2:4], want[2:4]):
                assert a == b == "-" or abs(float(a) - float(b)) < 1e-5


def test_next_shows_candidates_and_survivors(files, capsys):
    code, out, err = run_cli(capsys, "next", "--model_path", files["text"], "Hi", "--top_k", 3,
                             "--top", 5)
    assert code == 0 and err == ""
    assert "effective choices" in out and f"3 of {VOCAB} tokens survive" in out
    model = minillm.load(files["text"])
    logits = model.forward(np.array([model.tokenizer.encode("Hi")]))[0, -1]
    best = int(np.argmax(logits))
    assert repr(model.tokenizer.decode([best])) in out
    code, out, _ = run_cli(capsys, "next", "--model_path", files["ids"], "--prompt_ids", "7",
                           "--temperature", 0)
    assert code == 0 and f"1 of {VOCAB} tokens survive" in out


BAD = [
    (["--model_path", "/no/such/model.npz", "--prompt_ids", "1"], "model_path"),
    (["--model_path", "{broken}", "--prompt_ids", "1"], "--model_path: {broken}: not an .npz "
                                                         "file (not a zip archive)"),
    (["--model_path", "{ids}", "--prompt_ids", "1", "--top_p", "2"], "top_p"),
    (["--model_path", "{ids}", "--prompt_ids", "1", "--top_k", "-1"], "top_k"),
    (["--model_path", "{ids}", "--prompt_ids", "1", "--temperature", "-1"], "temperature"),
    (["--model_path", "{ids}", "--prompt_ids", "1", "--min_p", "1.5"], "min_p"),
    (["--model_path", "{ids}", "--prompt_ids", "1", "--repetition_penalty", "0"],
     "repetition_penalty"),
    (["--model_path", "{ids}", "--prompt_ids", ""], "empty prompt"),
    (["--model_path", "{ids}", "--prompt_ids", "1,300"], "outside the vocabulary"),
    (["--model_path", "{ids}", "--prompt_ids", "1,x"], "prompt_ids"),
    (["--model_path", "{ids}", "--prompt", "hello"], "no tokenizer"),
    (["--model_path", "{ids}"], "give exactly one"),
    (["--model_path", "{ids}", "hi", "--prompt_ids", "1"], "give exactly one"),
    (["--model_path", "{text}", "--prompt", ""], "empty prompt"),
]


@pytest.mark.parametrize("command", ["generate", "next"])
@pytest.mark.parametrize("argv, message", BAD)
def test_bad_input_is_one_line_and_exit_code_2(files, capsys, command, argv, message):
    code, out, err = run_cli(capsys, command, *[a.format(**files) for a in argv])
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and message.format(**files) in err
    assert "Traceback" not in err


@pytest.mark.parametrize("argv, message", [
    (["--max_new_tokens", "-1"], "--max_new_tokens: must be"),
    (["--stop_ids", "nope"], "--stop_ids"),
    (["--stop_ids", "999"], "--stop_ids: ids must be in [0, 258)"),
    (["--stop", "x"], "--stop: this model has no")])
def test_bad_generate_only_flags(files, capsys, argv, message):
    """The library's names of the knobs (stop_tokens, stop_strings) become their flags'."""
    code, out, err = run_cli(capsys, "generate", "--model_path", files["ids"], "--prompt_ids",
                             "1", *argv)
    assert code == 2 and out == "" and len(err.splitlines()) == 1 and message in err


def test_a_missing_default_model_is_a_clear_error(capsys, monkeypatch, tmp_path):
    import minillm.cli.common as command

    monkeypatch.setattr(command, "DEFAULT_MODEL", tmp_path / "target.npz")
    code, _, err = run_cli(capsys, "generate", "--prompt_ids", "1")
    assert code == 2 and "default model" in err and len(err.splitlines()) == 1
    code, _, err = run_cli(capsys, "next", "--top", "0", "--prompt_ids", "1")
    assert code == 2 and "--top" in err


def test_the_installed_command_runs_in_a_fresh_process(files):
    ok = subprocess.run([sys.executable, "-m", "minillm", "generate", "--model_path",
                         files["ids"], "--prompt_ids", "1,2", "--max_new_tokens", "5"],
                        capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert ok.returncode == 0 and len(ok.stdout.split()) == 7 and "5 new tokens" in ok.stderr
    bad = subprocess.run([sys.executable, "-m", "minillm", "generate", "--model_path",
                          files["broken"], "--prompt_ids", "1"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert bad.returncode == 2 and len(bad.stderr.splitlines()) == 1
    assert "Traceback" not in bad.stderr


@pytest.mark.parametrize("argv, message", [
    (["generate", "--top_k", "abc"], "minillm generate: error: argument --top_k: must be an "
                                     "integer >= 0 (0 or None disables), got 'abc'"),
    (["generate", "--top-k", "abc"], "minillm generate: error: argument --top_k: must be"),
    (["convert", "m.gguf"], "the following arguments are required: out (see"),
    (["generate", "--no_such_flag"], "unrecognized arguments: --no_such_flag"),
    (["next", "--top", "many"], "minillm next: error: argument --top"),
    (["no_such_command"], "minillm: error: argument COMMAND: invalid choice"),
    ([], "required: COMMAND")])
def test_argparse_errors_are_one_line_and_exit_code_2(capsys, argv, message):
    with pytest.raises(SystemExit) as exit:
        main(argv)
    out, err = capsys.readouterr()
    assert exit.value.code == 2 and out == ""
    assert len(err.splitlines()) == 1 and message in err and "usage:" not in err


def test_threads_below_one_is_a_one_line_error(files, capsys):
    code, out, err = run_cli(capsys, "generate", "--threads", 0, "--model_path", files["ids"],
                             "--prompt_ids", 1)
    assert code == 2 and out == "" and err.strip() == \
        "minillm generate: error: --threads: must be at least 1, got 0"


def test_the_text_writer_holds_back_what_may_still_become_a_stop_text():
    from minillm.cli.common import text_writer

    out = io.StringIO()
    write = text_writer(byte_tokenizer(), out, ["END"])
    write(list(b"END? "), new=False)  # the prompt is printed as it is
    shown = []
    for byte in b"hi EN!ok ENDx":
        write([byte])
        shown.append(out.getvalue())
    write([], end=True)
    assert shown[:6] == ["END? h", "END? hi", "END? hi ", "END? hi ", "END? hi ", "END? hi EN!"]
    assert shown[-1] == out.getvalue() == "END? hi EN!ok "


def test_refused_not_ignored(capsys):
    from minillm.cli import main

    assert main(["eval", "--window", "0", "--max_tokens", "20"]) == 2
    assert "--window: must be in [1, " in capsys.readouterr().err
    assert main(["generate", "--draft_k", "3", "--max_new_tokens", "2", "In"]) == 2
    assert "--draft_k: guesses need a drafter" in capsys.readouterr().err
    assert main(["generate", "--draft", "ngram", "--draft_k", "0", "In"]) == 2
    assert "--draft_k: must be at least 1" in capsys.readouterr().err


def test_a_closed_pipe_ends_generation_quietly():
    import subprocess
    import sys

    command = (f"{sys.executable} -m minillm generate 'In the beginning' --max_new_tokens 300 "
               "| head -c 20")
    result = subprocess.run(["bash", "-c", f"set -o pipefail; {command}"], capture_output=True,
                            text=True, timeout=120)
    assert len(result.stdout) == 20 and result.stdout.startswith("In the beginning")
    assert result.stderr == "" and result.returncode == 0


def test_quantize_in_place_reports_the_sizes_before_and_after(tmp_path, capsys):
    import shutil

    from minillm.cli import main

    path = tmp_path / "m.npz"
    shutil.copy("weights/target.npz", path)
    before = path.stat().st_size
    assert main(["quantize", str(path), str(path)]) == 0
    file_line = next(line for line in capsys.readouterr().out.splitlines()
                     if line.startswith("file"))
    assert f"{before / 2**20:.2f} MiB" in file_line
    assert f"{path.stat().st_size / 2**20:.2f} MiB" in file_line


def test_a_fetched_model_is_loaded_by_its_name(files, capsys, monkeypatch, tmp_path):
    import shutil

    monkeypatch.setenv("MINILLM_CACHE", str(tmp_path))
    argv = ["generate", "--model_path", "smollm2-135m-instruct", "--prompt_ids", "1,2",
            "--max_new_tokens", 4, "--greedy"]
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and "minillm fetch smollm2-135m-instruct" in err
    shutil.copy(files["ids"], tmp_path / "smollm2-135m-instruct.npz")
    code, out, err = run_cli(capsys, *argv)
    model = minillm.load(files["ids"])
    assert code == 0 and [int(t) for t in out.split()] == minillm.generate(
        model, [1, 2], max_new_tokens=4, temperature=0)


@pytest.mark.parametrize("command, name", [("inspect", "model_path"), ("quantize", "input"),
                                           ("export", "model_path")])
def test_the_file_commands_load_through_the_one_loader(files, capsys, monkeypatch, tmp_path,
                                                       command, name):
    """inspect, quantize and export take a fetched model's name too, and name their argument
    when the file is missing, as every command does."""
    import importlib.util
    import shutil

    monkeypatch.setenv("MINILLM_CACHE", str(tmp_path))
    extra = {"inspect": [], "quantize": [tmp_path / "q.npz"],
             "export": ["--to", "hf", tmp_path / "hf"]}[command]
    code, _, err = run_cli(capsys, command, tmp_path / "absent.npz", *extra)
    assert code == 2 and err.startswith(f"minillm {command}: error: {name}: no such file or "
                                        f"fetched model: {tmp_path / 'absent.npz'}")
    if command == "export" and importlib.util.find_spec("safetensors") is None:
        return  # writing the folder needs safetensors
    shutil.copy(files["ids"], tmp_path / "smollm2-135m-instruct.npz")
    code, out, _ = run_cli(capsys, command, "smollm2-135m-instruct", *extra)
    assert code == 0
    if command == "inspect":
        assert out.startswith("smollm2-135m-instruct  (") and "parameters:" in out
    elif command == "quantize":
        assert minillm.load(tmp_path / "q.npz").config == minillm.load(files["ids"]).config
    else:
        assert (tmp_path / "hf" / "config.json").is_file()


@pytest.mark.parametrize("argv", [
    ["generate", "--model_path", "{ids}", "--prompt_ids", "1,2", "--max_new_tokens", 6, "--seed", 2],
    ["generate", "--model_path", "{ids}", "--prompt_ids", "1,2", "--max_new_tokens", 6,
     "--draft_model", "{ids}", "--greedy"],
    ["next", "--model_path", "{text}", "Hi"],
    ["inspect", "{ids}"],
    ["quantize", "{ids}", "{out}"],
])
def test_the_reference_flag_loads_the_reference_model(files, capsys, monkeypatch, tmp_path,
                                                      argv):
    """--reference: every model a command loads is the reference (minillm.Model, not the fast
    path's FastModel, which it is without the flag); the output is the same."""
    from minillm.fast import model as fast
    from minillm.files import npz as weights

    real_load, loaded = weights.load, []
    monkeypatch.setattr(weights, "load", lambda path, fast=None, progress=None: loaded.append(
        real_load(path, fast)) or loaded[-1])
    monkeypatch.delenv("MINILLM_FAST", raising=False)
    argv = [str(a).format(out=tmp_path / "out.npz", **files) for a in argv]
    outputs = {}
    for flag in ([], ["--reference"]):
        loaded.clear()
        code, out, _ = run_cli(capsys, *argv, *flag)
        assert code == 0 and loaded
        assert all(isinstance(m, fast.FastModel) != bool(flag) for m in loaded), flag
        outputs[bool(flag)] = out
        if argv[0] == "quantize":  # what it writes; its report counts the tied head's copy
            with np.load(tmp_path / "out.npz") as written:
                outputs[bool(flag)] = {name: written[name] for name in written.files}
    if argv[0] == "inspect":  # the fast model holds the tied head's copy, the reference not
        assert "column-major copy" in outputs[False] and "column-major copy" not in outputs[True]
    elif argv[0] == "quantize":
        assert outputs[True].keys() == outputs[False].keys()
        for name, array in outputs[False].items():
            np.testing.assert_array_equal(outputs[True][name], array)
    else:
        assert outputs[True] == outputs[False]


def test_every_command_takes_the_reference_flag():
    from minillm.cli import COMMANDS, build_parser

    subparsers = next(a for a in build_parser()._actions if a.dest == "command").choices
    assert set(subparsers) == set(COMMANDS)
    for name, parser in subparsers.items():
        assert any("--reference" in a.option_strings for a in parser._actions), name


def test_every_sampling_knob_is_a_flag(files, capsys):
    knobs = dict(temperature=0.9, top_k=30, top_p=0.95, min_p=0.01, repetition_penalty=4.0,
                 penalty_window=2, seed=5, max_new_tokens=15)
    flags = [str(part) for name, value in knobs.items() for part in (f"--{name}", value)]
    code, out, _ = run_cli(capsys, "generate", "--model_path", files["ids"], "--prompt_ids",
                           "1,2,3", *flags)
    expected = minillm.generate(minillm.load(files["ids"]), [1, 2, 3], **knobs)
    assert code == 0 and [int(t) for t in out.split()] == expected


class Terminal(io.StringIO):
    """A stream that says it is a terminal, as a user's stderr is."""

    def isatty(self):
        return True


def test_a_long_read_shows_its_progress_and_wipes_it(monkeypatch):
    """minillm generate on a terminal: each chunk of a long prompt's read redraws one stderr
    line, wiped at the end; a short read shows nothing; piped, nothing at all."""
    from minillm.cli.generate import reading_progress

    monkeypatch.setattr("minillm.window.READ_CHUNK", 4)
    terminal = Terminal()
    show = reading_progress(terminal)
    for done in (4, 8, 10):
        show(done, 10)
    show(3, 3)
    err = terminal.getvalue()
    assert err.startswith("\r[reading 4 / 10 tokens]\r[reading 8 / 10 tokens]\r")
    assert err.endswith("\r") and "10 / 10" not in err and "3 / 3" not in err
    assert reading_progress(io.StringIO()) is None  # piped: no progress at all


def test_generate_shows_a_long_prompts_read_on_a_terminal_only(files, capsys, monkeypatch):
    monkeypatch.setattr("minillm.window.READ_CHUNK", 4)
    argv = ["generate", "--model_path", files["ids"], "--prompt_ids",
            ",".join(map(str, range(1, 13))), "--max_new_tokens", "2", "--greedy"]
    code, out, err = run_cli(capsys, *argv)  # piped (captured): the summary alone
    assert code == 0 and "\r" not in err and len(err.splitlines()) == 1
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    assert main(argv) == 0
    assert capsys.readouterr().out == out
    shown = terminal.getvalue()
    assert "\r[reading 4 / 12 tokens]\r[reading 8 / 12 tokens]\r" in shown
    assert shown.splitlines()[-1].startswith("[prompt 12 tokens read in ")


def test_the_stream_reports_the_prompt_and_slide_reads(monkeypatch):
    """stream(progress=...) is called after each chunk of the prompt's read and of the
    re-read of the window's kept half after a slide."""
    import minillm
    from minillm.generate import stream

    monkeypatch.setattr("minillm.window.READ_CHUNK", 3)
    cfg = minillm.ModelConfig(arch="modern", vocab_size=32, context_length=8, d_model=16,
                              n_layers=1, n_heads=2, d_ff=16)
    model = minillm.random_model(cfg)
    calls = []
    list(stream(model, list(range(7)), max_new_tokens=3, temperature=0,
                progress=lambda done, total: calls.append((done, total))))
    # the prompt, 7 tokens in chunks of 3; the first new token fills the window (8), the
    # second makes it slide: its kept half, 4 tokens, is read again
    assert calls == [(3, 7), (6, 7), (7, 7), (3, 4), (4, 4)]


def test_loading_a_large_model_shows_its_progress_on_a_terminal_only(files, capsys,
                                                                     monkeypatch):
    """minillm.files.npz.load(progress=...) reports every array read; a command shows it on a
    terminal's stderr for a large file (LARGE_MODEL, set to 0 here), then wipes it."""
    import minillm.cli.common as common

    calls = []
    minillm.files.npz.load(files["ids"], progress=lambda done, total: calls.append((done,
                                                                                   total)))
    with np.load(files["ids"]) as archive:
        n = len(archive.files)
    assert calls == [(i, n) for i in range(1, n + 1)]
    monkeypatch.setattr(common, "LARGE_MODEL", 0)
    argv = ["inspect", files["ids"]]
    code, out, err = run_cli(capsys, *argv)  # piped: nothing
    assert code == 0 and err == ""
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    assert main(argv) == 0 and capsys.readouterr().out == out
    shown = terminal.getvalue()
    assert shown.startswith(f"\r[loading ids.npz 1 / {n} arrays]\r[loading ids.npz 2 / {n} ")
    assert "\r[loading ids.npz: laying out the weights for the fast path]" in shown
    assert shown.endswith("\r")
    assert shown.replace("\r", "").replace(" ", "").count("[") == n  # no other line
    monkeypatch.setattr(common, "LARGE_MODEL", 1 << 40)  # a small file: nothing
    terminal.seek(0)
    terminal.truncate()
    assert main(argv) == 0 and terminal.getvalue() == ""


def test_a_progress_line_wipes_itself_before_another_line_is_written(monkeypatch):
    import sys

    from minillm.cli.common import ProgressLine

    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    with ProgressLine() as line:
        line.count("joining m.gguf", 2_000_000, 5_000_000, "bytes")
        print("downloading the next part", file=sys.stderr)
        line.count("converting m.gguf", 3, 9, "tensors")
    assert sys.stderr is terminal
    assert terminal.getvalue() == ("\r[joining m.gguf 2.0 / 5.0 MB]"
                                   "\r                             \r"
                                   "downloading the next part\n"
                                   "\r[converting m.gguf 3 / 9 tensors]"
                                   "\r                                 \r")
    piped = io.StringIO()
    with ProgressLine(piped) as line:
        line.count("joining m.gguf", 1, 5, "bytes")
        line.show("[loading]")
    assert piped.getvalue() == "" and not line.live


# -- structured output: --json_schema, --regex, --choice ----------------------------------------

SHIPPED_PROMPT = "In the beginning"


@pytest.fixture(scope="module")
def shipped():
    from minillm.cli.common import DEFAULT_MODEL

    return minillm.load(DEFAULT_MODEL)


def test_generate_constrained_prints_the_librarys_tokens(shipped, capsys, tmp_path):
    """The shipped model, each flag: the tokens of minillm.generate with that constraint."""
    from minillm.constrain import choice, json_schema, regex

    tok = shipped.tokenizer
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"},
                                               "n": {"type": "integer"}}, "required": ["ok"]}
    (tmp_path / "s.json").write_text(json.dumps(schema))
    ids = tok.encode(SHIPPED_PROMPT)
    for flags, constraint, whole in (
            (["--choice", " yes", "--choice", " no"], choice([" yes", " no"], tok),
             lambda t: t in (" yes", " no")),
            (["--regex", " [0-9]{2,4}"], regex(" [0-9]{2,4}", tok),
             lambda t: t[0] == " " and t[1:].isdigit() and 2 <= len(t) - 1 <= 4),
            (["--json_schema", tmp_path / "s.json"], json_schema(schema, tok),
             lambda t: isinstance(json.loads(t)["ok"], bool))):
        expected = minillm.generate(shipped, ids, max_new_tokens=60, seed=2,
                                    constraint=constraint)
        code, out, err = run_cli(capsys, "generate", SHIPPED_PROMPT, "--max_new_tokens", 60,
                                 "--seed", 2, *flags)
        assert code == 0 and expected[-1] in tok.eos_token_ids, err
        assert out == tok.decode(expected[:-1]) + "\n"
        assert whole(out[len(SHIPPED_PROMPT):-1]) and "cut" not in err


def test_a_constrained_text_cut_by_max_new_tokens_is_said_to_be(capsys):
    code, out, err = run_cli(capsys, "generate", SHIPPED_PROMPT, "--max_new_tokens", 2,
                             "--seed", 0, "--regex", "[a-z]{5,9}")
    assert code == 0 and re.fullmatch("[a-z]{1,9}", out[len(SHIPPED_PROMPT):-1])
    assert "cut at --max_new_tokens: the text is not whole]" in err


@pytest.mark.parametrize("command", ["generate", "chat"])
def test_the_structured_output_flags_refuse_in_one_line(capsys, tmp_path, command):
    (tmp_path / "bad.json").write_text('{"type": "object", "properties": '
                                       '{"d": {"type": "string", "format": "date"}}}')
    (tmp_path / "broken.json").write_text('{"type": ')
    text = [] if command == "chat" else ["Hi"]
    for flags, message in (
            (["--json_schema", tmp_path / "absent.json"],
             f"--json_schema: no such file: {tmp_path / 'absent.json'}"),
            (["--json_schema", tmp_path / "broken.json"],
             f"--json_schema: {tmp_path / 'broken.json'} is not JSON: Expecting value"),
            (["--json_schema", tmp_path / "bad.json"],
             f"--json_schema: {tmp_path / 'bad.json'}: json_schema: the keyword 'format' is "
             "not supported"),
            (["--regex", "(ab"], "--regex: regex '(ab'"),
            (["--regex", "a", "--choice", "b"],
             "argument --choice: not allowed with argument --regex"),
            (["--json-schema", tmp_path / "bad.json"], "--json-schema: ")):
        try:
            code, out, err = run_cli(capsys, command, *text, "--model_path",
                                     tmp_path / "absent.npz", *flags)  # before loading it
        except SystemExit as e:  # argparse's own refusal
            code, (out, err) = e.code, capsys.readouterr()
        assert code == 2 and err.startswith(f"minillm {command}: error: {message}"), err
        assert len(err.splitlines()) == 1
    code, _, err = run_cli(capsys, "generate", "Hi", "--choice", "a", "--draft", "ngram")
    assert code == 2 and err == ("minillm generate: error: --choice: not with --draft ngram: "
                                 "speculative decoding here takes no constraint\n")
