"""Workload 6: int8 against float32, decode speed and resident weight bytes.

The linear layers' bytes are what int8 shrinks (the output layer stays float by default);
a quantized weight's bytes are those of every array it holds, so a kept dequantized copy
would show up here.
"""
from __future__ import annotations

import minillm

from . import contenders as C
from .roofline import nbytes
from .timing import Missing, Row, measure, rows


def linear_bytes(model) -> int:
    """Bytes of the transformer blocks' matrices (q/k/v, out, MLP)."""
    return sum(nbytes(w) for name, w in model.params.items()
               if name.startswith("layers.") and name.endswith(".weight")
               and not name.endswith("norm.weight"))


def run(ctx):
    s = ctx["settings"]
    out = []
    for size, cfg in s.sizes.items():
        f32, q8 = C.model(ctx, size), C.int8(ctx, size)
        n = (s.slow_decode_tokens or {}).get(size, s.decode_tokens)
        prompt = C.prompts(cfg, 1, s.prompt)[0]
        contenders = {
            "minillm f32": lambda n: minillm.generate(f32, prompt, max_new_tokens=n,
                                                      temperature=0),
            "minillm int8": q8 if isinstance(q8, Missing) else (
                lambda n: minillm.generate(q8, prompt, max_new_tokens=n, temperature=0)),
        }
        seconds = measure(contenders, s.repeats, n, s.warm)
        out += rows("int8", f"{size}, decode {n} tokens", contenders, seconds, "tokens/s", n)
        out += size_rows(size, f32, q8)
    return "6. int8 against float32: decode (batch 1, greedy) and resident weights", out


def size_rows(size, f32, q8) -> list:
    case = f"{size}, linear-layer weights"
    base = linear_bytes(f32)
    out = [Row("int8", case, "minillm f32", "MiB", [base / 2**20],
               note=f"whole model {f32.nbytes / 2**20:.1f} MiB")]
    if isinstance(q8, Missing):
        return out + [Row("int8", case, "minillm int8", "MiB", missing=q8.reason)]
    ours = linear_bytes(q8)
    return out + [Row("int8", case, "minillm int8", "MiB", [ours / 2**20],
                      note=f"{ours / base:.1%} of float32; whole model "
                           f"{q8.nbytes / 2**20:.1f} MiB")]
