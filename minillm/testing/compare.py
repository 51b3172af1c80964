"""How two sets of logits are compared, and how a mismatch is reported."""
from __future__ import annotations

import numpy as np


def assert_logits_close(got, want, atol: float, rtol: float, what: str, case: str,
                        first: int = 0, row: int | None = None) -> None:
    """Raise an AssertionError unless |got - want| <= atol + rtol |want| everywhere.

    got, want: (B, T, V) logits of the text's positions first .. first + T - 1, or (T, V)
    logits of one row, numbered `row` in the message. The message
    names the check (`what`), the largest difference and where it is (row, position in the
    text), and the case that produced it (`case`: the tokens fed), so that a failure can be
    replayed by hand.
    """
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if row is not None:
        got, want = got[None], want[None]
    if got.shape != want.shape:
        raise AssertionError(f"{what}: logits of shape {got.shape}, expected {want.shape}; "
                             f"{case}")
    with np.errstate(invalid="ignore"):  # inf - inf where both are -inf: equal
        gap = np.where(got == want, 0.0, np.abs(got - want))
    excess = gap - (atol + rtol * np.abs(want))
    if np.isnan(gap).any() or excess.max() > 0:
        where = np.unravel_index(np.argmax(np.nan_to_num(gap, nan=np.inf)), got.shape)
        worst = float(np.nanmax(gap)) if not np.isnan(gap).all() else float("nan")
        row = where[0] if row is None else row
        raise AssertionError(f"{what}: logits differ by up to {worst:.3g} (atol {atol}, rtol "
                             f"{rtol}) at row {row}, position {first + where[1]}; {case}")
