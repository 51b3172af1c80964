"""Checkpoint sizes of the ~400M-parameter configurations in float32 and int8, from shapes alone.

    python -m bench.studies.quant_sizes

The configurations are not given by the seed text, only their parameter counts (classic 406M,
modern 355M) and sizes (1.51 GiB -> 0.67 GiB, 1.32 GiB -> 0.48 GiB). Both are taken here as
d_model 1024, 24 layers, 16 heads, the GPT-2 vocabulary (50257) and a 1024-token context: the
classic model untied (GPT-2 medium's body, 355M, plus a 51M output layer = 406M), the modern
model tied with plain multi-head attention and the default SwiGLU width (d_ff 2752). The table
prints each count so the match can be checked. int8 bytes: every linear weight of the blocks as
int8 plus one float32 scale per row; embeddings, norms, biases and the output layer in float32.
"""
from __future__ import annotations

import sys

import numpy as np

from minillm import ModelConfig
from minillm.config import parameter_shapes
from minillm.quantize import is_linear_weight

BASE = dict(vocab_size=50257, context_length=1024, d_model=1024, n_layers=24, n_heads=16)
CONFIGS = {"classic": ModelConfig(arch="classic", **BASE),
           "modern": ModelConfig(arch="modern", **BASE)}
SEED = {"classic": ("406M", "1.51 GiB", "0.67 GiB"), "modern": ("355M", "1.32 GiB", "0.48 GiB")}


def checkpoint_bytes(cfg: ModelConfig, quantized: bool, skip=("lm_head",), float_bytes=4) -> int:
    """Bytes of all tensors: float32, or int8 + float32 row scales for quantized linear weights."""
    total = 0
    for name, shape in parameter_shapes(cfg).items():
        size = int(np.prod(shape))
        if quantized and is_linear_weight(name) and not name.startswith(skip):
            total += size + float_bytes * shape[0]
        else:
            total += float_bytes * size
    return total


def main() -> int:
    gib = 2 ** 30
    print(f"{'arch':8s} {'parameters':>12s} {'float32':>10s} {'int8':>10s} {'smaller':>8s}"
          f"   seed: parameters, float32 -> int8")
    for arch, cfg in CONFIGS.items():
        f32, i8 = checkpoint_bytes(cfg, False), checkpoint_bytes(cfg, True)
        n, a, b = SEED[arch]
        print(f"{arch:8s} {cfg.n_params():>12,} {f32 / gib:>6.2f} GiB {i8 / gib:>6.2f} GiB "
              f"{f32 / i8:>7.2f}x   {n}, {a} -> {b}")
    for arch, cfg in CONFIGS.items():
        print(f"{arch}: d_ff {cfg.d_ff}, n_kv_heads {cfg.n_kv_heads}, tied {cfg.tie_embeddings}, "
              f"bias {cfg.bias}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
