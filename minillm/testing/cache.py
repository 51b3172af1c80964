"""Cache equivalence: a KV cache changes the cost of a forward pass, never its logits.

Three properties, for any tokens, any batch size and any way of cutting the text into chunks:

    chunked:   feeding tokens[:, a:b] to a cache that holds tokens[:, :a] gives
               forward(tokens[:, :b])[:, a:b]    (one call, token by token, or anything between)
    causal:    the chunks together give forward(tokens): a position's logits do not depend on
               later tokens (in a one-layer model, a mask that lets each token see one token
               ahead passes `chunked`, both paths stopping at the chunk's end, and fails this)
    rollback:  caching tokens, cache.truncate(keep), then feeding `more` gives
               forward(tokens[:, :keep] + more)[:, keep:]   (speculative decoding's rollback)

Tolerance: |cached - uncached| <= atol + rtol |uncached|. The two paths differ only in the order
of floating-point sums, so float64 engines agree to ~1e-12 and float32 ones to ~1e-5 (for
logits of order 1); pick atol from the engine's dtype.
"""
from __future__ import annotations

import numpy as np
from hypothesis import given

from .compare import assert_logits_close
from .engine import can_truncate, logits_of, require_cache
from .settings import checker_settings
from .strategies import chunk_cases, rollback_cases


def assert_chunks_match(engine, tokens, cuts, atol: float, rtol: float = 0.0) -> np.ndarray:
    """Feed tokens (B, T) through one cache in chunks [cuts[i], cuts[i + 1]) and compare each
    chunk's logits with the uncached forward pass of the text up to the chunk's end, then all
    of them with the uncached pass over the whole text. cuts: positions in (0, T) (0 and T
    may be given too). Returns the cached logits (B, T, V), for further comparisons."""
    require_cache(engine)
    tokens = np.asarray(tokens, dtype=np.int64)
    cuts = sorted(set(cuts) | {0, tokens.shape[1]})
    case = f"tokens {tokens.tolist()}, chunks cut at {cuts}"
    cache = engine.new_cache(len(tokens))
    chunks = []
    for a, b in zip(cuts, cuts[1:]):
        chunks.append(logits_of(engine, tokens[:, a:b], cache))
        want = logits_of(engine, tokens[:, :b])[:, a:b]
        assert_logits_close(chunks[-1], want, atol, rtol, f"cached chunk [{a}, {b})", case,
                            first=a)
    cached = np.concatenate(chunks, axis=1)
    assert_logits_close(cached, logits_of(engine, tokens), atol, rtol,
                        "cached chunks against the whole text (causality)", case)
    return cached


def assert_rollback_matches(engine, tokens, keep: int, more, atol: float,
                            rtol: float = 0.0) -> None:
    """Cache all of tokens (B, T), cache.truncate(keep), feed `more` (B, M): the logits must be
    those of the uncached text tokens[:, :keep] + more, at the positions of `more`."""
    require_cache(engine)
    tokens, more = np.asarray(tokens, dtype=np.int64), np.asarray(more, dtype=np.int64)
    cache = engine.new_cache(len(tokens))
    if not can_truncate(cache):
        raise ValueError("engine: its cache has no truncate(length), so rollback cannot be "
                         "checked")
    logits_of(engine, tokens, cache)
    cache.truncate(keep)
    got = logits_of(engine, more, cache)
    text = np.concatenate([tokens[:, :keep], more], axis=1)
    want = logits_of(engine, text)[:, keep:]
    assert_logits_close(got, want, atol, rtol, f"after truncate({keep})",
                        f"tokens {tokens.tolist()}, then {more.tolist()}", first=keep)


def check_cache_equivalence(engine, atol: float, rtol: float = 0.0, max_batch: int = 2,
                            max_length: int = 16, max_examples: int = 25) -> None:
    """The properties of the module docstring on `max_examples` drawn cases each (Hypothesis,
    derandomized: the same cases on every run). Texts are at most min(max_length,
    engine.context_length) tokens. Rollback is checked when the engine's caches have
    truncate(length). Raises AssertionError with the smallest failing case Hypothesis finds."""
    require_cache(engine)
    length = min(max_length, engine.context_length)

    @checker_settings(max_examples)
    @given(chunk_cases(engine.vocab_size, max_batch, length))
    def chunked(case):
        assert_chunks_match(engine, *case, atol=atol, rtol=rtol)

    chunked()
    if can_truncate(engine.new_cache(1)) and length >= 2:
        @checker_settings(max_examples)
        @given(rollback_cases(engine.vocab_size, max_batch, length))
        def rollback(case):
            assert_rollback_matches(engine, *case, atol=atol, rtol=rtol)

        rollback()
