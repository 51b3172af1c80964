"""Drafters for speculative decoding: anything that guesses the next k tokens and says which
distribution q each guess was drawn from. A drafter changes only the speed, never the output.

    propose(text, k, rng) -> (guesses: list of up to k ids, q: (len(guesses), V) probabilities)

With a constraint it is also told the constraint and the automaton's state after `text`,
propose(text, k, rng, constraint, state): a draft model masks its q as the target's p is
masked, so that it guesses only allowed tokens; any guess is checked all the same (`drafted`).
"""
from __future__ import annotations

import dataclasses
import warnings

import numpy as np

from .constrain.constraint import guess_states
from .generate import decode
from .knobs import GenerationConfig, checked
from .sampling import SamplingConfig
from .window import first_window, sync, view_start


class ModelDrafter:
    """A smaller model with its own KV cache, sampling with the same knobs as the target.

    Each proposal brings the cache to the drafter's view of the text (window.sync: the guesses
    the target rejected are dropped, a truncate, never a recomputation), then runs the decode
    loop for k tokens; q is the distribution each guess was drawn from.
    """

    def __init__(self, model, sampling: SamplingConfig):
        self.model, self.sampling = model, sampling
        self.cache = model.new_cache()
        self.cached: list[int] = []  # the tokens whose keys and values the cache holds
        self.start = 0  # the drafter's view is text[start:]
        self.calls = 0

    def propose(self, text, k, rng, constraint=None, state=0):
        V, W = self.model.config.vocab_size, self.model.config.context_length
        if k <= 0:
            return [], np.zeros((0, V))
        # Slide before the guesses would overflow the window, not in the middle of them.
        self.start = view_start(len(text), self.start, W, room=k - 1)
        view = text[self.start:]
        k = max(1, min(k, W - len(view) + 1))  # what the window holds
        logits = sync(self.model, self.cache, self.cached, view)
        window = first_window([np.asarray(view)], W)
        config = GenerationConfig(max_new_tokens=k, sampling=self.sampling, seed=None)
        guesses, q = [], np.zeros((k, V))
        masks = None if constraint is None else [constraint]  # an end token ends the guesses
        for i, step in enumerate(decode(self.model, window, self.cache, logits, config, rng,
                                        constraints=masks, states=[state])):
            guesses.append(int(step.tokens[0]))
            q[i] = step.probs[0]
        self.cached = window.row(0)  # the view and every guess but the last, unread
        self.calls += len(guesses)  # a forward pass per guess: the sync, then each step
        return guesses, q[:len(guesses)]


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
        self.vocab_size, self.n, self.calls = vocab_size, checked("ngram", n), 0

    def propose(self, text, k, rng, constraint=None, state=0):
        guesses = lookup(text, k, self.n) if k > 0 else []  # checked by `drafted`, not here
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


def drafted(drafter, text, k, rng, constraint=None, state=0):
    """A round's (guesses, q, states): the drafter's guesses and the q they were drawn from;
    with a constraint (in `state` after `text`), told to the drafter, the states that mask the
    target's rows (constraint.guess_states, None without one) and the guesses cut to those worth
    verifying. A guess not allowed is the last verified and rejected by its p = 0, not cut
    before it: exact for any q (cutting it would be exact only for a point mass, as prompt
    lookup's, whose residual max(0, p - q) is then p itself), at the cost of one position."""
    if constraint is None:
        return (*drafter.propose(text, k, rng), None)
    guesses, q = drafter.propose(text, k, rng, constraint, state)
    states = guess_states(constraint, state, guesses)
    return guesses[:len(states) - 1], q[:len(states) - 1], states


def make_drafter(draft, vocab, sampling: SamplingConfig, ngram, tokenizer=None):
    """A drafter from what the caller gave: a Model, "ngram", or a ready drafter object.

    A draft model must speak the target's tokenizer (`tokenizer`), not only have as many ids:
    the same id must mean the same text. Tokenizers carried in both files are compared; a model
    without one is taken on trust, with a warning.
    """
    if isinstance(draft, str):
        if draft != "ngram":
            raise ValueError(f"draft: expected a model or 'ngram', got {draft!r}")
        return NgramDrafter(vocab, n=ngram)
    if hasattr(draft, "propose"):
        return draft
    if draft.config.vocab_size != vocab:
        raise ValueError(f"draft: its vocabulary has {draft.config.vocab_size} tokens, the "
                         f"target's {vocab}; both must share one tokenizer")
    theirs = getattr(draft, "tokenizer", None)
    if theirs is None or tokenizer is None:
        if theirs is not tokenizer:
            warnings.warn("draft: the draft or the target model carries no tokenizer, so they "
                          "cannot be checked to share one", stacklevel=3)
    elif not theirs.same_tokens(tokenizer):
        raise ValueError("draft: its tokenizer differs from the target's; both must share one "
                         "tokenizer (the same ids for the same text)")
    return ModelDrafter(draft, sampling)
