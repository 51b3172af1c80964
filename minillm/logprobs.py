"""Log-probabilities of generated tokens, read off the loop for free.

Each new token is scored with the distribution it was drawn from, so the scores cost no
forward pass: ln p(token) under the distribution after every knob, and ln softmax(z)[token]
under the model's own logits z at temperature 1. A prompt's tokens are scored by one uncached
pass over its first window.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from .layers import log_softmax
from .window import first_window


@dataclass
class Rollout:
    """One row of a generation, with the log-probability of every new token (natural log).

    tokens: prompt + new tokens, what generate returns without return_logprobs.
    logprobs[i]: ln p(new token i) under the distribution it was drawn from, every knob
        applied: penalty, temperature, top-k, top-p, min-p (0.0 at temperature 0, one-hot).
    raw_logprobs[i]: ln softmax(z)[token] for the model's own logits z, temperature 1, no knob.
    prompt_logprobs (when asked): per prompt token, ln softmax(z)[token] for the logits z of
        the visible prompt before it; None for the first token the model sees, and for the
        tokens cut from the left of a prompt longer than the window.
    Each is what a fresh forward pass over the same view of the text gives.
    """

    tokens: list[int]
    logprobs: list[float]
    raw_logprobs: list[float]
    prompt_logprobs: list[float | None] | None = None

    @property
    def new_tokens(self) -> list[int]:
        return self.tokens[len(self.tokens) - len(self.logprobs):]


class ScoredToken(NamedTuple):
    """A new token with its two log-probabilities (see Rollout)."""

    token: int
    logprob: float
    raw_logprob: float


def rollouts(model, prompts, steps, prompt_logprobs=False) -> list[Rollout]:
    """A Rollout per row from the decode loop's steps (generate.decode_steps)."""
    rows = [Rollout(list(map(int, prompt)), [], []) for prompt in prompts]
    for step in scored_steps(steps):
        for r, scored in step.items():
            rows[r].tokens.append(scored.token)
            rows[r].logprobs.append(scored.logprob)
            rows[r].raw_logprobs.append(scored.raw_logprob)
    if prompt_logprobs:
        for rollout, scores in zip(rows, score_prompts(model, prompts)):
            rollout.prompt_logprobs = scores
    return rows


def scored_steps(steps):
    """The decode loop's steps as {row: ScoredToken}: the same draws, so the same tokens as
    without scores."""
    for step in steps:
        running = step.rows
        yield dict(zip(map(int, running), score(step.probs[running], step.logits[running],
                                                step.tokens[running])))


def score(probs, logits, tokens) -> list[ScoredToken]:
    """Each token (one per row) with ln p under `probs`, the distribution it was drawn from,
    and ln softmax(logits) at temperature 1, no knob."""
    picked = np.arange(len(tokens)), np.asarray(tokens)
    logprobs = np.log(probs[picked])  # drawn: p > 0, finite
    raw = log_softmax(logits)[picked]
    return [ScoredToken(int(token), float(logprob), float(raw_logprob))
            for token, logprob, raw_logprob in zip(tokens, logprobs, raw)]


def top_entries(logprobs, k: int) -> list[tuple[int, float]]:
    """The k largest finite entries of a row of log-probabilities as (token, logprob), most
    likely first, ties by the lowest id."""
    if k <= 0:
        return []
    k = min(k, len(logprobs))
    kth = np.partition(logprobs, -k)[-k]  # the k-th largest: a partition, not a sort of V
    candidates = np.flatnonzero(logprobs >= kth)  # the k largest and their ties, by id
    order = candidates[np.argsort(-logprobs[candidates], kind="stable")][:k]
    return [(int(t), float(logprobs[t])) for t in order if np.isfinite(logprobs[t])]


def score_positions(logits, tokens, start: int, first: int, k: int) -> list:
    """(ln p(tokens[t] | tokens[:t]), the k likeliest (token, ln p) there) for every t >= first
    that the positions start, start + 1, ... of `logits` (n, V) predict (position p predicts
    token p + 1), at temperature 1, no knob: a prompt scored a chunk at a time."""
    logp = log_softmax(logits)  # (n, V): the chunk's, never the whole prompt's
    predicted = range(max(first, start + 1), min(start + len(logits) + 1, len(tokens)))
    return [(float(logp[t - 1 - start, tokens[t]]), top_entries(logp[t - 1 - start], k))
            for t in predicted]


def score_prompts(model, prompts) -> list[list[float | None]]:
    """ln p(token | the visible prompt before it), temperature 1, for every prompt token; None
    where nothing precedes it in the first window. One uncached forward pass over that window:
    the prefill of generation keeps the logits of the last position only."""
    window = first_window(prompts, model.config.context_length)
    tokens = window.tokens[:, :window.width]
    logp = log_softmax(model.forward(np.maximum(tokens, 0), pad=window.pad))  # (B, width, V)
    scores = []
    for r, prompt in enumerate(prompts):
        start = int(window.pad[r])  # the first column the model sees of this prompt
        cut = len(prompt) - (window.width - start)  # tokens cut from its left
        # Column c predicts column c + 1.
        predicted = [float(logp[r, c, tokens[r, c + 1]]) for c in range(start, window.width - 1)]
        scores.append([None] * (cut + 1) + predicted)
    return scores
