"""The cached keys' layout: attention over plain keys (B, K, S, d), as kv_cache.py stores them,
against keys stored transposed, (B, K, d, S) per layer, the layout the cache once kept so that
Q K^T would multiply a row-major block. Microseconds per `layers.attention` call.

    python -m bench.studies.key_layout [--rounds 25] [--calls 300] [--threads 1]

For SmolLM2-135M's heads (9 query heads sharing 3 key heads of 64) and the Sprout and student
sizes' heads, one query token (decoding) or a 5-token pass (a verify pass) over S cached keys.
Both layouts are views into a longer cache, as the cache hands them out. The two are timed in
turn, `--calls` calls each, `--rounds` times; the table gives the medians and the median of the
per-round ratios (above 1: the transposed layout is faster).
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from minillm.layers import attention

from ..suite.machine import set_threads

CASES = [  # (label, query heads, key heads, head size, cached keys S, new tokens T)
    ("SmolLM2, decode", 9, 3, 64, 256, 1),
    ("SmolLM2, pass of 5", 9, 3, 64, 256, 5),
    ("SmolLM2, decode", 9, 3, 64, 1024, 1),
    ("Sprout, decode", 6, 2, 64, 128, 1),
    ("student, decode", 4, 2, 32, 128, 1),
    ("student, pass of 4", 4, 2, 32, 128, 4),
]
ROOM = 2048  # the cache's allocated positions: keys are a view of the first S


def per_call(fn, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def measure(H, K, d, S, T, rounds: int, calls: int):
    """(plain µs, transposed µs, median of plain / transposed per round)."""
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, H, T, d)).astype(np.float32)
    plain = rng.standard_normal((1, K, ROOM, d)).astype(np.float32)
    transposed = np.ascontiguousarray(plain.swapaxes(-1, -2))  # (1, K, d, ROOM)
    v = rng.standard_normal((1, K, ROOM, d)).astype(np.float32)
    k_plain, k_transposed = plain[:, :, :S], transposed[..., :S].swapaxes(-1, -2)
    mask = None if T == 1 else np.tril(np.ones((T, S), bool), S - T)
    a, b = [], []
    for _ in range(rounds):
        a.append(per_call(lambda: attention(q, k_plain, v[:, :, :S], mask), calls))
        b.append(per_call(lambda: attention(q, k_transposed, v[:, :, :S], mask), calls))
    return (float(np.median(a)) * 1e6, float(np.median(b)) * 1e6,
            float(np.median(np.array(a) / np.array(b))))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=25)
    p.add_argument("--calls", type=int, default=300)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    print(set_threads(args.threads)[0])
    print("| case | S | plain µs | transposed µs | plain / transposed |\n| --- | --- | --- | --- | --- |")
    for label, H, K, d, S, T in CASES:
        a, b, ratio = measure(H, K, d, S, T, args.rounds, args.calls)
        print(f"| {label} | {S} | {a:.1f} | {b:.1f} | {ratio:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
