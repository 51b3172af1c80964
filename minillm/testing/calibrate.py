"""Calibration: an engine's noise floor, measured, and the bound it suggests.

An engine whose kernels change with the shape of a call (llama.cpp without flash attention:
one-token steps; on some models every call of 4 or 8 tokens and more) differs from itself
between equally right paths. Before choosing a bound, measure how far, on seeded texts of ids
drawn uniformly over the whole vocabulary, each path against one uncached call of the text:

    one-token steps   a prefill of one token, then one token a call
    call sizes        the text in chunks of c tokens, for each c in `sizes`
    two chunkings     two random chunkings of the text against each other (like for like)
    batch rows        each text as a row of a batch of `rows` equal-length rows, uncached
    position shift    the same text read `shift` positions later (`shifted`: the engine with
                      every position moved; with RoPE an exact engine gives the same logits)

`suggested` is the bound that admits what was measured on the paths the checks compare (not
the position shift, which no check makes): 2x the largest difference (0.0 when every path
agreed exactly), as an atol. It is a bound for "the engine is right up to its own
noise", not a proof that the noise is harmless: read the figures.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .engine import logits_of, open_cache


@dataclass(frozen=True)
class Calibration:
    """The largest elementwise difference of each path from one uncached call, and the atol
    it suggests."""

    one_token: float
    call_sizes: dict = field(default_factory=dict)
    chunkings: float = 0.0
    batch_rows: float = 0.0
    position_shift: float | None = None
    suggested: float = 0.0

    def __str__(self) -> str:
        sizes = ", ".join(f"{c}: {d:.3g}" for c, d in self.call_sizes.items())
        shift = "" if self.position_shift is None else f", position shift {self.position_shift:.3g}"
        return (f"one-token steps {self.one_token:.3g}, call sizes {{{sizes}}}, two chunkings "
                f"{self.chunkings:.3g}, batch rows {self.batch_rows:.3g}{shift}; suggested "
                f"atol {self.suggested:.3g}")


def in_chunks(engine, text, cuts) -> np.ndarray:
    """The text (T,) through one cache, cut at `cuts`: its logits (T, V)."""
    bounds = [0] + sorted(cuts) + [len(text)]
    with open_cache(engine, 1) as cache:
        return np.concatenate([logits_of(engine, text[None, a:b], cache)
                               for a, b in zip(bounds, bounds[1:]) if b > a], axis=1)[0]


def calibrate(engine, texts: int = 4, length: int = 16, sizes=(1, 2, 3, 4, 8), rows: int = 3,
              shifted=None, seed: int = 0) -> Calibration:
    """The module's measurements on `texts` seeded texts of `length` uniform ids."""
    length = min(length, engine.context_length)
    rng = np.random.default_rng(seed)
    batch = rng.integers(0, engine.vocab_size, (texts, length))  # (texts, T)
    whole = [logits_of(engine, text[None])[0] for text in batch]  # each (T, V)

    def gap(a, b):
        return float(np.abs(a - b).max())

    cached = getattr(engine, "new_cache", None) is not None
    one_token, sizes_seen, chunkings = 0.0, {}, 0.0
    if cached:
        for text, want in zip(batch, whole):
            one_token = max(one_token, gap(in_chunks(engine, text, range(1, length)), want))
            for c in sizes:
                got = in_chunks(engine, text, range(c, length, c))
                sizes_seen[c] = max(sizes_seen.get(c, 0.0), gap(got, want))
            cuts = [sorted(rng.choice(np.arange(1, length), rng.integers(1, 4), replace=False))
                    for _ in range(2)]
            chunkings = max(chunkings, gap(in_chunks(engine, text, cuts[0]),
                                           in_chunks(engine, text, cuts[1])))
    together = logits_of(engine, batch[:rows])  # (rows, T, V)
    batch_rows = max(gap(together[r], whole[r]) for r in range(len(together)))
    shift = None
    if shifted is not None:
        shift = max(gap(logits_of(shifted, text[None])[0], want)
                    for text, want in zip(batch, whole))
    seen = [one_token, chunkings, batch_rows, *sizes_seen.values()]  # what the checks compare
    return Calibration(one_token, sizes_seen, chunkings, batch_rows, shift, 2 * max(seen))
