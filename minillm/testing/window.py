"""Window slides: generation past the context length equals a fresh pass over what it keeps.

When a text outgrows the context window W, a loop keeps its newest `keep` tokens (minillm
keeps kept_on_slide(W) = W // 2, the new token included) and goes on from them, positions
counting from 0 again. Whatever the loop does inside (shift its cache, re-read the kept tokens,
re-rotate RoPE keys), each new token's logits must be those of an uncached forward pass over
the view it was drawn after:

    logits at step i == forward(view_i)[-1]        view_i: the slide rule applied to the text

(greedy decoding, so the text is the argmax of each step's logits). Tolerance as for cache
equivalence: |loop - fresh| <= atol + rtol |fresh|.
"""
from __future__ import annotations

import numpy as np
from hypothesis import given

from ..window import kept_on_slide
from .compare import assert_logits_close
from .engine import logits_of
from .settings import checker_settings
from .strategies import token_sequences


def slide_views(prompt, new_tokens, W: int, keep: int) -> list[list[int]]:
    """The view each new token was drawn after: the prompt's last W tokens, then each token
    appended; a view of W tokens that receives one more keeps its newest `keep`."""
    view, views = list(prompt)[-W:], []
    for token in new_tokens:
        views.append(list(view))
        view = view + [token] if len(view) < W else (view + [token])[-keep:]
    return views


def assert_slides_match(decode, engine, prompt, n: int, keep: int, atol: float,
                        rtol: float = 0.0) -> None:
    """decode(prompt, n) -> (n, V) logits of n greedy steps, each against the uncached pass
    over its view (slide_views with the engine's context length and `keep`)."""
    got = np.asarray(decode(list(prompt), n), dtype=np.float64)
    if got.shape != (n, engine.vocab_size):
        raise AssertionError(f"decode returned logits of shape {got.shape}, expected "
                             f"{(n, engine.vocab_size)}")
    tokens = [int(t) for t in got.argmax(axis=-1)]  # (n,) the greedy text
    views = slide_views(prompt, tokens, engine.context_length, keep)
    for step, view in enumerate(views):
        want = logits_of(engine, [view])[0, -1]
        assert_logits_close(got[None, step:step + 1], want[None, None], atol, rtol,
                            f"step {step} (view of {len(view)} tokens)",
                            f"prompt {list(prompt)}, new tokens {tokens[:step + 1]}, view {view}",
                            first=len(view) - 1)


def check_window_slides(decode, engine, atol: float, rtol: float = 0.0, keep: int | None = None,
                        max_examples: int = 10) -> None:
    """decode(prompt, n) -> (n, V): the logits of each of n greedy steps of the loop under test,
    for one prompt (a list of ids). Prompts of 1 to W + 3 tokens (W: engine.context_length),
    n = 2 W + 1 new tokens, so that every view slides at least twice; keep: the loop's slide
    rule (default minillm's, kept_on_slide(W); a rolling window that always keeps the last W
    tokens is keep = W). Raises AssertionError with the step, the view, and the largest
    difference, for the smallest failing prompt Hypothesis finds."""
    W = engine.context_length
    keep = kept_on_slide(W) if keep is None else keep
    if not 1 <= keep <= W:
        raise ValueError(f"keep: must be in [1, {W}], got {keep}")

    @checker_settings(max_examples)
    @given(token_sequences(engine.vocab_size, 1, W + 3))
    def slides(prompt):
        assert_slides_match(decode, engine, prompt, 2 * W + 1, keep, atol, rtol)

    slides()
