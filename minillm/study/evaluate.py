"""Held-out loss of a model on a token sequence, in nats per token.

The text is cut into non-overlapping windows of ``window + 1`` tokens that share their edge
token: window ``w`` covers ``ids[w*window : (w+1)*window + 1]``, the model reads all but its
last token and predicts all but its first. So every token after the first is predicted once,
from the tokens before it in its own window, and the loss is

    loss = -(1/N) * sum_i log p(x_i | window prefix)        (N = len(ids) - 1)

Perplexity is ``exp(loss)``; bits per byte is ``loss * N / (n_bytes * ln 2)``.
"""

import math

import numpy as np

from ..layers import log_softmax


def evaluate(model, token_ids, window=None, progress=None):
    """Mean negative log-likelihood (nats/token) of ``token_ids`` under ``model``.

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
    for start in range(0, count, window):
        chunk = ids[start:start + window + 1]
        logits = model.forward(chunk[None, :-1])[0]
        logp = log_softmax(logits)
        total -= logp[np.arange(len(chunk) - 1), chunk[1:]].sum()
        done += len(chunk) - 1
        if progress is not None:
            progress(done, count)
    return total / count


def bits_per_byte(loss, n_tokens, n_bytes):
    """Convert a loss in nats/token over ``n_tokens`` predictions to bits per text byte."""
    return loss * n_tokens / (n_bytes * math.log(2))
