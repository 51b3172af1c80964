"""The fast path: how the same model is made quicker on a real machine.

The algorithm files hold the reference: `layers.linear` is `x @ W.T + b` and an int8 weight's
product is `s_r (Q_r . x)`. This module changes *how* those products run, never *what* they
compute: memory layouts chosen per matrix, big products cut into blocks that BLAS handles
better, a few rows by a large matrix as one matrix-vector product each, a second copy of a
tied output layer in the other layout, int8 widened a block at a time into a reused buffer,
the C library's malloc told to keep freed memory for the next temporaries, and large
products written to the system's ordinary pages.

`accelerate(model)` returns a `FastModel`: the same configuration and tokenizer, its parameters
replaced by the objects below (each with `matmul(x) -> x @ W.T`, the protocol `layers.linear`
already speaks for quantized weights), so that the reference forward pass runs unchanged on
them; its `attend` is the tiled attention of attention.py, and its `next_tokens` makes
the decode loop's greedy choice without building the distribution. `reference(model)` gives
the plain model back. tests/test_fast.py proves the two equal; docs/PERFORMANCE.md holds the
measurements behind every device (`python -m bench.studies.few_rows`, ...).
"""
from __future__ import annotations

import contextlib
import ctypes
import dataclasses

import numpy as np

from .blas import settle_threads
from .attention import causal_attention
from ..model import Model
from ..quantize import QuantizedWeight, is_linear_weight
from ..sampling import choose

# OpenBLAS multiplies products of up to this many multiply-adds (M x N x K) where the operands
# lie; larger ones are first packed into blocks, which for a few rows of x by a matrix held in
# cache costs more than the product itself (docs/PERFORMANCE.md, "Few-row products").
SMALL_PRODUCT = 10 ** 6
# At most this many rows of x count as "a few" (a verify pass, a batch decoding one token each,
# a serving step): a matrix in cache is multiplied by blocks of its rows, and a matrix read from
# memory (LARGE_MATRIX) in the layout of one-row products. More rows (a prefill) pay for the
# packing and go to BLAS in one call.
FEW_ROWS = 16
# A matrix of at least this many entries (1 MiB in float32) is read from memory, not cache:
# a large down projection is then kept row-major (docs/PERFORMANCE.md, "Layouts").
LARGE_MATRIX = 2 ** 18
# Up to this many rows by a matrix read from memory (at least LARGE_MATRIX entries) cost less
# as one matrix-vector product per row, a block of CACHED_MATRIX entries of the matrix at a
# time: the first row's product brings the block into the last-level cache and the others
# read it from there, where one BLAS call over a few rows would pack the whole matrix first
# (docs/PERFORMANCE.md, "Few-row products").
ROW_BY_ROW = 5
CACHED_MATRIX = 2 ** 20  # 4 MiB in float32
# int8 rows are widened to float about this many bytes at a time, near one core's L2 cache
# (docs/PERFORMANCE.md, "int8").
BLOCK_BYTES = 1024 * 1024
# glibc's malloc maps a block of at least its mmap threshold (128 KiB at first, then the size
# of the largest such block freed) afresh from the system, returns it when freed, and trims
# freed memory off its heap past the trim threshold: each of a prefill's temporaries of a few
# MiB (a 512-token chunk's MLP activations are 3-6 MiB for SmolLM2) then costs a page fault
# and a page of zeros every 4 KiB, every time it is made. The fast path raises both limits
# (`keep_freed_memory`): blocks under MMAP_THRESHOLD come from the heap and reuse its pages,
# and up to TRIM_THRESHOLD of freed memory stays there (docs/PERFORMANCE.md, "Page faults").
MMAP_THRESHOLD = 32 * 2 ** 20  # the highest glibc's own rule ever moves it to
TRIM_THRESHOLD = 64 * 2 ** 20  # twice that, as glibc's rule keeps it
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt's parameters (glibc's malloc.h)
# NumPy asks Linux to back each new array of HUGE_PAGE_ADVICE bytes or more with transparent
# huge pages (madvise). With the kernel's default defrag setting ("madvise") the first touch of
# such memory then waits while the kernel compacts memory into 2 MiB pages: SmolLM2's first
# forward(ids, cache) over 128 tokens took 1.15x its later ones, faulting in its 25 MB of
# logits, which later passes find in freed memory kept. A product's large output (the logits
# of every position, a long chunk's MLP activations) is made without that advice
# (`output_pages`); the KV cache keeps it, as it is read at every step, where huge pages save
# the processor's page-table walks (docs/PERFORMANCE.md, "The first prefill of a process").
HUGE_PAGE_ADVICE = 4 * 2 ** 20  # NumPy's threshold (numpy/_core/src/multiarray/alloc.c)


