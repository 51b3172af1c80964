"""Turning logits into the next token: the sampling knobs, applied in a fixed order.

    z  = logits, penalised for recent repeats   (repetition penalty, CTRL)
    p  = softmax(z / T)                         (temperature; T = 0 means greedy)
    p  = p restricted to the k largest          (top-k)
    p  = p restricted to the nucleus            (top-p: smallest head with mass >= top_p)
    p  = p restricted to {i : p_i >= min_p max_j p_j}   (min-p)
    next token ~ p                              (one uniform draw per row)

Each filter renormalises what survives before the next one looks at it. Everything works on a
batch of rows (B, V) at once; a single row (V,) is accepted too.

The order is that of Hugging Face transformers' logits processors (repetition penalty on the
logits, then temperature, top-k, top-p, min-p), and so are the common cases: top_k >= V,
top_p = 1 and min_p = 0 keep everything; min-p keeps p_i >= min_p max_j p_j, equality
included; the most likely token always survives. Where transformers defines the edge cases
differently:
- top-k: transformers keeps every token tied with the k-th largest logit (possibly more than k);
  here exactly k survive and ties are broken towards the lowest token id, the same rule as
  greedy's argmax, so top_k=1 is greedy.
- top-p: transformers sorts ascending and drops the tail whose cumulative mass is <= 1 - top_p
  (same set up to rounding; tie order unspecified); here the head is summed from the top and
  tied probabilities are ordered by token id, lowest first.
- repetition penalty: transformers penalises every token of the whole input; here only the
  distinct tokens of the last `penalty_window` (default 64) tokens of each row.
- rows whose logits are all -inf: transformers returns NaN; here that is a ValueError. A +inf
  logit (overflow in the model) takes all the mass, shared equally among +inf entries.
- temperature 0: transformers rejects it and uses do_sample=False; here it is greedy, returned
  as a one-hot distribution so that speculative decoding can treat both cases alike.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SamplingConfig:
    """The sampling knobs, checked once. "Off" values (top_k 0, top_p 1, min_p 0,
    repetition_penalty 1) are stored as None, so `None` is the one way a knob reads as off.

    penalty_window: how many of the most recent tokens the repetition penalty looks at.
    """

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    penalty_window: int = 64

    def __post_init__(self):
        knob = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731 (frozen)
        knob("temperature", _number("temperature", self.temperature, lambda t: t >= 0,
                                    "a number >= 0 (0 is greedy)"))
        knob("top_k", _count("top_k", self.top_k, 0, "an integer >= 0 (0 or None disables)"))
        if self.top_p is not None:
            knob("top_p", _number("top_p", self.top_p, lambda p: 0 < p <= 1,
                                  "in (0, 1] (1 or None disables)"))
        if self.min_p is not None:
            knob("min_p", _number("min_p", self.min_p, lambda p: 0 <= p <= 1,
                                  "in [0, 1] (0 or None disables)"))
        if self.repetition_penalty is not None:
            knob("repetition_penalty", _number(
                "repetition_penalty", self.repetition_penalty, lambda r: r > 0,
                "a number > 0 (1 or None disables; > 1 discourages repeats)"))
        knob("penalty_window", _count("penalty_window", self.penalty_window, 1,
                                      "an integer >= 1"))
        for name, off in (("top_k", 0), ("top_p", 1.0), ("min_p", 0.0),
                          ("repetition_penalty", 1.0)):
            if getattr(self, name) == off:
                knob(name, None)

    @property
    def greedy(self) -> bool:
        """Temperature 0: the argmax, no randomness."""
        return self.temperature == 0

    @property
    def penalises(self) -> bool:
        """Whether the repetition penalty is on: only then is each row's history needed."""
        return self.repetition_penalty is not None


def _number(name, value, ok, allowed) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) \
            or not math.isfinite(value) or not ok(value):
        raise ValueError(f"{name}: must be {allowed}, got {value!r}")
    return float(value)


def _count(name, value, least, allowed) -> int | None:
    if value is None and least == 0:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
        raise ValueError(f"{name}: must be {allowed}, got {value!r}")
    return int(value)


def filtered_probs(logits, temperature=1.0, top_k=None, top_p=None, min_p=None,
                   repetition_penalty=None, history=None, penalty_window=64) -> np.ndarray:
    """The distribution the next token is drawn from: (B, V) or (V,) logits -> float64 probs.

    Disabled values: top_k 0/None, top_p 1/None, min_p 0/None, repetition_penalty 1/None.
    history: the tokens each row has seen, a (B, n) int array or a list of B lists; negative
    ids are ignored (left padding). Only its last `penalty_window` entries per row count.
    Greedy (temperature 0) is one-hot on the argmax, ties going to the lowest token id.
    At least one token always survives, and the result never holds NaN.
    """
    knobs = SamplingConfig(temperature, top_k, top_p, min_p, repetition_penalty, penalty_window)
    return probabilities(logits, knobs, history)


