"""What a loaded tokenizer costs: the memory it holds and the time of its first texts, before
and after the merges became token ids (minillm.text.bpe.MergeTable), non-ASCII text was split
collapsed (minillm.text.pretokenize.collapse), the added tokens became a trie
(minillm.text.tokenizer.longest_match_pattern) and SentencePiece's parts were cut in NumPy.
Every figure comes from a fresh process.

    python -m bench.studies.tokenizer_footprint [--before REV | --before_tree DIR]
                                                [--case NAME=PATH ...] [--repeats 3]
                                                [--text FILE] [--where 0]

The cases: Gemma 3 270M's and SmolLM2-135M-Instruct's tokenizer.json as `minillm fetch` keeps
it in the .npz file, Gemma 3's GGUF metadata (SentencePiece merged by score), SmolLM2's GGUF
metadata, and the shipped 2k vocabulary (weights/tokenizer.json), from minillm's cache folder
($MINILLM_CACHE, else ~/.cache/minillm); --case NAME=PATH adds or replaces one (.npz, .gguf or
tokenizer.json). A missing file is a line that says so.

Each child process reads the tokenizer's source (the JSON text, or the GGUF metadata), then:
    resident MiB    VmRSS after building the tokenizer and dropping the source, less VmRSS
                    before reading it: what the process holds for the tokenizer (a tokenizer
                    that keeps its tokenizer.json counts it)
    peak MiB        VmHWM then, less VmRSS before reading: reading and building at their most
    build ms        Tokenizer.from_json / from_gguf
    first ASCII ms  the first encode, of a short ASCII sentence
    first other ms  then the first encode of a short sentence with non-ASCII characters
    text cold ms    then the first encode of --text (weights/web_valid.txt, 244 kB): every
                    word merged from its bytes
    text warm ms    the same text again, every word in the cache (median of three)
The times are the process's CPU time (time.process_time: one thread; on a shared machine the
other work moves it less than the wall clock). A second process gives "traced MiB":
tracemalloc's count of the bytes allocated since before the source was read and still held
after the build, the source dropped (Python's objects and NumPy's arrays, without the
allocator's slack).

"before" is the minillm package of --before REV (`git archive`; default: the parent of the
commit that added this file) or of the tree --before_tree DIR; "after" is this tree's. The
two alternate, --repeats times each; the tables give medians and after / before, and say
whether every encode gave the same ids in both. --where N: also the N source lines holding
the most traced memory after each build.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[2]
TEXT = HERE / "weights" / "web_valid.txt"
ASCII_TEXT = "The quick brown fox jumps over the lazy dog, and then it rests for 12 minutes."
OTHER_TEXT = "Grüße aus Köln: 日本語のテキスト, ½ € — déjà vu 🙂 Ελληνικά."

# Run in the child with (kind, path, text path, traced lines or -1 for the timed run); it
# prints one JSON line.
CHILD = r"""
import gc, hashlib, json, sys, time
kind, path, text_path, where = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
ASCII_TEXT, OTHER_TEXT = json.loads(sys.argv[5])

def status(key):
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith(key + ":")) / 1024

import numpy as np
from minillm.text.tokenizer import Tokenizer, TokenizerConfig
gc.collect()
base = status("VmRSS")
if where >= 0:  # from before the source is read: a tokenizer that keeps it is charged for it
    import tracemalloc
    tracemalloc.start()
if kind == "npz":
    with np.load(path) as z:
        source = str(z["minillm.tokenizer"][()])
        config = (TokenizerConfig.from_json(str(z["minillm.tokenizer_config"][()]))
                  if "minillm.tokenizer_config" in z.files else None)
elif kind == "gguf":
    from minillm.files.gguf import read_gguf
    source = read_gguf(path).metadata
else:
    with open(path, encoding="utf-8") as f:
        source, config = f.read(), None
start = time.process_time()
tok = Tokenizer.from_gguf(source) if kind == "gguf" else Tokenizer.from_json(source, config)
build = time.process_time() - start
del source
gc.collect()
if where >= 0:
    traced = tracemalloc.get_traced_memory()[0] / 2**20
    top = [str(s) for s in tracemalloc.take_snapshot().statistics("lineno")[:where]]
    print(json.dumps({"traced": traced, "top": top}))
    raise SystemExit
result = {"resident": status("VmRSS") - base, "peak": status("VmHWM") - base, "build": build}
digest = hashlib.sha256()
def timed(name, text):
    start = time.process_time()
    ids = tok.encode(text)
    result[name] = time.process_time() - start
    digest.update(json.dumps(ids).encode())
timed("first ASCII", ASCII_TEXT)
timed("first other", OTHER_TEXT)
with open(text_path, encoding="utf-8") as f:
    text = f.read()
timed("text cold", text)
warm = []
for _ in range(3):
    timed("text warm", text)
    warm.append(result["text warm"])
