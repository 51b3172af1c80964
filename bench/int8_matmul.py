"""Time the int8 weight matmul options against the float32 matmul, for decode and prefill.

    python bench/int8_matmul.py [--rows 1 128] [--repeat 7]
    python bench/int8_matmul.py --decode 128     # tokens/s of a random Sprout-size model

Shapes (out, in) are the linear layers of the Sprout size (d_model 384, d_ff 1024) and of
GPT-2 small. For each option the table gives microseconds per call (the best of `repeat`
timings, each the mean of several calls) and the ratio to the float32 matmul x @ W.T.
Options:
  astype      (x @ Q.astype(float32).T) * s: widen the whole matrix per call (a big temporary)
  mixed       (x @ Q.T) * s: NumPy's own int8 x float32 matmul (casts internally, no BLAS)
  block NK    widen N KiB of rows at a time into a buffer allocated per call, BLAS per block
  prealloc    as block, into a buffer kept with the weight (costs resident memory)
BLAS threads: set OPENBLAS_NUM_THREADS (the machine's other core is usually busy).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from minillm.quantize import BLOCK_BYTES, blocked_matmul, quantize_rows  # noqa: E402

SHAPES = {"sprout": [(1152, 384), (384, 384), (2048, 384), (384, 1024)],
          "gpt2-small": [(2304, 768), (768, 768), (3072, 768), (768, 3072)]}
BLOCKS_KIB = (32, 128, 256, 1024)


def best_time(fn, repeat: int) -> float:
    """Best mean time of one call in microseconds; about 20 ms of calls per timing."""
    fn()
    t0 = time.perf_counter()
    fn()
    calls = max(1, int(0.02 / max(time.perf_counter() - t0, 1e-7)))
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best * 1e6


def blocked(x, q, s, kib, buffer=None):
    rows = max(1, kib * 1024 // (4 * q.shape[1]))
    if buffer is None:
        buffer = np.empty((min(rows, q.shape[0]), q.shape[1]), np.float32)
    y = np.empty((x.shape[0], q.shape[0]), np.float32)
    blocked_matmul(x, q, s, y, buffer)
    return y


def options(x, w, q, s):
    """name -> a function computing x @ W.T (approximately, for the int8 ones)."""
    rows = max(1, BLOCK_BYTES // (4 * q.shape[1]))
    kept = np.empty((min(rows, q.shape[0]), q.shape[1]), np.float32)
    opts = {"float32": lambda: x @ w.T,
            "astype": lambda: (x @ q.astype(np.float32).T) * s}
    if x.shape[0] == 1:
        opts["mixed"] = lambda: (x @ q.T) * s
    for kib in BLOCKS_KIB:
        opts[f"block {kib}K"] = lambda kib=kib: blocked(x, q, s, kib)
    opts[f"prealloc {BLOCK_BYTES // 1024}K"] = lambda: blocked(x, q, s, 0, kept)
    return opts


def decode_speed(new_tokens: int) -> None:
    """Greedy cached decode of a random Sprout-size model, float32 against its int8 copy."""
    import minillm
    from minillm.quantize import weight_bytes

    cfg = minillm.ModelConfig(arch="modern", vocab_size=8192, context_length=512, d_model=384,
                              n_layers=8, n_heads=6, d_ff=1024)
    model = minillm.random_model(cfg, seed=0, dtype="float32")
    prompt = list(range(1, 17))
    for name, m in [("float32", model), ("int8", minillm.quantize(model))]:
        minillm.generate(m, prompt, max_new_tokens=4, temperature=0)  # warm up
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            minillm.generate(m, prompt, max_new_tokens=new_tokens, temperature=0)
            best = min(best, time.perf_counter() - t0)
        print(f"{name:8s} {new_tokens / best:7.1f} tokens/s   weights in memory "
              f"{weight_bytes(m) / 2**20:6.2f} MiB", flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 128],
                        help="rows of x: 1 is a decode step, more is a prefill")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--decode", type=int, default=0, metavar="N",
                        help="instead: decode N tokens with a random Sprout-size model")
    args = parser.parse_args(argv)
    if args.decode:
        decode_speed(args.decode)
        return 0
    rng = np.random.default_rng(0)
    print(f"numpy {np.__version__}; block buffer in minillm: {BLOCK_BYTES // 1024} KiB")
    for n in args.rows:
        print(f"\nx: ({n}, in) float32 -- microseconds per call (ratio to float32)")
        header = None
        for model, shapes in SHAPES.items():
            for out_f, in_f in shapes:
                w = (0.02 * rng.standard_normal((out_f, in_f))).astype(np.float32)
                q, s = quantize_rows(w)
                x = rng.standard_normal((n, in_f)).astype(np.float32)
                timings = {k: best_time(f, args.repeat) for k, f in options(x, w, q, s).items()}
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
