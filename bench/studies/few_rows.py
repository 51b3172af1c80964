"""Products with a few rows (a batch decoding one token a row, a verify pass): minillm's
`linear` against the one-call products it replaces, microseconds per call.

    python -m bench.studies.few_rows [--rows 4 8] [--repeat 7]

For each linear layer of the benchmark sizes, laid out as `Model` lays it out (column-major,
bench.shapes.FULL_SIZES), with x of N rows:
  stacked   x @ W.T with x (N, 1, in): NumPy makes N matrix-vector products
  one call  x @ W.T with x (N, in): one product, packed by OpenBLAS when above 10^6 multiply-adds
  linear    minillm.layers.linear: one product, in blocks of W's rows under SMALL_PRODUCT
Set OPENBLAS_NUM_THREADS to choose the BLAS threads (1 unless told otherwise is the fair case).
"""
from __future__ import annotations

import argparse

import numpy as np

from minillm.layers import SMALL_PRODUCT, linear

from .int8_matmul import best_time

SHAPES = {"student": [(576, 192), (192, 192), (768, 192), (192, 768)],
          "Sprout": [(1152, 384), (384, 384), (2048, 384)],
          "GPT-2-small": [(2304, 768), (768, 768), (3072, 768)]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print("| size | W (out x in) | rows | multiply-adds | stacked µs | one call µs | linear µs "
          "| one call ÷ linear |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for size, shapes in SHAPES.items():
        for out_features, in_features in shapes:
            w = np.asfortranarray(rng.standard_normal((out_features, in_features),
                                                      dtype=np.float32))
            for n in args.rows:
                x = rng.standard_normal((n, 1, in_features), dtype=np.float32)
                rows = x.reshape(n, in_features)
                stacked = best_time(lambda: x @ w.T, args.repeat)
                one = best_time(lambda: rows @ w.T, args.repeat)
                ours = best_time(lambda: linear(x, w), args.repeat)
                work = n * w.size
                mark = "" if work <= SMALL_PRODUCT else " (blocks)"
                print(f"| {size} | {out_features} x {in_features} | {n} | {work:,}{mark} | "
                      f"{stacked:.1f} | {one:.1f} | {ours:.1f} | {one / ours:.2f}x |")


if __name__ == "__main__":
    main()