def probabilities(logits, knobs: SamplingConfig, history=None) -> np.ndarray:
    """filtered_probs with the knobs already checked: the rule itself, in the order above."""
    z = np.array(logits, dtype=np.float64)  # a copy: the caller's logits are never changed
    single = z.ndim == 1
    z = _check_logits(z[None] if single else z)
    B, V = z.shape

    if knobs.penalises:
        if history is None:
            raise ValueError("history: the repetition penalty needs each row's recent tokens")
        seen = _seen(history, B, V, knobs.penalty_window)
        z = apply_repetition_penalty(z, seen, knobs.repetition_penalty)
    if knobs.greedy:
        probs = np.zeros_like(z)
        probs[np.arange(B), z.argmax(axis=-1)] = 1.0  # argmax takes the lowest id among ties
        return probs[0] if single else probs

    # e = exp((z - max z) / T): the largest entry is exactly 1, so nothing can overflow.
    with np.errstate(over="ignore"):  # z - max may overflow to -inf for huge logits: p = 0
        e = np.exp((z - z.max(axis=-1, keepdims=True)) / knobs.temperature)  # (B, V)
    keep = e > 0
    if knobs.top_k is not None and knobs.top_k < V:
        # Ranked by logit, not by e: two logits a hair apart can round to the same e.
        keep &= top_k_mask(z, knobs.top_k)
    if knobs.top_p is not None:
        keep &= top_p_mask(np.where(keep, e, 0.0), knobs.top_p)
    if knobs.min_p is not None:
        keep &= min_p_mask(np.where(keep, e, 0.0), knobs.min_p)
    e = np.where(keep, e, 0.0)
    probs = e / e.sum(axis=-1, keepdims=True)  # the row's max survives every filter: sum >= 1
    return probs[0] if single else probs


def sample_next_token(logits, *, temperature=1.0, top_k=None, top_p=None, min_p=None,
                      repetition_penalty=None, history=None, penalty_window=64,
                      rng=None) -> np.ndarray:
    """Draw one token per row from filtered_probs(...): (B, V) logits -> (B,) ids; (V,) -> id.

    The draw is inverse-CDF sampling with one uniform u per row from `rng` (a seeded
    numpy.random.Generator): the token is the first i whose running total exceeds u * total,
    so a token of probability 0 is never drawn. Greedy (temperature 0) uses no randomness.
    """
    knobs = SamplingConfig(temperature, top_k, top_p, min_p, repetition_penalty, penalty_window)
    return sample(logits, knobs, history, rng)


def sample(logits, knobs: SamplingConfig, history=None, rng=None) -> np.ndarray:
    """sample_next_token with the knobs already checked."""
    if knobs.greedy and not knobs.penalises:
        # Greedy is the argmax of the logits, where `probabilities` puts its one-hot; finite
        # logits (the usual case) need none of its checks and copies.
        z = np.asarray(logits)
        if z.ndim in (1, 2) and z.shape[-1] > 0 and np.isfinite(z).all():
            return z.argmax(axis=-1)
    probs = probabilities(logits, knobs, history)
    single = probs.ndim == 1
    probs = probs[None] if single else probs
    if knobs.greedy:
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


# -- the filters, each on a batch of unnormalised probabilities e (B, V) --------------------

def apply_repetition_penalty(z, seen, penalty):
    """CTRL (Keskar et al., 2019): z_i / r if z_i > 0 else z_i * r, for every seen token i.

    With r > 1 both branches lower the logit; each distinct token is penalised once, however
    often it repeats. seen: (B, V) booleans.
    """
    penalised = np.where(z > 0, z / penalty, z * penalty)
    return np.where(seen, penalised, z)


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


def min_p_mask(e, min_p):
    """Keep {i : p_i >= min_p * max_j p_j}; the ratio needs no normalisation, so use e."""
    return e >= min_p * e.max(axis=-1, keepdims=True)


# -- inputs ----------------------------------------------------------------------------------

def _seen(history, B, V, window):
    """(B, V) booleans: which tokens occur in the last `window` entries of each row's history."""
    if isinstance(history, np.ndarray):
        rows = history if history.ndim == 2 else history.reshape(1, -1)
    else:
        rows = list(history)
        if all(isinstance(t, numbers.Integral) for t in rows):
            rows = [rows]  # one flat list: a single row
    if len(rows) != B:
        raise ValueError(f"history: expected {B} rows of token ids (a (B, n) array or a list "
                         f"of lists), got {len(rows)}")
    if isinstance(rows, np.ndarray):  # the common case in generation: vectorised
        recent = rows[:, -window:]
    else:
        recent = np.full((B, max([len(r) for r in rows] + [0])), -1, dtype=np.int64)
        for r, tokens in enumerate(rows):
            recent[r, recent.shape[1] - len(tokens):] = np.asarray(tokens, dtype=np.int64)
        recent = recent[:, -window:]
    if recent.size and not np.issubdtype(recent.dtype, np.integer):
        raise ValueError(f"history: expected integer token ids, got dtype {recent.dtype}")
    if recent.size and recent.max() >= V:
        raise ValueError(f"history: token ids must be < {V} (the vocabulary size), got "
                         f"{recent.max()}")
    seen = np.zeros((B, V), dtype=bool)
    row, col = np.nonzero(recent >= 0)  # negative ids are padding
    seen[row, recent[row, col]] = True
    return seen


def _check_logits(z):
    if z.ndim != 2 or z.shape[-1] == 0:
        raise ValueError(f"logits: expected a (batch, vocab) or (vocab,) array, got shape "
                         f"{z.shape}")
    if np.isfinite(z).all():  # the usual case, settled in one pass
        return z
    if np.isnan(z).any():
        raise ValueError("logits: contain NaN")
    if not (z > -np.inf).any(axis=-1).all():
        raise ValueError("logits: a row has no entry above -inf, nothing can be sampled")
    top = np.isposinf(z)
    if top.any():  # the limit of softmax as some logits grow without bound
        rows = top.any(axis=-1, keepdims=True)
        z = np.where(rows, np.where(top, 0.0, -np.inf), z)
    return z
