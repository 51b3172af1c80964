"""The .npz format: exact round trip, and one clear WeightsError per malformed file."""
import json
import os
import stat
import zipfile

import numpy as np
import pytest

import minillm
from minillm.files.npz import CONFIG_KEY, VERSION_KEY

CFG = minillm.ModelConfig(arch="modern", vocab_size=30, context_length=8, d_model=8, n_layers=2,
                          n_heads=2, n_kv_heads=1, d_ff=12)


@pytest.mark.parametrize("arch", ["classic", "modern"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_round_trip_is_exact(tmp_path, arch, dtype):
    cfg = minillm.ModelConfig(arch=arch, vocab_size=30, context_length=8, d_model=8, n_layers=2,
                              n_heads=2)
    model = minillm.random_model(cfg, seed=3, dtype=dtype)
    minillm.save(model, tmp_path / "m.npz")
    back = minillm.load(tmp_path / "m.npz", fast=False)
    assert back.config == model.config
    assert back.params.keys() == model.params.keys()
    for name, value in model.params.items():
        assert back.params[name].dtype == value.dtype
        np.testing.assert_array_equal(back.params[name], value)
    tokens = np.array([[1, 2, 3]])
    np.testing.assert_array_equal(back.forward(tokens), model.forward(tokens))


def _entries(tmp_path):
    model = minillm.random_model(CFG, seed=4)
    minillm.save(model, tmp_path / "good.npz")
    with np.load(tmp_path / "good.npz") as f:
        return {k: f[k] for k in f.files}


def _write(tmp_path, entries):
    path = tmp_path / "bad.npz"
    with open(path, "wb") as f:
        np.savez(f, **entries)
    return path


def _drop(d, key):
    return {k: v for k, v in d.items() if k != key}


MALFORMED = {
    "missing tensor": (lambda e: _drop(e, "layers.1.attn.out.weight"),
                       "missing tensor.*layers.1.attn.out.weight"),
    "unexpected tensor": (lambda e: {**e, "layers.9.attn.out.weight": np.zeros(2, np.float32)},
                          "unexpected tensor.*layers.9"),
    "wrong shape": (lambda e: {**e, "final_norm.weight": np.ones(9, np.float32)},
                    r"'final_norm.weight' has shape \(9,\); expected \(8,\)"),
    "wrong dtype": (lambda e: {**e, "final_norm.weight": np.ones(8, np.int32)},
                    "'final_norm.weight' has dtype int32"),
    "mixed dtypes": (lambda e: {**e, "final_norm.weight": np.ones(8, np.float64)},
                     "share one dtype"),
    "non-finite": (lambda e: {**e, "tok_emb.weight": np.full((30, 8), np.nan, np.float32)},
                   "'tok_emb.weight' holds non-finite"),
    "missing config": (lambda e: _drop(e, CONFIG_KEY), "missing 'minillm.config'"),
    "bad config JSON": (lambda e: {**e, CONFIG_KEY: np.array("{nope")}, "bad config.*JSON"),
    "invalid config": (lambda e: {**e, CONFIG_KEY: np.array(json.dumps(
        {**CFG.to_dict(), "n_heads": 3}))}, "bad config.*d_model"),
    "config not a string": (lambda e: {**e, CONFIG_KEY: np.array([1, 2])}, "string scalar"),
    "unknown version": (lambda e: {**e, VERSION_KEY: np.array(7)}, "unknown format version 7"),
    "missing version": (lambda e: _drop(e, VERSION_KEY), "not a minillm weights file"),
    "object array": (lambda e: {**e, "extra": np.array([{"a": 1}], dtype=object)},
                     "'extra' is an object array"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_file_gives_one_clear_error(tmp_path, case):
    change, message = MALFORMED[case]
    path = _write(tmp_path, change(_entries(tmp_path)))
    with pytest.raises(minillm.WeightsError, match=message):
        minillm.load(path)


def test_not_a_zip_missing_file_and_truncated_archive(tmp_path):
    (tmp_path / "text.npz").write_text("hello")
    with pytest.raises(minillm.WeightsError, match="not an .npz file"):
        minillm.load(tmp_path / "text.npz")
    with pytest.raises(minillm.WeightsError, match="no such file"):
        minillm.load(tmp_path / "absent.npz")
    np.save(tmp_path / "plain.npy", np.zeros(3))
    with pytest.raises(minillm.WeightsError, match="not an .npz"):
        minillm.load(tmp_path / "plain.npy")
    minillm.save(minillm.random_model(CFG), tmp_path / "good.npz")
    data = (tmp_path / "good.npz").read_bytes()
    (tmp_path / "cut.npz").write_bytes(data[: len(data) // 2])
    with pytest.raises(minillm.WeightsError):
        minillm.load(tmp_path / "cut.npz")


def test_a_folder_or_a_gguf_file_says_what_it_is_and_what_to_do(tmp_path):
    with pytest.raises(minillm.WeightsError, match="a folder, not an .npz file$"):
        minillm.load(tmp_path)
    (tmp_path / "config.json").write_text("{}")  # the mark of a Hugging Face model folder
    with pytest.raises(minillm.WeightsError, match="Hugging Face model folder.*minillm convert"):
        minillm.load(tmp_path)
    (tmp_path / "m.gguf").write_bytes(b"GGUF" + bytes(20))
    with pytest.raises(minillm.WeightsError, match=r"m.gguf: a GGUF file, not an .npz file; "
                                                   r"convert it first: minillm convert .*m.gguf"):
        minillm.load(tmp_path / "m.gguf")


def test_saving_into_a_missing_folder_names_the_folder(tmp_path):
    model = minillm.random_model(CFG)
    with pytest.raises(FileNotFoundError) as error:
        minillm.save(model, tmp_path / "absent" / "m.npz")
    assert str(error.value) == (f"{tmp_path / 'absent' / 'm.npz'}: no folder "
                                f"{tmp_path / 'absent'} to write into (create it first)")
    (tmp_path / "file").write_text("")
    with pytest.raises(NotADirectoryError, match="file is a file, not a folder$"):
        minillm.save(model, tmp_path / "file" / "m.npz")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_corrupted_member_is_reported(tmp_path):
    minillm.save(minillm.random_model(CFG), tmp_path / "good.npz")
    src = zipfile.ZipFile(tmp_path / "good.npz")
    with zipfile.ZipFile(tmp_path / "bad.npz", "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == "tok_emb.weight.npy":
                data = data[:20]  # a broken .npy header
            dst.writestr(info, data)
    with pytest.raises(minillm.WeightsError, match="tok_emb.weight"):
        minillm.load(tmp_path / "bad.npz")


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_a_saved_file_has_the_permissions_open_would_give_it(tmp_path, umask):
    old = os.umask(umask)
    try:
        minillm.save(minillm.random_model(CFG, seed=0), tmp_path / "m.npz")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "m.npz").st_mode) == 0o666 & ~umask
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.npz"]  # no temporary file left


@pytest.mark.parametrize("command", [["quantize", "weights/target.npz"],
                                     ["convert", "not/read/yet.safetensors"]])
def test_commands_name_a_missing_output_folder_before_their_work(command, tmp_path, capsys):
    from minillm.cli import main

    out = tmp_path / "absent" / "m.npz"
    assert main(command + [str(out)]) == 2
    assert capsys.readouterr().err == (f"minillm {command[0]}: error: {out}: no folder "
                                       f"{tmp_path / 'absent'} to write into (create it first)\n")
