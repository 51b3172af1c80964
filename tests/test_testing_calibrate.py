"""calibrate's rule on NumPy engines: the bound it suggests admits an honest engine's own
noise and catches bugs of 0.5 and 2 logits at one position, where twice the noise did not;
never goes below the floor of the logits' dtype; each check's setting is measured on texts of
that check's own lengths (the window check's too); and a failure within call-size noise says
what to try, with its figures."""
import re

import numpy as np
import pytest

import minillm
from minillm.testing import Engine, calibrate, check_batch_equivalence, check_cache_equivalence
from minillm.testing import check_rollback
from minillm.testing import Tolerance, check_window_slides
from minillm.testing.calibrate import FLOOR_ULPS, MARGIN, SHARE
from minillm.testing.window import rereading_loop
from tests.test_testing_budgets import WINDOWED, loses_a_cell
from tests.test_testing_budgets import rereading_loop as budget_loop

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
    assert found.reference == "chunks" and found.suggested == found.floor < 1e-12
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
    assert exact.suggested == exact.floor < 1e-12 and exact.across_sizes < 1e-12


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


# -- a failure within call-size noise says what to try ----------------------------------------

def test_a_rollback_failure_within_call_size_noise_names_reference_chunks_kl_and_calibrate():
    with pytest.raises(AssertionError, match="after truncate") as e:
        check_rollback(engine(noise=0.05), atol=0, reference="uncached", **SMALL)
    lines = str(e.value).splitlines()
    hint = next(line for line in lines if line.startswith("hint: "))
    assert lines[-1].startswith("replay: minillm.testing.assert_rollback_matches(")
    assert lines.index(hint) == len(lines) - 2  # after the check's note, before the replay
    assert 'use reference="chunks"' in hint and "Tolerance(kl=...)" in hint
    assert "minillm.testing.calibrate(engine)" in hint
    figures = re.search(r"differ by ([\d.e-]+) at that position, ([\d.e-]+) of its logits' "
                        r"standard deviation ([\d.e-]+), KL ([\d.e-]+) nats", hint)
    largest, ratio, scale, kl = map(float, figures.groups())
    assert 0 < largest <= 0.05 * 4 and 0 < ratio <= 1 and kl > 0
    assert largest / scale == pytest.approx(ratio, abs=0.01)


def test_each_check_builds_the_same_hint_and_only_where_reference_chunks_would_help():
    """The cache check's chunks are compared with uncached calls whatever the reference: its
    hint names the KL bound and calibrate, not reference="chunks". The batch check's cached
    rows with reference="uncached" name it."""
    with pytest.raises(AssertionError, match="cached chunk") as e:
        check_cache_equivalence(engine(noise=0.05), atol=0, **SMALL)
    hint = str(e.value).split("\nhint: ")[1]
    assert "Tolerance(kl=...)" in hint and "calibrate(engine)" in hint
    assert 'reference="chunks"' not in hint
    with pytest.raises(AssertionError, match="cached, against the row alone, one uncached") as e:
        check_batch_equivalence(engine(noise=0.05), atol=0, ragged=False, **SMALL)
    assert 'use reference="chunks"' in str(e.value).split("\nhint: ")[1]


def test_a_failure_past_the_positions_logit_spread_gets_no_hint():
    with pytest.raises(AssertionError, match="after truncate") as e:
        check_rollback(engine(bug=100.0), atol=0, reference="chunks", **SMALL)
    assert "hint:" not in str(e.value)


# -- the floor of the logits' dtype -----------------------------------------------------------

FLOAT32 = minillm.random_model(minillm.ModelConfig(
    arch="modern", vocab_size=11, context_length=80, d_model=8, n_layers=2, n_heads=2,
    n_kv_heads=1, d_ff=12), seed=5, dtype="float32", std=0.5)


