"""python -m bench: run the workloads, print the tables, optionally write them and plots."""
from __future__ import annotations

import argparse
import sys
import time
import traceback

from .suite import (batch, cache, decode, goals, int8, machine, prefill, real_batch, real_decode,
                    real_long, real_passes, real_speculative, speculative, tokenizer)
from .suite.contenders import context
from .suite.shapes import settings
from .suite.table import markdown
from .suite.timing import Row

WORKLOADS = {"decode": decode.run, "cache": cache.run, "batch": batch.run,
             "prefill": prefill.run, "speculative": speculative.run, "int8": int8.run,
             "tokenizer": tokenizer.run, "real-decode": real_decode.run,
             "real-passes": real_passes.run, "real-speculative": real_speculative.run,
             "real-batch": real_batch.run, "real-long": real_long.run}
REAL = [name for name in WORKLOADS if name.startswith("real-") and name != "real-long"]
# --only real: those four; real-long (long contexts, up to 45 minutes) only by name or in a full run


def parse(argv):
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    p.add_argument("--quick", action="store_true", help="tiny shapes, 1 repeat (a smoke run)")
    p.add_argument("--repeats", type=int, default=None, help="timed runs per contender (3)")
    p.add_argument("--only", choices=sorted(WORKLOADS) + ["real"], action="append",
                   help="run this workload only (repeatable); real: the four real-model ones")
    p.add_argument("--threads", type=int, default=1, help="BLAS and torch threads (1)")
    p.add_argument("--out", help="write the header and tables to this Markdown file")
    p.add_argument("--append", action="store_true", help="append to --out instead")
    p.add_argument("--plots", help="write PNG charts into this folder (needs matplotlib)")
    p.add_argument("--real-tokens", type=int, help="real model: new tokens per run (128)")
    p.add_argument("--real-threads", type=counts,
                   help="real model: thread counts of the decode table (1,2)")
    p.add_argument("--real-layers", type=counts,
                   help="real model: layer counts of the self-speculative drafters (4,8,15)")
    args = p.parse_args(argv)
    if args.real_tokens is not None and args.real_tokens < 2:
        p.error(f"--real-tokens: must be at least 2, got {args.real_tokens}")
    if args.repeats is not None and args.repeats < 1:
        p.error(f"--repeats: must be at least 1, got {args.repeats}")
    if args.threads < 1:
        p.error(f"--threads: must be at least 1, got {args.threads}")
    return args


def counts(text: str) -> tuple:
    """"1,2" -> (1, 2): positive integers, comma-separated."""
    values = tuple(int(v) for v in text.split(","))
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers like 1,2; got {text!r}")
    return values


def workloads(only, quick: bool) -> list:
    """The workloads to run, in order: --only's (real: the four real-model ones), else all;
    a --quick run without --only leaves out the real model's (it needs the real files)."""
    if not only:
        return [name for name in WORKLOADS if not (quick and name.startswith("real-"))]
    names = []
    for name in only:
        for n in REAL if name == "real" else [name]:
            if n not in names:
                names.append(n)
    return names


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse(argv)
    threads, restore_threads = machine.set_threads(args.threads)
    try:
        return run_all(args, argv, threads)
    finally:
        restore_threads()


def run_all(args, argv, threads) -> int:
    s = settings(args.quick, args.repeats, {"real_tokens": args.real_tokens,
                                            "real_threads": args.real_threads,
                                            "real_layers": args.real_layers})
    ctx = context(s)
    header = machine.header(threads, argv) + f"- repeats: {s.repeats}, interleaved\n"
    print(header, flush=True)
    parts, results = [header], []
    started = time.perf_counter()
    names = workloads(args.only, args.quick)
    if args.quick and not args.only:
        print("(--quick leaves out the real-model workloads: python -m bench --quick --only "
              "real runs them briefly)\n")
    for name in names:
        title, rows = run_one(name, ctx)
        results.append((name, title, rows))
        parts.append(markdown(title, rows))
        print(parts[-1], flush=True)
    parts.append(goals.markdown(results, s.quick))
    print(parts[-1], flush=True)
    parts.append(f"Total time {time.perf_counter() - started:.0f} s.\n")
    print(parts[-1])
    if args.plots:
        print(plots_line(results, args.plots))
    if args.out:
        with open(args.out, "a" if args.append else "w", encoding="utf-8") as f:
            f.write("\n".join(parts) + "\n")
    return 0


def run_one(name, ctx):
    """A workload's (title, rows); one that fails is reported as missing, the run goes on."""
    try:
        return WORKLOADS[name](ctx)
    except Exception as e:
        traceback.print_exc()
        return name, [Row(name, "all", "all", "", missing=f"{type(e).__name__}: {e}")]


def plots_line(results, folder):
    from .suite import plots
    return plots.write(results, folder)


if __name__ == "__main__":
    sys.exit(main())
