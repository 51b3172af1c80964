"""How two sets of logits are compared, and how a mismatch is reported."""
from __future__ import annotations

import numpy as np


def assert_logits_close(got, want, atol: float, rtol: float, what: str, case: str) -> None:
    """Raise an AssertionError unless |got - want| <= atol + rtol |want| everywhere.

    The message names the check (`what`), the largest difference and where it is (row,
    position), and the case that produced it (`case`: the tokens fed), so that a failure can
    be replayed by hand.
    """
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        raise AssertionError(f"{what}: logits of shape {got.shape}, expected {want.shape}; "
                             f"{case}")
    excess = np.abs(got - want) - (atol + rtol * np.abs(want))
    if np.isnan(got).any() or excess.max() > 0:
        where = np.unravel_index(np.nanargmax(np.abs(got - want)), got.shape)
        worst = float(np.nanmax(np.abs(got - want)))
        raise AssertionError(f"{what}: logits differ by up to {worst:.3g} (atol {atol}, rtol "
                             f"{rtol}) at row {where[0]}, position {where[1]}; {case}")
