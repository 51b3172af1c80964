"""A prefill with glibc's default limits against one with freed memory kept
(`fast.keep_freed_memory`, which `fast.accelerate` calls): seconds and page faults.

    python -m bench.studies.page_faults [--lengths 2048 8192] [--rounds 3]

The model is SmolLM2-135M-Instruct from minillm's cache folder (`minillm fetch
smollm2-135m-instruct`), one thread, R5's random token ids. Each run is a fresh process (the
allocator's limits are the process's): the fast model loaded, a short warm-up, then the
prefill of one length and one new token, timed, with the page faults it cost
(`getrusage`'s minor faults). "default" replaces `keep_freed_memory` by a function that does
nothing before the model is loaded; the two alternate round by round.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

from ..suite import real

RUN = """
import json, resource, sys, time
import minillm
from minillm.fast import model as fast
from minillm.generate import stream
from bench.suite.machine import set_threads
from bench.suite.real_long import prompt_ids
how, length, npz = sys.argv[1], int(sys.argv[2]), sys.argv[3]
set_threads(1)
if how == "default":
    fast.keep_freed_memory = lambda: False
model = minillm.load(npz)
for _ in stream(model, prompt_ids(32, model.config.vocab_size), max_new_tokens=2,
                temperature=0):
    pass
ids = prompt_ids(length, model.config.vocab_size)
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
start = time.perf_counter()
for _ in stream(model, ids, max_new_tokens=1, temperature=0):
    pass
print(json.dumps({"s": time.perf_counter() - start,
                  "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults}))
"""
WAYS = ("default", "kept")


def run(how: str, length: int, npz: str) -> dict:
    out = subprocess.run([sys.executable, "-c", RUN, how, str(length), npz], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.studies.page_faults",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[2048, 8192])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    gone = real.absent()
    if gone:
        raise SystemExit(gone.reason)
    npz = real.files()[0]
    print("prefill seconds (page faults), 1 thread, rounds of default then kept\n")
    print("| tokens | round | default s (faults) | kept s (faults) | kept ÷ default, time |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for length in args.lengths:
        ratios = []
        for r in range(1, args.rounds + 1):
            got = {how: run(how, length, npz) for how in WAYS}
            ratios.append(got["kept"]["s"] / got["default"]["s"])
            cells = " | ".join(f"{got[how]['s']:.2f} ({got[how]['faults']:,})" for how in WAYS)
            print(f"| {length} | {r} | {cells} | {ratios[-1]:.3f}x |", flush=True)
        print(f"| {length} | median | | | {statistics.median(ratios):.3f}x "
              f"({min(ratios):.3f}-{max(ratios):.3f}) |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
