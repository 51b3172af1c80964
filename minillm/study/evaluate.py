"""Held-out loss of a model on a token sequence, in nats per token.

The windows. The text is cut into non-overlapping windows of ``window + 1`` tokens that share
their edge token: window ``w`` covers ``ids[w*window : (w+1)*window + 1]`` (the last one may be
shorter), the model reads all but its last token and predicts all but its first. So every token
after the first is predicted exactly once, from at most ``window`` tokens of context (the tokens
before it in its own window), and the loss is

    loss = -(1/N) * sum_i log p(x_i | window prefix)        (N = len(ids) - 1)

Perplexity is ``exp(loss)``; bits per byte is ``loss * N / (n_bytes * ln 2)``.

Why these windows: they are the cheapest that score every token once, one forward pass per
``window`` predictions. The price is context: the first prediction of a window sees one token,
the last sees ``window``. A sliding window (stride ``s < window``, each token scored after at
least ``window - s`` tokens) would give a lower loss at ``window / s`` times the passes; this
module keeps the non-overlapping windows, which is the figure ``minillm eval`` prints and
weights/checks.json records.

``split_windows``, ``window_logits`` and ``token_losses`` are the pieces ``evaluate`` is made of.
minillm/study/quality.py reads its windows through the same three, so its loss for a float and a
quantized model is ``evaluate``'s loss of each on the text its windows cover, to the last bit.
"""

import math

import numpy as np

from ..layers import log_softmax


def split_windows(token_ids, window: int) -> list:
    """The windows ``evaluate`` reads: ``ids[s : s + window + 1]`` for ``s = 0, window, 2*window,
    ...`` while ``s < len(ids) - 1`` (views; the last may be shorter)."""
    ids = np.asarray(token_ids, dtype=np.int64).reshape(-1)
    return [ids[start:start + window + 1] for start in range(0, len(ids) - 1, window)]


def window_logits(model, chunks):
    """For each window of tokens, one forward pass on its own: yields ``(logits, targets)``, the
    logits for all but its last token, (T, V), and the tokens they predict, all but its first."""
    for chunk in chunks:
        yield model.forward(chunk[None, :-1])[0], chunk[1:]


def token_losses(logits, targets) -> np.ndarray:
    """-log softmax(logits)[target] at each position, float64: (..., T, V), (..., T) -> (..., T)."""
    logp = log_softmax(logits)
    return -np.take_along_axis(logp, np.asarray(targets)[..., None], axis=-1)[..., 0]


def evaluate(model, token_ids, window=None, progress=None):
    """Mean negative log-likelihood (nats/token) of ``token_ids`` under ``model``, over the
    windows of the module docstring (every token after the first predicted once).

    ``window`` defaults to the model's context length. ``progress``, if given, is called as
    ``progress(tokens_done, tokens_total)`` after each window.
    """
    ids = np.asarray(token_ids, dtype=np.int64).reshape(-1)
    if len(ids) < 2:
        raise ValueError("need at least two tokens to measure a loss")
    window = model.config.context_length if window is None else window
    if not 0 < window <= model.config.context_length:
        raise ValueError(f"window {window} must be between 1 and the context length "
                         f"{model.config.context_length}")
    total, done, count = 0.0, 0, len(ids) - 1
    for logits, targets in window_logits(model, split_windows(ids, window)):
        total += token_losses(logits, targets).sum()
        done += len(targets)
        if progress is not None:
            progress(done, count)
    return total / count


def bits_per_byte(loss, n_tokens, n_bytes):
    """Convert a loss in nats/token over ``n_tokens`` predictions to bits per text byte."""
    return loss * n_tokens / (n_bytes * math.log(2))