def test_a_float32_engine_never_gets_a_bound_below_the_floor_of_its_dtype():
    """minillm in float32: its cached and uncached paths sum in other orders (noise of a few
    1e-6 on calibrate's texts). Twice that noise is below the floor, 64 float32 ulps of the
    largest logit; every bound suggested is at least the floor, and the default checks pass
    at their settings, crossings of 16, 32 and 64 tokens included."""
    found = calibrate(FLOAT32)
    largest = max(float(np.abs(FLOAT32.forward(text[None])).max()) for text in
                  np.random.default_rng(0).integers(0, 11, (4, 16)))
    assert found.dtype == "float32"
    assert found.floor == pytest.approx(FLOOR_ULPS * np.finfo(np.float32).eps * largest)
    assert 0 < MARGIN * found.one_token < found.floor  # the rule alone would go below it
    assert found.suggested >= found.floor and found.across_sizes >= found.floor
    for name in ("cache", "rollback", "batch"):
        assert found.checks[name]["tolerance"].atol >= found.floor
    check_cache_equivalence(FLOAT32, **found.checks["cache"])
    check_rollback(FLOAT32, **found.checks["rollback"])
    check_batch_equivalence(FLOAT32, **found.checks["batch"])
    double = calibrate(MODEL)
    assert double.dtype == "float64" and double.floor < 1e-12


# -- each check's setting, measured on its own texts ------------------------------------------

PAGED = minillm.random_model(minillm.ModelConfig(
    arch="modern", vocab_size=11, context_length=80, d_model=8, n_layers=2, n_heads=2,
    n_kv_heads=1, d_ff=12), seed=5, dtype="float64", std=0.5)


def growing(model, noise):
    """An engine whose one-token calls into a cache of n tokens are off by noise * n / 16 (a
    kernel whose error grows with the text, as float32 sums over longer attention rows do):
    calibrate's texts of 16 tokens see noise, the texts that cross 64 four times as much."""
    wobble = np.random.default_rng(7).standard_normal(model.vocab_size) * noise / 16

    def forward(tokens, cache=None, pad=None):
        length = 0 if cache is None else cache.length
        logits = model.forward(tokens, cache, pad)
        return logits + wobble * length if cache is not None and tokens.shape[1] == 1 \
            and length else logits
    return Engine(model.vocab_size, model.context_length, forward, model.new_cache)


def test_each_checks_setting_is_measured_on_that_checks_texts():
    """The bound from calibrate's 16-token texts fails the default cache check at its crossing
    of 32 tokens; the cache check's own setting, measured on texts of its lengths, passes,
    and still catches a cell lost past 32 tokens."""
    noisy = growing(PAGED, 1e-3)
    found = calibrate(noisy)
    setting = found.checks["cache"]
    assert setting["tolerance"].atol > 2 * found.across_sizes
    with pytest.raises(AssertionError, match="crossing 32"):
        check_cache_equivalence(noisy, atol=found.across_sizes, reference=found.reference)
    check_cache_equivalence(noisy, **setting)
    check_rollback(noisy, **found.checks["rollback"])
    check_batch_equivalence(noisy, **found.checks["batch"])
    lost = loses_a_cell(noisy, 32)
    with pytest.raises(AssertionError, match="crossing 32"):
        check_cache_equivalence(lost, **setting)


def test_the_window_check_gets_a_setting_measured_on_its_own_run():
    """Given the loop's window, calibrate runs the window check's seeded run (its prompt of W
    tokens, its steps past 64 tokens) through the loop and bounds the noise it saw: the honest
    loop passes at that setting, a loop that goes wrong past 32 tokens does not."""
    noisy = growing(WINDOWED, 1e-3)
    assert "window" not in calibrate(noisy).checks
    found = calibrate(noisy, window=6)
    setting = found.checks["window"]
    assert 0 < setting["tolerance"].atol < SHARE * found.spread
    check_window_slides(rereading_loop(noisy, 6), noisy, window=6, **setting)
    broken = budget_loop(WINDOWED, 6, broken_past=32)
    with pytest.raises(AssertionError, match="a seeded run past 64 tokens"):
        check_window_slides(broken, noisy, window=6, **setting)


def test_the_suggested_reference_is_the_rules_whatever_the_checks_settings_chose():
    """An engine exact like with like and off across call sizes: reference="chunks" at the
    top, whatever order the per-check figures were measured in."""
    for noisy, window in ((engine(noise=0.5), None), (growing(PAGED, 1e-3), 8),
                          (growing(WINDOWED, 1e-3), 6)):
        found = calibrate(noisy, window=window)  # "window" measured last, with no reference
        assert found.same_chunks == 0 < found.one_token and found.reference == "chunks"
