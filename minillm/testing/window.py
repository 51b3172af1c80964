"""Window slides: generation past the context length equals a fresh pass over what it keeps.

When a text outgrows the context window W, a loop keeps its newest `keep` tokens (minillm
keeps kept_on_slide(W) = W // 2, the new token included) and goes on from them, positions
counting from 0 again. The property: each new token's logits are those of an uncached forward
pass over the view it was drawn after,

    logits at step i == forward(view_i)[-1]        view_i: the slide rule applied to the text

(greedy decoding, so the text is the argmax of each step's logits). Tolerance as for cache
equivalence (compare.Tolerance).

Which loops can pass. W is the window of the loop under test (for llama.cpp, the n_ctx of its
context; for minillm, the model's context length), given to the checker.
- A loop that re-reads the kept tokens (a fresh prefill of the view, as minillm's does) passes
  at the tolerance of its cache check.
- A loop that shifts its cached keys in place (drops the oldest cells, re-rotates the kept
  RoPE keys to their new positions: llama.cpp's context shift, StreamingLLM's sinks) passes
  on a one-layer model only. From the second layer on, a kept token's key and value were
  computed from a hidden state that attended to the dropped tokens, so they still carry them:
  on a multi-layer model such a loop approximates the fresh pass by design and fails this
  check; measure how far with a loose Tolerance and read the Report.
"""
from __future__ import annotations

import numpy as np

from ..window import kept_on_slide
from .compare import Report, Tolerance, assert_logits_close, assert_top1, combine, per_case
from .compare import tolerance_of
from .engine import logits_of
from .profiles import boundary_texts, profile_of
from .settings import SHRINK_SECONDS, run_property, run_seeded
from .strategies import token_sequences


def slide_views(prompt, new_tokens, W: int, keep: int) -> list[list[int]]:
    """The view each new token was drawn after: the prompt's last W tokens, then each token
    appended; a view of W tokens that receives one more keeps its newest `keep`."""
    view, views = list(prompt)[-W:], []
    for token in new_tokens:
        views.append(list(view))
        view = view + [token] if len(view) < W else (view + [token])[-keep:]
    return views


def rereading_loop(engine, window: int, keep: int | None = None):
    """A greedy decode loop over any engine whose caches have truncate(length), as
    check_window_slides wants it: decode(prompt, n) -> (n, V), the logits of each step. It
    reads the prompt's last `window` tokens, then one token a call; when the view is full, it
    keeps the newest `keep` (default kept_on_slide(window)), empties the cache (truncate(0))
    and reads the kept tokens again from position 0: what minillm's loop does, and what an
    engine's own loop must equal."""
    keep = kept_on_slide(window) if keep is None else keep

    def decode(prompt, n):
        view, steps = list(prompt)[-window:], []
        cache = engine.new_cache(1)
        try:
            logits = logits_of(engine, [view], cache)[0, -1]
            for _ in range(n):
                steps.append(logits)
                token = int(logits.argmax())
                if len(view) < window:
                    view.append(token)
                    logits = logits_of(engine, [[token]], cache)[0, -1]
                else:
                    view = (view + [token])[-keep:]
                    cache.truncate(0)
                    logits = logits_of(engine, [view], cache)[0, -1]
        finally:
            getattr(cache, "close", lambda: None)()
        return np.array(steps)
    return decode


def assert_slides_match(decode, engine, prompt, n: int, keep: int, atol: float | None = None,
                        rtol: float = 0.0, *, tolerance: Tolerance | None = None,
                        window: int | None = None) -> Report:
    """decode(prompt, n) -> (n, V) logits of n greedy steps, each against the uncached pass
    over its view (slide_views with the loop's window W, default engine.context_length, and
    `keep`)."""
    tol = tolerance_of(atol, rtol, tolerance)
    W = engine.context_length if window is None else window
    got = np.asarray(decode(list(prompt), n), dtype=np.float64)
    if got.shape != (n, engine.vocab_size):
        raise AssertionError(f"decode returned logits of shape {got.shape}, expected "
                             f"{(n, engine.vocab_size)}")
    tokens = [int(t) for t in got.argmax(axis=-1)]  # (n,) the greedy text
    reports = []
    for step, view in enumerate(slide_views(prompt, tokens, W, keep)):
        want = logits_of(engine, [view])[0, -1]
        reports.append(assert_logits_close(
            got[None, step:step + 1], want[None, None], tol,
            f"step {step} (view of {len(view)} tokens, window {W})",
            f"prompt {list(prompt)}, new tokens {tokens[:step + 1]}, view {view}",
            first=len(view) - 1, across=f"the loop's own calls against one call of "
            f"{len(view)}" if len(view) > 1 else ""))
    return combine(reports)


def check_window_slides(decode, engine, atol: float | None = None, rtol: float = 0.0,
                        keep: int | None = None, max_examples: int | None = None, *,
                        window: int | None = None, tolerance: Tolerance | None = None,
                        profile: str = "default",
                        shrink_seconds: float = SHRINK_SECONDS) -> Report:
    """decode(prompt, n) -> (n, V): the logits of each of n greedy steps of the loop under test,
    for one prompt (a list of ids). window: the loop's window W (default
    engine.context_length; at most it). Drawn prompts of 1 to W + 3 tokens (the profile's
    window_examples of them, or max_examples), n = 2 W + 1 new tokens, so that every view
    slides at least twice; then one seeded run whose text (a prompt of W tokens and what it
    generates) passes the profile's largest boundary (64 by default: a loop's own counters,
    pages and positions past a block). keep: the loop's slide rule (default minillm's,
    kept_on_slide(W); a rolling window that always keeps the last W tokens is keep = W).
    Returns a Report; raises AssertionError with the step, the view, and the largest
    difference, for the smallest failing prompt Hypothesis finds in shrink_seconds."""
    tol = tolerance_of(atol, rtol, tolerance)
    budget = profile_of(profile, max_examples=max_examples)
    W = engine.context_length if window is None else window
    if not 1 <= W <= engine.context_length:
        raise ValueError(f"window: must be in [1, {engine.context_length}] (the engine's "
                         f"context length), got {W}")
    keep = kept_on_slide(W) if keep is None else keep
    if not 1 <= keep <= W:
        raise ValueError(f"keep: must be in [1, {W}], got {keep}")
    reports = []
    run_property(token_sequences(engine.vocab_size, 1, W + 3),
                 lambda prompt: reports.append(assert_slides_match(
                     decode, engine, prompt, 2 * W + 1, keep, tolerance=per_case(tol),
                     window=W)),
                 budget.window_examples, shrink_seconds, "check_window_slides",
                 lambda prompt: f"minillm.testing.assert_slides_match(decode, engine, {prompt}, "
                                f"{2 * W + 1}, {keep}, tolerance={per_case(tol)!r}, window={W})")
    prompt = boundary_texts(engine.vocab_size, 1, W, seed=400)[0].tolist()
    n = max(2 * W + 1, max(budget.boundaries) + 2 - W)
    reports.append(run_seeded(
        lambda: assert_slides_match(decode, engine, prompt, n, keep, tolerance=per_case(tol),
                                    window=W),
        f"check_window_slides: a seeded run past {max(budget.boundaries)} tokens, after the "
        f"drawn prompts", f"minillm.testing.assert_slides_match(decode, engine, {prompt}, {n}, "
        f"{keep}, tolerance={per_case(tol)!r}, window={W})"))
    report = combine(reports)
    assert_top1(report, tol, "window slides")
    return report
