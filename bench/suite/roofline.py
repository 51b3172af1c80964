"""The roofline of batch-1 decoding: every weight is read once per token, so

    tokens/s <= read bandwidth / bytes of weights read per token

with the bandwidth measured, in the same run, as NumPy's float32 matrix-vector product over one
matrix too large for any cache (>= 256 MiB), in its faster orientation: what the memory system
gives NumPy here.
"""
from __future__ import annotations

import time

import numpy as np


def bandwidth(mib: int = 256, tries: int = 7) -> float:
    """Bytes/s read by a matrix-vector product over a float32 matrix of `mib` MiB, in the
    faster of its two orientations: y = W @ x (each y_i a dot product over a row of W) and
    y = x @ W (x scaling whole rows of W into y); on the 2-core EPYC of bench/RESULTS.md the
    second reads 10-30% faster. Each orientation counts the median of `tries` runs, as the
    decode rows count medians: this VM's bandwidth has short spikes (47 GB/s once, against
    34-36 GB/s in every other run with 2 threads) that a fastest-of-N would take as the roof.
    """
    n = int((mib * 2**20 / 4) ** 0.5)
    W = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    x = np.ones(n, dtype=np.float32)
    y = np.empty(n, dtype=np.float32)
    seconds = {0: [], 1: []}
    for _ in range(tries):
        for side, (a, b) in enumerate(((W, x), (x, W))):
            start = time.perf_counter()
            np.matmul(a, b, out=y)
            seconds[side].append(time.perf_counter() - start)
    return W.nbytes / min(float(np.median(s)) for s in seconds.values())


def bytes_per_token(model) -> int:
    """Bytes of weights one decode step reads: every layer's matrices, norms and biases, and
    the output layer; of the embeddings only one row (the output layer is read whole even
    when it is the tied embedding)."""
    cfg, total = model.config, 0
    for name, w in model.params.items():
        if name in ("tok_emb.weight", "pos_emb.weight"):
            total += nbytes(w) // w.shape[0]  # one row
        else:
            total += nbytes(w)
    if cfg.tie_embeddings:
        total += nbytes(model.params["tok_emb.weight"])
    return total


def nbytes(w) -> int:
    """Bytes of a weight's values: an array (or what reads as one, as minillm.fast.Dense does:
    its values once, whatever copies it keeps), or a quantized weight's arrays (q, scales)."""
    if hasattr(w, "__array__"):
        return np.asarray(w).nbytes
    return sum(v.nbytes for v in vars(w).values() if isinstance(v, np.ndarray))


def widening_ceiling(bandwidth_bytes: float, block_bytes: int, in_features: int,
                     tries: int = 7) -> float:
    """Seconds per int8 weight of a one-row product that widens int8 to float32 a block at a
    time (minillm.fast.Int8): the ceiling of int8 decoding in NumPy, which has no int8 x float
    product. Each weight costs its byte read from memory, its widening into a block that stays
    in cache (np.copyto, measured here), and the float32 product's read of that block (a
    matrix-vector product over a block in cache, measured here):

        seconds per weight = 1 / bandwidth + 1 / widen rate + 1 / product rate

    against 4 / bandwidth for a float32 weight: int8 pays only when the two measured rates are
    high next to the bandwidth.
    """
    rows = max(1, block_bytes // (4 * in_features))  # a block of rows of in_features weights
    rng = np.random.default_rng(0)
    q = rng.integers(-127, 128, (rows, in_features), dtype=np.int8)
    block = np.empty((rows, in_features), dtype=np.float32)
    x = np.ones(in_features, dtype=np.float32)
    y = np.empty(rows, dtype=np.float32)
    widen, product = [], []
    for _ in range(tries):
        start = time.perf_counter()
        for _ in range(20):
            np.copyto(block, q)
        middle = time.perf_counter()
        for _ in range(20):
            np.matmul(block, x, out=y)
        widen.append(middle - start)
        product.append(time.perf_counter() - middle)
    calls = 20 * q.size  # weights widened, then multiplied, per timing
    return (1 / bandwidth_bytes + float(np.median(widen)) / calls
            + float(np.median(product)) / calls)