result["text warm"] = sorted(warm)[1]
result["ids"] = digest.hexdigest()[:16]
print(json.dumps(result))
"""

METRICS = (("resident", "MiB"), ("peak", "MiB"), ("traced", "MiB"), ("build", "ms"),
           ("first ASCII", "ms"), ("first other", "ms"), ("text cold", "ms"),
           ("text warm", "ms"))


def default_cases() -> dict:
    from minillm.files.registry import MODELS, cache_folder

    folder = cache_folder()
    return {"Gemma 3 270M, tokenizer.json (.npz)": folder / "gemma3-270m.npz",
            "SmolLM2-135M, tokenizer.json (.npz)": folder / "smollm2-135m-instruct.npz",
            "Gemma 3 270M, GGUF metadata": folder / MODELS["gemma3-270m"].filename,
            "SmolLM2-135M, GGUF metadata": folder / MODELS["smollm2-135m-instruct"].filename,
            "shipped 2k, tokenizer.json": HERE / "weights" / "tokenizer.json"}


def kind_of(path: Path) -> str:
    return {".npz": "npz", ".gguf": "gguf"}.get(path.suffix, "json")


def run_child(tree: Path, path: Path, text: Path, where: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1")
    args = [kind_of(path), str(path), str(text), str(where),
            json.dumps([ASCII_TEXT, OTHER_TEXT])]
    # cwd: `python -c` imports from the working folder before PYTHONPATH.
    out = subprocess.run([sys.executable, "-c", CHILD, *args], capture_output=True, text=True,
                         env=env, cwd=tree)
    if out.returncode != 0:
        raise RuntimeError(f"the child failed on {path} in {tree}:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=HERE, capture_output=True, text=True,
                          check=True).stdout.strip()


def before_revision() -> str:
    """The parent of the commit that added this file."""
    added = git("log", "--diff-filter=A", "--format=%H", "--",
                "bench/studies/tokenizer_footprint.py").splitlines()
    if not added:
        raise SystemExit("this study is not committed yet: name the tree before with --before "
                         "REV or --before_tree DIR")
    return added[-1] + "^"


def export(revision: str, folder: str) -> Path:
    """The minillm package of `revision`, written into `folder`."""
    archive = subprocess.run(["git", "archive", revision, "minillm"], cwd=HERE,
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", folder], input=archive, check=True)
    return Path(folder)


def measure(trees: dict, path: Path, text: Path, repeats: int, where: int) -> dict:
    """{tree name: {metric: median}}, the trees alternating; also each tree's ids digests."""
    runs = {name: [] for name in trees}
    for _ in range(repeats):
        for name, tree in trees.items():
            runs[name].append(run_child(tree, path, text, -1))
    traced = {name: run_child(tree, path, text, where) for name, tree in trees.items()}
    out = {}
    for name, results in runs.items():
        out[name] = {metric: statistics.median(r[metric] for r in results)
                     for metric, _ in METRICS if metric != "traced"}
        out[name]["traced"] = traced[name]["traced"]
        out[name]["top"] = traced[name]["top"]
        out[name]["ids"] = {r["ids"] for r in results}
    return out


def table(figures: dict) -> str:
    before, after = figures["before"], figures["after"]
    lines = ["| | before | after | after / before |", "| --- | --- | --- | --- |"]
    for metric, unit in METRICS:
        scale = 1e3 if unit == "ms" else 1  # the children give seconds
        b, a = before[metric] * scale, after[metric] * scale
        ratio = f"{a / b:.3f}" if b > 0 else "-"
        lines.append(f"| {metric} ({unit}) | {b:.1f} | {a:.1f} | {ratio} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python -m bench.studies.tokenizer_footprint",
                                description=__doc__.splitlines()[0])
    p.add_argument("--before", default=None, metavar="REV",
                   help="the git revision before (default: the parent of this file's commit)")
    p.add_argument("--before_tree", default=None, metavar="DIR",
                   help="a minillm source tree to take as before, instead of --before")
    p.add_argument("--case", action="append", default=[], metavar="NAME=PATH")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--text", default=str(TEXT))
    p.add_argument("--where", type=int, default=0, metavar="N")
    args = p.parse_args(argv)
    cases = default_cases()
    for case in args.case:
        name, _, path = case.partition("=")
        cases[name] = Path(path)
    print(f"command: `{' '.join(['python -m bench.studies.tokenizer_footprint'] + argv)}`")
    print(f"load average at start: {', '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
    with tempfile.TemporaryDirectory() as folder:
        if args.before_tree is not None:
            before = Path(args.before_tree)
        else:
            revision = args.before or before_revision()
            before = export(revision, folder)
            print(f"before: {git('rev-parse', '--short', revision)}, after: this tree\n")
        trees = {"before": before, "after": HERE}
        for name, path in cases.items():
            if not Path(path).is_file():
                print(f"## {name}\n\n{path} not found\n")
                continue
            figures = measure(trees, Path(path), Path(args.text), args.repeats, args.where)
            same = figures["before"]["ids"] == figures["after"]["ids"]
            print(f"## {name}\n\n{path}; the ids of every encode: "
                  f"{'the same' if same else 'DIFFERENT'}\n\n{table(figures)}\n")
            for tree in trees if args.where else ():
                print(f"traced memory by line, {tree}:")
                print("\n".join("    " + line for line in figures[tree]["top"]) + "\n")
    print(f"load average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