def accelerate(model: Model, own: bool = False) -> "FastModel":
    """The same model (configuration, parameter values, tokenizer), multiplying faster.

    own: nothing else holds the model's parameter arrays (a model just read from a file), so
    each is let go as soon as its layout is made, and the parameters are never held twice;
    `model` is left without parameters.
    Settles NumPy's BLAS on one thread unless the program chose a count (blas.py: many
    threads wait on each other at every product of a small model), warning once of a choice of
    more threads than there are free cores.
    Has the C library keep freed memory for the next temporaries (`keep_freed_memory`).
    """
    settle_threads(stacklevel=3)
    keep_freed_memory()
    params = dict(model.params)  # FastModel prepares what is not prepared yet
    if own:
        model.params = {}
        params = prepare(params, model.config.tie_embeddings, consume=True)
    return FastModel(model.config, params, model.tokenizer)


def keep_freed_memory() -> bool:
    """Have the C library's malloc keep freed memory for the next blocks: those under
    MMAP_THRESHOLD come from its heap, and up to TRIM_THRESHOLD of freed memory stays there,
    so that a temporary made again (every layer, every chunk) finds its pages already mapped.
    Only where arrays live changes, never a value; the process may hold up to TRIM_THRESHOLD
    of freed memory. Returns whether the C library took both settings (glibc does; elsewhere
    nothing changes)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError, TypeError):  # no mallopt, or no C library by that route
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))


@contextlib.contextmanager
def ordinary_pages():
    """While the block runs, NumPy makes its new arrays without asking the system for
    transparent huge pages (its advice for arrays of 4 MiB or more), so that their first touch
    costs ordinary page faults, not a wait for the kernel to compact memory into 2 MiB pages;
    NumPy's setting is restored after. The setting is the process's: another thread's arrays
    made meanwhile are in ordinary pages too. Only where arrays live changes, never a value;
    with a NumPy that has no such setting, nothing changes."""
    advise = getattr(np._core.multiarray, "_set_madvise_hugepage", None)
    if advise is None:
        yield
        return
    before = advise(False)
    try:
        yield
    finally:
        advise(before)


def output_pages(nbytes: int):
    """`ordinary_pages()` for a product's output of `nbytes` large enough for NumPy's huge-page
    advice; else a block that changes nothing (the decoding step's products: a few integer
    operations, no dtype resolved, as they run for every token)."""
    return contextlib.nullcontext() if nbytes < HUGE_PAGE_ADVICE else ordinary_pages()


def reference(model: Model) -> Model:
    """The plain model of a fast one (or of a plain one): its parameters as arrays and
    QuantizedWeights, multiplied by the formulas of the algorithm files."""
    params = {name: (QuantizedWeight(w.q, w.scale, w.bits) if isinstance(w, QuantizedWeight)
                     else w.w if isinstance(w, Dense) else w)
              for name, w in model.params.items()}
    return Model(model.config, params, model.tokenizer)


@dataclasses.dataclass(eq=False)
class FastModel(Model):
    """A Model whose parameters are prepared for speed (`prepare`), whatever it is made from:
    `dataclasses.replace(fast_model, config=..., params=...)` and `minillm.quantize(fast_model)`
    give fast models too, preparing only what is not prepared yet."""

    def __post_init__(self):
        self.params = prepare(self.params, self.config.tie_embeddings)
        super().__post_init__()

    def next_tokens(self, step, rng) -> np.ndarray:
        """The decode loop's choice (generate.next_tokens), the same tokens sooner: greedy
        decoding without a penalty takes the argmax of finite logits, where filtered_probs
        puts its one-hot, skipping the distribution's float64 copy, checks and one-hot
        (docs/PERFORMANCE.md, "Sampling and the norms"). Ties go to the lowest id, as there;
        logits that are not all finite take the reference's way, and its errors."""
        sampling = step.sampling
        if sampling.greedy and not sampling.penalises and np.isfinite(step.logits).all():
            return step.logits.argmax(axis=-1)
        return choose(step.probs, sampling, rng)

    def zeros(self, shape) -> np.ndarray:
        """A serving engine's block pool in ordinary pages (`ordinary_pages`): requests touch
        its blocks a few at a time, and with NumPy's huge-page advice each first touch of 2 MiB
        may wait while the kernel compacts memory (docs/SERVING.md, "Measured")."""
        with ordinary_pages():
            return super().zeros(shape)

    def attend(self, q, k, v, mask, scale=None):
        """The same attention a tile at a time, the causal mask's hidden half never computed
        (`causal_attention`)."""
        return causal_attention(q, k, v, mask, scale)


