"""Real model 1: prefill and decode of SmolLM2-135M-Instruct, batch 1, greedy, at 1 and 2
threads: minillm float32 and int8, the PyTorch loop and transformers on the same weights, and
llama.cpp on the original Q4_1 file; against the memory roofline, with each process's peak
resident memory.

    python -m bench --only real-decode [--real-threads 1,2] [--real-tokens 128] [--repeats 3]

Each contender runs in a process of its own (bench.suite.real_worker), so that its peak resident
memory is its own and no model's weights sit in another's caches. For each thread count the
parent measures the roofline's bandwidth, starts one process per contender, warms each up with
a short run, then sends rounds A B C ..., A B C ... of the timed run: the 128-token prompt, then
128 new tokens. A row is the median (min-max) over the rounds; the prefill is the prompt's
tokens over the time to the first new token, the decode the other new tokens over the time
after it.

The roofline of a contender: tokens/s <= bandwidth / the bytes of weights it reads per token
(float32: every block matrix and the whole output layer, the tied embedding; int8: the int8
matrices and their scales; llama.cpp: the GGUF file's Q4_1 and Q8_0 blocks). Its share is its
decode speed over that bound.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from . import real, roofline
from .real_worker import CONTENDERS, LLAMA_BUILD
from .timing import Missing, Row

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Worker:
    """A contender's process: start, ask for runs, quit (then its peak resident memory)."""

    def __init__(self, name: str, threads: int, context: int | None = None):
        self.name = name
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
                   MKL_NUM_THREADS=str(threads), PYTHONPATH=os.pathsep.join(
                       [ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                 if p]))
        self.log = tempfile.TemporaryFile(mode="w+")  # its warnings and progress bars
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.suite.real_worker", name, str(threads)] +
            ([str(context)] if context else []), cwd=ROOT,
            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True,
            bufsize=1)
        self.ready = self.receive()

    def receive(self) -> dict:
        line = self.process.stdout.readline()
        if line:
            return json.loads(line)
        code = self.process.wait()
        self.log.seek(0)
        last = [t for t in self.log.read().strip().splitlines() if t.strip()][-1:]
        why = "illegal instruction: a build for another CPU" if code == -signal.SIGILL else ""
        return {"error": f"its process ended with code {code} {why}".rstrip() +
                         (f": {last[0][-200:]}" if last else "")}

    def ask(self, message: dict) -> dict:
        try:
            self.process.stdin.write(json.dumps(message) + "\n")
            self.process.stdin.flush()
        except BrokenPipeError:
            pass
        return self.receive()

    def quit(self) -> float | None:
        """Ends the process; its peak resident memory in MiB (None if it had failed)."""
        answer = self.ask({"quit": True}) if self.process.poll() is None else {}
        self.process.wait()
        self.log.close()
        return answer.get("peak_rss_mib")


def start(name: str, threads: int, context: int | None = None):
    """A ready Worker, or Missing(why not); context: llama.cpp's positions (real_worker)."""
    if name == "llama.cpp" and not has_llama_cpp():
        return Missing(f"llama-cpp-python not installed; with AVX2: `{LLAMA_BUILD}`")
    if name.endswith("+ emb") and not real.has_embeddings_option():
        return Missing(real.EMB_MISSING)
    worker = Worker(name, threads, context)
    if "error" in worker.ready:
        worker.quit()
        return Missing(worker.ready["error"])
    return worker


def has_llama_cpp() -> bool:
    import importlib.util
    return importlib.util.find_spec("llama_cpp") is not None


