"""`minillm eval`: the loss it prints is evaluate()'s on the encoded text; bad input is one line."""
import math

import pytest

import minillm
from minillm.cli import main
from minillm.study.evaluate import evaluate
from tests.test_cli import VOCAB, byte_tokenizer

TEXT = "In the beginning was a short text, read twice: in the beginning was a short text.\n"


@pytest.fixture()
def files(tmp_path):
    cfg = minillm.ModelConfig(arch="classic", vocab_size=VOCAB, context_length=16, d_model=8,
                              n_layers=1, n_heads=2)
    model = minillm.random_model(cfg, seed=2, std=0.5)
    minillm.save(model, tmp_path / "ids.npz")
    model.tokenizer = byte_tokenizer()
    minillm.save(model, tmp_path / "text.npz")
    (tmp_path / "t.txt").write_text(TEXT)
    (tmp_path / "one.txt").write_text("a")
    return model, tmp_path


def test_eval_prints_the_loss_of_the_text(files, capsys):
    model, folder = files
    for extra, name in (([], "float"), (["--int8"], "int8")):
        code = main(["eval", "--model_path", str(folder / "text.npz"), "--text",
                     str(folder / "t.txt"), *extra])
        out, err = capsys.readouterr()
        assert code == 0, err
        if name == "int8":
            model = minillm.quantize(model)
        expected = evaluate(model, model.tokenizer.encode(TEXT))
        line = next(line for line in out.splitlines() if line.startswith("loss"))
        assert float(line.split()[1]) == pytest.approx(expected, abs=5e-5)
        perplexity = next(line for line in out.splitlines() if line.startswith("perplexity"))
        assert float(perplexity.split()[1]) == pytest.approx(math.exp(expected), rel=1e-3)


@pytest.mark.parametrize("extra, message", [
    (["--model_path", "{d}/ids.npz", "--text", "{d}/t.txt"], "no tokenizer"),
    (["--model_path", "{d}/text.npz", "--text", "{d}/absent.txt"], "no such file"),
    (["--model_path", "{d}/text.npz", "--text", "{d}/one.txt"], "fewer than two tokens"),
    (["--model_path", "{d}/text.npz", "--text", "{d}/t.txt", "--window", "99"], "window"),
    (["--model_path", "{d}/text.npz", "--text", "{d}/t.txt", "--threads", "0"], "--threads"),
])
def test_eval_bad_input_is_one_line(files, capsys, extra, message):
    _, folder = files
    code = main(["eval", *[a.format(d=folder) for a in extra]])
    out, err = capsys.readouterr()
    assert code == 2 and len(err.strip().splitlines()) == 1 and message in err
