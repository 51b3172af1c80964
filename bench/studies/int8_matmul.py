"""Time the int8 weight matmul options against the float32 matmul, for decode and prefill.

    python -m bench.studies.int8_matmul [--rows 1 128] [--repeat 7]
    python -m bench.studies.int8_matmul --decode 64 [--size gpt2-small]   # tokens/s, random model

Shapes (out, in) are the linear layers of the Sprout size (d_model 384, d_ff 1024) and of
GPT-2 small. For each option the table gives microseconds per call (the best of `repeat`
timings, each the mean of several calls) and the ratio to the float32 matmul x @ W.T.
Options:
  astype      (x @ Q.astype(float32).T) * s: widen the whole matrix per call (a big temporary)
  mixed       (x @ Q.T) * s: NumPy's own int8 x float32 matmul (casts internally, no BLAS)
  block NK    minillm.fast.blocked_matmul: widen N KiB of rows at a time into a buffer
              allocated per call, BLAS per block (minillm.fast.Int8 does this with BLOCK_BYTES)
  prealloc    as block, into a buffer kept with the weight (costs resident memory)
BLAS threads: --threads (1 by default: the machine's other core is usually busy).
"""
from __future__ import annotations

import argparse
import itertools
import sys
import time

import numpy as np

from minillm.fast.model import BLOCK_BYTES, blocked_matmul
from minillm.quantize import quantize_rows

from ..suite.machine import set_threads
from ..suite.timing import best_time

SHAPES = {"sprout": [(1152, 384), (384, 384), (2048, 384), (384, 1024)],
          "gpt2-small": [(2304, 768), (768, 768), (3072, 768), (768, 3072)]}
BLOCKS_KIB = (32, 128, 256, 1024)


def blocked(x, q, s, kib, buffer=None):
    rows = max(1, kib * 1024 // (4 * q.shape[1]))
    if buffer is None:
        buffer = np.empty((min(rows, q.shape[0]), q.shape[1]), np.float32)
    y_t = np.empty((q.shape[0], x.shape[0]), np.float32)
    blocked_matmul(x, q, s, y_t, buffer)
    return y_t.T


def options(x, w, q, s, copies: int = 1):
    """name -> a function computing x @ W.T (approximately, for the int8 ones).

    With copies > 1 every call uses the next of `copies` copies of the weight, so that the
    weights come from memory rather than from cache, as in a model bigger than the cache.
    """
    rows = max(1, BLOCK_BYTES // (4 * q.shape[1]))
    kept = np.empty((min(rows, q.shape[0]), q.shape[1]), np.float32)
    ws = itertools.cycle([w.copy() for _ in range(copies)])
    qs = itertools.cycle([q.copy() for _ in range(copies)])
    opts = {"float32": lambda: x @ next(ws).T,
            "astype": lambda: (x @ next(qs).astype(np.float32).T) * s}
    if x.shape[0] == 1:
        opts["mixed"] = lambda: (x @ next(qs).T) * s
    for kib in BLOCKS_KIB:
        opts[f"block {kib}K"] = lambda kib=kib: blocked(x, next(qs), s, kib)
    opts[f"prealloc {BLOCK_BYTES // 1024}K"] = lambda: blocked(x, next(qs), s, 0, kept)
    return opts


MODELS = {"sprout": dict(arch="modern", vocab_size=8192, context_length=512, d_model=384,
                        n_layers=8, n_heads=6, d_ff=1024),
          "gpt2-small": dict(arch="classic", vocab_size=50257, context_length=1024, d_model=768,
                             n_layers=12, n_heads=12)}


def decode_speed(new_tokens: int, size: str, blocks_kib) -> None:
    """Greedy cached decode of a random model, float32 against int8 copies with several block
    sizes of minillm.fast.Int8 (a block as big as the matrix is the whole-matrix astype)."""
    import minillm
    import minillm.fast as fast

    model = minillm.random_model(minillm.ModelConfig(**MODELS[size]), seed=0, dtype="float32")
    model8 = minillm.quantize(model)
    prompt = list(range(1, 17))
    runs = [("float32", model, None)] + [
        (f"int8 block {kib}K" if kib < 2**20 else "int8 whole matrix", model8, kib)
        for kib in blocks_kib]
    print(f"{size}: prompt 16 tokens, {new_tokens} new tokens, greedy, KV cache")
    default = fast.BLOCK_BYTES
    try:
        for name, m, kib in runs:
            if kib is not None:
                fast.BLOCK_BYTES = kib * 1024  # read by fast.Int8.matmul at every call
            minillm.generate(m, prompt, max_new_tokens=4, temperature=0)  # warm up
            best = float("inf")
            for _ in range(3):
                t0 = time.perf_counter()
                minillm.generate(m, prompt, max_new_tokens=new_tokens, temperature=0)
                best = min(best, time.perf_counter() - t0)
            print(f"{name:20s} {new_tokens / best:7.1f} tokens/s   weights in memory "
                  f"{m.nbytes / 2**20:7.2f} MiB", flush=True)
    finally:
        fast.BLOCK_BYTES = default


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.studies.int8_matmul",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 128],
                        help="rows of x: 1 is a decode step, more is a prefill")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1, help="BLAS threads (1)")
    parser.add_argument("--cold", type=int, default=0, metavar="MIB",
                        help="cycle through copies of each weight, at least MIB MiB of int8 "
                             "(choose 3x the last-level cache): weights read from memory")
    parser.add_argument("--decode", type=int, default=0, metavar="N",
                        help="instead: decode N tokens with a random model of --size")
    parser.add_argument("--size", choices=sorted(MODELS), default="sprout")
    parser.add_argument("--blocks", type=int, nargs="+", default=[256, 1024, 4096, 2**20],
                        metavar="KIB", help="int8 block sizes for --decode")
    args = parser.parse_args(argv)
    print(set_threads(args.threads)[0])
    if args.decode:
        decode_speed(args.decode, args.size, args.blocks)
        return 0
    rng = np.random.default_rng(0)
    print(f"numpy {np.__version__}; block buffer of minillm.fast.Int8: {BLOCK_BYTES // 1024} KiB")
    for n in args.rows:
        where = f"weights from memory ({args.cold} MiB of int8 copies)" if args.cold else (
            "weights hot in cache")
        print(f"\nx: ({n}, in) float32, {where} -- microseconds per call (ratio to float32)")
        header = None
        for model, shapes in SHAPES.items():
            for out_f, in_f in shapes:
                w = (0.02 * rng.standard_normal((out_f, in_f))).astype(np.float32)
                q, s = quantize_rows(w)
                x = rng.standard_normal((n, in_f)).astype(np.float32)
                copies = max(1, -(-args.cold * 2**20 // q.nbytes))
                timings = {k: best_time(f, args.repeat)
                           for k, f in options(x, w, q, s, copies).items()}
                if header is None:
                    header = list(timings)
                    print(f"{'shape':>20s} " + " ".join(f"{k:>15s}" for k in header))
                base = timings["float32"]
                cells = [f"{timings['float32']:9.1f}      "] + [
                    f"{t:8.1f} ({t / base:4.2f})" for k, t in timings.items() if k != "float32"]
                print(f"{model + f' {out_f}x{in_f}':>20s} " + " ".join(f"{c:>15s}" for c in cells),
                      flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
