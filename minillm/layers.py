"""The building blocks of a transformer, as plain functions on NumPy arrays.

Every function keeps the dtype of its input: constants are Python floats, which NumPy 2 treats
as "weak" scalars, so float32 activations stay float32 (a float64 NumPy scalar would silently
promote them and make every step several times slower).
"""
from __future__ import annotations

import math

import numpy as np

from .rope_scaling import scaled_frequencies


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """softmax(x)_i = exp(x_i - max x) / sum_j exp(x_j - max x).

    Subtracting the max changes nothing mathematically and keeps exp() from overflowing.
    Entries of -inf get probability 0; a row must have at least one finite entry.
    """
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def log_softmax(logits) -> np.ndarray:
    """log softmax(z)_i = (z_i - max z) - log sum_j exp(z_j - max z), over the last axis, in
    float64: the log-probabilities a loss or a score reads."""
    z = np.asarray(logits, dtype=np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def layer_norm(x, weight, bias, eps: float):
    """LayerNorm(x) = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias, over the last axis."""
    D = x.shape[-1]
    centred = x - x.sum(axis=-1, keepdims=True) / D
    var = (centred * centred).sum(axis=-1, keepdims=True) / D
    out = centred / np.sqrt(var + eps) * weight
    return out if bias is None else out + bias


def rms_norm(x, weight, eps: float):
    """RMSNorm(x) = x / sqrt(mean(x^2) + eps) * weight, over the last axis (no centring)."""
    mean_square = (x * x).sum(axis=-1, keepdims=True) / x.shape[-1]  # (.., 1)
    return x / np.sqrt(mean_square + eps) * weight


# Chebyshev-fitted coefficients for erfc(z) = t * exp(-z^2 + P(t)), t = 1 / (1 + z/2), z >= 0
# (Press et al., Numerical Recipes, "erfcc"): relative error below 1.2e-7 for every z >= 0.
_ERFC_COEFFS = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806,
                0.27886807, -1.13520398, 1.48851587, -0.82215223, 0.17087277)


def erfc(x: np.ndarray) -> np.ndarray:
    """Complementary error function, erfc(x) = 1 - erf(x), as exact as the dtype asks.

    NumPy has no erf. float64, the dtype of exactness tests, goes through math.erfc element by
    element: exact to the last bits, and slow. Other dtypes use erfc_fit, whose relative error
    (below 1.2e-7) is about one float32 rounding step.
    """
    if x.dtype == np.float64:
        return _erfc_math(x).astype(np.float64)
    return erfc_fit(x)


def erfc_fit(x: np.ndarray) -> np.ndarray:
    """erfc to a relative error below 1.2e-7, in a dozen vectorised operations.

    For z = |x|, erfc(z) = t exp(-z^2 + P(t)) with t = 1/(1 + z/2) and P a degree-9 polynomial
    (Horner's rule); for x < 0, erfc(x) = 2 - erfc(-x). The bound is relative to erfc itself,
    so it holds far into the tail where erfc is tiny.
    """
    z = np.abs(x)
    t = 1.0 / (1.0 + 0.5 * z)
    poly = _ERFC_COEFFS[-1] * t
    for c in _ERFC_COEFFS[-2:0:-1]:
        poly = (poly + c) * t
    poly += _ERFC_COEFFS[0]
    r = t * np.exp(poly - z * z)
    return np.where(x >= 0, r, 2.0 - r)


_erfc_math = np.frompyfunc(math.erfc, 1, 1)  # elementwise math.erfc, returning objects


def gelu(x):
    """GELU(x) = x * Phi(x) = 0.5 * x * (1 + erf(x / sqrt 2)) = 0.5 * x * erfc(-x / sqrt 2).

    Written with erfc so that the relative accuracy holds for negative x too, where
    1 + erf(...) would cancel catastrophically.
    """
    return 0.5 * x * erfc(x * -(1.0 / math.sqrt(2.0)))


def gelu_tanh(x):
    """GELU's tanh approximation (GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


def silu(x):
    """SiLU(x) = x * sigmoid(x) = x / (1 + e^-x). Below about -88 (float32) e^-x overflows to
    inf and the quotient is 0, as it should be: that overflow is expected, not an error."""
    with np.errstate(over="ignore"):
        return x / (1.0 + np.exp(-x))


ACTIVATIONS = {"gelu": gelu, "gelu_tanh": gelu_tanh, "silu": silu}


def linear(x, weight, bias=None):
    """y = x @ W.T + b, with W stored (out_features, in_features) as PyTorch stores it.

    A weight that is not a NumPy array (an int8 QuantizedWeight, or a weight minillm.fast laid
    out for speed) carries its own product: any object whose `matmul(x)` returns x @ W.T.
    """
    y = x @ weight.T if isinstance(weight, np.ndarray) else weight.matmul(x)
    return y if bias is None else y + bias


def rope_tables(length: int, head_dim: int, theta: float, dtype,
                scaling: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The rotation tables of apply_rope for positions m < length, theta_j = theta^(-2j / d):

        cos = [cos(m theta_j), cos(m theta_j)],   sin = [-sin(m theta_j), sin(m theta_j)]

    two arrays of shape (length, head_dim), each half over j < d/2, computed in float64 and
    then cast. The sign of the first half of `sin` is what lets apply_rope rotate in one sum.
    scaling: a model's RoPE scaling (rope_scaling.py), which changes the theta_j and may
    multiply both tables by an attention factor.
    """
    inv_freq = theta ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    factor = 1.0
    if scaling is not None:
        inv_freq, factor = scaled_frequencies(inv_freq, scaling, theta)
    angles = np.outer(np.arange(length, dtype=np.float64), inv_freq)  # (length, head_dim/2)
    cos, sin = factor * np.cos(angles), factor * np.sin(angles)
    return (np.concatenate([cos, cos], axis=-1).astype(dtype),
            np.concatenate([-sin, sin], axis=-1).astype(dtype))


