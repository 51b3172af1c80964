"""Turning logits into the next token: the sampling knobs, applied in a fixed order.

    z  = logits, penalised for recent repeats   (repetition penalty, CTRL)
    z  = z - f * count - p * [count > 0]        (frequency and presence penalties)
    p  = softmax(z / T)                         (temperature; T = 0 means greedy)
    p  = p restricted to the k largest          (top-k)
    p  = p restricted to the nucleus            (top-p: smallest head with mass >= top_p)
    p  = p restricted to {i : p_i >= min_p max_j p_j}   (min-p)
    next token ~ p                              (one uniform draw per row)

Each filter renormalises what survives before the next one looks at it. Everything works on a
batch of rows (B, V) at once; a single row (V,) is accepted too.

The order is that of Hugging Face transformers' logits processors; where the edge cases
differ from theirs (ties, the penalty's window, all -inf rows, temperature 0): docs/GUIDE.md,
"The knobs".
"""
from __future__ import annotations

import dataclasses
import numbers

import numpy as np

from .inputs import check_tokens
from .knobs import DEFAULT_SAMPLING, SAMPLING_KNOBS, SamplingConfig

__all__ = ["SamplingConfig", "sample_next_token", "choose", "draw", "filtered_probs",
           "apply_repetition_penalty", "apply_count_penalties", "top_k_mask", "top_p_mask"]


def sample_next_token(logits, sampling: SamplingConfig | None = None, history=None, rng=None,
                      **knobs) -> np.ndarray:
    """Draw one token per row from filtered_probs(...): (B, V) logits -> (B,) ids; (V,) -> id.

    The knobs come as a SamplingConfig, by name (temperature=0.7, top_k=40, ...), or both
    (the named ones replace the config's). Greedy (temperature 0) uses no randomness; any
    other temperature needs `rng`, a seeded numpy.random.Generator.
    """
    if knobs or not isinstance(sampling, SamplingConfig):  # a config alone is checked
        sampling = sampling_config(sampling, knobs)
    return choose(filtered_probs(logits, sampling, history), sampling, rng)


def choose(probs, sampling: SamplingConfig, rng=None) -> np.ndarray:
    """The token of each row of filtered probabilities: the argmax when greedy (the one-hot's
    one), else one inverse-CDF draw with a uniform u per row from `rng`."""
    single = probs.ndim == 1
    probs = probs[None] if single else probs
    if sampling.greedy:
        tokens = probs.argmax(axis=-1)
    else:
        if not isinstance(rng, np.random.Generator):
            raise ValueError("rng: a numpy.random.Generator is needed when temperature > 0, "
                             f"got {type(rng).__name__}")
        tokens = draw(probs, rng.random(probs.shape[0]))  # (B,)
    return tokens[0] if single else tokens


def draw(probs, u):
    """Inverse-CDF draw: the first token whose running total exceeds u * total, u in [0, 1).

    Token i owns an interval of u of length probs[i] / total, so a token of probability 0 is
    never drawn. probs (V,) with one u, or (B, V) with u (B,): one token per row.
    """
    cdf = np.cumsum(probs, axis=-1)  # (.., V)
    tokens = (cdf <= np.expand_dims(u, -1) * cdf[..., -1:]).sum(axis=-1)
    # The running total first exceeds u * total at a token of nonzero probability, unless
    # u * total rounded up to the total itself (u within an ulp of 1): then every running total
    # is below it, tokens = V, and the draw goes to the last token of nonzero probability.
    V = probs.shape[-1]
    if np.any(tokens == V):
        tokens = np.minimum(tokens, V - 1 - np.argmax(probs[..., ::-1] > 0, axis=-1))
    return tokens


