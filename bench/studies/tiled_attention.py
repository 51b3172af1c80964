"""Causal attention over a long text: the reference `layers.attention` (the whole score matrix,
masked) against the fast path's tiled `fast_attention.causal_attention`, at several tile sizes, and
PyTorch's `scaled_dot_product_attention` as a peer; seconds per call, one layer.

    python -m bench.studies.tiled_attention [--lengths 1024 4096] [--repeat 2] [--threads 1]

The shape is one attention layer of SmolLM2-135M (9 query heads, 3 key/value heads, head size
64), float32, a prefill of T tokens (queries and keys T long, causal). Contenders:
  reference        layers.attention(q, k, v, mask): (3·T x T) scores per key head at once, the
                   masked half included (left out past --reference-max tokens: 2.4 GB of
                   scores at 8,192)
  tiled R x E      fast_attention.causal_attention with QUERY_ROWS = R and SCORE_ENTRIES = E:
                   blocks of R queries of one key head (3 query heads), keys in blocks of
                   E / (3 R) with the running softmax
  per block R      the same with one block of keys per block of queries (the softmax of a
                   block of queries over every key it may see at once: no running softmax)
  torch sdpa       torch.nn.functional.scaled_dot_product_attention(is_causal=True), keys and
                   values repeated to 9 heads as transformers does
Then one decoding step (one query against T cached keys) for the reference and the shipped
tiles. The figures behind QUERY_ROWS and SCORE_ENTRIES (docs/PERFORMANCE.md, "Tiled attention").
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from minillm.fast import attention as fast_attention
from minillm.layers import attention
from minillm.layers import positions_and_mask

from ..suite.machine import set_threads

HEADS, KV_HEADS, HEAD_DIM = 9, 3, 64  # SmolLM2-135M
TILES = [(64, 2 ** 18), (64, 2 ** 19), (128, 2 ** 17), (128, 2 ** 18), (128, 2 ** 19),
         (256, 2 ** 18)]
PER_BLOCK = [16, 64]


def seconds(fn, repeat: int) -> float:
    """The best of `repeat` timed calls (after one untimed call)."""
    fn()
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def tiled(q, k, v, mask, rows, entries):
    """fast_attention.causal_attention with its two constants set to (rows, entries)."""
    saved = fast_attention.QUERY_ROWS, fast_attention.SCORE_ENTRIES
    fast_attention.QUERY_ROWS, fast_attention.SCORE_ENTRIES = rows, entries
    try:
        return fast_attention.causal_attention(q, k, v, mask)
    finally:
        fast_attention.QUERY_ROWS, fast_attention.SCORE_ENTRIES = saved


def contenders(q, k, v, reference_max: int) -> dict:
    """{name: a call computing the causal attention of the prefill}."""
    T = q.shape[2]
    mask = positions_and_mask(1, T, 0, None)[1]  # (T, T) booleans, as a forward pass gives
    out = {}
    if T <= reference_max:
        out["reference"] = lambda: attention(q, k, v, mask)
    for rows, entries in TILES:
        out[f"tiled {rows} x 2^{entries.bit_length() - 1}"] = (
            lambda rows=rows, entries=entries: tiled(q, k, v, mask, rows, entries))
    for rows in PER_BLOCK:  # one key block: SCORE_ENTRIES past any length
        out[f"per block {rows}"] = lambda rows=rows: tiled(q, k, v, mask, rows, 2 ** 62)
    try:
        import torch
    except ImportError:
        return out
    group = HEADS // KV_HEADS
    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
    tk, tv = tk.repeat_interleave(group, dim=1), tv.repeat_interleave(group, dim=1)
    out["torch sdpa"] = lambda: torch.nn.functional.scaled_dot_product_attention(
        tq, tk, tv, is_causal=True)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.studies.tiled_attention",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="BLAS and torch threads (1)")
    parser.add_argument("--reference-max", type=int, default=4096,
                        help="longest prefill the reference is timed at (4096)")
    args = parser.parse_args(argv)
    print(set_threads(args.threads)[0] + "\n")
    rng = np.random.default_rng(0)
    print("| T | contender | prefill s | ÷ shipped tiles | scores held at once, MiB |")
    print("| ---: | --- | ---: | ---: | ---: |")
    rows, entries = fast_attention.QUERY_ROWS, fast_attention.SCORE_ENTRIES
    shipped = f"tiled {rows} x 2^{entries.bit_length() - 1}"
    for T in args.lengths:
        q = rng.standard_normal((1, HEADS, T, HEAD_DIM), dtype=np.float32)
        k, v = (rng.standard_normal((1, KV_HEADS, T, HEAD_DIM), dtype=np.float32)
                for _ in range(2))
        calls = contenders(q, k, v, args.reference_max)
        times = {name: seconds(fn, args.repeat) for name, fn in calls.items()}
        for name, t in times.items():
            print(f"| {T} | {name} | {t:.3f} | {t / times[shipped]:.2f} | "
                  f"{held_mib(name, T):.1f} |", flush=True)
    print("\n| cached keys | contender | decode step ms |")
    print("| ---: | --- | ---: |")
    for S in args.lengths:
        q = rng.standard_normal((1, HEADS, 1, HEAD_DIM), dtype=np.float32)
        k, v = (rng.standard_normal((1, KV_HEADS, S, HEAD_DIM), dtype=np.float32)
                for _ in range(2))
        steps = {"reference": lambda: attention(q, k, v),
                 shipped: lambda: fast_attention.causal_attention(q, k, v)}
        for name, fn in steps.items():
            print(f"| {S} | {name} | {seconds(fn, 5 * args.repeat) * 1e3:.2f} |", flush=True)
    return 0


def held_mib(name: str, T: int) -> float:
    """The float32 scores one call holds at once (the peer's: not known, 0)."""
    if name == "reference":
        return HEADS * T * T * 4 / 2 ** 20
    group = HEADS // KV_HEADS  # a prefill's tile: the queries of one key head
    if name.startswith("tiled"):
        rows, entries = name.split()[1], name.split()[3]
        rows, entries = int(rows), 2 ** int(entries[2:])
        keys = max(rows, entries // (group * rows))
        return group * min(rows, T) * min(keys, T) * 4 / 2 ** 20
    if name.startswith("per block"):
        return group * int(name.split()[2]) * T * 4 / 2 ** 20
    return 0.0


if __name__ == "__main__":
    raise SystemExit(main())