def bandwidth(threads: int) -> float:
    """The roofline's read bandwidth (bytes/s) with `threads` BLAS threads."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return roofline.bandwidth()
    with threadpool_limits(limits=threads):
        return roofline.bandwidth()


def measure(threads: int, prompt: list, new: int, repeats: int) -> tuple:
    """({name: Worker or Missing}, {name: [answers of the timed runs]}, {name: peak MiB})."""
    workers = {name: start(name, threads) for name in CONTENDERS}
    live = {name: w for name, w in workers.items() if not isinstance(w, Missing)}
    answers = {name: [] for name in live}
    for name, w in list(live.items()):  # warm-up: a short run each
        reply = w.ask({"prompt": prompt, "new": 4})
        if "error" in reply:
            workers[name] = Missing(reply["error"])
            del live[name], answers[name]
            w.quit()
    for _ in range(repeats):  # interleaved: every contender once per round
        for name, w in live.items():
            answers[name].append(w.ask({"prompt": prompt, "new": new}))
    peaks = {name: w.quit() for name, w in live.items()}
    for name, runs in answers.items():
        broken = [a["error"] for a in runs if "error" in a]
        if broken:
            workers[name] = Missing(broken[0])
    return workers, answers, peaks


def run(ctx):
    s = ctx["settings"]
    P, N = s.real_prompt, s.real_tokens
    title = (f"R1. Real model, SmolLM2-135M-Instruct: prefill of a {P}-token chat prompt, then "
             f"{N} new tokens, batch 1, greedy, one process per contender")
    missing = real.missing_rows("real-decode", "tokens/s")
    if missing:
        return title, missing
    prompt = real.prompt(real.model(ctx).tokenizer, P)
    out = []
    for threads in s.real_threads:
        bw = bandwidth(threads)
        workers, answers, peaks = measure(threads, prompt, N, s.repeats)
        out += table_rows(threads, workers, answers, peaks, bw, P, N)
        if threads == 1:
            out.append(int8_ceiling_row(bw, workers, out, f"1 thread, decode {N} tokens",
                                        real.model(ctx).config.d_model))
    return title, out


def table_rows(threads, workers, answers, peaks, bw, P, N) -> list:
    label = f"{threads} thread{'s' if threads > 1 else ''}"
    prefill_case, decode_case = f"{label}, prefill {P} tokens", f"{label}, decode {N} tokens"
    prefill, decode = [], []
    reference = answers.get("minillm f32", [{}])[-1].get("tokens")
    for name, w in workers.items():
        if isinstance(w, Missing):
            prefill.append(Row("real-decode", prefill_case, name, "tokens/s", missing=w.reason))
            decode.append(Row("real-decode", decode_case, name, "tokens/s", missing=w.reason))
            continue
        runs = answers[name]
        speeds = [(N - 1) / a["decode_s"] for a in runs]
        weights = w.ready["bytes_per_token"]
        best = bw / weights
        median = sorted(speeds)[len(speeds) // 2]
        notes = [f"{median / best:.0%} of its roofline ({weights / 2**20:.0f} MiB/token)",
                 f"peak RSS {peaks.get(name) or 0:.0f} MiB"]
        if name != "minillm f32" and reference is not None:
            notes.append(same_tokens(reference, runs[-1]["tokens"]))
        if w.ready["about"]:
            notes.append(w.ready["about"])
        prefill.append(Row("real-decode", prefill_case, name, "tokens/s",
                           [P / a["prefill_s"] for a in runs],
                           note=f"load {w.ready['load_s']:.1f} s"))
        decode.append(Row("real-decode", decode_case, name, "tokens/s", speeds,
                          note="; ".join(notes)))
    f32 = workers.get("minillm f32")
    if not isinstance(f32, Missing):
        weights = f32.ready["bytes_per_token"]
        decode.append(Row("real-decode", decode_case, "roofline, float32", "tokens/s",
                          [bw / weights], note=f"{bw / 1e9:.1f} GB/s read by a {threads}-thread "
                                               f"matrix-vector product over 256 MiB; "
                                               f"{weights / 2**20:.0f} MiB of float32 weights "
                                               f"per token"))
    return prefill + decode


def int8_ceiling_row(bw, workers, rows, case, width: int) -> Row:
    """The ceiling of int8 decoding by widening blocks (bench.suite.roofline.widening_ceiling),
    for the all-int8 model, next to what it reached and to the float32 roofline."""
    from minillm.fast.model import BLOCK_BYTES

    name, label = "minillm int8 + emb", "ceiling, int8 widened"
    int8, f32 = workers.get(name), workers.get("minillm f32")
    if any(w is None or isinstance(w, Missing) for w in (int8, f32)):
        return Row("real-decode", case, label, "tokens/s", missing=f"{name} or f32 did not run")
    seconds = roofline.widening_ceiling(bw, BLOCK_BYTES, width)
    weights = int8.ready["bytes_per_token"]  # int8: a byte per weight (and a few scales)
    ceiling = 1 / (weights * seconds)
    reached = next(r.median for r in rows if r.contender == name and r.case == case)
    f32_roof = bw / f32.ready["bytes_per_token"]
    return Row("real-decode", case, label, "tokens/s", [ceiling],
               note=(f"each of {weights / 2**20:.0f} MiB of int8 weights read, widened to "
                     f"float32 and multiplied from cache at this run's measured rates "
                     f"({1 / (seconds * 1e9):.2f} G weights/s): {ceiling / f32_roof:.2f}x the "
                     f"float32 roofline; {name} reached {reached / ceiling:.0%} of it"))


def same_tokens(reference, tokens) -> str:
    if list(reference) == list(tokens):
        return "same greedy tokens as minillm f32"
    step = next((i for i, (a, b) in enumerate(zip(reference, tokens)) if a != b),
                min(len(reference), len(tokens)))
    return f"tokens differ from minillm f32 from step {step} on"
