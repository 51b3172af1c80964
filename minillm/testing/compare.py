"""How two sets of logits are compared, how close they must be, and what was seen.

A real engine's cached, batched and uncached paths may sum in different orders, or run
different kernels, so "equal" needs a bound that fits the engine. Each bound of a Tolerance is
checked where it is given, at every position (a row of V logits) of every comparison:

    atol, rtol   |got - want| <= atol + rtol |want|                    elementwise
    scaled       |got - want| <= scaled * s      s: the standard deviation of the position's
                                                 finite logits `want` (its logit scale)
    kl           KL(softmax(want) || softmax(got)) <= kl                in nats
    tv           1/2 sum |softmax(want) - softmax(got)| <= tv           total variation
    top1         argmax got == argmax want on a share >= top1 of the positions (a rate over
                 everything a checker compared, so one disagreement is not a failure)

Every comparison is measured whether or not it passes: a Report holds the largest difference
of each kind and the top-1 agreement, so that a bound can be chosen from evidence. When an
atol fails on a comparison whose two paths make calls of different sizes, by no more than the
position's own logit spread, the message ends with a hint (noise_hint): that much can be an
engine's call-size noise, and it says what to try, with the figures measured.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

NOISE_SCALED = 1.0  # past one standard deviation of the position's logits: no kernel's rounding


@dataclass(frozen=True)
class Tolerance:
    """The bounds two sets of logits must meet; None leaves a bound out (see the module)."""

    atol: float | None = None
    rtol: float = 0.0
    scaled: float | None = None
    kl: float | None = None
    tv: float | None = None
    top1: float | None = None

    def __post_init__(self):
        for name in ("atol", "rtol", "scaled", "kl", "tv"):
            value = getattr(self, name)
            if value is not None and not value >= 0:
                raise ValueError(f"{name}: must be >= 0, got {value}")
        if self.top1 is not None and not 0 <= self.top1 <= 1:
            raise ValueError(f"top1: must be a rate in [0, 1], got {self.top1}")

    @property
    def bounds(self) -> str:
        """The bounds given, as text for a message."""
        given = {name: getattr(self, name) for name in ("atol", "scaled", "kl", "tv", "top1")}
        text = ", ".join(f"{name} {value}" for name, value in given.items() if value is not None)
        return text + (f", rtol {self.rtol}" if self.rtol else "")


def tolerance_of(atol, rtol, tolerance) -> Tolerance:
    """The checkers' two ways of saying how close: atol (and rtol) or a Tolerance, exactly one."""
    if (atol is None) == (tolerance is None):
        raise ValueError("atol or tolerance: give exactly one (atol=1e-12, or "
                         "tolerance=Tolerance(...))")
    tol = Tolerance(atol=atol, rtol=rtol) if tolerance is None else tolerance
    if tol.atol is None and tol.scaled is None and tol.kl is None and tol.tv is None \
            and tol.top1 is None:
        raise ValueError("tolerance: give at least one bound (atol, scaled, kl, tv or top1)")
    return tol


@dataclass(frozen=True)
class Report:
    """What a checker saw, passing or not: the number of comparisons and positions (rows of V
    logits) compared, the largest elementwise, scaled, KL and total-variation differences,
    how many positions agreed on the top-1 token, and where the largest elementwise
    difference was (`worst`: the comparison and the case). `repeat`: the largest difference
    between two identical forward calls (0.0 for a deterministic engine)."""

    comparisons: int = 0
    positions: int = 0
    max_abs: float = 0.0
    max_scaled: float = 0.0
    max_kl: float = 0.0
    max_tv: float = 0.0
    top1_agree: int = 0
    worst: str = ""
    repeat: float = 0.0

    @property
    def top1(self) -> float:
        """The share of positions whose top-1 token agreed (1.0 when none were compared)."""
        return self.top1_agree / self.positions if self.positions else 1.0

    def __str__(self) -> str:
        return (f"{self.comparisons} comparisons, {self.positions} positions: largest "
                f"difference {self.max_abs:.3g} (scaled {self.max_scaled:.3g}), KL "
                f"{self.max_kl:.3g}, TV {self.max_tv:.3g}, top-1 agreement {self.top1:.4f}; "
                f"repeated calls differ by {self.repeat:.3g}"
                + (f"; worst: {self.worst}" if self.worst else ""))


