"""minillm/study/explain.py and `minillm generate --explain / --plot`: each token's surprise, rank
and repeat mark against the library computing them another way."""
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, strategies as st

import minillm
from minillm.cli import main
from minillm.study.explain import explained_generate, notes, repeats, surprise
from minillm.layers import log_softmax

ROOT = Path(__file__).resolve().parents[1]
TARGET = str(ROOT / "weights" / "target.npz")


@pytest.fixture(scope="module")
def model():
    return minillm.load(TARGET)


@pytest.mark.parametrize("use_cache,new", [(True, 40), (True, 300),
                                           pytest.param(False, 40, marks=pytest.mark.slow)])
def test_surprise_is_generates_own_raw_logprob(model, use_cache, new):
    # 300 new tokens outgrow the 256-token window: the slide's re-read is a pass too.
    prompt = model.tokenizer.encode("In the beginning")
    ids, token_notes = explained_generate(model, prompt, max_new_tokens=new, temperature=0.9,
                                          seed=4, use_cache=use_cache)
    rollout = minillm.generate(model, prompt, max_new_tokens=new, temperature=0.9, seed=4,
                               use_cache=use_cache, return_logprobs=True)
    assert ids == rollout.tokens  # watching the model changes nothing
    np.testing.assert_allclose([-t.surprise for t in token_notes], rollout.raw_logprobs,
                               rtol=0, atol=1e-9)


def test_rank_against_a_fresh_forward_pass(model):
    prompt = model.tokenizer.encode("And the LORD said")
    ids, token_notes = explained_generate(model, prompt, max_new_tokens=30, temperature=1.3,
                                          seed=1, stop_tokens=[0])
    logits = model.forward(np.array([ids]))[0]  # (T, V): row c predicts token c + 1
    for i, note in enumerate(token_notes):
        row = logits[len(prompt) + i - 1]
        ranked = np.argsort(-row, kind="stable")  # ties: the lower id first
        assert note.rank == int(np.flatnonzero(ranked == note.token)[0]) + 1
        assert note.surprise == pytest.approx(-log_softmax(row)[note.token], abs=1e-4)
    assert any(note.rank > 1 for note in token_notes)  # T = 1.3 leaves the favourite


def test_greedy_tokens_are_all_rank_one(model):
    prompt = model.tokenizer.encode("In the beginning")
    _, token_notes = explained_generate(model, prompt, max_new_tokens=30, temperature=0)
    assert [t.rank for t in token_notes] == [1] * 30


@given(st.lists(st.integers(0, 3), min_size=0, max_size=40), st.integers(0, 40),
       st.integers(1, 5))
def test_repeats_against_brute_force(tokens, start, n):
    start = min(start, len(tokens))
    want = [i >= n - 1 and any(tokens[i - n + 1:i + 1] == tokens[j - n + 1:j + 1]
                               for j in range(n - 1, i))
            for i in range(start, len(tokens))]
    assert repeats(tokens, start, n) == want


def test_notes_need_one_row_per_new_token():
    with pytest.raises(ValueError, match="rows: 1 rows of logits for 2 new tokens"):
        notes([np.zeros(4)], [1, 2, 3], 1)


def test_surprise_reads_one_window(model):
    ids = model.tokenizer.encode("In the beginning God created the heavens")
    logp = log_softmax(model.forward(np.array([ids]))[0])
    assert surprise(model, ids) == pytest.approx(
        -np.mean([logp[c, ids[c + 1]] for c in range(len(ids) - 1)]), rel=1e-6)  # float32
    with pytest.raises(ValueError, match="token_ids: need 2 to 256 tokens"):
        surprise(model, ids[:1])


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_generate_explain_marks_every_token_when_piped(model, capsys):
    code, out, err = run_cli(capsys, "generate", "--model_path", TARGET, "In the beginning",
                             "--explain", "--max_new_tokens", "25", "--seed", "2")
    assert code == 0
    text, summary = out.rstrip("\n").split("\n")[-2:]
    marks = re.findall(r"\[([^|\]]*)\|(\d+\.\d\d)\|(\d+)(\|R)?\]", text)
    prompt = model.tokenizer.encode("In the beginning")
    _, token_notes = explained_generate(model, prompt, max_new_tokens=25, temperature=1.0,
                                        seed=2, stop_tokens=[0])
    assert len(marks) == len(token_notes) == 25
    for (piece, shown, rank, repeat), note in zip(marks, token_notes):
        assert piece == model.tokenizer.decode([note.token])
        assert shown == f"{note.surprise:.2f}" and int(rank) == note.rank
        assert bool(repeat) == note.repeat
    mean = np.mean([t.surprise for t in token_notes])
    assert summary.startswith(f"[25 tokens: mean surprise {mean:.3f} nats/token")
    assert "\x1b[" not in out  # no colour codes into a pipe
    assert "surprise" in err  # the legend


def test_generate_plot_writes_a_png(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    path = tmp_path / "explain.png"
    code, out, _ = run_cli(capsys, "generate", "--model_path", TARGET, "In the beginning",
                           "--plot", str(path), "--max_new_tokens", "12", "--greedy")
    assert code == 0 and "[12 tokens:" in out
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_says_so(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now fails
    code, _, err = run_cli(capsys, "generate", "--model_path", TARGET, "In the beginning",
                           "--plot", str(tmp_path / "x.png"), "--max_new_tokens", "3")
    assert code == 2
    assert "--plot needs matplotlib: pip install matplotlib" in err


def test_explain_refuses_speculative_decoding(capsys):
    code, _, err = run_cli(capsys, "generate", "--model_path", TARGET, "In the beginning",
                           "--explain", "--draft", "ngram")
    assert code == 2 and "--explain: not with" in err
