"""Speculative decoding's output follows the target's distribution, whatever the drafter.

The check runs the engine's sampling loop `runs` times from one prompt and counts each
continuation of `new_tokens` tokens. The exact probability of a continuation c is the chain
rule over the target's filtered distributions (minillm.sampling's rule for the knobs):

    P(c) = prod_t p(c_t | prompt + c_<t)

and a chi-square test at the 0.1% level compares counts with runs * P (continuations expected
fewer than 5 times pooled into one; minillm.testing.stats gives the false-alarm rate and the
power). Nothing here is specific to speculative decoding: any sampling loop that claims to
follow the target's distribution (plain generation included) can be checked the same way.
The prompt and the continuation must fit the target's context (no window slides).
"""
from __future__ import annotations

from collections import Counter

import numpy as np

from ..sampling import SamplingConfig, probabilities
from .engine import Engine
from .stats import FALSE_ALARM, chi_square, chi_square_critical


def likely_continuations(engine: Engine, prompt, knobs: SamplingConfig, new_tokens: int,
                         min_prob: float) -> dict:
    """{continuation: P(continuation)} for every continuation of probability >= min_prob.

    A tree search, one depth at a time, each depth one batched forward pass: a prefix below
    min_prob is dropped with everything under it (its continuations are all below min_prob
    too), so at most 1 / min_prob prefixes are read per depth, whatever the vocabulary.
    """
    frontier = {(): 1.0}
    for _ in range(new_tokens):
        texts = np.array([list(prompt) + list(c) for c in frontier], dtype=np.int64)
        logits = np.asarray(engine.forward(texts, None), dtype=np.float64)[:, -1]
        history = [list(t) for t in texts] if knobs.penalises else None
        probs = probabilities(logits, knobs, history)  # (prefixes, V)
        grown = {}
        for (prefix, mass), row in zip(frontier.items(), probs):
            for token in np.flatnonzero(mass * row >= min_prob):
                grown[prefix + (int(token),)] = mass * row[token]
        frontier = grown
    return frontier


def continuation_probabilities(engine: Engine, prompt, continuations, knobs: SamplingConfig):
    """P(c) for each continuation c (all of one length), by the chain rule: one forward pass
    over prompt + c gives every factor."""
    P = len(prompt)
    texts = np.array([list(prompt) + list(c) for c in continuations], dtype=np.int64)
    logits = np.asarray(engine.forward(texts, None), dtype=np.float64)
    prob = np.ones(len(texts))
    for t in range(texts.shape[1] - P):
        history = [list(row[:P + t]) for row in texts] if knobs.penalises else None
        p = probabilities(logits[:, P - 1 + t], knobs, history)  # (n, V): next after P + t
        prob *= p[np.arange(len(texts)), texts[:, P + t]]
    return prob


def assert_continuations_follow(engine: Engine, prompt, knobs: SamplingConfig, outcomes) -> None:
    """Continuations drawn by the loop under test (a list of tuples, all new_tokens long)
    against the target's exact distribution: no impossible continuation, and a chi-square
    statistic under the critical value."""
    counts = Counter(tuple(int(t) for t in c) for c in outcomes)
    runs, new_tokens = len(outcomes), len(next(iter(counts)))
    seen = list(counts)
    impossible = [c for c, p in zip(seen, continuation_probabilities(engine, prompt, seen, knobs))
                  if p == 0]
    if impossible:
        raise AssertionError(f"drew continuations of probability 0 after {list(prompt)}: "
                             f"{impossible[:5]}")
    likely = likely_continuations(engine, prompt, knobs, new_tokens, min_prob=5.0 / runs)
    observed = [counts.get(c, 0) for c in likely] + [runs - sum(counts.get(c, 0) for c in likely)]
    expected = list(likely.values()) + [max(0.0, 1.0 - sum(likely.values()))]
    stat, df = chi_square(observed, expected)
    critical = chi_square_critical(df) if df > 0 else 0.0
    if stat > critical:
        worst = sorted(zip(likely, observed, expected), key=lambda x: -abs(x[1] - runs * x[2]))
        raise AssertionError(
            f"continuations of {list(prompt)} do not follow the target's distribution for "
            f"{knobs}: chi-square {stat:.1f} > {critical:.1f} (df {df}, false-alarm rate "
            f"{FALSE_ALARM}); largest gaps (continuation, count, expected): "
            + ", ".join(f"{c} {o} {runs * e:.1f}" for c, o, e in worst[:3]))


def check_speculative(generate, engine: Engine, prompt, knobs: SamplingConfig,
                      new_tokens: int = 3, runs: int = 3000, seed: int = 1234) -> None:
    """generate(prompt, new_tokens, rng) -> the new_tokens ids the loop under test samples
    with `knobs` (a speculative decoder with any drafter, say), called `runs` times with one
    rng = numpy.random.default_rng(seed). `engine` is the target, for the exact distribution.
    Cost: `runs` calls of the loop, plus about new_tokens * runs / 5 rows of target forward
    passes at most for the exact distribution (a few rows for a peaked one)."""
    if len(prompt) + new_tokens > engine.context_length:
        raise ValueError(f"prompt and new_tokens: {len(prompt) + new_tokens} tokens exceed the "
                         f"target's context length {engine.context_length}")
    rng = np.random.default_rng(seed)
    outcomes = [tuple(generate(list(prompt), new_tokens, rng)) for _ in range(runs)]
    if any(len(c) != new_tokens for c in outcomes):
        raise AssertionError(f"generate returned continuations of lengths "
                             f"{sorted({len(c) for c in outcomes})}, expected {new_tokens}")
    assert_continuations_follow(engine, prompt, knobs, outcomes)
