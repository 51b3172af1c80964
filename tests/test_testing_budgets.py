"""The kit's default budgets catch the bugs engines ship: every misordering of the sampler's
stages, a paged cache that loses a cell once a text passes a block of 16, 32 or 64 tokens (in
the cache, rollback and batch checks), a decode loop that goes wrong past 32 tokens, and the
planted bugs of tests/test_testing_kit.py, each with the checks' own defaults (no
max_examples, no max_length). The smaller "quick" profile misses what lies past its one
boundary, 16, and says so by passing: that is what the profiles are for.
"""
import itertools

import numpy as np
import pytest

import minillm
from minillm.sampling import filtered_probs
from minillm.testing import (MINILLM_ORDER, Engine, check_batch_equivalence,
                             check_cache_equivalence, check_rollback, check_sampler,
                             check_window_slides, probabilities_in_order)
from minillm.testing.profiles import PROFILES, profile_of
from minillm.window import kept_on_slide
from tests.test_testing_kit import (MODERN, cache_ignored, off_by_one,
                                    top_p_of_the_unnormalised_top_k,
                                    top_p_without_the_crossing_token, truncate_forgotten)

ATOL = 1e-12
PAGED = minillm.random_model(minillm.ModelConfig(
    arch="modern", vocab_size=11, context_length=80, d_model=8, n_layers=2, n_heads=2,
    n_kv_heads=1, d_ff=12), seed=5, dtype="float64", std=0.5)
WINDOWED = minillm.random_model(minillm.ModelConfig(  # learned positions: its greedy text cycles
    arch="classic", vocab_size=11, context_length=6, d_model=8, n_layers=2, n_heads=2),
    seed=6, dtype="float64", std=0.5)


# -- the sampler: its knob grid catches every misordering -------------------------------------

def same_as_minillm(order) -> bool:
    """top-k commutes with the temperature (it keeps the k largest logits either way): those
    orders are minillm's; every other order is another sampler."""
    return tuple(s for s in order if s != "top_k") == MINILLM_ORDER[:1] + MINILLM_ORDER[2:] \
        and order.index("top_k") < order.index("top_p")


ORDERS = [order for order in itertools.permutations(MINILLM_ORDER) if not same_as_minillm(order)]


@pytest.mark.parametrize("order", ORDERS, ids=lambda order: ">".join(order))
def test_the_default_sampler_check_catches_every_order_of_the_stages(order):
    """Top-p before the temperature (transformers' warpers reordered), min-p before it, top-p
    before top-k, min-p before top-p, the temperature last (llama.cpp's order, against
    minillm's rule): the default check, in its knob grid, before any drawn case."""
    with pytest.raises(AssertionError, match="knob combination .* of the grid") as e:
        check_sampler(lambda z, knobs: probabilities_in_order(z, knobs, order))
    assert "replay: minillm.testing.assert_filter_holds(filter_fn, " in str(e.value)


def test_the_orders_the_grid_cannot_tell_apart_are_the_same_sampler():
    """The two orders that pass: top-k before or after the temperature, the same sampler."""
    same = [order for order in itertools.permutations(MINILLM_ORDER) if same_as_minillm(order)]
    assert sorted(same) == sorted([MINILLM_ORDER, ("top_k", "temperature", "top_p", "min_p")])
    for order in same:
        report = check_sampler(lambda z, knobs: probabilities_in_order(z, knobs, order))
        assert report.cases == 240 + 50 and report.max_diff < 1e-12


@pytest.mark.parametrize("bug", [top_p_without_the_crossing_token,
                                 top_p_of_the_unnormalised_top_k])
def test_the_earlier_sampler_bugs_are_caught_by_the_default(bug):
    """Each bug where it applies (top-k and top-p on, min-p off, sampling), minillm's rule
    elsewhere: the grid reaches it."""
    def planted(z, knobs):
        if knobs.top_k is not None and knobs.top_p is not None and knobs.min_p is None \
                and not knobs.greedy:
            return bug(z, knobs)
        return filtered_probs(z, knobs)

    with pytest.raises(AssertionError, match="differs from minillm's filtered_probs"):
        check_sampler(planted)
    check_sampler(lambda z, knobs: filtered_probs(z, knobs))


# -- paged caches: a cell lost past a block ---------------------------------------------------

