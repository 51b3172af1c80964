"""The chi-square goodness-of-fit test without SciPy, its false-alarm rate and its power.

A statistical checker draws `n` samples from the engine, counts each outcome, and compares the
counts with the exact probabilities:

    X^2 = sum_i (count_i - n p_i)^2 / (n p_i)      (outcomes expected < 5 times pooled into one)

If the engine samples from p, X^2 follows a chi-square law with df = categories - 1, and
X^2 >= chi_square_critical(df) happens with probability FALSE_ALARM = 0.001 (up to the two
approximations named below). If it samples from some other p', X^2 grows like n times the
chi-square distance sum_i (p'_i - p_i)^2 / p_i: `power_by_simulation` and
`power_by_noncentral_approximation` say how often the test then fails.
"""
from __future__ import annotations

import math

import numpy as np

# The upper 0.1% point of the standard normal: a test using it raises a false alarm with
# probability 1e-3 when the sampler is right.
Z_999 = 3.0902
FALSE_ALARM = 1e-3


def chi_square_critical(df: int, z: float = Z_999) -> float:
    """The chi-square quantile by the Wilson-Hilferty approximation (relative error well under
    1% for df >= 3): df * (1 - 2/(9 df) + z sqrt(2/(9 df)))^3."""
    c = 2.0 / (9.0 * df)
    return df * (1.0 - c + z * math.sqrt(c)) ** 3


def pooled(counts, expected_probs, min_expected=5.0):
    """(observed, expected) counts with every category expected fewer than `min_expected` times
    pooled into one, so that the chi-square approximation holds."""
    counts = np.asarray(counts, dtype=np.float64)
    expected = counts.sum() * np.asarray(expected_probs, dtype=np.float64)
    small = expected < min_expected
    obs = np.append(counts[~small], counts[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    return obs, exp


def chi_square(counts, expected_probs, min_expected=5.0):
    """(statistic, degrees of freedom) for observed counts against expected probabilities.

    Categories expected fewer than `min_expected` times are pooled into one; a count in a
    category of probability 0 makes the statistic infinite.
    """
    counts = np.asarray(counts, dtype=np.float64)
    probs = np.asarray(expected_probs, dtype=np.float64)
    if np.any(counts[probs == 0] > 0):
        return math.inf, 1
    obs, exp = pooled(counts, probs, min_expected)
    return float(((obs - exp) ** 2 / exp).sum()), len(exp) - 1


def power_by_simulation(probs, actual_probs, n: int, trials: int = 2000, seed: int = 0) -> float:
    """How often the test of n samples against `probs` fails when the samples really come from
    `actual_probs`: the fraction of `trials` simulated count vectors (multinomial, seeded) whose
    statistic reaches the critical value. With actual_probs = probs it is the false-alarm rate
    the approximations actually give; its Monte Carlo error is about sqrt(r (1 - r) / trials)."""
    rng = np.random.default_rng(seed)
    failed = 0
    for counts in rng.multinomial(n, actual_probs, size=trials):
        stat, df = chi_square(counts, probs)
        failed += stat >= chi_square_critical(df)
    return failed / trials


def power_by_noncentral_approximation(probs, actual_probs, n: int) -> float:
    """The same power from the noncentral chi-square law, without simulating.

    X^2 is approximately noncentral chi-square with df degrees of freedom and noncentrality
    lam = n sum_i (p'_i - p_i)^2 / p_i (over the pooled categories). Patnaik's approximation
    takes that law as c chi^2_h with c = (df + 2 lam) / (df + lam), h = (df + lam)^2 /
    (df + 2 lam); the tail of chi^2_h comes from Wilson-Hilferty's normal approximation.
    """
    probs = np.asarray(probs, dtype=np.float64)
    actual = np.asarray(actual_probs, dtype=np.float64)
    small = n * probs < 5.0
    p = np.append(probs[~small], probs[small].sum())
    a = np.append(actual[~small], actual[small].sum())
    if p[-1] == 0:
        if a[-1] > 0:
            return 1.0  # mass where the expected law has none: any draw there fails the test
        p, a = p[:-1], a[:-1]
    lam = n * float(((a - p) ** 2 / p).sum())
    return power_at(len(p) - 1, lam)


def power_at(df: int, lam: float) -> float:
    """P(X^2 >= critical) for X^2 noncentral chi-square with df degrees of freedom and
    noncentrality lam, by Patnaik's approximation (c chi^2_h, c = (df + 2 lam) / (df + lam),
    h = (df + lam)^2 / (df + 2 lam)) and Wilson-Hilferty's normal tail of chi^2_h."""
    c, h = (df + 2 * lam) / (df + lam), (df + lam) ** 2 / (df + 2 * lam)
    x = chi_square_critical(df) / c
    w = 2.0 / (9.0 * h)
    z = ((x / h) ** (1 / 3) - (1 - w)) / math.sqrt(w)
    return 0.5 * math.erfc(z / math.sqrt(2))  # P(N(0, 1) > z)


def smallest_detectable_tv(probs, n: int, power: float = 0.9) -> float:
    """The smallest total-variation error the test of n samples against `probs` catches with
    probability >= `power`, whatever the wrong distribution p' (within the pooled categories).

    Moving mass d = TV(p, p') from a set A of categories to a set B gives a chi-square
    distance w^2 = sum (p'_i - p_i)^2 / p_i >= d^2 (1 / p(A) + 1 / p(B)) >= 4 d^2
    (Cauchy-Schwarz, then p(A) + p(B) <= 1), so every p' at distance d has noncentrality at
    least 4 n d^2; the power grows with it, and d is found by bisection.
    """
    probs = np.asarray(probs, dtype=np.float64).ravel()
    small = n * probs < 5.0
    df = int((~small).sum()) + int(probs[small].sum() > 0) - 1
    if df < 1 or power_at(df, 4.0 * n) < power:
        return 1.0  # too few categories or samples to promise anything below TV 1
    lo, hi = 0.0, 1.0
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if power_at(df, 4.0 * n * mid * mid) >= power else (mid, hi)
    return hi
