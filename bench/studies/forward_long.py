"""A long prompt into a cache three ways: `model.forward(ids, cache)` (every position's logits),
`model.forward(ids, cache, last=1)` (the next token's only) and `window.read` (the decode
loop's reading: chunks of READ_CHUNK tokens, last=1), alternated round by round in one process.

    python -m bench.studies.forward_long [--model_path smollm2-135m-instruct] [--length 2048]

It tells whether the documented API, `forward` over the whole prompt, is the slow way in, and
why: the times are reported as ratios to `read`'s in the same round.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

import minillm
from minillm.cli.common import model_file
from minillm.window import read


def ways(model, ids):
    """name -> a function reading ids into a fresh cache."""
    return {
        "forward(ids, cache)": lambda: model.forward(ids, model.new_cache(1)),
        "forward(ids, cache, last=1)": lambda: model.forward(ids, model.new_cache(1), last=1),
        "window.read (chunks, last=1)": lambda: read(model, ids, model.new_cache(1)),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.studies.forward_long",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--model_path", default="smollm2-135m-instruct",
                        help="a .npz file or a fetched model's name")
    parser.add_argument("--length", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    minillm.threads(1)
    model = minillm.load(model_file(args.model_path))
    ids = np.random.default_rng(0).integers(0, model.config.vocab_size, (1, args.length))
    times = {name: [] for name in ways(model, ids)}
    print(f"load average at start: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for _ in range(args.rounds):
        for name, run in ways(model, ids).items():
            started = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - started)
    reference = times["window.read (chunks, last=1)"]
    print(f"\n{args.length} tokens of {args.model_path}, one BLAS thread, {args.rounds} rounds\n")
    print("| way | median time ÷ read's, per round |")
    print("| --- | ---: |")
    for name, seconds in times.items():
        ratios = [s / r for s, r in zip(seconds, reference)]
        print(f"| {name} | {statistics.median(ratios):.2f}x "
              f"({', '.join(f'{x:.2f}' for x in ratios)}) |")
    print(f"\nload average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
