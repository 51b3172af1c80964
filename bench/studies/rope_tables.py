"""RoPE tables that grow with the text (minillm.Model) against tables of the whole context
built with the model (minillm's former design): seconds per decode step and per prefill, the
seconds a model takes to build, and the bytes the tables hold.

    python -m bench.studies.rope_tables [--model PATH.npz ...] [--prompt 128] [--steps 32]
                                        [--repeats 15] [--threads 1] [--reference]

The models: the shipped one and SmolLM2-135M-Instruct from minillm's cache folder
(`minillm fetch smollm2-135m-instruct`), unless --model names others. For each: a prefill of
--prompt tokens into an empty cache, and --steps decode steps of one token after it (the
cache truncated back between runs), the two contenders alternating run by run in one
process; then building the model from its parameters, alternating likewise.
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import statistics

import numpy as np

import minillm
from minillm.layers import rope_tables

from ..suite.machine import set_threads
from ..suite.real import files
from ..suite.timing import measure


def with_tables(model):
    """The same model as minillm built it before its tables grew: tables of every position
    < context_length, built now and never grown."""
    cfg = model.config
    tabled = copy.copy(model)
    tabled._rope_tables = {}
    for theta in model._rope_tables:
        cos, sin = rope_tables(cfg.context_length, cfg.head_dim, theta, model.dtype)
        tabled._rope_tables[theta] = (cos[:, None], sin[:, None])
    tabled._grow_rope = lambda end: None
    return tabled


def contenders(model, prompt: int, steps: int) -> tuple[dict, dict, int]:
    """{name: run(n)} for the prefill and for the decode steps, and the tables' bytes."""
    tabled = with_tables(model)
    nbytes = sum(cos.nbytes + sin.nbytes for cos, sin in tabled._rope_tables.values())
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, model.vocab_size, (1, prompt + steps))
    prefill, decode = {}, {}
    for name, m in (("growing", model), ("whole", tabled)):
        cache = m.new_cache(capacity=prompt + steps)
        m.forward(tokens[:, :prompt], cache, last=1)

        def prefill_run(n, m=m):
            m.forward(tokens[:, :n], m.new_cache(capacity=n), last=1)

        def decode_run(n, m=m, cache=cache):
            cache.truncate(prompt)
            for t in range(prompt, prompt + n):
                m.forward(tokens[:, t:t + 1], cache)

        prefill[name], decode[name] = prefill_run, decode_run
    return prefill, decode, nbytes


def report(label, seconds, per):
    """One line per contender: median and spread of seconds per unit, and the ratio."""
    medians = {name: statistics.median(s) / per for name, s in seconds.items()}
    for name, s in seconds.items():
        lo, hi = min(s) / per, max(s) / per
        print(f"  {label:8} {name:9} median {medians[name] * 1e3:8.3f} ms  "
              f"(min {lo * 1e3:.3f}, max {hi * 1e3:.3f})")
    print(f"  {label:8} growing / whole = {medians['growing'] / medians['whole']:.3f}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.studies.rope_tables")
    p.add_argument("--model", nargs="+", default=["weights/target.npz", files()[0]],
                   metavar="PATH")
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--steps", type=int, default=32)
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--reference", action="store_true",
                   help="the reference Model, without minillm.fast.accelerate")
    args = p.parse_args(argv)
    print(set_threads(args.threads)[0])
    for path in args.model:
        model = minillm.load(path, fast=not args.reference)
        prefill, decode, nbytes = contenders(model, args.prompt, args.steps)
        print(f"{path}: {type(model).__name__}, context_length {model.context_length}")
        report(f"prefill {args.prompt}", measure(prefill, args.repeats, args.prompt,
                                                 warm=args.prompt), 1)
        report("decode", measure(decode, args.repeats, args.steps, warm=args.steps),
               args.steps)
        grown = sum(cos.nbytes + sin.nbytes for cos, sin in model._rope_tables.values())
        print(f"  tables held: growing {grown / 2**10:.1f} KiB, whole {nbytes / 2**10:.1f} KiB")
        build = {"growing": lambda n: dataclasses.replace(model),
                 "whole": lambda n: with_tables(dataclasses.replace(model))}
        report("build", measure(build, args.repeats, 1, warm=1), 1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
