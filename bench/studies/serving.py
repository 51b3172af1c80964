"""The serving engine (minillm.serving.Engine) against one request at a time, greedy, in one
process: throughput and time to the first token, prefix caching on a shared system prompt, and
the memory of the block pool against contiguous caches.

    python -m bench.studies.serving [--model_path weights/target.npz | FILE.npz | NAME]
                                    [--requests 16] [--prompt 16 256] [--new 32 64]
                                    [--shared 500] [--question 8 24] [--shared_new 8]
                                    [--block_size 16] [--max_batch_tokens 512] [--threads 1]
                                    [--seed 0] [--rounds 1] [--profile N]

--model_path: a .npz file or the name of a fetched model (`minillm fetch smollm2-135m-instruct`,
read from $MINILLM_CACHE, else ~/.cache/minillm), the shipped model by default; loaded fast
(`minillm.load(path)`), NumPy's BLAS on --threads threads (`minillm.threads`).

1. --requests prompts of drawn lengths (--prompt, uniform, a fixed --seed) and drawn numbers of
   new tokens (--new), cut from the held-out text: the engine (every request queued at the start,
   then steps until none is left) against the same requests one after the other through
   `minillm.stream` (generate's loop, yielding each token as it is drawn). Both: new tokens per
   second over the whole run, and each request's time to its first token counted from the start
   of the run (what a user waiting in the queue sees), then the run split into reading the
   prompts and decoding; the tokens are checked identical.
2. --requests prompts that share a --shared-token system prompt, each followed by a distinct
   question of --question tokens, --shared_new new tokens each, through the engine with and
   without prefix caching: prompt tokens computed (engine.stats), time to the first token (mean,
   p50, p99, from the start), total time.
   Both tables also give the process's CPU time (time.process_time, one BLAS thread), which
   other work on a shared machine moves less than the wall clock.
3. The block pool's memory: the most blocks held at once (counted after every step) times a
   block's bytes, against --requests contiguous caches of the whole context and of each
   request's own length, from the shapes.

Greedy (temperature 0), stop_tokens=() so that every request draws all its new tokens. One
warm-up of each path runs before the timed runs; each comparison's two sides then run one
after the other, --rounds times (the tables give the medians, each gain the median of the
rounds' own gains with their range). A model whose context is too short for the sizes (the
shipped model: 256 positions) gets them cut to fit, and the tables say so. --profile N: after the tables, cProfile over one more engine run of
workload 1 and one of workload 2 with prefix caching: the N functions with the most own time,
and minillm's N largest with their callees.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import minillm
from minillm.serving import Engine

TEXT = Path(__file__).resolve().parents[2] / "weights" / "web_valid.txt"


# -- the requests ------------------------------------------------------------------------------

def source_ids(model, needed: int, seed: int) -> list[int]:
    """At least `needed` token ids of the held-out text (random ids if the model has no
    tokenizer or the text is missing)."""
    tokenizer = getattr(model, "tokenizer", None)
    if tokenizer is not None and TEXT.is_file():
        text = TEXT.read_text(encoding="utf-8")
        ids, size = [], 20_000
        while len(ids) < needed and size < 4 * len(text):
            ids = list(tokenizer.encode(text[:size]))
            size *= 2
        if len(ids) >= needed:
            return ids
    rng = np.random.default_rng(seed)
    return rng.integers(0, model.config.vocab_size, needed).tolist()


def mixed_requests(model, n: int, prompt: tuple, new: tuple, seed: int):
    """n (prompt ids, new tokens): lengths drawn uniformly in the given ranges, cut to the
    context; each prompt a slice of the held-out text at a drawn place. Also a note when the
    ranges were cut."""
    context = model.config.context_length
    lo_new, hi_new = min(new[0], context // 2), min(new[1], context // 2)
    hi_prompt = min(prompt[1], context - hi_new)
    lo_prompt = min(prompt[0], hi_prompt)
    note = ""
    if (lo_prompt, hi_prompt, lo_new, hi_new) != (*prompt, *new):
        note = (f"cut to the context of {context}: prompts {lo_prompt}-{hi_prompt} tokens, "
                f"{lo_new}-{hi_new} new")
    rng = np.random.default_rng(seed)
    lengths = rng.integers(lo_prompt, hi_prompt + 1, n)
    news = rng.integers(lo_new, hi_new + 1, n)
    ids = source_ids(model, 4 * hi_prompt + 1, seed)
    starts = rng.integers(0, len(ids) - hi_prompt, n)
    prompts = [ids[s:s + length] for s, length in zip(starts, lengths)]
    return list(zip(prompts, news.tolist())), (lo_prompt, hi_prompt, lo_new, hi_new), note


def shared_requests(model, n: int, shared: int, question: tuple, new: int, seed: int):
    """n (prompt ids, new tokens): one system prompt of `shared` tokens, then a distinct
    question of a drawn length each (cut to the context, with a note)."""
    context = model.config.context_length
    asked, new = new, min(new, context // 4)
    hi_q = min(question[1], context // 4)
    lo_q = min(question[0], hi_q)
    shared_len = min(shared, context - hi_q - new)
    note = ""
    if (shared_len, lo_q, hi_q) != (shared, *question) or new != asked:
        note = (f"cut to the context of {context}: a {shared_len}-token system prompt, "
                f"questions of {lo_q}-{hi_q} tokens, {new} new")
    rng = np.random.default_rng(seed + 1)
    ids = source_ids(model, shared_len + n * hi_q + 1, seed)
    system = ids[:shared_len]
    rest = ids[shared_len:]
    q_lengths = rng.integers(lo_q, hi_q + 1, n)
    starts = rng.choice(len(rest) - hi_q, n, replace=False)
    prompts = [system + rest[s:s + q] for s, q in zip(starts, q_lengths)]
    return [(p, new) for p in prompts], (shared_len, lo_q, hi_q, new), note


# -- the two ways to run them --------------------------------------------------------------------

@dataclass
class SequentialRun:
    """The requests one after the other: each one's tokens and first-token time (from the
    start), the total, and the seconds up to each first token and after them, summed."""

    outputs: list
    first: list
    total: float
    reading: float
    decoding: float
    cpu: float  # the process's CPU seconds over the run (time.process_time)
    first_cpu: list  # the process's CPU seconds from the start to each first token


def run_sequential(model, requests) -> SequentialRun:
    """One request after the other through minillm.stream (generate's loop, a token at a
    time)."""
    outputs, first, first_cpu = [], [], []
    reading = decoding = 0.0
    cpu0, t0 = time.process_time(), time.perf_counter()
    for prompt, new in requests:
        tokens = []
        start = time.perf_counter()
        for token in minillm.stream(model, prompt, max_new_tokens=new, temperature=0,
                                    stop_tokens=()):
            if not tokens:
                now = time.perf_counter()
                first.append(now - t0)
                first_cpu.append(time.process_time() - cpu0)
                reading += now - start
            tokens.append(int(token))
        decoding += time.perf_counter() - (first[-1] + t0)
        outputs.append(tokens)
    total = time.perf_counter() - t0
    return SequentialRun(outputs, first, total, reading, decoding, time.process_time() - cpu0,
                         first_cpu)


@dataclass
class EngineRun:
    """One engine run: each request's tokens and first-token time (from the start), the total,
    the engine, the most blocks held at once, and the steps: seconds in steps with prompt
    chunks, seconds and tokens of the other steps, and (seconds, forward passes) of each."""

    outputs: list
    first: list
    total: float
    engine: Engine
    peak: int
    reading: float
    decoding: float
    decoded: int
    steps: list
    cpu: float  # the process's CPU seconds over the run (time.process_time)
    first_cpu: list  # the process's CPU seconds from the start to each first token


class Counted:
    """The model, its forward passes counted (the engine runs one a step, and one per
    speculative round)."""

    def __init__(self, model):
        self.model, self.passes = model, 0

    def __getattr__(self, name):
        return getattr(self.model, name)

    def forward(self, *args, **kwargs):
        self.passes += 1
        return self.model.forward(*args, **kwargs)


def run_engine(model, requests, engine=None, **engine_args) -> EngineRun:
    """Every request queued at once into a new engine (or `engine`), then engine steps until
    none is left."""
    engine = Engine(model, **engine_args) if engine is None else engine  # made before the clock
    counted = engine.model = Counted(engine.model)
    cpu0, t0 = time.process_time(), time.perf_counter()
    ids = [engine.add_request(prompt, max_new_tokens=new, temperature=0, stop_tokens=())
           for prompt, new in requests]
    tokens = {rid: [] for rid in ids}
    first, first_cpu = {}, {}
    peak = 0
    reading = decoding = 0.0
    decoded = 0
    steps = []
    while engine.has_unfinished():
        prompts = bool(engine.scheduler.waiting) or any(r.to_compute > 1
                                                        for r in engine.scheduler.running)
        passes = counted.passes
        start = time.perf_counter()
        outputs = engine.step()
        end = time.perf_counter()
        steps.append((end - start, counted.passes - passes))
        if prompts:
            reading += end - start
        else:
            decoding += end - start
            decoded += len(outputs)
        for out in outputs:
            tokens[out.request_id].append(out.token)
            if out.request_id not in first:
                first[out.request_id] = end - t0
                first_cpu[out.request_id] = time.process_time() - cpu0
        peak = max(peak, sum(1 for r in engine.block_manager.refs if r > 0))
    total, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    engine.model = counted.model
    return EngineRun([tokens[rid] for rid in ids], [first[rid] for rid in ids], total, engine,
                     peak, reading, decoding, decoded, steps, cpu,
                     [first_cpu[rid] for rid in ids])


def step_log(run: EngineRun, first: int = 4) -> str:
    """The first steps' seconds and forward passes, and the rest summed."""
    shown = ", ".join(f"{t:.2f} s ({n} pass{'es' if n != 1 else ''})"
                      for t, n in run.steps[:first])
    rest = run.steps[first:]
    if rest:
        shown += (f", then {len(rest)} more steps: {sum(t for t, _ in rest):.2f} s, "
                  f"{sum(n for _, n in rest)} passes")
    return shown