def filtered_probs(logits, sampling: SamplingConfig | None = None, history=None,
                   **knobs) -> np.ndarray:
    """The distribution the next token is drawn from: (B, V) or (V,) logits -> float64 probs,
    the knobs applied in the order above.

    sampling: a SamplingConfig; knobs: the knobs by name (temperature=..., top_k=...,
    top_p=..., min_p=..., repetition_penalty=..., frequency_penalty=..., presence_penalty=...,
    penalty_window=...), replacing the config's (or the defaults).
    history: the tokens each row has seen, a (B, n) int array or a list of B lists; negative
    ids are ignored (left padding). Only its last `penalty_window` entries per row count.
    Greedy (temperature 0) is one-hot on the argmax, ties going to the lowest token id.
    At least one token always survives, and the result never holds NaN.
    """
    if knobs or not isinstance(sampling, SamplingConfig):  # a config alone is checked
        sampling = sampling_config(sampling, knobs)
    z = np.array(logits, dtype=np.float64)  # a copy: the caller's logits are never changed
    single = z.ndim == 1
    z = z[None] if single else z
    # The usual logits, (B, V) and finite, need no closer look than this one pass.
    if z.ndim != 2 or z.shape[-1] == 0 or not np.isfinite(z).all():
        z = _check_logits(z)
    B, V = z.shape
    if sampling.penalises:
        if history is None:
            raise ValueError("history: the penalties need each row's recent tokens")
        counts = _counts(history, B, V, sampling.penalty_window)  # (B, V)
        if sampling.repetition_penalty is not None:
            z = apply_repetition_penalty(z, counts > 0, sampling.repetition_penalty)
        if sampling.frequency_penalty is not None or sampling.presence_penalty is not None:
            z = apply_count_penalties(z, counts, sampling.frequency_penalty or 0.0,
                                      sampling.presence_penalty or 0.0)
    if sampling.greedy:
        probs = np.zeros_like(z)
        probs[np.arange(B), z.argmax(axis=-1)] = 1.0  # argmax takes the lowest id among ties
        return probs[0] if single else probs

    # e = exp((z - max z) / T): the largest entry is exactly 1, so nothing can overflow.
    with np.errstate(over="ignore"):  # z - max may overflow to -inf for huge logits: p = 0
        e = np.exp((z - z.max(axis=-1, keepdims=True)) / sampling.temperature)  # (B, V)
    keep = e > 0
    if sampling.top_k is not None and sampling.top_k < V:
        # Ranked by logit, not by e: two logits a hair apart can round to the same e.
        keep &= top_k_mask(z, sampling.top_k)
    if sampling.top_p is not None:
        keep &= top_p_mask(np.where(keep, e, 0.0), sampling.top_p)
    if sampling.min_p is not None:  # min-p: p_i >= min_p max_j p_j, a ratio: e serves as p
        kept = np.where(keep, e, 0.0)
        keep &= kept >= sampling.min_p * kept.max(axis=-1, keepdims=True)
    e = np.where(keep, e, 0.0)
    probs = e / e.sum(axis=-1, keepdims=True)  # the row's max survives every filter: sum >= 1
    return probs[0] if single else probs


# -- the filters, each on a batch of unnormalised probabilities e (B, V) --------------------

def apply_repetition_penalty(z, recent, penalty):
    """CTRL (Keskar et al., 2019): z_i / r if z_i > 0 else z_i * r, for every recent token i.

    With r > 1 both branches lower the logit; each distinct token is penalised once, however
    often it repeats. recent: (B, V) booleans, whether token i is among the row's recent ones.
    """
    penalised = np.where(z > 0, z / penalty, z * penalty)
    return np.where(recent, penalised, z)


def apply_count_penalties(z, counts, frequency, presence):
    """The frequency and presence penalties (OpenAI's API, llama.cpp's penalty sampler):
    z_i - frequency * c_i - presence * [c_i > 0], c_i the count of token i in the window.

    The frequency penalty grows with every repeat, the presence penalty is paid once by any
    token that occurred; positive values discourage repeats, negative ones encourage them.
    counts: (B, V) integers.
    """
    return z - frequency * counts - presence * (counts > 0)


