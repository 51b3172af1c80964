"""Products with a few rows (a batch decoding one token a row, a verify pass): the reference
`layers.linear` against the fast path's `fast.Dense` and the one-call product it builds on,
microseconds per call.

    python -m bench.studies.few_rows [--rows 4 8] [--repeat 7] [--threads 1]

For each linear layer of a block of the benchmark sizes (bench.suite.shapes.FULL_SIZES), laid
out as `Model` lays it out (`fast.laid_out`: column-major, or row-major for a large down
projection), with x of N rows shaped (N, 1, in) as in batched decoding:
  linear    minillm.layers.linear(x, W), the reference x @ W.T: on a 3-D x, NumPy makes N
            matrix-vector products
  one call  x.reshape(N, in) @ W.T: one product, which OpenBLAS packs first when it has more
            than 10^6 multiply-adds
  Dense     minillm.fast.Dense(W).matmul(x): one product, cut into blocks of W's rows under
            fast.SMALL_PRODUCT when N <= fast.FEW_ROWS (as W @ x.T when W is row-major)
"""
from __future__ import annotations

import argparse

import numpy as np

from minillm import ModelConfig
from minillm.config import parameter_shapes
from minillm.fast.model import SMALL_PRODUCT, Dense, laid_out
from minillm.layers import linear
from minillm.quantize import is_linear_weight

from ..suite.machine import set_threads
from ..suite.shapes import FULL_SIZES
from ..suite.timing import best_time


def block_shapes(fields: dict) -> list:
    """(out, in) of the linear layers of one block of a size (q/k/v, out, MLP)."""
    shapes = parameter_shapes(ModelConfig(**fields))
    return [shape for name, shape in shapes.items()
            if name.startswith("layers.0.") and is_linear_weight(name)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.studies.few_rows",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1, help="BLAS threads (1)")
    args = parser.parse_args(argv)
    print(set_threads(args.threads)[0] + "\n")
    rng = np.random.default_rng(0)
    print("| size | W (out x in) | layout | rows | multiply-adds | linear µs | one call µs "
          "| Dense µs | linear ÷ Dense | one call ÷ Dense |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for size, fields in FULL_SIZES.items():
        for out_features, in_features in block_shapes(fields):
            w = laid_out(rng.standard_normal((out_features, in_features), dtype=np.float32))
            dense = Dense(w)
            layout = "column-major" if w.flags.f_contiguous else "row-major"
            for n in args.rows:
                x = rng.standard_normal((n, 1, in_features), dtype=np.float32)
                rows = x.reshape(n, in_features)
                reference = best_time(lambda: linear(x, w), args.repeat)
                one = best_time(lambda: rows @ w.T, args.repeat)
                fast = best_time(lambda: dense.matmul(x), args.repeat)
                work = n * w.size
                mark = "" if work <= SMALL_PRODUCT else " (> SMALL_PRODUCT)"
                print(f"| {size} | {out_features} x {in_features} | {layout} | {n} | "
                      f"{work:,}{mark} | {reference:.1f} | {one:.1f} | {fast:.1f} | "
                      f"{reference / fast:.2f}x | {one / fast:.2f}x |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
