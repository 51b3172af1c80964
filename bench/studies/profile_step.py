"""Where a decode step's time goes: microseconds per piece of minillm's forward pass.

    python -m bench.studies.profile_step [--size student|Sprout|GPT-2-small] [--steps 100]
                                         [--int8] [--reference] [--model PATH.npz]

Each building block that minillm.model calls (linear, attention, the norms, RoPE, the
activation) is wrapped in a timer for the duration of the run; linear layers are told apart by
their weight's shape. The rest of a step (Python glue, embedding, cache writes, residual adds,
sampling) is what remains of the wall time of minillm.generate. The model runs the fast path
(`minillm.fast`'s products, timed inside `linear`) unless --reference asks for
the model without `minillm.fast.accelerate`.
"""
from __future__ import annotations

import argparse
import time
from collections import defaultdict

import minillm
import minillm.model as model_module
from minillm.fast import accelerate

from ..suite.machine import set_threads
from ..suite.shapes import FULL_SIZES

PIECES = ("linear", "attention", "layer_norm", "rms_norm", "apply_rope")


def timed(fn, name, totals, shape_of=None):
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        out = fn(*args, **kwargs)
        key = name if shape_of is None else f"{name} {shape_of(*args)}"
        totals[key][0] += time.perf_counter() - start
        totals[key][1] += 1
        return out
    return wrapper


def weight_shape(x, weight, bias=None):
    """A linear layer's label: its weight's (out, in), an array, fast.Dense or fast.Int8 alike."""
    return "x".join(map(str, weight.shape))


def profile(model, prompt, steps):
    """{piece: [seconds, calls]} over `steps` greedy tokens, and the whole run's seconds."""
    totals = defaultdict(lambda: [0.0, 0])
    originals = {name: getattr(model_module, name) for name in PIECES}
    originals["ACTIVATIONS"] = model_module.ACTIVATIONS
    try:
        for name in PIECES:
            setattr(model_module, name, timed(originals[name], name, totals,
                                              weight_shape if name == "linear" else None))
        model_module.ACTIVATIONS = {k: timed(f, k, totals)
                                    for k, f in originals["ACTIVATIONS"].items()}
        minillm.generate(model, prompt, max_new_tokens=4, temperature=0, stop_tokens=())  # warm-up
        totals.clear()
        start = time.perf_counter()
        minillm.generate(model, prompt, max_new_tokens=steps, temperature=0, stop_tokens=())
        wall = time.perf_counter() - start
    finally:
        for name, fn in originals.items():
            setattr(model_module, name, fn)
    return totals, wall


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.studies.profile_step")
    p.add_argument("--size", choices=sorted(FULL_SIZES), default="student")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--int8", action="store_true", help="profile minillm.quantize(model)")
    p.add_argument("--reference", action="store_true",
                   help="the reference path: the model without minillm.fast.accelerate")
    p.add_argument("--model", default=None, metavar="PATH",
                   help="profile this .npz (e.g. the real model of `minillm fetch`), not --size")
    args = p.parse_args(argv)
    print(set_threads(args.threads)[0])
    if args.model:
        model = minillm.load(args.model, fast=False)
        args.size = args.model
    else:
        model = minillm.random_model(minillm.ModelConfig(**FULL_SIZES[args.size]), seed=0)
    if not args.reference:
        model = accelerate(model)
    if args.int8:
        model = minillm.quantize(model)  # keeps the model's path
    totals, wall = profile(model, list(range(16)), args.steps)
    per_step = 1e6 / args.steps
    path = "reference path" if args.reference else "fast path"
    print(f"{args.size}, {path}: {wall * per_step:.0f} µs per generated token "
          f"({args.steps / wall:.0f} tokens/s, prefill of 16 tokens included)\n")
    print("| piece | µs per token | calls per token | share |\n| --- | --- | --- | --- |")
    for key, (seconds, calls) in sorted(totals.items(), key=lambda kv: -kv[1][0]):
        print(f"| {key} | {seconds * per_step:.1f} | {calls / args.steps:.1f} | "
              f"{seconds / wall:.0%} |")
    rest = wall - sum(seconds for seconds, _ in totals.values())
    print(f"| everything else (glue, embedding, cache writes, residuals, sampling) | "
          f"{rest * per_step:.1f} | | {rest / wall:.0%} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
