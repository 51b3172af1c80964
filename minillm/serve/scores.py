"""Top log-probabilities, which the engine does not report, computed beside it.

The engine's Output carries ln p of the token drawn, under the distribution it was drawn from
(every knob applied), but not the rest of that distribution. A Scorer follows one request with
a cache of its own: before each new token it runs the positions not yet read (the prompt,
then the previous token) through the model, applies the request's knobs to the last logits
with the request's text as history, exactly as the engine's draw does, and keeps the k most
likely tokens. That is one more one-token pass per new token of the requests that ask for
top_logprobs (docs/SERVE.md says what the engine would need to spare it). The logits come from
a contiguous cache where the engine's come from its blocks: equal up to rounding.

A prompt's own log-probabilities (echo with logprobs) are the model's, temperature 1, as
`generate(..., prompt_logprobs=True)` gives them: one uncached pass over the prompt.
"""
from __future__ import annotations

import numpy as np

from ..layers import log_softmax
from ..sampling import filtered_probs


def top_entries(logprobs, k: int) -> list[tuple[int, float]]:
    """The k largest finite entries of a row of log-probabilities as (token, logprob), most
    likely first, ties by the lowest id; tokens a knob removed (p = 0) are never listed."""
    if k <= 0:
        return []
    order = np.argsort(-logprobs, kind="stable")[:k]
    return [(int(t), float(logprobs[t])) for t in order if np.isfinite(logprobs[t])]


class Scorer:
    """The top k of the distribution each new token of one request is drawn from."""

    def __init__(self, model, prompt, sampling, k: int):
        self.model, self.sampling, self.k = model, sampling, k
        self.text = list(prompt)  # the request's text so far: the penalties' history
        self.unread = list(prompt)  # positions not yet run through the cache
        self.cache = model.new_cache(batch_size=1)

    def top(self, token: int) -> list[tuple[int, float]]:
        """The top entries of the distribution `token` was drawn from; then `token` joins the
        text (and is read at the next call, never after the last token)."""
        logits = self.model.forward(np.array([self.unread]), self.cache, last=1)[:, -1]
        probs = filtered_probs(logits, self.sampling, np.array([self.text]))[0]
        with np.errstate(divide="ignore"):
            best = top_entries(np.log(probs), self.k)
        self.text.append(int(token))
        self.unread = [int(token)]
        return best


def prompt_scores(model, prompt, k: int) -> list[tuple[float | None, list]]:
    """Per prompt token (its ln p given the tokens before it, the top k there): None and no
    entries for the first token, which nothing precedes."""
    logp = log_softmax(model.forward(np.array([prompt])))[0]  # (T, V)
    scores = [(None, [])]
    for t in range(1, len(prompt)):
        scores.append((float(logp[t - 1, prompt[t]]), top_entries(logp[t - 1], k)))
    return scores
