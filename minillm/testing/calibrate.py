"""Calibration: an engine's noise floor, measured, and the bound it suggests.

An engine whose kernels change with the shape of a call (llama.cpp without flash attention:
one-token steps; on some models every call of 4 or 8 tokens and more) differs from itself
between equally right paths. Before choosing a bound, measure how far, on seeded texts of ids
drawn uniformly over the whole vocabulary, each path against one uncached call of the text:

    one-token steps   a prefill of one token, then one token a call
    call sizes        the text in chunks of c tokens, for each c in `sizes`
    two chunkings     two random chunkings of the text against each other
    batch rows        each text as a row of a batch of `rows` equal-length rows, uncached
    same chunks       one chunking twice, in two fresh caches (what reference="chunks"
                      compares: like with like)
    position shift    the same text read `shift` positions later (`shifted`: the engine with
                      every position moved; with RoPE an exact engine gives the same logits)

The rule. The logits' spread s is the median, over the uncached calls' positions, of the
standard deviation of a position's logits. Across call sizes the noise is N, the largest
difference of the one-token steps, call sizes, two chunkings and batch rows; like with like
it is L, the largest of the same chunks and batch rows (the position shift is no check's).
When L < N the noise comes from the calls' sizes alone: `reference` is "chunks" (the
rollback and batch checks then compare each path with a fresh cache fed the same chunks) and
the noise bounded is L, else `reference` is "uncached" and the noise is N. Then

    suggested = min(MARGIN * noise, SHARE * s)      MARGIN = 2, SHARE = 0.25

as an atol, for the checks that take `reference` (check_rollback, check_batch_equivalence):
never so wide that a bug moving one logit by a quarter of the logits' spread passes. The
comparisons made across call sizes whatever the reference (check_cache_equivalence's chunks
against uncached calls, check_batch_equivalence's ragged rows against the row alone) get `across_sizes` = MARGIN * N, when that is within the cap; past it
(kernels per call size that differ by that much) no atol holds them without hiding bugs:
`across_sizes` is None and `kl` suggests a distribution bound instead, MARGIN times the
largest KL(uncached || path) measured. `why` says which case applies. These are bounds for
"the engine is right up to its own noise", not a proof that the noise is harmless: read the
figures.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .compare import position_differences
from .engine import logits_of, open_cache

MARGIN = 2.0  # times the largest noise measured: a few texts see less than all texts do
SHARE = 0.25  # of the logits' spread: the widest atol suggested, whatever the noise


@dataclass(frozen=True)
class Calibration:
    """The largest elementwise difference of each path from one uncached call (same_chunks:
    of one chunking from itself), the logits' spread, and the bounds the rule suggests."""

    one_token: float
    call_sizes: dict = field(default_factory=dict)
    chunkings: float = 0.0
    batch_rows: float = 0.0
    position_shift: float | None = None
    suggested: float = 0.0
    same_chunks: float = 0.0
    spread: float = 0.0
    reference: str = "uncached"
    across_sizes: float | None = 0.0
    kl: float | None = None
    why: str = ""

    def __str__(self) -> str:
        sizes = ", ".join(f"{c}: {d:.3g}" for c, d in self.call_sizes.items())
        shift = "" if self.position_shift is None else f", position shift {self.position_shift:.3g}"
        across = ("kl " + f"{self.kl:.3g}" if self.across_sizes is None
                  else f"atol {self.across_sizes:.3g}")
        return (f"one-token steps {self.one_token:.3g}, call sizes {{{sizes}}}, two chunkings "
                f"{self.chunkings:.3g}, same chunks {self.same_chunks:.3g}, batch rows "
                f"{self.batch_rows:.3g}{shift}; logits' spread {self.spread:.3g}; suggested "
                f"atol {self.suggested:.3g} with reference={self.reference!r}, across call "
                f"sizes {across}: {self.why}")