def top_k_mask(e, k):
    """Keep exactly the k largest entries of each row (logits or probabilities, the order is
    the same); among equal values, the lowest ids.

    The k-th largest value v comes from np.partition; everything above v survives, then the
    entries equal to v fill the remaining places in order of token id.
    """
    kth = -np.partition(-e, k - 1, axis=-1)[:, k - 1:k]  # (B, 1), the k-th largest
    above = e > kth
    tied = e == kth
    room = k - above.sum(axis=-1, keepdims=True)  # (B, 1) places left for the tied entries
    return above | (tied & (np.cumsum(tied, axis=-1) <= room))


def top_p_mask(e, p):
    """Keep the smallest head of the sorted distribution whose mass reaches p (Holtzman et al.).

    Sorted descending, token number i (from 0) is kept when the mass strictly before it is
    < p: the token that crosses p stays in. The first token always survives. Equal
    probabilities are ordered by token id, lowest first (a stable sort).
    """
    order = np.argsort(-e, axis=-1, kind="stable")  # (B, V), most likely first
    sorted_e = np.take_along_axis(e, order, axis=-1)
    mass_before = (np.cumsum(sorted_e, axis=-1) - sorted_e) / sorted_e.sum(axis=-1,
                                                                          keepdims=True)
    keep = np.empty_like(e, dtype=bool)
    np.put_along_axis(keep, order, mass_before < p, axis=-1)
    return keep



# -- inputs ----------------------------------------------------------------------------------

def _counts(history, B, V, window):
    """(B, V) integers: how often each token occurs in the last `window` entries of each row's
    history, a (B, n) array or B lists (one flat list for one row); negative ids are padding."""
    if not isinstance(history, np.ndarray):
        rows = list(history)
        rows = [rows] if all(isinstance(t, numbers.Integral) for t in rows) else rows
        history = np.full((len(rows), max(map(len, rows), default=0)), -1, dtype=np.int64)
        for r, tokens in enumerate(rows):  # right-aligned, as a window's rows are
            history[r, history.shape[1] - len(tokens):] = np.asarray(tokens, dtype=np.int64)
    recent = np.atleast_2d(history)[:, -window:]
    if len(recent) != B:
        raise ValueError(f"history: expected {B} rows of token ids (a (B, n) array or a list "
                         f"of lists), got {len(recent)}")
    if recent.size and (recent >= 0).any():  # negative ids are padding
        check_tokens(recent[recent >= 0][None], V, "history")
    row, col = np.nonzero(recent >= 0)  # negative ids are padding
    return np.bincount(row * V + recent[row, col], minlength=B * V).reshape(B, V)


def _check_logits(z):
    """Logits of a wrong shape, or not all finite: an error, or the limit of what they ask."""
    if z.ndim != 2 or z.shape[-1] == 0:
        raise ValueError(f"logits: expected a (batch, vocab) or (vocab,) array, got shape "
                         f"{z.shape}")
    if np.isnan(z).any():
        raise ValueError("logits: contain NaN")
    if not (z > -np.inf).any(axis=-1).all():
        raise ValueError("logits: a row has no entry above -inf, nothing can be sampled")
    posinf = np.isposinf(z)
    if posinf.any():  # the limit of softmax as some logits grow without bound
        has_posinf = posinf.any(axis=-1, keepdims=True)  # (B, 1)
        z = np.where(has_posinf, np.where(posinf, 0.0, -np.inf), z)
    return z


def sampling_config(sampling=None, knobs=None) -> SamplingConfig:
    """The SamplingConfig `sampling` (default: every knob's default) with `knobs`, the knobs
    given by name, replaced, every one checked; a config given alone was checked when made."""
    if sampling is not None and not isinstance(sampling, SamplingConfig):
        raise ValueError(f"sampling: expected a SamplingConfig, got {sampling!r}; give the "
                         "knobs by name (temperature=..., top_k=...)")
    if not knobs:
        return sampling or DEFAULT_SAMPLING
    unknown = sorted(set(knobs) - set(SAMPLING_KNOBS))
    if unknown:
        raise TypeError(f"{unknown[0]}: not a sampling knob; they are "
                        f"{', '.join(sorted(SAMPLING_KNOBS))}")
    return dataclasses.replace(sampling or DEFAULT_SAMPLING, **knobs)
