"""A chi-square goodness-of-fit test without SciPy, for the statistical tests."""
import numpy as np

# The upper 0.1% point of the standard normal: a test using it raises a false alarm with
# probability 1e-3 when the sampler is right.
Z_999 = 3.0902


def chi_square_critical(df: int, z: float = Z_999) -> float:
    """The chi-square quantile by the Wilson-Hilferty approximation (relative error well under
    1% for df >= 3): df * (1 - 2/(9 df) + z sqrt(2/(9 df)))^3."""
    c = 2.0 / (9.0 * df)
    return df * (1.0 - c + z * np.sqrt(c)) ** 3


def chi_square(counts, expected_probs, min_expected=5.0):
    """(statistic, degrees of freedom) for observed counts against expected probabilities.

    Categories expected fewer than `min_expected` times are pooled into one, so the chi-square
    approximation holds; a count in a category of probability 0 makes the statistic infinite.
    """
    counts = np.asarray(counts, dtype=np.float64)
    probs = np.asarray(expected_probs, dtype=np.float64)
    n = counts.sum()
    if np.any(counts[probs == 0] > 0):
        return np.inf, 1
    expected = n * probs
    small = expected < min_expected
    obs = np.append(counts[~small], counts[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    return float(((obs - exp) ** 2 / exp).sum()), len(exp) - 1