def combine(reports) -> Report:
    """One report for many: counts add up, largest differences take the largest."""
    total = Report()
    for r in reports:
        worst = r.worst if r.max_abs > total.max_abs or not total.worst else total.worst
        total = Report(total.comparisons + r.comparisons, total.positions + r.positions,
                       max(total.max_abs, r.max_abs), max(total.max_scaled, r.max_scaled),
                       max(total.max_kl, r.max_kl), max(total.max_tv, r.max_tv),
                       total.top1_agree + r.top1_agree, worst, max(total.repeat, r.repeat))
    return total


def _log_softmax(z):
    """log softmax over the last axis; -inf logits give -inf, never NaN."""
    top = np.max(z, axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", over="ignore"):
        shifted = z - top
        return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def position_differences(got, want):
    """Per position (..., V) -> (...): the largest |got - want|, it divided by the position's
    logit scale, KL(softmax(want) || softmax(got)), total variation, top-1 agreement."""
    with np.errstate(invalid="ignore"):  # inf - inf where both are -inf: equal
        gap = np.where(got == want, 0.0, np.abs(got - want))
    finite = np.isfinite(want)
    count = np.maximum(finite.sum(axis=-1, keepdims=True), 1)
    mean = np.where(finite, want, 0.0).sum(axis=-1, keepdims=True) / count
    scale = np.sqrt((np.where(finite, want - mean, 0.0) ** 2).sum(axis=-1) / count[..., 0])
    largest = gap.max(axis=-1)
    scaled = np.where(largest == 0, 0.0, largest / np.where(scale > 0, scale, np.nan))
    log_p, log_q = _log_softmax(want), _log_softmax(got)
    p, q = np.exp(log_p), np.exp(log_q)
    with np.errstate(invalid="ignore"):  # 0 * (-inf - -inf): a token impossible in both
        kl = np.where(p > 0, p * (log_p - log_q), 0.0).sum(axis=-1)
    tv = 0.5 * np.abs(p - q).sum(axis=-1)
    top_got = got.argmax(axis=-1)
    agree = np.take_along_axis(want, top_got[..., None], axis=-1)[..., 0] == want.max(axis=-1)
    return gap, scaled, kl, tv, agree


def noise_hint(largest: float, scale: float, kl: float, across: str, chunks: bool) -> str:
    """What to try when an atol fails on paths that make calls of different sizes (`across`
    says which calls; '' when they make the same ones) by at most NOISE_SCALED times the
    position's logit standard deviation `scale`: an engine whose kernels change with a call's
    size (llama.cpp without flash attention, for one-token calls) differs that much without a
    bug. `chunks`: reference="chunks" would compare this path like with like. '' when the
    failure is not of that kind: a difference past the spread is named without excuses."""
    if not across or not largest <= NOISE_SCALED * scale:
        return ""
    like = ('use reference="chunks" (the same calls in a fresh cache: like with like, so only '
            'a rollback or batching bug differs) and ' if chunks else "")
    return (f"\nhint: the two paths make calls of different sizes ({across}) and differ by "
            f"{largest:.3g} at that position, {largest / scale:.2g} of its logits' standard "
            f"deviation {scale:.3g}, KL {kl:.3g} nats: as much as an engine whose kernels "
            f"change with a call's size may differ without a bug. Measure that noise with "
            f"minillm.testing.calibrate(engine) on a build you trust: if it is this large, "
            f"{like}bound the comparisons across call sizes by the distribution, "
            f"Tolerance(kl=...) with its `kl`, rather than by a wider atol; if it is not, this "
            f"is a bug")


def assert_logits_close(got, want, tol: Tolerance, what: str, case: str, first: int = 0,
                        row: int | None = None, across: str = "",
                        chunks: bool = False) -> Report:
    """Raise an AssertionError unless got and want meet every bound of `tol` at every position
    (top1: as a rate over these positions); return what was measured.

    got, want: (B, T, V) logits of the text's positions first .. first + T - 1, or (T, V)
    logits of one row, numbered `row` in the message. The message names the check (`what`),
    the bound broken, by how much and where (row, position in the text), and the case that
    produced it (`case`: the tokens fed), so that a failure can be replayed by hand. `across`:
    how the two paths' call sizes differ ('' when they make the same calls), `chunks`: whether
    reference="chunks" compares them like with like; an atol failure within call-size noise
    then ends with noise_hint's line.
    """
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if row is not None:
        got, want = got[None], want[None]
    if got.shape != want.shape:
        raise AssertionError(f"{what}: logits of shape {got.shape}, expected {want.shape}; "
                             f"{case}")
    gap, scaled, kl, tv, agree = position_differences(got, want)

    def at(index):
        return f"at row {index[0] if row is None else row}, position {first + index[1]}"

    if np.isnan(gap).any():
        where = np.unravel_index(np.argmax(np.isnan(gap).any(axis=-1)), gap.shape[:2])
        raise AssertionError(f"{what}: NaN in the logits {at(where)}; {case}")
    worst = np.unravel_index(np.argmax(gap.max(axis=-1)), gap.shape[:2])
    report = Report(1, int(agree.size), float(gap.max(initial=0.0)),
                    float(np.nan_to_num(scaled, nan=np.inf).max(initial=0.0)),
                    float(kl.max(initial=0.0)), float(tv.max(initial=0.0)),
                    int(agree.sum()), f"{what}, {at(worst)}; {case}")
    if tol.atol is not None:
        excess = gap - (tol.atol + tol.rtol * np.abs(want))
        if excess.max(initial=0.0) > 0:
            where = np.unravel_index(np.argmax(excess), gap.shape)
            largest, ratio = gap[where[:2]].max(), scaled[where[:2]]
            scale = largest / ratio if ratio > 0 else 0.0  # no spread: no excuse
            raise AssertionError(f"{what}: logits differ by up to {report.max_abs:.3g} (atol "
                                 f"{tol.atol}, rtol {tol.rtol}) {at(where)}; {case}"
                                 + noise_hint(largest, scale, kl[where[:2]], across, chunks))
    for name, values, label in (("scaled", scaled, "scaled difference"),
                                ("kl", kl, "KL divergence"), ("tv", tv, "total variation")):
        bound = getattr(tol, name)
        if bound is not None and np.nan_to_num(values, nan=np.inf).max(initial=0.0) > bound:
            where = np.unravel_index(np.argmax(np.nan_to_num(values, nan=np.inf)),
                                     values.shape)
            raise AssertionError(f"{what}: {label} up to "
                                 f"{float(np.nan_to_num(values, nan=np.inf)[where]):.3g} "
                                 f"({name} {bound}) {at(where)}; {case}")
    if tol.top1 is not None:
        assert_top1(report, tol, what)
    return report


def assert_top1(report: Report, tol: Tolerance, what: str) -> None:
    """Raise an AssertionError when the share of positions agreeing on the top-1 token is
    below tol.top1."""
    if tol.top1 is not None and report.top1 < tol.top1:
        raise AssertionError(f"{what}: the top-1 token agrees on {report.top1_agree} of "
                             f"{report.positions} positions ({report.top1:.4f} < top1 "
                             f"{tol.top1}); largest difference {report.max_abs:.3g}, "
                             f"{report.worst}")


def per_case(tol: Tolerance) -> Tolerance:
    """The bounds checked case by case inside a property: all but top1, a rate over the whole
    run (0.0 in its place: a rate that always holds, so that the tolerance keeps a bound)."""
    return tol if tol.top1 is None else dataclasses.replace(tol, top1=0.0)