# -- the tables ----------------------------------------------------------------------------------

def fmt(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:,.0f}"


def ratio(x: float) -> str:
    return f"{x:.2f}×"


def percentile(values, q) -> float:
    return float(np.percentile(values, q))


def kv_bytes(cfg, positions: int, itemsize: int) -> int:
    """Keys and values of every layer for `positions` positions."""
    return 2 * cfg.n_layers * cfg.n_kv_heads * positions * cfg.head_dim * itemsize


def mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


def row(label: str, base: list, other: list, kind: str) -> tuple[str, float]:
    """A table row: the median of each side's figure over the rounds, and the gain (the
    median of the rounds' own gains, with their range when there are several); kind "speed"
    (higher is better: other ÷ base) or "time" (lower is better: base ÷ other)."""
    gains = [(o / b if kind == "speed" else b / o) if o and b else float("nan")
             for b, o in zip(base, other)]
    gain = float(np.median(gains))
    spread = (f" ({min(gains):.2f}–{max(gains):.2f})" if len(gains) > 1 else "")
    return (f"| {label} | {fmt(float(np.median(base)))} | {fmt(float(np.median(other)))} | "
            f"{ratio(gain)}{spread} |", gain)


def ttft_rows(base_runs, other_runs) -> list[tuple[str, float]]:
    """Time to the first token, mean, p50 and p99 (from the start of the run)."""
    rows = []
    for name, fn in (("mean", np.mean), ("p50", lambda v: percentile(v, 50)),
                     ("p99", lambda v: percentile(v, 99))):
        rows.append(row(f"time to first token, {name}, s from the start",
                        [float(fn(r.first)) for r in base_runs],
                        [float(fn(r.first)) for r in other_runs], "time"))
    rows.append(row("time to first token, mean, CPU s of the process from the start (less "
                    "moved by other work on the machine)",
                    [float(np.mean(r.first_cpu)) for r in base_runs],
                    [float(np.mean(r.first_cpu)) for r in other_runs], "time"))
    return rows


