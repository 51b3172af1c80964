"""Cache equivalence: a KV cache changes the cost of a forward pass, never its logits.

Three properties, for any tokens, any batch size and any way of cutting the text into chunks:

    chunked:   feeding tokens[:, a:b] to a cache that holds tokens[:, :a] gives
               forward(tokens[:, :b])[:, a:b]            (prefill, decode, or anything between)
    causal:    the chunks together give forward(tokens): a position's logits do not depend on
               later tokens (in a one-layer model, a mask that lets each token see one token
               ahead passes `chunked`, both paths stopping at the chunk's end, and fails this)
    rollback:  truncating the cache to `keep` tokens, then feeding `more`, gives
               forward(tokens[:, :keep] + more)[:, keep:] (speculative decoding's rollback)

Tolerance: |cached - uncached| <= atol + rtol |uncached|. The two paths differ only in the order
of floating-point sums, so float64 engines agree to ~1e-12 and float32 ones to ~1e-5 (for
logits of order 1); pick atol from the engine's dtype.
"""
from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from .compare import assert_logits_close
from .engine import Engine
from .settings import checker_settings


def assert_chunks_match(engine: Engine, tokens, cuts, atol: float,
                        rtol: float = 0.0) -> np.ndarray:
    """Feed tokens (B, T) through one cache in chunks [cuts[i], cuts[i + 1]) and compare each
    chunk's logits with the uncached forward pass of the text up to the chunk's end, then all
    of them with the uncached pass over the whole text. cuts: positions in (0, T) (0 and T
    may be given too). Returns the cached logits (B, T, V), for further comparisons."""
    engine.require("new_cache", "extend")
    tokens = np.asarray(tokens, dtype=np.int64)
    cuts = sorted(set(cuts) | {0, tokens.shape[1]})
    case = f"tokens {tokens.tolist()}, cuts {cuts}"
    cache = engine.new_cache(len(tokens), None)
    chunks = []
    for a, b in zip(cuts, cuts[1:]):
        chunks.append(np.asarray(engine.extend(cache, tokens[:, a:b])))
        want = np.asarray(engine.forward(tokens[:, :b], None))[:, a:b]
        assert_logits_close(chunks[-1], want, atol, rtol, f"cached chunk [{a}, {b})", case)
    cached = np.concatenate(chunks, axis=1)
    assert_logits_close(cached, engine.forward(tokens, None), atol, rtol,
                        "cached chunks against the whole text (causality)", case)
    return cached


def assert_rollback_matches(engine: Engine, tokens, keep: int, more, atol: float,
                            rtol: float = 0.0) -> None:
    """Cache all of tokens (B, T), truncate to `keep`, feed `more` (B, M): the logits must be
    those of the uncached text tokens[:, :keep] + more, at the positions of `more`."""
    engine.require("new_cache", "extend", "truncate")
    tokens, more = np.asarray(tokens, dtype=np.int64), np.asarray(more, dtype=np.int64)
    cache = engine.new_cache(len(tokens), None)
    engine.extend(cache, tokens)
    engine.truncate(cache, keep)
    got = engine.extend(cache, more)
    text = np.concatenate([tokens[:, :keep], more], axis=1)
    want = np.asarray(engine.forward(text, None))[:, keep:]
    assert_logits_close(got, want, atol, rtol, f"after truncate({keep})",
                        f"tokens {tokens.tolist()}, then {more.tolist()}")


@st.composite
def chunk_cases(draw, vocab_size: int, max_batch: int = 2, max_length: int = 16):
    """(tokens (B, T), cuts): a batch of texts and where to cut it into chunks."""
    batch = draw(st.integers(1, max_batch))
    length = draw(st.integers(1, max_length))
    tokens = draw(token_arrays(vocab_size, batch, length))
    cuts = draw(st.sets(st.integers(1, length), max_size=length))
    return tokens, sorted(cuts)


@st.composite
def rollback_cases(draw, vocab_size: int, max_batch: int = 2, max_length: int = 16):
    """(tokens (B, T), keep, more (B, M)) with T + M - (T - keep) <= max_length."""
    batch = draw(st.integers(1, max_batch))
    length = draw(st.integers(1, max_length - 1))
    keep = draw(st.integers(0, length))
    tokens = draw(token_arrays(vocab_size, batch, length))
    more = draw(token_arrays(vocab_size, batch, draw(st.integers(1, max_length - keep))))
    return tokens, keep, more


def token_arrays(vocab_size: int, batch: int, length: int):
    """A strategy for (batch, length) int64 token ids in [0, vocab_size)."""
    ids = st.integers(0, vocab_size - 1)
    return st.lists(st.lists(ids, min_size=length, max_size=length), min_size=batch,
                    max_size=batch).map(lambda rows: np.array(rows, dtype=np.int64))


def check_cache_equivalence(engine: Engine, atol: float, rtol: float = 0.0, max_batch: int = 2,
                            max_length: int = 16, max_examples: int = 25) -> None:
    """The properties of the module docstring on `max_examples` drawn cases each (Hypothesis,
    derandomized: the same cases on every run). Texts are at most min(max_length,
    engine.context_length) tokens. Rollback is checked when the engine has `truncate`.
    Raises AssertionError with the smallest failing case Hypothesis finds."""
    engine.require("new_cache", "extend")
    length = min(max_length, engine.context_length)

    @checker_settings(max_examples)
    @given(chunk_cases(engine.vocab_size, max_batch, length))
    def chunked(case):
        assert_chunks_match(engine, *case, atol=atol, rtol=rtol)

    chunked()
    if engine.truncate is not None and length >= 2:
        @checker_settings(max_examples)
        @given(rollback_cases(engine.vocab_size, max_batch, length))
        def rollback(case):
            assert_rollback_matches(engine, *case, atol=atol, rtol=rtol)

        rollback()
