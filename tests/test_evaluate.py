"""evaluate(): the mean next-token loss over non-overlapping windows."""

import numpy as np
import pytest

import minillm
from minillm.study.evaluate import bits_per_byte, evaluate
from minillm.layers import log_softmax


def direct_loss(model, ids, window):
    """The same figure, written out token by token from the definition."""
    losses = []
    for start in range(0, len(ids) - 1, window):
        chunk = ids[start:start + window + 1]
        logits = model.forward(np.array([chunk[:-1]]))[0].astype(np.float64)
        for t in range(len(chunk) - 1):
            z = logits[t]
            losses.append(np.log(np.exp(z - z.max()).sum()) + z.max() - z[chunk[t + 1]])
    return float(np.mean(losses))


@pytest.mark.parametrize("arch", ["classic", "modern"])
def test_evaluate_matches_the_definition(arch):
    cfg = minillm.ModelConfig(arch=arch, vocab_size=23, context_length=8, d_model=8,
                              n_layers=2, n_heads=2, d_ff=12)
    model = minillm.random_model(cfg, seed=1, dtype="float64")
    ids = np.random.default_rng(0).integers(0, 23, size=30)
    seen = []
    loss = evaluate(model, ids, window=8, progress=lambda done, total: seen.append((done, total)))
    assert loss == pytest.approx(direct_loss(model, ids, 8), rel=1e-12)
    assert seen[-1] == (29, 29) and [d for d, _ in seen] == [8, 16, 24, 29]
    assert evaluate(model, ids, window=5) == pytest.approx(direct_loss(model, ids, 5), rel=1e-12)


def test_evaluate_refuses_bad_input():
    cfg = minillm.ModelConfig(arch="modern", vocab_size=5, context_length=4, d_model=4,
                              n_layers=1, n_heads=1, d_ff=4)
    model = minillm.random_model(cfg, seed=0)
    with pytest.raises(ValueError):
        evaluate(model, [1])
    with pytest.raises(ValueError):
        evaluate(model, [1, 2, 3], window=5)


def test_log_softmax_and_bits_per_byte():
    z = np.array([[1000.0, 1000.0]])
    assert np.allclose(log_softmax(z), np.log(0.5))
    assert bits_per_byte(np.log(2), n_tokens=10, n_bytes=10) == pytest.approx(1.0)


@pytest.mark.parametrize("arch", ["classic", "modern"])
def test_quality_loss_is_evaluate_loss_exactly(arch):
    """quality.py's loss of the float and the quantized model is evaluate()'s of each, bit for
    bit, on the tokens its windows cover (whatever is left over after the last full window is
    not read)."""
    from minillm.study.quality import compare, loss, windows

    cfg = minillm.ModelConfig(arch=arch, vocab_size=23, context_length=8, d_model=8,
                              n_layers=2, n_heads=2, d_ff=12)
    model = minillm.random_model(cfg, seed=3)
    model8 = minillm.quantize(model, bits=4)
    ids = np.random.default_rng(1).integers(0, 23, size=40)
    for length, count in ((8, None), (5, None), (6, 3)):
        wins = windows(ids, length, count)
        covered = ids[:len(wins) * length + 1]
        assert (wins[:, 1:].ravel() == covered[1:]).all()  # each token after the first once
        r = compare(model, model8, wins)
        assert r.positions == len(covered) - 1
        assert r.loss_float == evaluate(model, covered, window=length)
        assert r.loss_quant == evaluate(model8, covered, window=length)
        assert r.loss_quant != r.loss_float
        assert loss(model8, wins) == r.loss_quant and loss(model, wins) == r.loss_float
