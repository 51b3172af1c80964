"""What a model accepts, checked once: token ids, prompts, padding.

Token ids index the embedding's rows, so every id anywhere (a forward pass's tokens, a
generation's prompts, the history the penalties count) is an integer in [0, vocab_size):
`check_tokens` is that rule, and each wrong input is one ValueError naming it.
"""
from __future__ import annotations

import warnings

import numpy as np


def check_tokens(tokens, vocab_size: int, name: str = "tokens") -> np.ndarray:
    """(B, T) integer ids in [0, vocab_size), T >= 1, as an array: the rule for every id.
    `name` says which input in the message."""
    tokens = np.asarray(tokens)
    if tokens.ndim != 2:
        raise ValueError(f"{name}: expected a (batch, length) array, got shape {tokens.shape}")
    if tokens.shape[1] == 0:
        raise ValueError(f"{name}: empty sequence")
    if not np.issubdtype(tokens.dtype, np.integer):
        raise ValueError(f"{name}: token ids must be integers, got {tokens.dtype} values")
    if tokens.min() < 0 or tokens.max() >= vocab_size:
        raise ValueError(f"{name}: ids must be in [0, {vocab_size}) (the vocabulary), got "
                         f"min {tokens.min()} and max {tokens.max()}")
    return tokens


def check_prompts(prompt_ids, vocab_size: int, W: int) -> tuple[list[np.ndarray], bool]:
    """The prompts as 1-D int64 arrays, each checked (non-empty, ids in [0, vocab_size)), and
    whether they came as a batch: a 2-D array or a sequence of sequences; one prompt is a flat
    sequence. A prompt longer than the context W is read from its last W tokens only: a
    warning says so, with the numbers."""
    if isinstance(prompt_ids, np.ndarray):
        batch = prompt_ids.ndim == 2
    else:
        batch = bool(prompt_ids) and isinstance(prompt_ids[0], (list, tuple, np.ndarray))
    rows = list(prompt_ids) if batch else [prompt_ids]
    if not rows:
        raise ValueError("prompt_ids: empty batch, give at least one prompt")
    prompts = []
    for r, row in enumerate(rows):
        name = "prompt_ids" + (f"[{r}]" if len(rows) > 1 else "")
        ids = np.asarray(row)
        if ids.ndim != 1 or ids.size == 0:
            raise ValueError(f"{name}: expected a non-empty list of token ids")
        prompts.append(check_tokens(ids[None], vocab_size, name)[0].astype(np.int64))
        if len(ids) > W:
            which = "prompt" + (f" {r}" if len(rows) > 1 else "")
            warnings.warn(f"{which}: {len(ids)} tokens, longer than the model's context of "
                          f"{W}: only the last {W} are read", stacklevel=3)
    return prompts, batch


def check_pad(pad, B: int, T: int) -> np.ndarray | None:
    """(B,) padding counts in [0, T), as an array; None when no row is padded."""
    pad = np.asarray(pad, dtype=np.int64)
    if pad.shape != (B,) or pad.min() < 0 or pad.max() >= T:
        raise ValueError(f"pad: expected {B} counts in [0, {T}), got {pad.tolist()}")
    return None if not pad.any() else pad
