"""Reading weights files: safetensors with a user's own naming table from the command line,
bfloat16 checkpoints (NumPy has no bfloat16: they are widened through torch), and a folder's
tokenizer config."""
import json

import numpy as np
import pytest

import minillm
from minillm.cli import main
from minillm.files import convert, to_hf_state_dict

safetensors_numpy = pytest.importorskip("safetensors.numpy")


def test_safetensors_with_a_users_naming_table_from_the_command_line(tmp_path, capsys):
    cfg = minillm.ModelConfig(arch="classic", vocab_size=13, context_length=8, d_model=8,
                              n_layers=2, n_heads=2, bias=False, activation="gelu_tanh")
    model = minillm.random_model(cfg, seed=0)
    renamed, table = {}, {}  # a course model's own names: course.blocks.N.<minillm piece>
    for name, value in model.params.items():
        if name.startswith("layers."):
            _, i, piece = name.split(".", 2)
            table["layers.{i}." + piece] = "course.blocks.{i}." + piece
            renamed[f"course.blocks.{i}." + piece] = value
        else:
            table[name] = "course." + name
            renamed["course." + name] = value
    # safetensors writes raw buffers and needs C-contiguous arrays (minillm keeps its linear
    # weights column-major in memory).
    renamed = {name: np.ascontiguousarray(value) for name, value in renamed.items()}
    safetensors_numpy.save_file(renamed, str(tmp_path / "w.safetensors"))
    (tmp_path / "names.json").write_text(json.dumps(table))
    (tmp_path / "cfg.json").write_text(cfg.to_json())
    assert main(["convert", str(tmp_path / "w.safetensors"), str(tmp_path / "m.npz"),
                 "--config", str(tmp_path / "cfg.json"),
                 "--naming", str(tmp_path / "names.json")]) == 0
    back = minillm.load(tmp_path / "m.npz")
    for name, value in model.params.items():
        np.testing.assert_array_equal(back.params[name], value)
    # Without the table the layout is not recognised: one line, exit code 2.
    assert main(["convert", str(tmp_path / "w.safetensors"), str(tmp_path / "m2.npz"),
                 "--config", str(tmp_path / "cfg.json")]) == 2
    assert "cannot recognise" in capsys.readouterr().err
    assert main(["convert", str(tmp_path / "w.safetensors"), str(tmp_path / "m2.npz")]) == 2
    assert "give the model's config" in capsys.readouterr().err


def test_a_damaged_torch_file_is_one_line(tmp_path, capsys):
    pytest.importorskip("torch")
    (tmp_path / "w.pt").write_bytes(b"not a checkpoint")
    assert main(["convert", str(tmp_path / "w.pt"), str(tmp_path / "o.npz")]) == 2
    assert "cannot read the checkpoint" in capsys.readouterr().err


def test_bfloat16_safetensors_are_widened(tmp_path):
    torch = pytest.importorskip("torch")
    safetensors_torch = pytest.importorskip("safetensors.torch")
    cfg = minillm.ModelConfig(arch="modern", vocab_size=13, context_length=8, d_model=8,
                              n_layers=1, n_heads=2, n_kv_heads=1)
    model = minillm.random_model(cfg, seed=1)
    state = {k: torch.from_numpy(v).to(torch.bfloat16)
             for k, v in to_hf_state_dict(model).items()}
    safetensors_torch.save_file(state, str(tmp_path / "w.safetensors"))
    ours = convert(tmp_path / "w.safetensors", config=cfg)
    expected = state["model.embed_tokens.weight"].float().numpy()
    np.testing.assert_array_equal(ours.params["tok_emb.weight"], expected)
    assert ours.dtype == np.float32


def test_a_folders_tokenizer_config_and_chat_template_come_along(tmp_path):
    from minillm.files.hf import export_hf
    from minillm.text.tokenizer import BYTE_TO_CHAR, Tokenizer

    cfg = minillm.ModelConfig(arch="modern", vocab_size=258, context_length=8, d_model=8,
                              n_layers=1, n_heads=2)
    model = minillm.random_model(cfg, seed=0)
    vocab = {char: byte for byte, char in BYTE_TO_CHAR.items()}
    model.tokenizer = Tokenizer(vocab, [], [{"id": 256, "content": "<|im_start|>", "special": True},
                                            {"id": 257, "content": "<|im_end|>", "special": True}])
    export_hf(model, tmp_path)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": "<|im_start|>", "eos_token": {"content": "<|im_end|>", "special": True},
        "add_bos_token": False, "chat_template": "old", "tokenizer_class": "GPT2Tokenizer"}))
    (tmp_path / "chat_template.jinja").write_text("{{ messages }}")
    tok = convert(tmp_path).tokenizer
    assert (tok.bos_token_id, tok.eos_token_id) == (256, 257)
    assert tok.chat_template == "{{ messages }}"
    minillm.save(convert(tmp_path), tmp_path / "m.npz")
    assert minillm.load(tmp_path / "m.npz").tokenizer.config == tok.config
