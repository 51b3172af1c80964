"""The models shipped in weights/: they load, match their recorded sha256, loss and sample."""

import hashlib
import json
import pathlib
import re

import numpy as np
import pytest

import minillm
from minillm.study.evaluate import evaluate

WEIGHTS = pathlib.Path(__file__).resolve().parents[1] / "weights"
CHECKS = json.loads((WEIGHTS / "checks.json").read_text(encoding="utf-8"))
FILES = sorted(CHECKS)


def readme_sha256():
    """{file name: sha256} from the table in weights/README.md."""
    text = (WEIGHTS / "README.md").read_text(encoding="utf-8")
    return dict(re.findall(r"`([\w.-]+\.npz)`.*`([0-9a-f]{64})`", text))


@pytest.fixture(scope="module")
def valid_text():
    return (WEIGHTS / "web_valid.txt").read_text(encoding="utf-8")


@pytest.fixture(scope="module", params=FILES)
def shipped(request):
    return request.param, minillm.load(WEIGHTS / request.param)


def test_readme_lists_every_shipped_file():
    assert sorted(readme_sha256()) == FILES == sorted(p.name for p in WEIGHTS.glob("*.npz"))


@pytest.mark.parametrize("name", FILES)
def test_sha256_matches_readme(name):
    digest = hashlib.sha256((WEIGHTS / name).read_bytes()).hexdigest()
    assert digest == readme_sha256()[name] == CHECKS[name]["sha256"]


def test_loads_with_tokenizer_and_float32(shipped):
    name, model = shipped
    assert model.tokenizer is not None and len(model.tokenizer) == model.config.vocab_size
    assert model.tokenizer.eos_token_id == 0
    assert all(p.dtype == np.float32 for p in model.params.values())
    assert sum(p.size for p in model.params.values()) == CHECKS[name]["parameters"]


@pytest.mark.slow
def test_held_out_loss_on_a_fixed_slice(shipped, valid_text):
    name, model = shipped
    record = CHECKS[name]
    ids = model.tokenizer.encode(valid_text)[:record["slice_tokens"] + 1]
    loss = evaluate(model, ids, model.config.context_length)
    assert loss == pytest.approx(record["slice_loss"], abs=1e-3)


def test_seeded_sample_is_reproducible(shipped):
    name, model = shipped
    sample = CHECKS[name]["sample"]
    prompt = model.tokenizer.encode(sample["prompt"])
    knobs = dict(max_new_tokens=sample["max_new_tokens"], temperature=sample["temperature"],
                 seed=sample["seed"])
    first = minillm.generate(model, prompt, **knobs)
    assert first == minillm.generate(model, prompt, **knobs) == sample["ids"]
    assert model.tokenizer.decode(first) == sample["text"]
