"""The contenders, built once per run and shared by the workloads: minillm float32 and int8
models, the PyTorch loop and transformers over the same weights, or Missing(reason)."""
from __future__ import annotations

import numpy as np

import minillm
from minillm.fast import accelerate
from minillm.plumbing.optional import install_hint

from .timing import Missing


def context(settings) -> dict:
    """What the workloads share: the settings, and every model built so far (by kind, size)."""
    return {"settings": settings}


def _cached(ctx, key, build):
    if key not in ctx:
        ctx[key] = build()
    return ctx[key]


def model(ctx, size):
    """minillm float32, random weights (seed 0) of the size's shape, on the fast path."""
    return _cached(ctx, ("f32", size), lambda: accelerate(
        minillm.random_model(ctx["settings"].sizes[size], seed=0)))


def int8(ctx, size):
    """minillm.quantize of the float32 model, or Missing when quantize has not landed."""
    if not hasattr(minillm, "quantize"):
        return Missing("minillm.quantize not available yet")
    return _cached(ctx, ("int8", size), lambda: _guard(minillm.quantize, model(ctx, size)))


def torch_loop(ctx, size):
    from . import torch_loop as loop

    return _cached(ctx, ("torch", size), lambda: _peer("torch", loop.load, model(ctx, size)))


def transformers(ctx, size):
    from . import hf

    return _cached(ctx, ("hf", size),
                   lambda: _peer("transformers", hf.load, model(ctx, size)))


def _peer(module, load, m):
    try:
        __import__(module)
    except ImportError:
        return Missing(f"{module} not installed: {install_hint('bench')}")
    return _guard(load, m)


def _guard(build, *args):
    try:
        return build(*args)
    except Exception as e:  # report the contender as missing, keep the run going
        return Missing(f"{type(e).__name__}: {e}")


def prompts(cfg, batch: int, length: int, seed: int = 1) -> np.ndarray:
    """(batch, length) random token ids."""
    return np.random.default_rng(seed).integers(0, cfg.vocab_size, (batch, length))


def recorded(outputs: dict, name: str, fn):
    """fn, keeping its latest result in outputs[name] (to compare the contenders' tokens)."""
    def run(n):
        outputs[name] = fn(n)
    return run


def same_tokens(reference, other, reference_name: str = "minillm") -> str:
    """A note: do two token arrays agree, and if not, from which step on."""
    a, b = np.asarray(reference), np.asarray(other)
    if a.shape == b.shape and np.array_equal(a, b):
        return f"same greedy tokens as {reference_name}"
    if a.shape != b.shape:
        return f"token arrays differ in shape {a.shape} vs {b.shape}"
    step = int(np.argmax((a != b).reshape(-1, a.shape[-1]).any(axis=0)))
    return f"tokens differ from {reference_name} from step {step} on"
