"""The long prefills of R5 repeated: minillm and transformers alternated round by round at a
few lengths, so that a ratio of a few percent can be told from the machine's drift, which moves
a single run of these lengths by more than that (bench/RESULTS.md, "Long contexts").

    python -m bench.studies.long_prefill [--lengths 8000 8192] [--rounds 3]

The contenders and their processes are R5's (`bench.suite.real_worker`, one thread, the model
from `minillm fetch smollm2-135m-instruct`, the same random token ids as R5); each run is a
prefill into a fresh cache and one new token. A round runs minillm, then transformers, at one
length; the ratio of a round is transformers' time over minillm's (minillm's speed ÷
transformers'), and the table gives its median and range over the rounds.
"""
from __future__ import annotations

import argparse
import statistics

from ..suite import real
from ..suite.real_decode import start
from ..suite.real_long import CONTEXT, THREADS, prompt_ids
from ..suite.timing import Missing

CONTENDERS = ("minillm f32", "transformers")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.studies.long_prefill",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[8000, 8192])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    gone = real.absent()
    if gone:
        raise SystemExit(gone.reason)
    vocab = real.model({}).config.vocab_size  # R5's ids: the same draw from the same vocabulary
    workers = {name: start(name, THREADS, CONTEXT) for name in CONTENDERS}
    try:
        for name, worker in workers.items():
            if isinstance(worker, Missing):
                raise SystemExit(f"{name}: {worker.reason}")
            worker.ask({"prompt": prompt_ids(32, vocab), "new": 2})  # warm-up
        print(f"prefill seconds, {THREADS} thread, rounds of minillm then transformers\n")
        print("| tokens | round | minillm f32 s | transformers s | minillm speed ÷ transformers |")
        print("| ---: | ---: | ---: | ---: | ---: |")
        for length in args.lengths:
            ids, ratios = prompt_ids(length, vocab), []
            for r in range(1, args.rounds + 1):
                t = {name: w.ask({"prompt": ids, "new": 1})["prefill_s"]
                     for name, w in workers.items()}
                ratios.append(t["transformers"] / t["minillm f32"])
                print(f"| {length} | {r} | {t['minillm f32']:.1f} | {t['transformers']:.1f} | "
                      f"{ratios[-1]:.2f}x |", flush=True)
            print(f"| {length} | median | | | {statistics.median(ratios):.2f}x "
                  f"({min(ratios):.2f}-{max(ratios):.2f}) |", flush=True)
    finally:
        for worker in workers.values():
            if not isinstance(worker, Missing):
                worker.quit()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