def same_tokens(base_runs, other_runs, n: int) -> str:
    same = min(sum(a == b for a, b in zip(x.outputs, y.outputs))
               for x in base_runs + other_runs for y in base_runs[:1])
    return f"| same tokens | | | {'yes' if same == n else 'NO'}, {same} of {n} requests |"


def rounds_text(n: int) -> str:
    return ("" if n == 1 else f"Each figure is the median of {n} rounds (the two sides "
            "alternating), each gain the median of the rounds' gains, their range in brackets. ")


def table1(requests, ranges, note, seqs, engs, engine_args) -> tuple[str, float]:
    n_new = sum(new for _, new in requests)
    lo_p, hi_p, lo_n, hi_n = ranges
    eng, stats = engs[0], engs[0].engine.stats
    throughput, speed = row("new tokens per second, the whole run",
                            [n_new / r.total for r in seqs], [n_new / r.total for r in engs],
                            "speed")
    cpu_row = row("new tokens per CPU second of the process (less moved by other work on the "
                  "machine)", [n_new / r.cpu for r in seqs], [n_new / r.cpu for r in engs],
                  "speed")
    rows = [(throughput, speed), cpu_row, *ttft_rows(seqs, engs),
            row("total time, s", [r.total for r in seqs], [r.total for r in engs], "time"),
            row("of which reading prompts, s (one at a time: each prompt up to its first "
                "token; engine: the steps with prompt chunks, which decode too)",
                [r.reading for r in seqs], [r.reading for r in engs], "time"),
            row(f"decoding alone, new tokens per second (one at a time: after each first "
                f"token; engine: the steps without prompt chunks, {eng.decoded:,} tokens)",
                [(n_new - len(requests)) / r.decoding for r in seqs],
                [r.decoded / r.decoding if r.decoding else float("nan") for r in engs],
                "speed")]
    lines = [f"### 1. {len(requests)} requests, prompts of {lo_p}-{hi_p} tokens "
             f"({sum(len(p) for p, _ in requests):,} in all), {lo_n}-{hi_n} new tokens each "
             f"({n_new:,} in all): the engine against one request at a time", "",
             "| measure | one at a time (`minillm.stream`) | engine | the engine's gain |",
             "| --- | ---: | ---: | ---: |", *(text for text, _ in rows),
             same_tokens(seqs, engs, len(requests)),
             "", rounds_text(len(seqs)) + "The gain: a speed's ratio engine ÷ one at a time, a "
             "time's one at a time ÷ engine (above 1, the engine is better).",
             "", f"Engine: {engine_args_text(engine_args)}, {stats.steps} steps, "
             f"{sum(n for _, n in eng.steps)} forward passes, {stats.preemptions} preemptions; "
             f"its first steps (round 1): {step_log(eng)}. Greedy, stop tokens off (every "
             "request draws all its new tokens)." + (f" Sizes {note}." if note else "")]
    return "\n".join(lines), (speed, cpu_row[1])