def prepare(params: dict, tie_embeddings: bool, consume: bool = False) -> dict:
    """The parameters as the fast path multiplies them, by canonical name: float linear weights
    as `Dense`, quantized ones as `Int8`, everything else (norms, biases, an untied embedding)
    as it is; what is already prepared stays as it is. consume: empty `params` as it goes, so
    that an array nothing else holds is freed once its layout is made.

    A tied token embedding, which is also the output layer, becomes a `Dense` that reads the
    embedding row-major (lookups, products of several rows) and keeps a column-major copy for
    one-row products.
    """
    prepared = {}
    for name in list(params):
        w = params.pop(name) if consume else params[name]
        head = name == "tok_emb.weight" and tie_embeddings
        if isinstance(w, (Dense, Int8)) or not (head or is_linear_weight(name)):
            prepared[name] = w
        elif isinstance(w, QuantizedWeight):
            prepared[name] = Int8(np.ascontiguousarray(w.q), w.scale, w.bits)  # row blocks
        elif head:
            prepared[name] = Dense(w, columns=np.asfortranarray(w))
        else:
            prepared[name] = Dense(laid_out(w))
    return prepared


def laid_out(w: np.ndarray) -> np.ndarray:
    """W (out, in) in the memory order its products read fastest, same values and shape.

    Mostly column-major: W.T in `x @ W.T` is then a row-major (in, out) matrix, which OpenBLAS
    multiplies by a few rows of x faster. A large matrix with more inputs than outputs (a down
    projection) stays row-major: one-row products then read it along its long rows.
    """
    out_features, in_features = w.shape
    if in_features > out_features and w.size >= LARGE_MATRIX:
        return np.ascontiguousarray(w)
    return np.asfortranarray(w)


class Dense:
    """A float weight W (out, in), possibly with a column-major copy for one-row products.

    It reads like the array it holds where the rest of minillm reads parameters: rows by
    index (an embedding's lookup), `np.asarray(dense)` (saving, quantizing), shape, dtype.
    """

    def __init__(self, w: np.ndarray, columns: np.ndarray | None = None):
        self.w, self.columns = w, columns
        self.shape, self.dtype, self.ndim, self.size = w.shape, w.dtype, w.ndim, w.size

    @property
    def nbytes(self) -> int:
        """Bytes held: W, and the column-major copy if there is one."""
        return self.w.nbytes + (0 if self.columns is None else self.columns.nbytes)

    def __getitem__(self, rows) -> np.ndarray:
        return self.w[rows]

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        return np.array(self.w, dtype=dtype, copy=copy)

    def matmul(self, x: np.ndarray) -> np.ndarray:
        """x @ W.T for x (..., in) -> (..., out)."""
        if x.size == x.shape[-1]:  # one row: a matrix-vector product
            w = self.w if self.columns is None else self.columns
            return x @ w.T
        # One 2-D product over all rows: with x (B, T, in), `x @ W.T` would be B products.
        rows = x.reshape(-1, x.shape[-1])  # (N, in)
        few, large = len(rows) <= FEW_ROWS, self.w.size >= LARGE_MATRIX
        w = self.w if self.columns is None else self.columns  # the few-row layout
        with output_pages(len(rows) * self.w.shape[0] * rows.itemsize):
            if len(rows) <= ROW_BY_ROW and large:
                y = row_by_row(rows, w)
            elif few and not large and rows.size * self.w.shape[0] > SMALL_PRODUCT:
                y = column_major_blocks(rows, self.w)
            else:  # one call; a few rows by a matrix read from memory gain nothing by blocks
                y = rows @ (w if few else self.w).T
        return y.reshape(x.shape[:-1] + (self.w.shape[0],))


