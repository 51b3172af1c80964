"""The serving engine's block pool with and without NumPy's huge-page advice: each step's time
on the shared-prompt workload, a new engine each run, the two alternated in one process.

    python -m bench.studies.pool_pages [--model_path smollm2-135m-instruct | FILE.npz]
                                       [--rounds 3] [--threads 1] [--seed 0]

The workload is bench.studies.serving's second: 16 requests sharing a 500-token system prompt,
a question of 8-24 tokens each, 8 new tokens, greedy, prefix caching on. "huge pages" makes the
pool as NumPy makes any array of 4 MiB or more (its madvise for transparent huge pages, the
reference Model's `zeros`); "ordinary pages" as the fast model does (`FastModel.zeros`).
Everything else is the same fast model. With the kernel's defrag setting "madvise" (its
default), the first touch of each 2 MiB of advised memory waits while memory is compacted, and
the pool's blocks are first touched as requests grow. Prints each run's step times and the
medians of the first step and of the run.
"""
from __future__ import annotations

import argparse
import os
import time
import types

import numpy as np

import minillm
from minillm.fast import FastModel
from minillm.model import Model
from minillm.serving import Engine

from .serving import model_path, shared_requests


def run(model, requests, huge: bool) -> list[float]:
    """The seconds of each step of one engine run (a new engine, its pool made either way)."""
    # this model's own way to make the pool: the reference's, or the fast model's
    model.zeros = types.MethodType(Model.zeros if huge else FastModel.zeros, model)
    engine = Engine(model)
    for prompt, new in requests:
        engine.add_request(prompt, max_new_tokens=new, temperature=0, stop_tokens=())
    times = []
    while engine.has_unfinished():
        start = time.perf_counter()
        engine.step()
        times.append(time.perf_counter() - start)
    return times


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.studies.pool_pages",
                                description=__doc__.splitlines()[0])
    p.add_argument("--model_path", "--model-path", default="smollm2-135m-instruct")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    path = model_path(p, args.model_path)
    print(f"model: {path}; load average at start: "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with minillm.threads(args.threads):
        model = minillm.load(str(path))
        requests = shared_requests(model, 16, 500, (8, 24), 8, args.seed)[0]
        run(model, requests, huge=False)  # warm-up
        runs = {"huge pages": [], "ordinary pages": []}
        for _ in range(args.rounds):
            for name in runs:
                times = run(model, requests, huge=name == "huge pages")
                runs[name].append(times)
                print(f"{name}: {sum(times):.2f} s; steps " +
                      " ".join(f"{t:.2f}" for t in times), flush=True)
    print("\n| pool | first step, s | whole run, s |\n| --- | ---: | ---: |")
    for name, rs in runs.items():
        print(f"| {name} | {np.median([r[0] for r in rs]):.2f} | "
              f"{np.median([sum(r) for r in rs]):.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
