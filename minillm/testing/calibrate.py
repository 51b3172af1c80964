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

    suggested = max(min(MARGIN * noise, SHARE * s), floor)      MARGIN = 2, SHARE = 0.25
    floor     = FLOOR_ULPS * eps(dtype) * the largest |logit|   FLOOR_ULPS = 64

as an atol, for the checks that take `reference` (check_rollback, check_batch_equivalence):
never so wide that a bug moving one logit by a quarter of the logits' spread passes, never
below the rounding of the logits' own dtype (float32: eps 1.2e-7, so about 1.5e-4 for logits
up to 20, above the 1e-5 that transformers' float32 paths differ by on texts longer than
these), whatever the few texts measured saw. The comparisons made across call sizes whatever
the reference (check_cache_equivalence's chunks against uncached calls,
check_batch_equivalence's ragged rows against the row alone) get `across_sizes` =
max(MARGIN * N, floor), when MARGIN * N is within the cap; past it (kernels per call size that
differ by that much) no atol holds them without hiding bugs: `across_sizes` is None and `kl`
suggests a distribution bound instead, MARGIN times the largest KL(uncached || path)
measured. `why` says which case applies.

Per check. Noise grows with a text's length and depends on a check's calls, so `checks` holds
each check's own setting (keyword arguments: check_rollback(engine, **found.checks["rollback"])),
measured by that check's own comparisons (its one-case functions, with no bound) on seeded
texts of the lengths and calls it uses: the profile's drawn length and the texts that cross
each of its boundaries (profiles), with other ids than the check's own seeded cases (the batch
check's with a row of one token too: its ragged rows), joined with the figures above (the
paths its drawn cases take: N for "uncached", L for "chunks"). "window"
is measured when the loop's `window` is given: the window check's seeded run (its prompt
length, its number of steps) through `decode` (default window.rereading_loop). Each gets the
rule above on its own noise: an atol of max(MARGIN * noise, floor) within the cap, else
Tolerance(kl=MARGIN * its largest KL); rollback and batch take reference="chunks" when that
measured less than "uncached"; "cache" holds its rollback part too. Calibration measures
each check, the window check included, rather than each check calibrating itself: one rule in
one place, the figures printed together for a reader to judge, and no check widening its bound
on the very cases it then judges. These are bounds for "the
engine is right up to its own noise", not a proof that the noise is harmless: calibrate a
build you trust, keep the figures, and read them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..window import kept_on_slide
from .batch import assert_batch_matches
from .cache import assert_rollback_matches, compare_chunks, rolls_back
from .compare import Tolerance, position_differences
from .engine import EngineError, logits_of, open_cache
from .profiles import (boundary_texts, chunk_crossings, crossable, profile_of,
                       rollback_crossings)
from .window import assert_slides_match, rereading_loop

MARGIN = 2.0  # times the largest noise measured: a few texts see less than all texts do
SHARE = 0.25  # of the logits' spread: the widest atol suggested, whatever the noise
FLOOR_ULPS = 64  # of the logits' dtype at the largest logit: rounding the texts may not show
UNBOUNDED = Tolerance(atol=np.inf)  # a check's comparisons measured, never failed


@dataclass(frozen=True)
class Calibration:
    """The largest elementwise difference of each path from one uncached call (same_chunks:
    of one chunking from itself), the logits' spread, and the bounds the rule suggests.
    dtype: of the engine's own logits; floor: the rule's; checks: {check name: its keyword
    arguments}."""

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
    dtype: str = "float64"
    floor: float = 0.0
    checks: dict = field(default_factory=dict)

    def __str__(self) -> str:
        sizes = ", ".join(f"{c}: {d:.3g}" for c, d in self.call_sizes.items())
        shift = "" if self.position_shift is None else f", position shift {self.position_shift:.3g}"
        across = ("kl " + f"{self.kl:.3g}" if self.across_sizes is None
                  else f"atol {self.across_sizes:.3g}")
        return (f"one-token steps {self.one_token:.3g}, call sizes {{{sizes}}}, two chunkings "
                f"{self.chunkings:.3g}, same chunks {self.same_chunks:.3g}, batch rows "
                f"{self.batch_rows:.3g}{shift}; logits' spread {self.spread:.3g}; suggested "
                f"atol {self.suggested:.3g} with reference={self.reference!r}, across call "
                f"sizes {across}: {self.why}; {self.dtype} floor {self.floor:.3g}"
                + "".join(f"; {name}: {setting_text(kwargs)}"
                          for name, kwargs in self.checks.items()))