def table2(requests, sizes, note, offs, ons, engine_args) -> tuple[str, float]:
    """offs, ons: the engine runs without and with prefix caching, a pair per round."""
    shared, lo_q, hi_q, new = sizes
    off, on = offs[0], ons[0]
    s_off, s_on = off.engine.stats, on.engine.stats
    computed = s_off.prompt_tokens_computed, s_on.prompt_tokens_computed
    ttft = ttft_rows(offs, ons)
    lines = [f"### 2. {len(requests)} requests sharing a {shared}-token system prompt, each "
             f"then a question of {lo_q}-{hi_q} tokens, {new} new tokens each: prefix caching "
             "on and off", "",
             "| measure | without prefix caching | with | prefix caching's gain |",
             "| --- | ---: | ---: | ---: |",
             f"| prompt tokens computed (engine.stats) | {computed[0]:,} | {computed[1]:,} | "
             f"{ratio(computed[0] / computed[1])} |",
             f"| prompt tokens reused | {s_off.prompt_tokens_reused:,} | "
             f"{s_on.prompt_tokens_reused:,} | |",
             *(text for text, _ in ttft),
             row("total time, s", [r.total for r in offs], [r.total for r in ons], "time")[0],
             row("CPU time of the process, s", [r.cpu for r in offs], [r.cpu for r in ons],
                 "time")[0],
             same_tokens(offs, ons, len(requests)),
             "", rounds_text(len(offs)) + "The gain: without ÷ with (above 1, prefix caching "
             "is better).",
             "", f"Engine: {engine_args_text(engine_args)}; without prefix caching "
             f"{s_off.steps} steps, {sum(n for _, n in off.steps)} forward passes, "
             f"{s_off.preemptions} preemptions, its first steps (round 1): {step_log(off)}; "
             f"with it {s_on.steps} steps, {sum(n for _, n in on.steps)} forward passes, "
             f"{s_on.preemptions} preemptions, its first steps: {step_log(on)}."
             + (f" Sizes {note}." if note else "")]
    return "\n".join(lines), (ttft[0][1], ttft[-1][1])


