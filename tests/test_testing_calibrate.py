"""calibrate's rule on NumPy engines: the bound it suggests admits an honest engine's own
noise and catches bugs of 0.5 and 2 logits at one position, where twice the noise did not."""
import numpy as np
import pytest

import minillm
from minillm.testing import Engine, calibrate, check_batch_equivalence, check_cache_equivalence
from minillm.testing import check_rollback
from minillm.testing.calibrate import MARGIN, SHARE

MODEL = minillm.random_model(minillm.ModelConfig(
    arch="modern", vocab_size=11, context_length=12, d_model=8, n_layers=2, n_heads=2,
    n_kv_heads=1, d_ff=12), seed=3, dtype="float64", std=1.0)
SMALL = dict(max_examples=10, max_length=12)


class Rolled:
    """A cache that remembers whether it was truncated; the model reads the one it wraps."""

    def __init__(self, cache):
        self.cache, self.rolled = cache, False

    def truncate(self, length):
        self.rolled = True
        self.cache.truncate(length)


def engine(noise=0.0, bug=0.0, at=0):
    """An engine like llama.cpp without flash attention: a call of one token runs another
    kernel (a fixed perturbation of `noise` times a normal draw). `bug`: added to the logit
    of token `at` at the first position fed to a cache after a truncate (a rollback that
    leaves a stale cell)."""
    wobble = np.random.default_rng(7).standard_normal(MODEL.vocab_size) * noise

    def forward(tokens, cache=None, pad=None):
        logits = MODEL.forward(tokens, None if cache is None else cache.cache, pad)
        if np.asarray(tokens).shape[1] == 1:
            logits = logits + wobble
        if cache is not None and cache.rolled:
            logits[:, 0, at] += bug
            cache.rolled = False
        return logits
    return Engine(MODEL.vocab_size, MODEL.context_length, forward,
                  lambda batch_size: Rolled(MODEL.new_cache(batch_size)))


def test_noise_only_between_call_sizes_suggests_like_with_like_and_says_why():
    found = calibrate(engine(noise=0.5))
    assert found.one_token > 0.5 and found.same_chunks == 0 and found.batch_rows < 1e-12
    assert found.reference == "chunks" and found.suggested == 0
    assert "only between calls of different sizes" in found.why
    assert MARGIN * found.one_token > SHARE * found.spread  # twice the noise: past the cap
    assert found.across_sizes is None and found.kl > 0 and "Tolerance(kl=" in found.why
    assert "reference='chunks'" in str(found)


def test_the_suggested_atol_never_passes_a_share_of_the_logits_spread():
    found = calibrate(engine(noise=0.5))
    assert found.suggested <= SHARE * found.spread
    small = calibrate(engine(noise=1e-3))
    assert small.across_sizes == pytest.approx(MARGIN * small.one_token)
    exact = calibrate(MODEL)
    assert exact.suggested == 0 and exact.across_sizes < 1e-12


@pytest.mark.parametrize("bug", [0.5, 2.0])
def test_planted_bugs_of_half_a_logit_and_two_are_caught_under_the_calibrated_setting(bug):
    found = calibrate(engine(noise=0.5))
    honest = dict(atol=found.suggested, reference=found.reference, **SMALL)
    check_rollback(engine(noise=0.5), **honest)
    check_batch_equivalence(engine(noise=0.5), ragged=False, **honest)  # rows of one size
    with pytest.raises(AssertionError, match="truncate"):
        check_rollback(engine(noise=0.5, bug=bug), **honest)
    old = MARGIN * max(found.one_token, *found.call_sizes.values(), found.chunkings)
    assert old > 0.5  # the former suggestion, twice the largest noise, admitted the 0.5 bug


@pytest.mark.parametrize("bug", [0.5, 2.0])
def test_planted_bugs_are_caught_across_call_sizes_within_the_cap(bug):
    found = calibrate(engine(noise=1e-3))
    assert found.across_sizes is not None
    check_cache_equivalence(engine(noise=1e-3), atol=found.across_sizes, **SMALL)
    with pytest.raises(AssertionError, match="truncate"):
        check_cache_equivalence(engine(noise=1e-3, bug=bug), atol=found.across_sizes, **SMALL)