def loses_a_cell(model, page: int):
    """Bug: once a text passes `page` tokens, the first cell of its second page is lost (its
    keys and values written to a block nobody reads: zeros where they should be)."""
    def forward(tokens, cache=None, pad=None):
        logits = model.forward(tokens, cache, pad)
        if cache is not None and cache.length > page:
            cache.k[:, :, :, page] = 0
            cache.v[:, :, :, page] = 0
        return logits
    return Engine(model.vocab_size, model.context_length, forward, model.new_cache)


def test_the_honest_engine_passes_every_default_check_past_64_tokens():
    report = check_cache_equivalence(PAGED, atol=ATOL)
    batch = check_batch_equivalence(PAGED, atol=ATOL)
    assert report.max_abs < ATOL and batch.max_abs < ATOL


@pytest.mark.parametrize("page", [16, 32, 64])
def test_a_cell_lost_past_16_32_or_64_tokens_is_caught_by_each_default_check(page):
    engine = loses_a_cell(PAGED, page)
    for check, name in ((check_cache_equivalence, "check_cache_equivalence"),
                        (check_rollback, "check_rollback"),
                        (check_batch_equivalence, "check_batch_equivalence")):
        with pytest.raises(AssertionError, match=f"{name}: a seeded .*crossing {page}|"
                                                 f"{name}: a seeded .*around {page}") as e:
            check(engine, atol=ATOL)
        assert "\nreplay: minillm.testing.assert_" in str(e.value)


def test_the_quick_profile_crosses_16_only_and_an_explicit_budget_replaces_the_profiles():
    check_cache_equivalence(loses_a_cell(PAGED, 32), atol=ATOL, profile="quick")
    with pytest.raises(AssertionError, match="crossing 16"):
        check_cache_equivalence(loses_a_cell(PAGED, 16), atol=ATOL, profile="quick")
    assert profile_of("long", max_length=8) == PROFILES["long"].__class__(
        "long", 100, 8, (16, 32, 64, 128, 256), 25)
    with pytest.raises(AssertionError, match="crossing 64"):  # drawn cases fewer, seeded kept
        check_cache_equivalence(loses_a_cell(PAGED, 64), atol=ATOL, max_examples=2,
                                max_length=4)
    with pytest.raises(ValueError, match="profile: one of"):
        check_rollback(PAGED, atol=ATOL, profile="thorough")


# -- window slides: a loop that goes wrong past 32 tokens -------------------------------------

def rereading_loop(model, W: int, broken_past: int | None = None):
    """Greedy decoding that re-reads its view each step (slide rule: kept_on_slide(W)). Bug
    when broken_past is given: once the text passes that many tokens, the loop's view loses
    its oldest token (an index counted from the text's start, not the view's)."""
    keep = kept_on_slide(W)

    def decode(prompt, n):
        view, total, steps = list(prompt)[-W:], len(prompt), []
        for _ in range(n):
            read = view[1:] if broken_past and total > broken_past and len(view) > 1 else view
            steps.append(model.forward(np.array([read]))[0, -1])
            token = int(steps[-1].argmax())
            view = view + [token] if len(view) < W else (view + [token])[-keep:]
            total += 1
        return np.array(steps)
    return decode


def test_a_loop_wrong_past_32_tokens_is_caught_by_the_default_window_check_not_the_quick():
    check_window_slides(rereading_loop(WINDOWED, 6), WINDOWED, atol=ATOL)
    broken = rereading_loop(WINDOWED, 6, broken_past=32)
    check_window_slides(broken, WINDOWED, atol=ATOL, profile="quick")
    with pytest.raises(AssertionError, match="a seeded run past 64 tokens"):
        check_window_slides(broken, WINDOWED, atol=ATOL)


# -- the earlier planted bugs, at the defaults ------------------------------------------------

@pytest.mark.parametrize("bug", [cache_ignored, truncate_forgotten, off_by_one])
@pytest.mark.parametrize("engine", [MODERN, PAGED], ids=["context-12", "context-80"])
def test_the_earlier_cache_bugs_are_caught_by_the_default(bug, engine):
    with pytest.raises(AssertionError, match="logits differ"):
        check_cache_equivalence(bug(engine), atol=ATOL, shrink_seconds=5)
