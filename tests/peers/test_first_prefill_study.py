"""bench.studies.first_prefill with its transformers contender: the model transformers builds
from minillm's weights chooses minillm's next token, first read and later ones."""
import pytest

pytest.importorskip("torch", reason="the transformers contender needs torch")
pytest.importorskip("transformers", reason="the transformers contender needs transformers")

from bench.studies.first_prefill import main as first_prefill  # noqa: E402


def test_both_contenders_choose_the_same_next_token_on_the_shipped_model(capsys):
    assert first_prefill(["--model_path", "weights/target.npz", "--tokens", "16",
                          "--rounds", "1", "--calls", "2"]) == 0
    printed = capsys.readouterr().out
    assert "same next token in every read of both: yes" in printed
    assert "| first | " in printed and "| later (median of the others) | " in printed
    assert "| transformers | " in printed
