"""How much quantization changes a model: the same held-out windows through both models.

For each position t of each window, with logits a_t (float model) and b_t (quantized copy):
    cosine      mean_t  a_t . b_t / (|a_t| |b_t|)
    same top    share of positions where argmax a_t == argmax b_t
    loss        mean_t -log softmax(z_t)[x_{t+1}]   (nats per token, next-token prediction)
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..layers import log_softmax


@dataclass
class QuantQuality:
    cosine: float  # mean logit cosine similarity
    same_top: float  # share of positions with the same most likely token
    loss_float: float  # nats/token of the float model
    loss_quant: float  # nats/token of the quantized model
    positions: int  # positions scored


def windows(ids, length: int, count: int | None = None) -> np.ndarray:
    """Consecutive non-overlapping windows of `length` tokens from a token list: (n, length)."""
    ids = np.asarray(ids, dtype=np.int64)
    if length < 2:
        raise ValueError(f"length: a window needs at least 2 tokens, got {length}")
    n = len(ids) // length if count is None else min(count, len(ids) // length)
    if n < 1:
        raise ValueError(f"ids: {len(ids)} tokens do not fill one window of {length}")
    return ids[:n * length].reshape(n, length)


def next_token_loss(logits: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """-log p(x_{t+1} | x_<=t) for every position but the last: (B, T, V), (B, T) -> (B, T-1)."""
    logp = log_softmax(logits[:, :-1])  # (B, T-1, V), float64
    return -np.take_along_axis(logp, tokens[:, 1:, None], axis=-1)[..., 0]


def compare(model_float, model_quant, windows_ids, batch_size: int = 4) -> QuantQuality:
    """Score both models on the same windows (B, T) of token ids; see the module docstring."""
    cos, same, loss_f, loss_q = [], [], [], []
    for i in range(0, len(windows_ids), batch_size):
        tokens = windows_ids[i:i + batch_size]
        a = model_float.forward(tokens).astype(np.float64)  # (B, T, V)
        b = model_quant.forward(tokens).astype(np.float64)
        cos.append(((a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1)
                                        + 1e-300)).ravel())
        same.append((a.argmax(-1) == b.argmax(-1)).ravel())
        loss_f.append(next_token_loss(a, tokens).ravel())
        loss_q.append(next_token_loss(b, tokens).ravel())
    cos, same = np.concatenate(cos), np.concatenate(same)
    return QuantQuality(float(cos.mean()), float(same.mean()), float(np.concatenate(loss_f).mean()),
                        float(np.concatenate(loss_q).mean()), int(cos.size))


def loss(model, windows_ids, batch_size: int = 4) -> float:
    """Mean next-token loss (nats/token) of one model on the windows."""
    parts = [next_token_loss(model.forward(windows_ids[i:i + batch_size]),
                             windows_ids[i:i + batch_size]).ravel()
             for i in range(0, len(windows_ids), batch_size)]
    return float(np.concatenate(parts).mean())
