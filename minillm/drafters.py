"""Drafters for speculative decoding: anything that guesses the next k tokens and says which
distribution q each guess was drawn from. A drafter changes only the speed, never the output.

    propose(text, k, rng) -> (guesses: list of up to k ids, q: (len(guesses), V) probabilities)
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .generate import kept_on_slide
from .sampling import SamplingConfig, draw, probabilities, sample


class ModelDrafter:
    """A smaller model with its own KV cache, sampling with the same knobs as the target.

    The cache holds the drafter's view of the text. At each proposal it keeps the longest
    prefix of its cached tokens that the text still agrees with (the guesses the target
    rejected are dropped: a truncate, never a recomputation) and reads only the rest.
    """

    def __init__(self, model, knobs: SamplingConfig):
        self.model, self.knobs = model, knobs
        self.cache = model.new_cache()
        self.cached: list[int] = []  # the tokens whose keys and values the cache holds
        self.start = 0  # the cache holds text[start:start + len(cached)]
        self.calls = 0

    def propose(self, text, k, rng):
        V = self.model.config.vocab_size
        if k <= 0:
            return [], np.zeros((0, V))
        view = self._sync(text, k)
        k = max(1, min(k, self.model.config.context_length - view + 1))  # what the cache holds
        guesses, q = [], np.zeros((k, V))
        fresh = text[self.start + len(self.cached):]
        for i in range(k):
            logits = self.model.forward(np.array([fresh]), self.cache, last=1)[0, -1]
            self.calls += 1
            self.cached += fresh
            history = [text + guesses] if self.knobs.penalises else None
            if self.knobs.greedy:  # q is one-hot on the token greedy sampling picks
                guess = int(sample(logits, self.knobs, history))
                q[i, guess] = 1.0
            else:
                q[i] = probabilities(logits, self.knobs, history)
                guess = int(draw(q[i], rng.random()))
            guesses.append(guess)
            fresh = [guess]
        return guesses, q

    def _sync(self, text, k):
        """Roll the cache back to the longest prefix it shares with the text; slide if full."""
        W = self.model.config.context_length
        if len(text) - self.start + k - 1 > W:  # the guesses would not fit: keep the newest half
            self.start = len(text) - kept_on_slide(W)
            self.cache.reset()
            self.cached = []
        visible = text[self.start:]
        agree = min(len(self.cached), len(visible))
        if self.cached[:agree] != visible[:agree]:  # one comparison when the cache is a prefix
            agree = next(i for i, (a, b) in enumerate(zip(self.cached, visible)) if a != b)
        agree = min(agree, len(visible) - 1)  # re-read at least the last token for its logits
        self.cache.truncate(agree)
        del self.cached[agree:]
        return len(visible)


def first_layers(model, n_layers: int):
    """A self-speculative draft model (early exit, as in LayerSkip, Elhoushi et al., 2024):
    the target's first `n_layers` blocks, then its final norm and output layer.

    It shares the target's weight arrays (nothing is copied) and gets a cache of its own when
    a ModelDrafter wraps it, so no second model is needed: its guesses cost n_layers / L of a
    target step plus the output layer.
    """
    if isinstance(n_layers, bool) or not isinstance(n_layers, int) \
            or not 1 <= n_layers <= model.config.n_layers:
        raise ValueError(f"n_layers: must be an integer in [1, {model.config.n_layers}], "
                         f"got {n_layers!r}")
    config = dataclasses.replace(model.config, n_layers=n_layers)
    params = {name: w for name, w in model.params.items()
              if not name.startswith("layers.") or int(name.split(".")[1]) < n_layers}
    return dataclasses.replace(model, config=config, params=params)


class NgramDrafter:
    """Prompt lookup: find the latest earlier occurrence of the text's last n tokens (trying
    n, n-1, ..., 1) and guess the tokens that followed it. Each guess is certain in the
    drafter's eyes, q = a point mass, and the accept/resample rule handles that exactly:
    the guess is kept with probability p(x), and a rejection draws from p without x.
    """

    def __init__(self, vocab_size, n=3):
        if n < 1:
            raise ValueError(f"ngram: must be >= 1, got {n}")
        self.vocab_size, self.n, self.calls = vocab_size, n, 0

    def propose(self, text, k, rng):
        guesses = lookup(text, k, self.n) if k > 0 else []
        q = np.zeros((len(guesses), self.vocab_size))
        q[np.arange(len(guesses)), guesses] = 1.0
        return guesses, q


def lookup(text, k, n):
    """The up-to-k tokens that followed the latest earlier occurrence of text's last m tokens,
    for the largest m <= n that occurs earlier; [] when none does."""
    for m in range(min(n, len(text) - 1), 0, -1):
        tail = text[-m:]
        for start in range(len(text) - m - 1, -1, -1):  # latest occurrence first
            if text[start:start + m] == tail:
                return text[start + m:start + m + k]
    return []

