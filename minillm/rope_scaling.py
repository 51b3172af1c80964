"""RoPE scaling: a model trained on a short context read at a longer one, by changing the
frequencies theta_j = base^(-2j/d), j < d/2, of its rotary embeddings (layers.rope_tables).

ModelConfig.rope_scaling is None (plain RoPE) or a dict with a "type" and its numbers; s is
"factor", L the context the model was first trained on ("original_context"):

    linear        theta_j' = theta_j / s                       (positions m read as m / s)
    llama3        wavelength w_j = 2 pi / theta_j, low = L / low_freq_factor,
                  high = L / high_freq_factor:
                  theta_j' = theta_j                           w_j < high (fast: kept)
                             theta_j / s                       w_j > low  (slow: interpolated)
                             (1 - a) theta_j / s + a theta_j   between, a = (L / w_j -
                                                               low_freq_factor) / (high_freq_factor
                                                               - low_freq_factor)
    freq_factors  theta_j' = theta_j / f_j                     (llama.cpp's rope_freqs tensor: the
                                                               f_j its converter computes from
                                                               llama3's numbers)
    yarn          r_j = clamp((j - lo) / (hi - lo), 0, 1), lo = floor(c(beta_fast)),
                  hi = ceil(c(beta_slow)), c(b) = d ln(L / (2 pi b)) / (2 ln base):
                  theta_j' = r_j theta_j / s + (1 - r_j) theta_j, and cos, sin multiplied by
                  attention_factor (default 0.1 ln s + 1), so every score q.k by its square

(YaRN: Peng et al. 2023; beta_fast 32 and beta_slow 1 by default; lo is clamped to >= 0 and hi
to <= d - 1, as transformers and llama.cpp do.) Only the global layers of a model with a
sliding window are scaled.
"""
from __future__ import annotations

import math

import numpy as np

# Each type's numbers: required ones, then optional ones with their defaults.
TYPES = {
    "linear": ({"factor"}, {}),
    "llama3": ({"factor", "low_freq_factor", "high_freq_factor", "original_context"}, {}),
    "freq_factors": ({"factors"}, {}),
    "yarn": ({"factor", "original_context"},
             {"beta_fast": 32.0, "beta_slow": 1.0, "attention_factor": None}),
}


def scaled_frequencies(inv_freq: np.ndarray, scaling: dict, base: float):
    """(theta', attention factor) for the frequencies theta_j = inv_freq[j] (float64, d/2)."""
    kind, s = scaling["type"], scaling.get("factor")
    if kind == "linear":
        return inv_freq / s, 1.0
    if kind == "freq_factors":
        return inv_freq / np.asarray(scaling["factors"], dtype=np.float64), 1.0
    if kind == "llama3":
        return llama3_frequencies(inv_freq, scaling), 1.0
    return yarn_frequencies(inv_freq, scaling, base)


def llama3_frequencies(inv_freq, scaling):
    s, L = scaling["factor"], scaling["original_context"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    wavelength = 2 * math.pi / inv_freq
    a = (L / wavelength - low) / (high - low)  # 0 at the slow end, 1 at the fast end
    between = (1 - a) * inv_freq / s + a * inv_freq
    return np.where(wavelength < L / high, inv_freq,
                    np.where(wavelength > L / low, inv_freq / s, between))


def yarn_frequencies(inv_freq, scaling, base):
    s, L = scaling["factor"], scaling["original_context"]
    half = len(inv_freq)  # d/2
    d = 2 * half

    def c(b):  # the dimension whose frequency turns b times over the original context
        return d * math.log(L / (b * 2 * math.pi)) / (2 * math.log(base))

    lo = max(math.floor(c(scaling.get("beta_fast", 32.0))), 0)
    hi = min(math.ceil(c(scaling.get("beta_slow", 1.0))), d - 1)
    if lo == hi:
        hi += 0.001  # as transformers and llama.cpp: no division by zero
    r = np.clip((np.arange(half) - lo) / (hi - lo), 0.0, 1.0)
    m = scaling.get("attention_factor")
    m = (0.1 * math.log(s) + 1.0 if s > 1 else 1.0) if m is None else m
    return r * inv_freq / s + (1 - r) * inv_freq, m


def check_scaling(scaling, head_dim: int) -> None:
    """Raise ValueError naming the first entry of a rope_scaling dict that is wrong."""
    if not isinstance(scaling, dict) or scaling.get("type") not in TYPES:
        raise ValueError(f"rope_scaling: expected a dict whose type is one of "
                         f"{', '.join(TYPES)}, got {scaling!r}")
    required, optional = TYPES[scaling["type"]]
    for key in sorted(set(scaling) - required - set(optional) - {"type"}):
        raise ValueError(f"rope_scaling.{key}: not a number of {scaling['type']} scaling")
    for key in sorted(required - set(scaling)):
        raise ValueError(f"rope_scaling.{key}: missing for {scaling['type']} scaling")
    numbers = {k: v for k, v in scaling.items() if k not in ("type", "factors")}
    if "factors" in scaling:
        factors = scaling["factors"]
        if not isinstance(factors, list) or len(factors) != head_dim // 2:
            raise ValueError(f"rope_scaling.factors: expected a list of head_dim / 2 = "
                             f"{head_dim // 2} numbers")
        numbers.update({f"factors[{i}]": f for i, f in enumerate(factors)})
    for key, value in numbers.items():
        if value is None and key == "attention_factor":
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                0 < value < math.inf):
            raise ValueError(f"rope_scaling.{key}: must be a positive finite number, got "
                             f"{value!r}")
    if scaling["type"] == "llama3" and not scaling["high_freq_factor"] > scaling[
            "low_freq_factor"]:
        raise ValueError("rope_scaling.high_freq_factor: must exceed low_freq_factor")
