"""How much quantization changes a model: the same held-out windows through both models.

The windows are evaluate's (minillm/study/evaluate.py): rows of T + 1 tokens, each sharing its
first token with the last of the row before; a model reads the first T and predicts the last T.
For each position t read, with logits a_t (float model) and b_t (quantized copy):
    cosine      mean_t  a_t . b_t / (|a_t| |b_t|)
    same top    share of positions where argmax a_t == argmax b_t
    loss        mean_t -log softmax(z_t)[x_{t+1}]   (nats per token, next-token prediction)
The loss is computed by evaluate.py's own pieces, window by window in the same order, so each
model's loss is exactly ``evaluate(model, ids, T)`` on the tokens the windows cover.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .evaluate import split_windows, token_losses, window_logits


@dataclass
class QuantQuality:
    cosine: float  # mean logit cosine similarity
    same_top: float  # share of positions with the same most likely token
    loss_float: float  # nats/token of the float model
    loss_quant: float  # nats/token of the quantized model
    positions: int  # positions scored


def windows(ids, length: int, count: int | None = None) -> np.ndarray:
    """evaluate's windows of `length` predictions from a token list, the full ones, at most
    `count`: (n, length + 1), row w = ids[w*length : (w+1)*length + 1]."""
    ids = np.asarray(ids, dtype=np.int64).reshape(-1)
    if length < 1:
        raise ValueError(f"length: a window predicts at least 1 token, got {length}")
    n = (len(ids) - 1) // length if count is None else min(count, (len(ids) - 1) // length)
    if n < 1:
        raise ValueError(f"ids: {len(ids)} tokens do not fill one window of {length} "
                         f"predictions ({length + 1} tokens)")
    return np.stack(split_windows(ids[:n * length + 1], length))


def next_token_loss(logits: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """-log p(x_{t+1} | x_<=t) for every position but the last: (B, T, V), (B, T) -> (B, T-1)."""
    return token_losses(logits[:, :-1], tokens[:, 1:])


def compare(model_float, model_quant, windows_ids) -> QuantQuality:
    """Score both models on the same windows (n, T + 1) from `windows`; see the module docstring.

    Each window is read on its own, as evaluate reads it, so the two losses are evaluate's to
    the last bit.
    """
    rows = _rows(windows_ids)
    cos, same = [], []
    total_f, total_q, count = 0.0, 0.0, 0
    for (a, targets), (b, _) in zip(window_logits(model_float, rows),
                                    window_logits(model_quant, rows)):
        total_f += token_losses(a, targets).sum()
        total_q += token_losses(b, targets).sum()
        count += len(targets)
        a, b = a.astype(np.float64), b.astype(np.float64)  # (T, V)
        cos.append((a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1)
                                      + 1e-300))
        same.append(a.argmax(-1) == b.argmax(-1))
    cos, same = np.concatenate(cos), np.concatenate(same)
    return QuantQuality(float(cos.mean()), float(same.mean()), float(total_f / count),
                        float(total_q / count), int(cos.size))


def loss(model, windows_ids) -> float:
    """Mean next-token loss (nats/token) of one model on the windows: evaluate's on the tokens
    they cover."""
    total, count = 0.0, 0
    for logits, targets in window_logits(model, _rows(windows_ids)):
        total += token_losses(logits, targets).sum()
        count += len(targets)
    return float(total / count)


def _rows(windows_ids) -> np.ndarray:
    rows = np.asarray(windows_ids, dtype=np.int64)
    if rows.ndim != 2 or rows.shape[0] < 1 or rows.shape[1] < 2:
        raise ValueError(f"windows_ids: need (n, T + 1) windows from windows(), got shape "
                         f"{rows.shape}")
    return rows
