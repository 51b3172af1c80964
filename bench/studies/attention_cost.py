"""Where a tile of the fast attention spends its time: `fast_attention.causal_attention`
run as shipped, its steps timed by clocks around its own helpers, given in nanoseconds per
score, next to PyTorch's fused `scaled_dot_product_attention` per score and to `exp` alone per
value.

    python -m bench.studies.attention_cost [--length 4096] [--rounds 3] [--threads 1]

One SmolLM2-135M attention layer (9 query heads, 3 key/value heads, head size 64), float32, a
causal prefill of T tokens, the shipped tiles (QUERY_ROWS queries of a key head, SCORE_ENTRIES
scores a tile, the product with [V, 1], the running softmax). The steps: the product Q K^T
(`_scores`), the mask (`_hide`), exp (`_exp`), the product with [V, 1] and the
sums (`_sums`), and the rest of the call (the range check, the loop, the output). A score is
one (query, visible key) pair: T (T + 1) / 2 per head. The best of --rounds.
"""
from __future__ import annotations

import argparse
import contextlib
import math
import time

import numpy as np

from minillm.fast import attention as fast_attention

from ..suite.machine import set_threads

HEADS, KV_HEADS, HEAD_DIM = 9, 3, 64  # SmolLM2-135M
HELPERS = {"_scores": "Q K^T", "_hide": "mask", "_exp": "exp", "_sums": "P [V, 1]"}
STEPS = ("Q K^T", "mask", "exp", "P [V, 1]", "the rest")


@contextlib.contextmanager
def clocks():
    """fast_attention's helpers wrapped by clocks: yields {step: seconds}, filled as the
    shipped code calls them."""
    clock = dict.fromkeys(HELPERS.values(), 0.0)
    saved = {name: getattr(fast_attention, name) for name in HELPERS}

    def timed(name, fn):
        def run(*args):
            start = time.perf_counter()
            try:
                return fn(*args)
            finally:
                clock[HELPERS[name]] += time.perf_counter() - start
        return run

    for name, fn in saved.items():
        setattr(fast_attention, name, timed(name, fn))
    try:
        yield clock
    finally:
        for name, fn in saved.items():
            setattr(fast_attention, name, fn)


def steps(q, k, v, mask):
    """{step: seconds} of one call of causal_attention, "the rest" what the helpers leave."""
    with clocks() as clock:
        start = time.perf_counter()
        fast_attention.causal_attention(q, k, v, mask)
        whole = time.perf_counter() - start
    clock["the rest"] = whole - sum(clock.values())
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
    mask = np.tril(np.ones((T, T), dtype=bool))
    for _ in range(args.rounds):
        for name, seconds in steps(q, k, v, mask).items():
            best[name] = min(best.get(name, math.inf), seconds)
    print(f"One SmolLM2 attention layer, causal prefill of {T} tokens, float32, "
          f"{args.threads} thread(s): ns per score, best of {args.rounds}")
    for name in STEPS:
        print(f"  {name:16s} {best[name] / scores * 1e9:6.2f}")
    print(f"  {'sum':16s} {sum(best[name] for name in STEPS) / scores * 1e9:6.2f}")
    shipped = math.inf
    for _ in range(args.rounds):
        start = time.perf_counter()
        fast_attention.causal_attention(q, k, v, mask)
        shipped = min(shipped, time.perf_counter() - start)
    print(f"  fast_attention.causal_attention, whole call without clocks: "
          f"{shipped / scores * 1e9:.2f}")
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
