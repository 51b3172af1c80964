"""The first prefill of a fresh process against the next ones, minillm and transformers side by
side: a 128-token prompt read into a new cache, several times, in processes of their own.

    python -m bench.studies.first_prefill [--model_path smollm2-135m-instruct] [--tokens 128]
                                          [--rounds 5] [--calls 5] [--logits last|every]
                                          [--profile N] [--contenders minillm,transformers]

Each process loads the model, then reads the same random token ids --calls times, each time into
a new cache, and times every read: its wall-clock time, its CPU time (time.process_time: user
and system, page faults included; on a shared machine the other work moves it less than the
wall clock) and its page faults (getrusage's minor faults).
    minillm       minillm.load(path) (the fast path on, one BLAS thread: minillm.threads(1)),
                  then window.read(model, ids, model.new_cache()): the decode loop's reading of
                  a prompt, what generate does before its first token (one pass, last=1)
    transformers  the same weights (minillm.load(path, fast=False), to_hf_state_dict) in the
                  model transformers builds from config_to_hf's configuration, float32,
                  torch.set_num_threads(1), then model(ids, past_key_values=a new DynamicCache,
                  logits_to_keep=1) under torch.inference_mode: what its generate does before
                  its first token
--logits every: model.forward(ids, model.new_cache()) and logits_to_keep=0 instead, every
position's logits (the documented API's plain call).
The rounds alternate the two (minillm, transformers, minillm, ...), a fresh process each; both
take OPENBLAS_NUM_THREADS = OMP_NUM_THREADS = MKL_NUM_THREADS = 1. The tables give
transformers' time over minillm's (above 1: minillm is faster) for the first read and for the
later ones (their median in each process), as the median over the rounds and each round's, and
each contender's first read over its later ones, with the page faults; the two must choose the
same next token (checked).

--profile N: one minillm process more, its first and second reads under cProfile (CPU time),
the N functions of most own time in each, the modules the first read imported and its page
faults; then, in fresh processes (--rounds each), each piece a first read may pay for once
(PIECES: BLAS's first product, the cache's memory, the RoPE tables, the heap's growth) done
alone before the first read: its own CPU time, and what the first read then takes.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
CONTENDERS = ("minillm", "transformers")

# Run in the child with (contender, .npz path, tokens, calls, profile rows, warm-up piece,
# "last" or "every" position's logits); it prints one JSON line.
CHILD = r"""
import json, resource, sys, time
contender, path, tokens, calls, profile, piece, every = sys.argv[1:8]
tokens, calls, profile = int(tokens), int(calls), int(profile)
started = time.perf_counter()
import numpy as np
import minillm
if contender == "minillm":
    from minillm.window import read
    minillm.threads(1)
    model = minillm.load(path)
    ids = np.random.default_rng(0).integers(0, model.config.vocab_size, (1, tokens))
    def prefill():
        if every == "every":  # model.forward over the prompt: every position's logits
            return model.forward(ids, model.new_cache())[0, -1]
        return read(model, ids, model.new_cache())[0]  # (V,) logits of the next token
else:
    import torch
    import transformers
    from minillm.files import config_to_hf, to_hf_state_dict
    torch.set_num_threads(1)
    reference = minillm.load(path, fast=False)
    config = transformers.AutoConfig.for_model(**config_to_hf(reference.config))
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    state = {k: torch.from_numpy(v) for k, v in to_hf_state_dict(reference).items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    tied = {"lm_head.weight"} if reference.config.tie_embeddings else set()
    assert set(missing) <= tied and not unexpected, (missing, unexpected)
    ids = np.random.default_rng(0).integers(0, reference.config.vocab_size, (1, tokens))
    del reference, state
    ids = torch.from_numpy(ids)
    def prefill():
        with torch.inference_mode():
            out = model(input_ids=ids, past_key_values=transformers.DynamicCache(config=config),
                        use_cache=True, logits_to_keep=0 if every == "every" else 1)
        return out.logits[0, -1].numpy()
load_s = time.perf_counter() - started
warm = {}
if piece != "none":
    from bench.studies.first_prefill import PIECES
    cpu = time.process_time()
    PIECES[piece](model, tokens)
    warm = {"piece": piece, "cpu": time.process_time() - cpu}
runs, profiles = [], []
for call in range(calls):
    if profile and call < 2:
        import cProfile, io, pstats
        profiler = cProfile.Profile(time.process_time)
        profiler.enable()
    modules = set(sys.modules)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    wall, cpu = time.perf_counter(), time.process_time()
    logits = prefill()
    runs.append({"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu,
                 "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults,
                 "token": int(np.argmax(logits)),
                 "imported": sorted(set(sys.modules) - modules)})
    del logits  # as a caller that keeps only its token: the next read may reuse the memory
    if profile and call < 2:
        profiler.disable()
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(profile)
        profiles.append(text.getvalue())
print(json.dumps({"load_s": load_s, "runs": runs, "profiles": profiles, **warm}))
"""


# What a first read may pay for once, each done alone before it (--profile): name ->
# function(model, tokens) on a loaded minillm model. What the first read then saves is its share.
def _blas(model, tokens):
    """One small product through NumPy's BLAS: its buffers and threads made."""
    a = np.ones((tokens, 64), np.float32)
    a @ a.T


def _cache(model, tokens):
    """A cache of the prompt's length made and written once (first-touch pages), then freed."""
    cache = model.new_cache()
    cache.reserve(tokens)
    cache.k[...] = 0
    cache.v[...] = 0


def _rope(model, tokens):
    """The RoPE tables grown to the prompt's length."""
    model._grow_rope(tokens)


def _heap(model, tokens):
    """The C library's heap grown by a prefill's temporaries and let go: an MLP activation of
    the prompt, made and freed."""
    cfg = model.config
    for _ in range(2):
        np.ones((tokens, 2 * cfg.d_ff), np.float32)


PIECES = {"BLAS's first product": _blas, "the cache's memory": _cache,
          "the RoPE tables": _rope, "the heap's growth": _heap}


def child(contender, path, tokens, calls, logits="last", profile=0, piece="none") -> dict:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
               MKL_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(
                   [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                  if p]))
    out = subprocess.run([sys.executable, "-c", CHILD, contender, str(path), str(tokens),
                          str(calls), str(profile), piece, logits], check=True, capture_output=True,
                         text=True, cwd=ROOT, env=env).stdout
    return json.loads(out.splitlines()[-1])


