"""Products with a few rows (a batch decoding one token a row, a verify pass): the reference
`layers.linear` against the fast path's `fast.Dense` and the one-call product it builds on,
microseconds per call.

    python -m bench.studies.few_rows [--rows 4 8] [--repeat 7] [--threads 1]
                                     [--memory_rows 6 8 12 16] [--copies 30]

For each linear layer of a block of the benchmark sizes (bench.suite.shapes.FULL_SIZES), laid
out as `Model` lays it out (`fast.laid_out`: column-major, or row-major for a large down
projection), with x of N rows shaped (N, 1, in) as in batched decoding:
  linear    minillm.layers.linear(x, W), the reference x @ W.T: on a 3-D x, NumPy makes N
            matrix-vector products
  one call  x.reshape(N, in) @ W.T: one product, which OpenBLAS packs first when it has more
            than 10^6 multiply-adds
  Dense     minillm.fast.Dense(W).matmul(x): one product, cut into blocks of W's rows under
            fast.SMALL_PRODUCT when N <= fast.FEW_ROWS and W is held in cache
Those matrices are multiplied again and again, so they sit in cache. A real model's come
from memory: the second table (--memory_rows, SmolLM2-135M's shapes, random values) takes
--copies copies of each of its linear layers (30 layers' worth) and multiplies each once per
round, milliseconds for all copies:
  blocks    by blocks of W's rows under SMALL_PRODUCT (column-major W: x @ W_J.T; row-major
            W: W_J @ x.T), as the fast path multiplied up to FEW_ROWS rows before
  Dense     fast.Dense(W).matmul: six rows or more by a matrix read from memory
            (>= LARGE_MATRIX entries) in one call, in the layout of one-row products (the
            tied output layer's column-major copy)
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from minillm import ModelConfig
from minillm.config import parameter_shapes
from minillm.fast.model import SMALL_PRODUCT, Dense, blocks, laid_out
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
    parser.add_argument("--memory_rows", "--memory-rows", type=int, nargs="*",
                        default=[6, 8, 12, 16])
    parser.add_argument("--copies", type=int, default=30)
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
    if args.memory_rows:
        from_memory(args.memory_rows, args.copies, args.repeat, rng)
    return 0


SMOLLM2 = dict(arch="modern", vocab_size=49152, d_model=576, n_layers=30, n_heads=9,
               n_kv_heads=3, d_ff=1536, context_length=8192, tie_embeddings=True)


def by_blocks(x, w):
    """x @ W.T by blocks of W's rows under SMALL_PRODUCT: the fast path's few-row product
    before it told matrices read from memory apart."""
    n, d = x.shape
    if w.flags.f_contiguous:
        y = np.empty((n, w.shape[0]), np.float32)
        for start, stop in blocks(w.shape[0], n * d):
            np.matmul(x, w[start:stop].T, out=y[:, start:stop])
        return y
    xt, out = np.ascontiguousarray(x.T), np.empty((w.shape[0], n), np.float32)
    for start, stop in blocks(w.shape[0], n * d):
        np.matmul(w[start:stop], xt, out=out[start:stop])
    return out.T


def from_memory(rows_list, copies: int, repeat: int, rng) -> None:
    """The second table: each linear layer of SmolLM2 in `copies` copies (the output layer,
    the tied embedding of 113 MiB, in 3), each product reading its matrix from memory."""
    print(f"\nMatrices read from memory: SmolLM2-135M's shapes, {copies} copies each (the "
          "tied output layer 3), ms for all copies, the best of --repeat rounds\n")
    print("| W (out x in) | layout | rows | blocks ms | Dense ms | blocks ÷ Dense |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    kinds = [(shape, False) for shape in block_shapes(SMOLLM2)] + [((49152, 576), True)]
    for (out_features, in_features), tied in kinds:
        ws = [rng.standard_normal((out_features, in_features), dtype=np.float32)
              for _ in range(3 if tied else copies)]
        denses = [Dense(w, columns=np.asfortranarray(w)) if tied else Dense(laid_out(w))
                  for w in ws]
        layout = "row-major + column-major copy" if tied else (
            "column-major" if denses[0].w.flags.f_contiguous else "row-major")
        for n in rows_list:
            x = rng.standard_normal((n, in_features), dtype=np.float32)
            old = new = float("inf")
            for _ in range(repeat):  # alternated, each over every copy
                t0 = time.perf_counter()
                for dense in denses:
                    by_blocks(x, dense.w)
                t1 = time.perf_counter()
                for dense in denses:
                    dense.matmul(x)
                t2 = time.perf_counter()
                old, new = min(old, t1 - t0), min(new, t2 - t1)
            print(f"| {out_features} x {in_features} | {layout} | {n} | {old * 1e3:.2f} | "
                  f"{new * 1e3:.2f} | {old / new:.2f}x |", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