def table3(model, engine, rows) -> str:
    """rows: (workload, requests, peak blocks held)."""
    cfg, pool = model.config, engine.block_manager
    itemsize, bs = pool.k.dtype.itemsize, pool.block_size
    block = kv_bytes(cfg, bs, itemsize)
    lines = [f"### 3. KV memory: the block pool's blocks held at the peak against contiguous "
             f"caches ({cfg.n_layers} layers × {cfg.n_kv_heads} KV heads × {cfg.head_dim} × "
             f"{pool.k.dtype}; a block of {bs} positions is {block / 2**10:,.0f} KiB)", "",
             "| workload | cache | positions | bytes | ÷ the paged peak |",
             "| --- | --- | ---: | ---: | ---: |"]
    for workload, requests, peak in rows:
        paged = peak * block
        own = sum(len(p) + new for p, new in requests)
        whole = len(requests) * cfg.context_length
        lines.append(f"| {workload} | paged: {peak} blocks held at the peak | {peak * bs:,} | "
                     f"{mib(paged)} | 1 |")
        lines.append(f"| {workload} | {len(requests)} contiguous caches of each request's own "
                     f"length (prompt + new) | {own:,} | {mib(kv_bytes(cfg, own, itemsize))} | "
                     f"{ratio(kv_bytes(cfg, own, itemsize) / paged)} |")
        lines.append(f"| {workload} | {len(requests)} contiguous caches of the whole context "
                     f"({cfg.context_length:,}) | {whole:,} | "
                     f"{mib(kv_bytes(cfg, whole, itemsize))} | "
                     f"{ratio(kv_bytes(cfg, whole, itemsize) / paged)} |")
    lines += ["", f"The pool itself is allocated for {pool.num_blocks:,} blocks "
              f"({mib(pool.num_blocks * block)}, the engine's default: room for 16,384 "
              "positions, or a whole context if longer): the engine makes its keys and "
              "values with `np.zeros`, pages untouched until written, so only the blocks "
              "used are resident."]
    return "\n".join(lines)


def goals(speed, ttft, model_name: str) -> str:
    """speed, ttft: (the gain in wall-clock time, the gain in the process's CPU time)."""
    title = "### Goals (set for SmolLM2-135M-Instruct)"
    if "smollm2" not in model_name.lower():
        title += "; this run is another model"
    lines = [title, "", "| goal | this run (wall clock) | | in CPU time of the process |",
             "| --- | --- | --- | --- |",
             f"| engine ≥ 2× the throughput of one request at a time | {ratio(speed[0])} | "
             f"{'met' if speed[0] >= 2 else 'not met'} | {ratio(speed[1])} |",
             f"| prefix caching ≥ 5× sooner to the first token (mean), shared prompt | "
             f"{ratio(ttft[0])} | {'met' if ttft[0] >= 5 else 'not met'} | {ratio(ttft[1])} |"]
    return "\n".join(lines)


def engine_args_text(args) -> str:
    return ", ".join(f"{k}={v}" for k, v in args.items())


