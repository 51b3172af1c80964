"""The real models minillm runs, side by side with transformers and llama.cpp on the same GGUF
file: greedy decoding from a 128-token prompt, prefill and decode tokens/s, and peak resident
memory of converting the file.

    python -m bench.studies.real_models [--models smollm2-135m-instruct,gemma3-270m]
                                        [--new 64] [--rounds 3] [--threads 1]

The files are `minillm fetch NAME`'s, in minillm's cache folder ($MINILLM_CACHE, else
~/.cache/minillm): the .npz minillm loads (float32, the fast path on) and the GGUF file
transformers (dequantized to float32) and llama.cpp (its own quantized blocks) load. The three
run in this one process, in turn (A B C, A B C, ...) after a warm-up each, one thread each;
a row is the median (min-max) over the rounds and minillm's speed over that row's (above 1:
minillm is faster). The conversion's peak resident memory is measured in a child process
(`model_from_gguf`, VmHWM).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import numpy as np

from bench.suite.real_worker import timed

TEXT = ("The lighthouse at the end of the harbour wall was built in 1868 from granite quarried "
        "on the island itself. Its lamp burned paraffin until 1921, when an electric light with "
        "a rotating lens replaced it, and the keeper's cottage beside it became a small museum "
        "in 1987. ") * 4
PROMPT_TOKENS = 128


def files(name):
    from minillm.cli.fetch import MODELS, cache_folder
    folder = cache_folder()
    return folder / f"{name}.npz", folder / MODELS[name].filename


def minillm_runner(npz):
    import minillm
    from minillm.generate import stream
    model = minillm.load(npz)

    def run(prompt, n):
        return timed(stream(model, prompt, max_new_tokens=n, temperature=0, stop_tokens=()), n)
    return model.tokenizer, run


def transformers_runner(gguf, threads):
    import torch
    import transformers
    torch.set_num_threads(threads)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32).eval()

    def run(prompt, n):
        streamer = TokenTimes()
        with torch.no_grad():
            model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=n,
                           min_new_tokens=n, eos_token_id=None, pad_token_id=0,
                           streamer=streamer)
        return streamer.result(n)
    return run


def llama_cpp_runner(gguf, threads):
    import llama_cpp
    llm = llama_cpp.Llama(str(gguf), n_ctx=512, n_threads=threads, n_batch=512,
                          verbose=False)

    def run(prompt, n):
        llm.reset()
        def tokens():
            for token in llm.generate(prompt, top_k=1, temp=0.0, reset=True):
                yield token
        return timed(tokens(), n)
    return run


class TokenTimes:
    """A transformers streamer that notes when the first new token arrives."""

    def __init__(self):
        self.start, self.first, self.count = time.perf_counter(), None, -1

    def put(self, value):
        self.count += 1  # the first call carries the prompt
        if self.count == 1:
            self.first = time.perf_counter()

    def end(self):
        self.stop = time.perf_counter()

    def result(self, n):
        return self.first - self.start, self.stop - self.first, n


def conversion_peak_mib(gguf) -> float:
    """Peak resident memory (MiB) of a process that converts the GGUF file with
    minillm.convert.model_from_gguf."""
    # VmHWM, not getrusage's ru_maxrss: Linux carries ru_maxrss over from the parent
    # across fork and exec, and the parent holds three models.
    code = ("from minillm.files import model_from_gguf; "
            f"model_from_gguf({str(gguf)!r}); "
            "print(next(int(line.split()[1]) for line in open('/proc/self/status') "
            "if line.startswith('VmHWM')) / 1024)")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    return float(out.stdout.strip().splitlines()[-1])


def measure(name, new, rounds, threads):
    npz, gguf = files(name)
    if not (npz.is_file() and gguf.is_file()):
        print(f"| {name} | missing: `minillm fetch {name}` | | | |")
        return
    tokenizer, ours = minillm_runner(npz)
    prompt = tokenizer.encode(TEXT, add_special_tokens=True)[:PROMPT_TOKENS]
    runners = {"minillm f32": ours}
    for label, make in (("transformers", transformers_runner), ("llama.cpp", llama_cpp_runner)):
        try:
            runners[label] = make(gguf, threads)
        except ImportError as e:
            print(f"| {name} | {label} | missing ({e}) | | |")
    times = {label: [] for label in runners}
    for label, run in runners.items():
        run(prompt, 4)  # warm-up
    for _ in range(rounds):
        for label, run in runners.items():
            prefill, decode, _ = run(prompt, new)
            times[label].append((len(prompt) / prefill, (new - 1) / decode))
    ours_prefill = statistics.median(t[0] for t in times["minillm f32"])
    ours_decode = statistics.median(t[1] for t in times["minillm f32"])
    for label, rows in times.items():
        prefill = statistics.median(t[0] for t in rows)
        decode = statistics.median(t[1] for t in rows)
        print(f"| {name} | {label} | {prefill:.1f} ({min(t[0] for t in rows):.1f}-"
              f"{max(t[0] for t in rows):.1f}) | {decode:.1f} ({min(t[1] for t in rows):.1f}-"
              f"{max(t[1] for t in rows):.1f}) | {ours_prefill / prefill:.2f} / "
              f"{ours_decode / decode:.2f} |")
    print(f"| {name} | minillm conversion peak RSS | {conversion_peak_mib(gguf):.0f} MiB | | |")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="smollm2-135m-instruct,gemma3-270m")
    p.add_argument("--new", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    from ..suite.machine import set_threads
    set_threads(args.threads)
    print(f"{args.new} new tokens after a {PROMPT_TOKENS}-token prompt, greedy, "
          f"{args.threads} thread(s), {args.rounds} rounds")
    print("| model | contender | prefill tok/s | decode tok/s | "
          "minillm / this (prefill / decode) |")
    print("| --- | --- | --- | --- | --- |")
    for name in args.models.split(","):
        measure(name, args.new, args.rounds, args.threads)


if __name__ == "__main__":
    main()