def in_chunks(engine, text, cuts) -> np.ndarray:
    """The text (T,) through one cache, cut at `cuts`: its logits (T, V)."""
    bounds = [0] + sorted(cuts) + [len(text)]
    with open_cache(engine, 1) as cache:
        return np.concatenate([logits_of(engine, text[None, a:b], cache)
                               for a, b in zip(bounds, bounds[1:]) if b > a], axis=1)[0]


def spread_of(logits) -> float:
    """The median over positions of the standard deviation of a position's finite logits."""
    rows = np.concatenate([np.reshape(x, (-1, np.shape(x)[-1])) for x in logits])  # (P, V)
    return float(np.median([row[np.isfinite(row)].std() for row in rows]))


def suggest(across: float, like: float, spread: float, kl: float):
    """The module's rule: (atol, reference, atol across call sizes or None, kl bound, why)."""
    cap = SHARE * spread
    if like < across:
        reference, noise = "chunks", like
        why = (f"the paths differ only between calls of different sizes (up to {across:.3g}); "
               f"like with like they differ by {like:.3g}: use reference=\"chunks\"")
    else:
        reference, noise = "uncached", across
        why = (f"{MARGIN:g} x the largest difference, {noise:.3g}" if noise else
               "every path agreed exactly")
    atol = min(MARGIN * noise, cap)
    if MARGIN * noise > cap:
        why += f"; capped at {SHARE:g} x the logits' spread ({cap:.3g})"
    if MARGIN * across <= cap:
        return atol, reference, MARGIN * across, None, why
    why += (f"; across call sizes no atol up to {cap:.3g} holds their noise ({across:.3g}): "
            f"bound those comparisons by Tolerance(kl={MARGIN * kl:.3g})")
    return atol, reference, None, MARGIN * kl, why


def calibrate(engine, texts: int = 4, length: int = 16, sizes=(1, 2, 3, 4, 8), rows: int = 3,
              shifted=None, seed: int = 0) -> Calibration:
    """The module's measurements on `texts` seeded texts of `length` uniform ids, and the
    bounds of its rule."""
    length = min(length, engine.context_length)
    rng = np.random.default_rng(seed)
    batch = rng.integers(0, engine.vocab_size, (texts, length))  # (texts, T)
    whole = [logits_of(engine, text[None])[0] for text in batch]  # each (T, V)
    kls = [0.0]

    def gap(a, b, kl=True):
        if kl:
            kls.append(float(position_differences(a, b)[2].max()))
        return float(np.abs(a - b).max())

    cached = getattr(engine, "new_cache", None) is not None
    one_token, sizes_seen, chunkings, same = 0.0, {}, 0.0, 0.0
    if cached:
        for text, want in zip(batch, whole):
            one_token = max(one_token, gap(in_chunks(engine, text, range(1, length)), want))
            for c in sizes:
                got = in_chunks(engine, text, range(c, length, c))
                sizes_seen[c] = max(sizes_seen.get(c, 0.0), gap(got, want))
            cuts = [sorted(rng.choice(np.arange(1, length), rng.integers(1, 4), replace=False))
                    for _ in range(2)]
            first = in_chunks(engine, text, cuts[0])
            chunkings = max(chunkings, gap(first, in_chunks(engine, text, cuts[1])))
            same = max(same, gap(first, in_chunks(engine, text, cuts[0]), kl=False))
    together = logits_of(engine, batch[:rows])  # (rows, T, V)
    batch_rows = max(gap(together[r], whole[r]) for r in range(len(together)))
    shift = None
    if shifted is not None:
        shift = max(gap(logits_of(shifted, text[None])[0], want, kl=False)
                    for text, want in zip(batch, whole))
    across = max([one_token, chunkings, batch_rows, *sizes_seen.values()])
    like = max(same, batch_rows)
    spread = spread_of(whole)
    atol, reference, across_atol, kl, why = suggest(across, like, spread, max(kls))
    return Calibration(one_token, sizes_seen, chunkings, batch_rows, shift, atol, same, spread,
                       reference, across_atol, kl, why)