def profile(model, requests, engine_args, top: int, workload: str) -> str:
    """cProfile over one engine run of `requests`: the `top` functions by own time."""
    engine = Engine(model, **engine_args)  # its pool made outside the profile, as in the runs
    profiler = cProfile.Profile()
    profiler.enable()
    run_engine(model, requests, engine)
    profiler.disable()
    stats = pstats.Stats(profiler, stream=io.StringIO())
    total = stats.total_tt
    rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:top]
    lines = [f"### Profile: one engine run of workload {workload} under cProfile ({total:.1f} s "
             "with the profiler's overhead), the functions with the most own time", "",
             "| function | calls | own s | own share | with callees s |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for (file, line, name), (cc, nc, tt, ct, _) in rows:
        where = name if file == "~" else f"{name} ({short(file)}:{line})"
        lines.append(f"| `{where}` | {nc:,} | {tt:.2f} | {tt / total:.0%} | {ct:.2f} |")
    cumulative = sorted(stats.stats.items(), key=lambda kv: kv[1][3], reverse=True)
    lines += ["", "With callees (minillm's functions only, the largest first):", "",
              "| function | calls | with callees s | share |", "| --- | ---: | ---: | ---: |"]
    shown = 0
    for (file, line, name), (cc, nc, tt, ct, _) in cumulative:
        if "minillm" not in file or shown == top:
            continue
        lines.append(f"| `{name} ({short(file)}:{line})` | {nc:,} | {ct:.2f} | "
                     f"{ct / total:.0%} |")
        shown += 1
    return "\n".join(lines)


def short(file: str) -> str:
    parts = Path(file).parts
    for anchor in ("minillm", "numpy"):
        if anchor in parts:
            return "/".join(parts[len(parts) - parts[::-1].index(anchor) - 1:])
    return Path(file).name


# -- the run -----------------------------------------------------------------------------------

def model_path(parser, value):
    """The .npz file --model_path names (a file, or a fetched model's name), or the parser's
    usage error saying why not."""
    from minillm.cli.common import UsageError, model_file

    try:
        return model_file(value)
    except UsageError as e:
        parser.error(str(e))


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    p = argparse.ArgumentParser(prog="python -m bench.studies.serving")
    p.add_argument("--model_path", "--model-path", default=None,
                   help="a .npz file or a fetched model's name (default: the shipped model)")
    p.add_argument("--requests", type=int, default=16)
    p.add_argument("--prompt", type=int, nargs=2, default=[16, 256], metavar=("MIN", "MAX"))
    p.add_argument("--new", type=int, nargs=2, default=[32, 64], metavar=("MIN", "MAX"))
    p.add_argument("--shared", type=int, default=500)
    p.add_argument("--question", type=int, nargs=2, default=[8, 24], metavar=("MIN", "MAX"))
    p.add_argument("--shared_new", "--shared-new", type=int, default=8)
    p.add_argument("--block_size", "--block-size", type=int, default=16)
    p.add_argument("--max_batch_tokens", "--max-batch-tokens", type=int, default=512)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=1,
                   help="run each comparison's two sides this many times, alternating; the "
                        "tables give medians")
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="then cProfile one engine run of workloads 1 and 2 (with prefix caching), "
                        "their N costliest functions")
    args = p.parse_args(argv)
    path = model_path(p, args.model_path)

    load_start = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"command: `{' '.join(['python -m bench.studies.serving'] + argv)}`")
    print(f"model: {path}; load average at start: {load_start}")
    with minillm.threads(args.threads):
        model = minillm.load(str(path))
        cfg = model.config
        print(f"{type(model).__name__}, {cfg.n_layers} layers, d_model {cfg.d_model}, "
              f"context {cfg.context_length}, {model.dtype}; {args.threads} BLAS thread(s); "
              f"numpy {np.__version__}\n")
        engine_args = dict(block_size=args.block_size, max_batch_tokens=args.max_batch_tokens)
        mixed, ranges, note1 = mixed_requests(model, args.requests, tuple(args.prompt),
                                              tuple(args.new), args.seed)
        shared, sizes, note2 = shared_requests(model, args.requests, args.shared,
                                               tuple(args.question), args.shared_new, args.seed)

        warm = [(prompt[:8], 2) for prompt, _ in mixed[:2]]  # a warm-up of each path
        run_sequential(model, warm)
        run_engine(model, warm, **engine_args)

        seqs, engs, offs, ons = [], [], [], []
        for _ in range(args.rounds):  # the two sides of each comparison one after the other
            seqs.append(run_sequential(model, mixed))
            engs.append(run_engine(model, mixed, **engine_args))
        text1, speed = table1(mixed, ranges, note1, seqs, engs, engine_args)
        print(text1 + "\n", flush=True)
        for _ in range(args.rounds):
            offs.append(run_engine(model, shared, prefix_caching=False, **engine_args))
            ons.append(run_engine(model, shared, prefix_caching=True, **engine_args))
        text2, ttft = table2(shared, sizes, note2, offs, ons, engine_args)
        print(text2 + "\n", flush=True)

        print(table3(model, engs[0].engine,
                     [("1. mixed lengths", mixed, max(r.peak for r in engs)),
                      ("2. shared prompt, without prefix caching", shared,
                       max(r.peak for r in offs)),
                      ("2. shared prompt, with prefix caching", shared,
                       max(r.peak for r in ons))]) + "\n")
        print(goals(speed, ttft, str(path)) + "\n")
        load_end = ", ".join(f"{x:.2f}" for x in os.getloadavg())
        print(f"load average at start: {load_start}; at the end of the timed runs: {load_end}")
        if args.profile:
            print("\n" + profile(model, mixed, engine_args, args.profile, "1"))
            print("\n" + profile(model, shared, engine_args, args.profile,
                                  "2 with prefix caching"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