def apply_rope(x, cos, sin):
    """Rotate each pair (x_j, x_{j + d/2}) of every head by the angle m * theta_j.

    With x = [x1, x2] split into halves (the "rotate half" layout of Llama in Hugging Face):
        RoPE(x, m) = [x1 cos(m theta) - x2 sin(m theta),  x2 cos(m theta) + x1 sin(m theta)]
                   = x * cos + [x2, x1] * sin        with the tables of rope_tables
    (the same bits as the first form: x1 cos + x2 (-sin) is exactly x1 cos - x2 sin).
    x: (B, T, heads, d); cos, sin: broadcastable to (B, T, 1, d).
    Because a rotation by m followed by the inverse of a rotation by n is a rotation by m - n,
    <RoPE(q, m), RoPE(k, n)> depends on the positions only through m - n.
    """
    half = x.shape[-1] // 2
    out = x * cos
    out += np.concatenate([x[..., half:], x[..., :half]], axis=-1) * sin
    return out


def attention(q, k, v, mask=None, scale=None):
    """Scaled dot-product attention with grouped-query heads.

        Attention(Q, K, V) = softmax(Q K^T / sqrt(d) + M) V

    (scale: another factor than 1 / sqrt(d), such as Gemma's 1 / sqrt(query_pre_attn_scalar)).

    q: (B, H, T, d) queries; k, v: (B, K, S, d) keys and values; K divides H, and query head h
    reads key/value head h // (H / K).
    mask: None (every key visible) or booleans broadcastable to (B, 1, 1, T, S), True where a
    key is visible. Returns (B, H, T, d).
    """
    B, H, T, d = q.shape
    K, S = v.shape[1], v.shape[2]
    group = H // K
    # Put the `group` query heads that share a key head side by side: one matmul per key head.
    q = q.reshape(B, K, group * T, d)
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    scores = (q * scale) @ k.swapaxes(-1, -2)  # (B, K, group*T, S)
    if mask is not None:
        hidden = ~np.asarray(mask)  # small: (T, S) or (B, 1, 1, T, S)
        np.copyto(scores.reshape(B, K, group, T, S), -np.inf, where=hidden)
    out = softmax(scores) @ v  # (B, K, group*T, d)
    return out.reshape(B, H, T, d)


# -- the mask: which keys each new token may see (causality, padding, a local window) -------
#
# Token t of a chunk of T new tokens sits at index i = start + t of its row (start tokens are
# cached before it). It sees key j when
#
#     j <= i                       causality
#     j >= pad (or j == i)         not a padding token (a padding query sees itself, so that no
#                                  softmax row is empty)
#     i - j < window               a local layer's sliding window (Gemma 3): itself and the
#                                  window - 1 keys before it
#
# The window counts indices, not positions: within a row the two differ by the row's padding,
# so their differences are the same.

def positions_and_mask(B, T, start, pad):
    """Positions of the new tokens and which keys each of them may see (causality, padding).

    A token's position is its index minus its row's padding. `start` is one count for every
    row (a cache's length), or a count per row (B,) for rows that each continue their own text
    (the serving engine's requests; no padding then).
    Returns positions (a slice of T, or (B, T) indices) and a mask broadcastable to
    (B, 1, 1, T, S), or None when every key is visible.
    """
    if np.ndim(start):  # a start per row: row r's token t sits at index start[r] + t
        index = start[:, None] + np.arange(T)  # (B, T)
        causal = np.arange(int(start.max()) + T) <= index[..., None]  # (B, T, S)
        return index, causal[:, None, None]
    if pad is None and T == 1:  # decoding one token: it sees every key
        return slice(start, start + 1), None
    index = np.arange(start, start + T)  # (T,)
    keys = np.arange(start + T)  # (S,)
    causal = keys <= index[:, None]  # (T, S)
    if pad is None:  # positions are the indices: a slice, so lookups are views, not copies
        return slice(start, start + T), causal
    positions = np.maximum(index - pad[:, None], 0)  # (B, T)
    visible = causal & ((keys >= pad[:, None, None]) | (keys == index[:, None]))  # (B, T, S)
    return positions, visible[:, None, None]


def sliding_window(mask, start, T, window):
    """A local layer's view: (first, mask') where keys before index `first` are out of every
    new token's window (the layer need not read them) and mask' is `mask` over keys
    [first, start + T) with the window applied, or None when every one of those is visible.
    `start`: one count, or one per row, as for positions_and_mask."""
    first = max(0, int(np.min(start)) + 1 - window)  # the oldest key a first new token sees
    index = np.add.outer(start, np.arange(T))  # (T,), or (B, T) for a start per row
    near = index[..., None] - np.arange(first, int(np.max(start)) + T) < window  # (.., T, S')
    if np.ndim(start):
        near = near[:, None, None]  # (B, 1, 1, T, S - first), as the mask
    if mask is None:
        return first, None if near.all() else near
    return first, mask[..., first:] & near