def setting_text(kwargs) -> str:
    """A check's setting as text: its bound and reference."""
    tol = kwargs["tolerance"]
    text = f"atol {tol.atol:.3g}" if tol.atol is not None else f"kl {tol.kl:.3g}"
    return text + (f" with reference={kwargs['reference']!r}" if "reference" in kwargs else "")


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


def suggest(across: float, like: float, spread: float, kl: float, floor: float):
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
    atol = max(min(MARGIN * noise, cap), floor)
    if MARGIN * noise > cap:
        why += f"; capped at {SHARE:g} x the logits' spread ({cap:.3g})"
    if MARGIN * across <= cap:
        return atol, reference, max(MARGIN * across, floor), None, why
    why += (f"; across call sizes no atol up to {cap:.3g} holds their noise ({across:.3g}): "
            f"bound those comparisons by Tolerance(kl={MARGIN * kl:.3g})")
    return atol, reference, None, MARGIN * kl, why


def bound(noise: float, kl: float, spread: float, floor: float) -> Tolerance:
    """One check's bound by the module's rule: an atol within the cap, else a KL bound."""
    if MARGIN * noise <= SHARE * spread:
        return Tolerance(atol=max(MARGIN * noise, floor))
    return Tolerance(kl=MARGIN * kl)


def floor_of(engine, text, whole) -> tuple[str, float]:
    """The dtype of the engine's own logits (one more uncached call, before any conversion)
    and the module's floor for it, at the largest finite |logit| of the uncached calls."""
    dtype = np.asarray(engine.forward(np.asarray(text[None], dtype=np.int64))).dtype
    dtype = dtype if np.issubdtype(dtype, np.floating) else np.dtype(np.float64)
    largest = max(float(np.abs(x[np.isfinite(x)]).max(initial=0.0)) for x in whole)
    return dtype.name, FLOOR_ULPS * float(np.finfo(dtype).eps) * largest


def measured(reports) -> tuple[float, float]:
    """The largest elementwise difference and KL of the reports."""
    return (max((r.max_abs for r in reports), default=0.0),
            max((r.max_kl for r in reports), default=0.0))


