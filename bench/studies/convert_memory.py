"""Peak resident memory of converting the real GGUF files and of loading what the conversion
wrote: each case in a fresh process, its VmHWM (MiB) read from /proc/self/status at its end.

    python -m bench.studies.convert_memory [--gguf PATH ...] [--tree DIR] [--no_fetch]

The cases, for each GGUF file of a model that `minillm fetch` knows:
    convert f32     minillm convert MODEL.gguf OUT.npz
    convert int8    minillm convert MODEL.gguf OUT-int8.npz --int8
    fetch f32/int8  minillm fetch NAME [--int8] --out DIR/, the GGUF file (and the model's
                    terms of use, if it has some) already in DIR: nothing is downloaded
    load ...        minillm.load(OUT.npz) (the fast model, the default), fast=False (the
                    reference model), and minillm.load(OUT-int8.npz)
The "float32 model" line is the reference model's parameter bytes (Model.nbytes).

--gguf: the files (default: those of `minillm fetch`'s models in minillm's cache folder).
--tree: the minillm source tree the processes import (default: this one); a tree of an
earlier commit, `git archive COMMIT | tar -x -C DIR`, gives the figures before a change.
Peak RSS is a size, not a time: one run per case.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from minillm.files.registry import MODELS, cache_folder

HERE = Path(__file__).resolve().parents[2]
# Run in the child; it ends by printing one JSON line: {"peak": MiB, "nbytes": bytes or None}.
CHILD = """
import json, sys
result = {"nbytes": None}
%s
with open("/proc/self/status") as f:
    result["peak"] = next(int(l.split()[1]) for l in f if l.startswith("VmHWM")) / 1024
print(json.dumps(result))
"""
CLI = "from minillm.cli import main\nassert main(%r) == 0"
LOAD = "import minillm\nresult['nbytes'] = minillm.load(%r, fast=%r).nbytes"


def run_child(code: str, tree: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1")
    # cwd: `python -c` imports from the working folder before PYTHONPATH.
    out = subprocess.run([sys.executable, "-c", CHILD % code], capture_output=True, text=True,
                         env=env, cwd=tree)
    if out.returncode != 0:
        raise RuntimeError(f"the child failed:\n{code}\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def model_of(gguf: Path) -> str:
    for name, source in MODELS.items():
        if source.filename == gguf.name:
            return name
    raise SystemExit(f"{gguf}: not the file of a model minillm fetch knows")


def cases(name: str, gguf: Path, folder: Path, fetch: bool) -> list:
    """(label, command shown, child code) of each case, in the order they must run."""
    f32, int8 = folder / f"{name}.npz", folder / f"{name}-int8.npz"
    out = [("convert f32", f"minillm convert {gguf.name} {f32.name}",
            CLI % (["convert", str(gguf), str(f32)],)),
           ("convert int8", f"minillm convert {gguf.name} {int8.name} --int8",
            CLI % (["convert", str(gguf), str(int8), "--int8"],))]
    if fetch:
        shop = folder / "fetch"
        for flag in ((), ("--int8",)):
            out.append((f"fetch {'int8' if flag else 'f32'}",
                        f"minillm fetch {name} {' '.join(flag)} --out DIR/".replace("  ", " "),
                        CLI % (["fetch", name, *flag, "--out", f"{shop}/"],)))
    out += [("load f32 (fast)", f"minillm.load({f32.name!r})", LOAD % (str(f32), True)),
            ("load f32 (reference)", f"minillm.load({f32.name!r}, fast=False)",
             LOAD % (str(f32), False)),
            ("load int8 (fast)", f"minillm.load({int8.name!r})", LOAD % (str(int8), True))]
    return out


def prepare_fetch(name: str, gguf: Path, folder: Path) -> bool:
    """Link the GGUF file (and the terms of use) into folder/fetch; False when the terms are
    not beside the GGUF file (the fetch would download them)."""
    shop = folder / "fetch"
    shop.mkdir()
    (shop / gguf.name).symlink_to(gguf.resolve())
    terms = MODELS[name].terms
    if terms is not None:
        beside = gguf.resolve().parent / Path(terms[1]).name
        if not beside.is_file():
            return False
        (shop / beside.name).symlink_to(beside)
    return True


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gguf", nargs="*", default=None, help="GGUF files (default: the "
                        "cache folder's files of minillm fetch's models)")
    parser.add_argument("--tree", default=str(HERE), help="the minillm tree to import")
    parser.add_argument("--no_fetch", action="store_true", help="leave out the fetch cases")
    args = parser.parse_args(argv)
    ggufs = ([Path(p) for p in args.gguf] if args.gguf is not None else
             [cache_folder() / s.filename for s in MODELS.values()
              if (cache_folder() / s.filename).is_file()])
    tree = Path(args.tree).resolve()
    print(f"minillm tree: {tree}; peak resident memory (VmHWM) of each case in a fresh "
          "process, one BLAS thread\n")
    print("| model | case | command | peak RSS |")
    print("| --- | --- | --- | --- |")
    for gguf in ggufs:
        name = model_of(gguf)
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            fetch = not args.no_fetch and prepare_fetch(name, gguf, folder)
            if not args.no_fetch and not fetch:
                print(f"| {name} | fetch | left out: no terms of use beside {gguf} | |")
            for label, shown, code in cases(name, gguf, folder, fetch):
                result = run_child(code, tree)
                print(f"| {name} | {label} | `{shown}` | {result['peak']:,.0f} MiB |",
                      flush=True)
                if label == "load f32 (reference)":
                    print(f"| {name} | float32 model | `Model.nbytes` | "
                          f"{result['nbytes'] / 2**20:,.0f} MiB |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
