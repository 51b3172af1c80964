"""Tokens per second with and without the KV cache, on random float32 models.

    python bench/cache_speed.py            # student and Sprout sizes, then the batched case
    python bench/cache_speed.py --quick    # tiny shapes, a smoke run

One prompt: 240 new tokens after a 16-token prompt (sampling at temperature 0.8, seed 0).
Batched: 8 prompts of 32 tokens, 160 new tokens each, the rollout shape of RL training.
Each case runs once after a short warm-up; the cached and uncached runs must produce the
same tokens, and the table says so. Prints a Markdown table.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

# One BLAS thread unless told otherwise: at these sizes a second thread buys little, and it
# stalls a decode step by 10-100x when the other core is busy. Set before NumPy loads BLAS.
for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
import minillm  # noqa: E402

SIZES = {
    "student": minillm.ModelConfig(arch="classic", vocab_size=4096, context_length=256,
                                   d_model=192, n_layers=4, n_heads=4),
    "Sprout": minillm.ModelConfig(arch="modern", vocab_size=8192, context_length=512,
                                  d_model=384, n_layers=8, n_heads=6, d_ff=1024),
}
QUICK = {"tiny": minillm.ModelConfig(arch="modern", vocab_size=512, context_length=64,
                                     d_model=32, n_layers=2, n_heads=2)}


def timed(model, prompts, n, use_cache):
    start = time.perf_counter()
    out = minillm.generate(model, prompts, n, temperature=0.8, seed=0, use_cache=use_cache)
    return time.perf_counter() - start, out


def run_case(name, model, prompts, n):
    """Two table rows, cached and uncached, for one model and one set of prompts."""
    batch = isinstance(prompts[0], list)
    minillm.generate(model, prompts, 4)  # warm-up: first-call costs out of the timing
    new = n * (len(prompts) if batch else 1)
    cached_s, cached = timed(model, prompts, n, True)
    plain_s, plain = timed(model, prompts, n, False)
    shape = f"{len(prompts)} x {len(prompts[0])} prompt, {n} new" if batch else \
        f"{len(prompts)}-token prompt, {n} new"
    same = "yes" if cached == plain else "NO"
    return [f"| {name} | {shape} | KV cache | {cached_s:.2f} | {new / cached_s:.0f} | "
            f"{plain_s / cached_s:.1f}x | {same} |",
            f"| {name} | {shape} | none | {plain_s:.2f} | {new / plain_s:.0f} | 1.0x | |"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tiny model, a few tokens")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else SIZES
    n_single, (B, P, n_batch) = (20, (2, 8, 10)) if args.quick else (240, (8, 32, 160))
    rng = np.random.default_rng(0)
    print(f"minillm {minillm.__version__}, numpy {np.__version__}, Python "
          f"{platform.python_version()}, {platform.machine()}, random float32 weights, "
          f"BLAS threads {os.environ['OPENBLAS_NUM_THREADS']}, load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores\n")
    print("| model | case | cache | seconds | tokens/s | speed-up | same tokens |")
    print("| --- | --- | --- | ---: | ---: | ---: | --- |")
    for name, cfg in sizes.items():
        model = minillm.random_model(cfg, seed=0, dtype="float32")
        label = f"{name} ({cfg.arch}, d {cfg.d_model}, {cfg.n_layers} layers, V {cfg.vocab_size})"
        prompt = rng.integers(0, cfg.vocab_size, 16).tolist()
        for line in run_case(label, model, prompt, n_single):
            print(line, flush=True)
    name, cfg = next(iter(sizes.items()))
    model = minillm.random_model(cfg, seed=0, dtype="float32")
    prompts = rng.integers(0, cfg.vocab_size, (B, P)).tolist()
    for line in run_case(f"{name} batched", model, prompts, n_batch):
        print(line, flush=True)


if __name__ == "__main__":
    main()