def row_by_row(x, w):
    """x @ W.T for a few rows x (N, in), one matrix-vector product per row, a block of W's
    rows (at most CACHED_MATRIX entries) at a time: each block is read from memory once."""
    y = np.empty((len(x), w.shape[0]), dtype=np.result_type(x, w))  # (N, out)
    step = max(1, CACHED_MATRIX // w.shape[1])
    for start in range(0, w.shape[0], step):
        block = w[start:start + step]
        for r in range(len(x)):
            np.matmul(x[r], block.T, out=y[r, start:start + step])
    return y


def column_major_blocks(x, w):
    """x @ W.T for a few rows x (N, in) and a column-major W (out, in) held in cache, a block
    of W's rows at a time, each block's product under SMALL_PRODUCT."""
    n, d = x.shape
    y = np.empty((n, w.shape[0]), dtype=np.result_type(x, w))  # (N, out)
    for start, stop in blocks(w.shape[0], n * d):
        np.matmul(x, w[start:stop].T, out=y[:, start:stop])
    return y


def blocks(out_features: int, per_row: int):
    """(start, stop) of blocks of W's rows whose product costs at most SMALL_PRODUCT
    multiply-adds, `per_row` each (at least 16 rows a block)."""
    rows = max(16, SMALL_PRODUCT // per_row)
    return [(start, min(start + rows, out_features)) for start in range(0, out_features, rows)]


@dataclasses.dataclass(eq=False)
class Int8(QuantizedWeight):
    """A QuantizedWeight whose product widens Q to float a block of rows at a time.

    NumPy has no int8 x float product, and widening the whole matrix per call allocates a
    temporary as large as the float matrix; a block of about BLOCK_BYTES stays in cache.
    Q must be row-major, so that a block of rows is contiguous (`prepare` makes it so).
    """

    def matmul(self, x: np.ndarray) -> np.ndarray:
        """x @ W.T for x (..., in) -> (..., out), in x's dtype."""
        q, scale = self.q, self.scale
        rows = x.reshape(-1, x.shape[-1])  # (N, in)
        dtype = np.result_type(x.dtype, np.float32)
        with output_pages(rows.shape[0] * q.shape[0] * dtype.itemsize):
            y_t = np.empty((q.shape[0], rows.shape[0]), dtype)  # (out, N): y transposed
        block = max(1, BLOCK_BYTES // (dtype.itemsize * q.shape[1]))
        buffer = np.empty((min(block, q.shape[0]), q.shape[1]), dtype)
        blocked_matmul(rows, q, scale, y_t, buffer)
        return y_t.T.reshape(*x.shape[:-1], q.shape[0])


def blocked_matmul(x, q, scale, y_t, buffer) -> None:
    """y_t = (s Q) @ x.T written into y_t (out, N), widening Q a block of rows at a time.

    Per row: y_t[r] = s_r (Q_r @ x.T), the scale applied once per output, after the sum.
    Per group: the scale of group g multiplies only its own partial sum, so it cannot come out
    of the whole row; here it is applied to the widened block (one multiply per weight).
    The block is the left operand (block @ x.T): for a few rows of x, OpenBLAS is several times
    faster that way round; two to ROW_BY_ROW rows are one matrix-vector product each, over the
    block while it is in cache. buffer: (R, in) scratch in y's dtype, R rows per block.
    """
    out_features = q.shape[0]
    per_row = scale.ndim == 1
    for r0 in range(0, out_features, buffer.shape[0]):
        r1 = min(r0 + buffer.shape[0], out_features)
        block = buffer[:r1 - r0]
        np.copyto(block, q[r0:r1])  # int8 -> float, exact (|Q| <= 127)
        if not per_row:
            grouped = block.reshape(r1 - r0, scale.shape[1], -1)  # (R, G, g), a view
            grouped *= scale[r0:r1, :, None]
        if 1 < len(x) <= ROW_BY_ROW:  # a few rows: the block is in cache for each of them
            for r in range(len(x)):
                np.matmul(block, x[r], out=y_t[r0:r1, r])
        else:
            np.matmul(block, x.T, out=y_t[r0:r1])
    if per_row:
        y_t *= scale[:, None]