def per_check(engine, lengths, steps, window, decode, keep, seed) -> dict:
    """Each check's comparisons on seeded texts of its own lengths (`lengths`: the b of
    profiles' crossings, a text of b + 2 tokens), with no bound: {check: {reference: (largest
    difference, largest KL)}}; "window" when `window` is given (`steps` new tokens)."""
    V, out = engine.vocab_size, {}

    def text(batch, length, n):
        return boundary_texts(V, batch, length, seed=seed + 1000 + n)

    if getattr(engine, "new_cache", None) is not None:
        out["cache"] = {"uncached": measured(
            [compare_chunks(engine, text(1, n, b + k), cuts, UNBOUNDED)[1]
             for b in lengths for k, (n, cuts) in enumerate(chunk_crossings(b))])}
        if rolls_back(engine):
            out["rollback"] = {reference: measured(
                [assert_rollback_matches(engine, text(1, n, 2 * b + k), keep_, text(
                    1, fed, 3 * b + k), tolerance=UNBOUNDED, reference=reference)
                 for b in lengths for k, (n, keep_, fed) in enumerate(rollback_crossings(b))])
                for reference in ("uncached", "chunks")}
    try:
        out["batch"] = {reference: measured(  # a long row crossing b; a row of one token
            [assert_batch_matches(engine, text(2, b + 2, 4 * b + k), pad, split=split,
                                  tolerance=UNBOUNDED, reference=reference)
             for b in lengths for k, (pad, split) in enumerate(
                 [([0, b + 2 - b // 2], b - 1), ([0, b + 1], b + 2)])])
            for reference in ("uncached", "chunks")}
    except EngineError:  # an engine that refuses padding: its batch check runs ragged=False
        pass
    if window is not None and (decode is not None or rolls_back(engine)):
        keep = kept_on_slide(window) if keep is None else keep
        loop = rereading_loop(engine, window, keep) if decode is None else decode
        prompt = text(1, window, 5 * window)[0].tolist()
        out["window"] = {"uncached": measured([assert_slides_match(
            loop, engine, prompt, steps, keep, tolerance=UNBOUNDED, window=window)])}
    return out


def settings_of(found: dict, spread: float, floor: float) -> dict:
    """{check: its keyword arguments} from per_check's figures, by the module's rule."""
    settings = {}
    for name, by_reference in found.items():
        reference = min(by_reference, key=lambda r: (by_reference[r][0], r != "uncached"))
        settings[name] = {"tolerance": bound(*by_reference[reference], spread, floor)}
        if len(by_reference) > 1:
            settings[name]["reference"] = reference
    if "cache" in settings and "rollback" in found:  # its rollback part, at rollback's reference
        reference = settings["rollback"]["reference"]
        noise = [max(a, b) for a, b in zip(found["cache"]["uncached"],
                                           found["rollback"][reference])]
        settings["cache"] = {"tolerance": bound(*noise, spread, floor), "reference": reference}
    return settings


def calibrate(engine, texts: int = 4, length: int = 16, sizes=(1, 2, 3, 4, 8), rows: int = 3,
              shifted=None, seed: int = 0, *, profile: str = "default", window=None,
              decode=None, keep=None) -> Calibration:
    """The module's measurements on `texts` seeded texts of `length` uniform ids, and the
    bounds of its rule; `checks`: each check's setting, measured on texts of the `profile`'s
    lengths (and, given the loop's `window`, the window check's run of `decode`, default
    window.rereading_loop(engine, window, keep))."""
    length = min(length, engine.context_length)
    rng = np.random.default_rng(seed)
    batch = rng.integers(0, engine.vocab_size, (texts, length))  # (texts, T)
    whole = [logits_of(engine, text[None])[0] for text in batch]  # each (T, V)
    kls, like_kls = [0.0], [0.0]  # KL across call sizes, like with like

    def gap(a, b, kl=kls):
        if kl is not None:
            kl.append(float(position_differences(a, b)[2].max()))
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
            same = max(same, gap(first, in_chunks(engine, text, cuts[0]), like_kls))
    together = logits_of(engine, batch[:rows])  # (rows, T, V)
    batch_rows = max(gap(together[r], whole[r]) for r in range(len(together)))
    like_kls.append(max(kls[-len(together):]))
    shift = None
    if shifted is not None:
        shift = max(gap(logits_of(shifted, text[None])[0], want, None)
                    for text, want in zip(batch, whole))
    across = max([one_token, chunkings, batch_rows, *sizes_seen.values()])
    like = max(same, batch_rows)
    spread = spread_of(whole)
    dtype, floor = floor_of(engine, batch[0], whole)
    atol, reference, across_atol, kl, why = suggest(across, like, spread, max(kls), floor)
    budget = profile_of(profile)
    drawn = min(budget.max_length, engine.context_length) - 2  # b of a text as long as drawn
    lengths = [b for b in [drawn] if b >= 8] + crossable(budget.boundaries,
                                                         engine.context_length)
    steps = (max(2 * window + 1, max(budget.boundaries) + 2 - window) if window is not None
             else 0)
    found = per_check(engine, lengths, steps, window, decode, keep, seed)
    on_drawn = {"cache": {"uncached": (max([one_token, chunkings, *sizes_seen.values()]),
                                       max(kls))},
                "rollback": {"uncached": (across, max(kls)), "chunks": (like, max(like_kls))}}
    on_drawn["batch"] = on_drawn["rollback"]  # the paths of each check's drawn cases
    for name, by_reference in found.items():
        for way, figures in by_reference.items():
            seen = on_drawn.get(name, {}).get(way, (0.0, 0.0))
            by_reference[way] = tuple(max(a, b) for a, b in zip(figures, seen))
    return Calibration(one_token, sizes_seen, chunkings, batch_rows, shift, atol, same, spread,
                       reference, across_atol, kl, why, dtype, floor,
                       settings_of(found, spread, floor))
