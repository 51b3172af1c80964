"""What the checkers need from an inference engine: a few functions over NumPy arrays.

An engine is anything that turns token ids into next-token logits. The checkers never see its
classes or tensors, only these functions:

    forward(tokens, pad)        (B, T) int64 ids, (B,) left-padding counts or None
                                -> (B, T, V) logits of every position, no cache
    new_cache(batch_size, pad)  -> an empty cache object (anything the engine likes), for rows
                                   left-padded by `pad` (None: no padding)
    extend(cache, tokens)       (B, T) ids continuing the cached text -> (B, T, V) logits;
                                the cache now holds those T tokens too
    truncate(cache, n)          forget every cached token from position n on (rollback)

Padding: row r of a (B, T) batch is tokens[r, pad[r]:]; the first pad[r] ids are filler that
the engine must ignore, and the row's positions count from its first real token. An engine
without a cache, without padding or without rollback leaves that function out (None, or
pad=None only) and the checkers that need it say so.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Engine:
    """An engine as the checkers see it (see the module docstring for each function)."""

    vocab_size: int
    context_length: int
    forward: Callable
    new_cache: Callable | None = None
    extend: Callable | None = None
    truncate: Callable | None = None
    pads: bool = True  # whether forward and new_cache accept left padding

    def require(self, *names: str) -> None:
        """Raise a ValueError naming the functions a checker needs and this engine lacks."""
        missing = [name for name in names if getattr(self, name) is None]
        if "pads" in names and not self.pads:
            missing.append("pads")
        if missing:
            raise ValueError(f"engine: this check needs {', '.join(missing)}; see "
                             "minillm.testing.Engine")


def minillm_engine(model) -> Engine:
    """minillm's own Model as an Engine: the adapter is four one-line functions."""

    def new_cache(batch_size, pad=None):
        return {"kv": model.new_cache(batch_size), "pad": pad}

    def extend(cache, tokens):
        # minillm takes the padding with the first chunk of an empty cache (the prefill).
        pad = cache["pad"] if cache["kv"].length == 0 else None
        return model.forward(tokens, cache["kv"], pad=pad)

    def truncate(cache, n):
        cache["kv"].truncate(n)

    return Engine(model.vocab_size, model.context_length,
                  forward=lambda tokens, pad=None: model.forward(tokens, pad=pad),
                  new_cache=new_cache, extend=extend, truncate=truncate)
