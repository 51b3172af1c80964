"""A sampling loop's output follows the target's exact distribution, whatever it does inside.

Speculative decoding claims its continuations have exactly the target's distribution, for any
drafter. With a tiny vocabulary V and a few new tokens n, that distribution can be written
down: the exact probability of every n-token continuation c, by the chain rule over the
target's filtered distributions (minillm.sampling's rule for the knobs),

    P(c) = prod_t p(c_t | prompt + c_<t)            an array of shape (V,) * n

and the loop's draws are compared with it by a chi-square test over the V^n continuations
(minillm.testing.stats: continuations expected fewer than 5 times pooled into one, false-alarm
rate FALSE_ALARM = 0.001, power given as the smallest total-variation error the test catches
with probability 0.9 at that number of runs). Nothing here is specific to speculative decoding:
any loop that claims to sample from the target (plain generation included) is checked the same
way. The prompt and the continuation must fit the target's context (no window slides).
"""
from __future__ import annotations

import itertools

import numpy as np

from ..sampling import SamplingConfig, filtered_probs
from .engine import logits_of
from .stats import FALSE_ALARM, chi_square, chi_square_critical, smallest_detectable_tv

MAX_CONTINUATIONS = 100_000  # V^n rows of forward passes: keep V and n small


def exact_sequence_distribution(engine, prompt, n: int, **knobs) -> np.ndarray:
    """The exact probability of each n-token continuation of `prompt`, an array of shape
    (V,) * n, under the target's distributions filtered by `knobs` (SamplingConfig's:
    temperature, top_k, top_p, min_p, repetition_penalty). One uncached forward pass over the
    V^n texts prompt + c gives every factor of the chain rule."""
    config = SamplingConfig(**knobs)
    V, P = engine.vocab_size, len(prompt)
    if P < 1 or P + n > engine.context_length:
        raise ValueError(f"prompt and n: need 1 <= {P} and {P} + {n} <= the context length "
                         f"{engine.context_length}")
    if V ** n > MAX_CONTINUATIONS:
        raise ValueError(f"V^n = {V}^{n} continuations: too many to enumerate (at most "
                         f"{MAX_CONTINUATIONS}); use a smaller vocabulary or fewer tokens")
    continuations = np.array(list(itertools.product(range(V), repeat=n)), dtype=np.int64)
    texts = np.concatenate([np.tile(np.asarray(prompt, dtype=np.int64), (V ** n, 1)),
                            continuations], axis=1)  # (V^n, P + n)
    logits = logits_of(engine, texts)  # (V^n, P + n, V)
    prob = np.ones(V ** n)
    for t in range(n):
        history = [list(row[:P + t]) for row in texts] if config.penalises else None
        p = filtered_probs(logits[:, P - 1 + t], config, history)  # (V^n, V): after P + t tokens
        prob *= p[np.arange(V ** n), texts[:, P + t]]
    return prob.reshape((V,) * n)


def check_speculative_distribution(sample_fn, exact_probs, runs: int = 3000,
                                   seed: int = 1234) -> dict:
    """sample_fn(seed) -> the n new tokens the loop under test samples (a speculative decoder
    with any drafter, say), called with seeds seed, seed + 1, ..., seed + runs - 1; exact_probs:
    exact_sequence_distribution's array (V,) * n. Fails (AssertionError) on a continuation of
    probability 0 or a chi-square statistic at or above the critical value; a correct loop
    fails with probability FALSE_ALARM. Returns what the test saw and could see:
    {"statistic", "df", "critical", "false_alarm", "detectable_tv"} (detectable_tv: the
    smallest total-variation error caught with probability 0.9 at this many runs)."""
    exact = np.asarray(exact_probs, dtype=np.float64)
    counts = np.zeros(exact.size, dtype=np.int64)
    for i in range(runs):
        c = tuple(int(t) for t in sample_fn(seed + i))
        if len(c) != exact.ndim or min(c) < 0 or max(c) >= exact.shape[0]:
            raise AssertionError(f"sample_fn({seed + i}) returned {c}; expected {exact.ndim} "
                                 f"token ids in [0, {exact.shape[0]})")
        if exact[c] == 0:
            raise AssertionError(f"sample_fn({seed + i}) drew the continuation {c}, of "
                                 "probability 0 under the target")
        counts[np.ravel_multi_index(c, exact.shape)] += 1
    stat, df = chi_square(counts, exact.ravel())
    report = dict(statistic=stat, df=df, critical=chi_square_critical(df) if df > 0 else 0.0,
                  false_alarm=FALSE_ALARM, detectable_tv=smallest_detectable_tv(exact, runs))
    if stat > report["critical"]:
        expected = runs * exact.ravel()
        worst = np.argsort(-np.abs(counts - expected))[:3]
        gaps = ", ".join(f"{tuple(int(t) for t in np.unravel_index(i, exact.shape))} "
                         f"{counts[i]} vs {expected[i]:.1f}" for i in worst)
        raise AssertionError(
            f"continuations do not follow the target's distribution: chi-square {stat:.1f} > "
            f"{report['critical']:.1f} (df {df}, false-alarm rate {FALSE_ALARM}, {runs} runs "
            f"catch a total-variation error of {report['detectable_tv']:.3f} with probability "
            f"0.9); largest gaps (continuation, count vs expected): {gaps}")
    return report
