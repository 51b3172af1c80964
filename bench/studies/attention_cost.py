"""Where a tile of the fast attention spends its time: each call of
`fast_attention.causal_attention`'s loop, timed separately and given in nanoseconds per score,
next to PyTorch's fused `scaled_dot_product_attention` per score and to `exp` alone per value.

    python -m bench.studies.attention_cost [--length 4096] [--rounds 3] [--threads 1]

One SmolLM2-135M attention layer (9 query heads, 3 key/value heads, head size 64), float32, a
causal prefill of T tokens; the loop is the shipped one (QUERY_ROWS queries, SCORE_ENTRIES
scores a tile, the product with [V, 1], the running softmax of fast_attention), with a clock
between its calls. A score is one (query, visible key) pair: T (T + 1) / 2 per head. The best
of --rounds.
"""
from __future__ import annotations

import argparse
import math
import time

import numpy as np

from minillm import fast_attention

from ..suite.machine import set_threads

HEADS, KV_HEADS, HEAD_DIM = 9, 3, 64  # SmolLM2-135M
STEPS = ("Q K^T", "mask", "running softmax")
PARTS = ("exp", "P [V, 1]")  # two of the running softmax's steps, timed again on a copy


def tile_loop(q, k, v):
    """fast_attention.causal_attention's loop for a causal prefill, each call it makes timed:
    {step: seconds}; and the running softmax's exp and product timed again on a copy of the
    tile (the rest of it, the maxima and the shift, is the difference)."""
    B, H, T, d = q.shape
    K, group = k.shape[1], H // k.shape[1]
    rows = fast_attention.QUERY_ROWS
    step = max(rows, fast_attention.SCORE_ENTRIES // (B * H * rows))
    clock = dict.fromkeys(STEPS + PARTS, 0.0)
    q = (q / math.sqrt(d)).reshape(B, K, group, T, d)
    v = np.concatenate([v, np.ones(v.shape[:-1] + (1,), v.dtype)], axis=-1)  # [V, 1]
    mask = np.tril(np.ones((T, T), dtype=bool))
    for t0 in range(0, T, rows):
        t1 = min(t0 + rows, T)
        n = t1 - t0
        qb = q[:, :, :, t0:t1].reshape(B, K, group * n, d)
        shift = acc = None
        for j0 in range(0, t1, step):
            j1 = min(j0 + step, t1)
            t = [time.perf_counter()]
            scores = qb @ k[:, :, j0:j1].swapaxes(-1, -2)
            t.append(time.perf_counter())
            fast_attention._hide(scores.reshape(B, K, group, n, j1 - j0), mask[t0:t1, j0:j1])
            t.append(time.perf_counter())
            tile = scores.copy()
            t.append(time.perf_counter())
            shift, acc = fast_attention._running_softmax(scores, v[:, :, j0:j1], shift, acc,
                                                         ones=True)
            t.append(time.perf_counter())
            np.exp(tile, out=tile)
            t.append(time.perf_counter())
            tile @ v[:, :, j0:j1]
            t.append(time.perf_counter())
            for name, start, stop in zip(STEPS[:2] + (None,) + STEPS[2:] + PARTS, t, t[1:]):
                if name is not None:  # not the copy
                    clock[name] += stop - start
    return clock


def per_value(fn, x, rounds: int) -> float:
    """Best seconds per element of fn(x) over `rounds` calls."""
    best = math.inf
    for _ in range(rounds):
        start = time.perf_counter()
        fn(x)
        best = min(best, time.perf_counter() - start)
    return best / len(x)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    set_threads(args.threads)
    T = args.length
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, HEADS, T, HEAD_DIM)).astype(np.float32)
    k = rng.standard_normal((1, KV_HEADS, T, HEAD_DIM)).astype(np.float32)
    v = rng.standard_normal((1, KV_HEADS, T, HEAD_DIM)).astype(np.float32)
    scores = HEADS * T * (T + 1) / 2
    best = {}
    for _ in range(args.rounds):
        for name, seconds in tile_loop(q, k, v).items():
            best[name] = min(best.get(name, math.inf), seconds)
    print(f"One SmolLM2 attention layer, causal prefill of {T} tokens, float32, "
          f"{args.threads} thread(s): ns per score, best of {args.rounds}")
    for name in STEPS:
        print(f"  {name:16s} {best[name] / scores * 1e9:6.2f}")
    for name in PARTS:
        print(f"    of which {name:8s} {best[name] / scores * 1e9:6.2f}")
    print(f"  {'sum':16s} {sum(best[name] for name in STEPS) / scores * 1e9:6.2f}")
    shipped, mask = math.inf, np.tril(np.ones((T, T), dtype=bool))
    for _ in range(args.rounds):
        start = time.perf_counter()
        fast_attention.causal_attention(q, k, v, mask)
        shipped = min(shipped, time.perf_counter() - start)
    print(f"  fast_attention.causal_attention, whole call: {shipped / scores * 1e9:.2f}")
    x = rng.standard_normal(1 << 16).astype(np.float32)
    print(f"np.exp, float32: {per_value(np.exp, x, 50) * 1e9:.2f} ns a value; "
          f"np.subtract: {per_value(lambda a: np.subtract(a, 1, out=a), x.copy(), 50) * 1e9:.2f}")
    try:
        import torch
    except ImportError:
        print("torch is not installed: no peer (pip install torch)")
        return 0
    torch.set_num_threads(args.threads)
    tq, tk, tv = (torch.from_numpy(a) for a in (q, k, v))
    peer = math.inf
    with torch.inference_mode():
        for _ in range(args.rounds):
            start = time.perf_counter()
            torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=True,
                                                             enable_gqa=True)
            peer = min(peer, time.perf_counter() - start)
        tx = torch.from_numpy(x)
        exp = per_value(torch.exp, tx, 50)
    print(f"torch scaled_dot_product_attention(is_causal=True): {peer / scores * 1e9:.2f} ns "
          f"a score (the tiles take {shipped / peer:.2f}x its time); torch.exp: "
          f"{exp * 1e9:.2f} ns a value")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
