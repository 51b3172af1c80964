"""What the checkers need from an inference engine: a small protocol, nothing more.

An engine is any object with

    vocab_size, context_length             ints
    new_cache(batch_size) -> cache         an empty cache: any object the engine keeps
    forward(tokens, cache=None, pad=None)  (B, T) int ids -> (B, T, V) logits

Without a cache, `tokens` are the whole text. With one, they continue the text the cache
holds, and the cache then holds them too. `pad` is the (B,) number of left-padding tokens of
each row: row r is tokens[r, pad[r]:], its first pad[r] ids are filler the engine must ignore,
and its positions count from its first real token. The checkers give `pad` to an uncached call
or with the first chunk into an empty cache (the prefill), never later; an engine without
batches may refuse it (check_batch_equivalence(..., ragged=False)). A cache that supports
rollback has `truncate(length)`: forget every token from position `length` on. A cache that
holds something scarce (sequence slots of a shared context, device memory) may have `close()`:
the checkers call it as soon as the case that made the cache is done, passing or failing, so
that at most two caches are alive at once (see each checker for how many rows they hold).

minillm.Model is an engine as it is. `Engine` makes one out of two functions, for an engine
whose own objects do not have these names (docs/TESTING.md shows transformers and a plain
PyTorch loop).
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .compare import Tolerance, assert_logits_close, position_differences


@dataclass(frozen=True)
class Engine:
    """An engine from functions: forward(tokens, cache=None, pad=None) -> (B, T, V) logits,
    new_cache(batch_size) -> a cache (None for an engine without one)."""

    vocab_size: int
    context_length: int
    forward: Callable
    new_cache: Callable | None = None


class EngineError(RuntimeError):
    """An exception the engine raised, with the call that raised it and a hint where one
    applies; the checkers report it with the check and the case."""


def engine_error(error: Exception, call: str, hint: str = "") -> EngineError:
    return EngineError(f"the engine raised {type(error).__name__}: {error}; in {call}"
                       + (f"; hint: {hint}" if hint else ""))


def logits_of(engine, tokens, cache=None, pad=None) -> np.ndarray:
    """engine.forward as float64 logits (B, T, V); `pad` is passed only when some row has
    padding, so that an engine refusing it is never asked. An exception of the engine comes
    out as an EngineError naming the call."""
    tokens = np.asarray(tokens, dtype=np.int64)
    padded = pad is not None and np.any(pad)
    try:
        if padded:
            out = engine.forward(tokens, cache, np.asarray(pad, dtype=np.int64))
        else:
            out = engine.forward(tokens, cache)
    except (AssertionError, EngineError):
        raise
    except Exception as error:
        held = "a cache" if cache is not None else "no cache"
        call = (f"forward(tokens {tokens.tolist()}, {held}"
                + (f", pad {np.asarray(pad).tolist()})" if padded else ")"))
        hint = ("an engine without padding: check_batch_equivalence(..., ragged=False)" if padded
                else "an engine whose caches hold one row: max_batch=1" if cache is not None
                and len(tokens) > 1 else "")
        raise engine_error(error, call, hint) from error
    return np.asarray(out, dtype=np.float64)


def require_cache(engine) -> None:
    """Raise a ValueError unless the engine can make a cache."""
    if getattr(engine, "new_cache", None) is None:
        raise ValueError("engine: this check needs new_cache(batch_size); see "
                         "minillm.testing.engine")


def can_truncate(cache) -> bool:
    """Whether a cache supports rollback (has truncate(length))."""
    return callable(getattr(cache, "truncate", None))


@contextmanager
def open_cache(engine, batch_size: int):
    """engine.new_cache(batch_size), closed (cache.close(), when it has one) on leaving."""
    try:
        cache = engine.new_cache(batch_size)
    except Exception as error:
        raise engine_error(error, f"new_cache({batch_size})", "an engine whose caches hold one "
                           "row: max_batch=1" if batch_size > 1 else "") from error
    try:
        yield cache
    finally:
        if callable(getattr(cache, "close", None)):
            cache.close()


def assert_deterministic(engine, tol: Tolerance, batch_size: int = 2, length: int = 8,
                         seed: int = 0) -> float:
    """The same calls twice, the second time while another cache holds a text of 3 tokens,
    must give the same logits within `tol`: an uncached call, then (engines with caches) a
    cache fed half the text and then one token a call. Otherwise the engine is not
    deterministic (a KV cache shared between sequences, say, whose cells shift with the other
    texts) and no property can be judged: Hypothesis would see cases that fail once and pass
    when repeated. The text is drawn from `seed`; an engine whose calls depend on the other
    texts only for some texts may pass this probe and fail a check on a case of its own.
    Returns the largest difference between the two runs. Caches alive at once: two of
    batch_size rows, or one and an uncached call."""
    length = min(length, engine.context_length)
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, engine.vocab_size, (batch_size, length))  # (B, T)
    cached = getattr(engine, "new_cache", None) is not None

    def run():
        calls = [logits_of(engine, tokens)]
        if cached:
            with open_cache(engine, batch_size) as cache:
                half = max(1, length // 2)
                calls.append(logits_of(engine, tokens[:, :half], cache))
                calls += [logits_of(engine, tokens[:, t:t + 1], cache)
                          for t in range(half, length)]
        return np.concatenate(calls, axis=1)  # (B, T or 2T, V)

    try:
        first, second, how = twice(run, cached, engine, rng, batch_size)
    except EngineError as error:
        raise AssertionError(f"the determinism probe (the same calls twice on the tokens "
                             f"{tokens.tolist()}): {error}") from error
    gap = float(position_differences(second, first)[0].max())
    try:
        assert_logits_close(second, first, tol, "", "")
    except AssertionError:
        raise AssertionError(f"the engine is not deterministic: the same calls on the tokens "
                             f"{tokens.tolist()} differ by up to {gap:.3g} ({tol.bounds}) when "
                             f"made twice{how}") from None
    return gap


def twice(run, cached: bool, engine, rng, batch_size: int):
    """run() twice, the second time (engines with caches) while another cache holds a text of
    3 tokens; the two results and how the second was made, for the message."""
    first = run()
    if not cached:
        return first, run(), ""
    with open_cache(engine, batch_size) as other:
        logits_of(engine, rng.integers(0, engine.vocab_size, (batch_size, 3)), other)
        second = run()
    return first, second, (", the second time while another cache held a text (an uncached "
                           "call, then a cache fed half the text and one token a call)")
