"""Speculative decoding inside the serving engine: requests that guess by prompt lookup
(`draft="ngram"`) through the engine, against the same requests through the engine without
guesses and through `speculative_generate` one at a time, greedy, in one process.

    python -m bench.studies.spec_serving [--model_path weights/target.npz | FILE.npz | NAME]
                                         [--requests 16] [--prompt 16 256] [--new 32 64]
                                         [--k 4] [--threads 1] [--seed 0] [--rounds 1]

--model_path as in bench.studies.serving (a fetched model's name is read from $MINILLM_CACHE).
The requests are bench.studies.serving's first workload: prompts of drawn lengths cut from the
held-out text, drawn numbers of new tokens, every request queued at the start. Three sides,
alternated --rounds times after one warm-up each: the engine with every request guessing
(`draft="ngram", k=--k`), the engine without guesses, and `speculative_generate(model,
"ngram", ...)` one request after the other. For each: new tokens per second over the run, the
target's forward passes and the engine's steps; the guesses proposed and kept; the tokens,
checked identical across the three (greedy, stop tokens off). The table gives the medians,
each gain the median of the rounds' own gains with their range.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

import minillm
from minillm.serving import Engine

from .serving import Counted, mixed_requests, model_path


def run_engine(model, requests, k: int | None) -> dict:
    """Every request queued at once, guessing (k) or not (None), then steps until done."""
    engine = Engine(model)  # made before the clock
    counted = engine.model = Counted(engine.model)
    t0 = time.perf_counter()
    guess = {} if k is None else {"draft": "ngram", "k": k}
    ids = [engine.add_request(prompt, max_new_tokens=new, temperature=0, stop_tokens=(),
                              **guess) for prompt, new in requests]
    tokens = {rid: [] for rid in ids}
    while engine.has_unfinished():
        for out in engine.step():
            tokens[out.request_id].append(out.token)
    seconds = time.perf_counter() - t0
    stats = engine.stats
    return dict(seconds=seconds, tokens=[tokens[rid] for rid in ids], passes=counted.passes,
                steps=stats.steps, guesses=stats.guesses, accepted=stats.accepted)


def run_alone(model, requests, k: int) -> dict:
    """One request after the other through speculative_generate with prompt lookup."""
    counted = Counted(model)
    t0 = time.perf_counter()
    tokens, guesses, accepted = [], 0, 0
    for prompt, new in requests:
        rollout, stats = minillm.speculative_generate(counted, "ngram", prompt, k=k,
                                                      max_new_tokens=new, temperature=0,
                                                      stop_tokens=(), return_logprobs=True)
        tokens.append(list(rollout.new_tokens))
        guesses, accepted = guesses + stats.guesses, accepted + stats.accepted
    return dict(seconds=time.perf_counter() - t0, tokens=tokens, passes=counted.passes,
                steps=counted.passes, guesses=guesses, accepted=accepted)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.studies.spec_serving",
                                description=__doc__.splitlines()[0])
    p.add_argument("--model_path", "--model-path", default=None)
    p.add_argument("--requests", type=int, default=16)
    p.add_argument("--prompt", type=int, nargs=2, default=[16, 256], metavar=("MIN", "MAX"))
    p.add_argument("--new", type=int, nargs=2, default=[32, 64], metavar=("MIN", "MAX"))
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=1)
    args = p.parse_args(argv)
    path = model_path(p, args.model_path)
    with minillm.threads(args.threads):
        return compare(minillm.load(str(path)), path, args, argv)


def compare(model, path, args, argv) -> int:
    """The three sides, the table, and whether their tokens agree (exit 1 if not)."""
    requests, _, note = mixed_requests(model, args.requests, tuple(args.prompt),
                                       tuple(args.new), args.seed)
    total_new = sum(new for _, new in requests)
    sides = {"engine, guessing": lambda: run_engine(model, requests, args.k),
             "engine, no guesses": lambda: run_engine(model, requests, None),
             "speculative_generate, one at a time": lambda: run_alone(model, requests, args.k)}
    for side in sides.values():  # warm-up
        side()
    runs = {name: [] for name in sides}
    for _ in range(args.rounds):
        for name, side in sides.items():
            runs[name].append(side())
    tokens = [run["tokens"] for name in runs for run in runs[name]]
    same = all(t == tokens[0] for t in tokens)
    argv = sys.argv[1:] if argv is None else argv
    print(f"command: `{' '.join(['python -m bench.studies.spec_serving'] + list(argv))}`")
    print(f"model: {path}; load average at start: "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{args.requests} requests, {sum(len(q) for q, _ in requests):,} prompt tokens, "
          f"{total_new:,} new tokens, k = {args.k}, greedy, {args.threads} BLAS thread(s), "
          f"{args.rounds} round(s){'; ' + note if note else ''}\n")
    print("| side | new tokens/s | target passes | steps | guesses kept / proposed | "
          "the guessing engine's gain |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    guessing = [total_new / r["seconds"] for r in runs["engine, guessing"]]
    for name, rs in runs.items():
        speeds = [total_new / r["seconds"] for r in rs]
        gains = [g / s for g, s in zip(guessing, speeds)]
        gain = "" if name == "engine, guessing" else \
            f"{np.median(gains):.2f}x ({min(gains):.2f}-{max(gains):.2f})"
        kept = f"{rs[0]['accepted']:,} / {rs[0]['guesses']:,}" if rs[0]["guesses"] else ""
        print(f"| {name} | {np.median(speeds):.1f} | {rs[0]['passes']:,} | {rs[0]['steps']:,} "
              f"| {kept} | {gain} |")
    print(f"\nsame tokens on every side and round: {'yes' if same else 'NO'}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