def ratios(top, bottom):
    return [a / b for a, b in zip(top, bottom)]


def cell(values) -> str:
    """The median of ratios and each one, in round order."""
    return f"{statistics.median(values):.2f}x ({', '.join(f'{v:.2f}' for v in values)})"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.studies.first_prefill",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--model_path", default="smollm2-135m-instruct",
                        help="a .npz file or a fetched model's name")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=5, help="reads per process (at least 2)")
    parser.add_argument("--profile", type=int, default=0,
                        help="also profile minillm's first two reads: this many functions each")
    parser.add_argument("--logits", choices=("last", "every"), default="last",
                        help="last: the decode loop's read (last=1, logits_to_keep=1); every: "
                             "model.forward(ids, cache), every position's logits")
    parser.add_argument("--contenders", default=",".join(CONTENDERS),
                        help="minillm alone leaves transformers out (no torch needed)")
    args = parser.parse_args(argv)
    if args.calls < 2:
        parser.error("--calls: at least 2 (a first read and a later one)")
    from minillm.cli.common import model_file
    path = model_file(args.model_path)
    names = [n for n in args.contenders.split(",") if n]
    print(f"load average at start: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    got = {name: [] for name in names}
    for _ in range(args.rounds):
        for name in names:
            got[name].append(child(name, path, args.tokens, args.calls, args.logits))
    print(f"\n{args.tokens} random token ids of {args.model_path} into a new cache, "
          f"{args.calls} reads per fresh process, one thread, {args.rounds} rounds\n")
    for name in names:
        print(f"{name}: load {statistics.median(r['load_s'] for r in got[name]):.1f} s; "
              f"CPU ms per read, first round: "
              + ", ".join(f"{run['cpu'] * 1e3:.0f}" for run in got[name][0]["runs"]))
    later = range(1, args.calls)

    def seconds(name, clock, calls):
        """Per round: the median time of those reads."""
        return [statistics.median(r["runs"][c][clock] for c in calls) for r in got[name]]

    if len(names) == 2:
        tokens = {tuple(run["token"] for run in r["runs"]) for rows in got.values() for r in rows}
        print(f"\nsame next token in every read of both: {'yes' if len(tokens) == 1 else 'NO'}")
        print("\n| read | transformers ÷ minillm, CPU time | wall-clock time |")
        print("| --- | ---: | ---: |")
        for label, calls in (("first", [0]), ("later (median of the others)", later)):
            print(f"| {label} | " + " | ".join(
                cell(ratios(seconds("transformers", clock, calls), seconds("minillm", clock,
                                                                            calls)))
                for clock in ("cpu", "wall")) + " |")
    print("\n| contender | first ÷ later read, CPU time | wall-clock time | page faults, "
          "first read (later) |")
    print("| --- | ---: | ---: | ---: |")
    for name in names:
        faults = statistics.median(r["runs"][0]["faults"] for r in got[name])
        rest = statistics.median(r["runs"][c]["faults"] for r in got[name] for c in later)
        print(f"| {name} | " + " | ".join(
            cell(ratios(seconds(name, clock, [0]), seconds(name, clock, later)))
            for clock in ("cpu", "wall")) + f" | {faults:,.0f} ({rest:,.0f}) |")
    if args.profile:
        profile(path, args)
    print(f"\nload average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


def profile(path, args) -> None:
    """minillm's first and second reads under cProfile, and the pieces timed alone."""
    result = child("minillm", path, args.tokens, 2, args.logits, args.profile)
    imported = result["runs"][0]["imported"]
    print(f"\nmodules the first read imported: {', '.join(imported) if imported else 'none'}; "
          f"page faults: {result['runs'][0]['faults']:,} (second read: "
          f"{result['runs'][1]['faults']:,})")
    for label, text in zip(("first", "second"), result["profiles"]):
        print(f"\n### Profile of minillm's {label} read\n")
        print("\n".join(line for line in text.splitlines() if line.strip()))
    print("\n| done alone before the first read, in a fresh process | its own CPU ms | first "
          "read, CPU ms | later reads |")
    print("| --- | ---: | ---: | ---: |")
    for piece in ["none", *PIECES]:
        rows = [child("minillm", path, args.tokens, args.calls, args.logits, piece=piece)
                for _ in range(args.rounds)]
        own = statistics.median(r.get("cpu", 0) for r in rows) * 1e3
        first = statistics.median(r["runs"][0]["cpu"] for r in rows) * 1e3
        later = statistics.median(run["cpu"] for r in rows for run in r["runs"][1:]) * 1e3
        print(f"| {'nothing' if piece == 'none' else piece} | {own:.1f} | {first:.0f} | "
              f"{later:.0f} |", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
