"""Row-quantized integer weights: storage, the matmul that keeps the scale out of the sum, and
`quantize(model)`.

One scale per output row r (or per group of `group_size` consecutive values of a row):

    s_r = max_j |W_rj| / qmax,   qmax = 2^(bits-1) - 1   (127 for 8 bits)
    Q_rj = round(W_rj / s_r), clipped to [-qmax, qmax],   W_rj ~ s_r Q_rj,  |W_rj - s_r Q_rj| <= s_r/2

and the scale does not depend on j, so it comes out of the sum of a matmul:

    y_r = sum_j W_rj x_j  ~  s_r sum_j Q_rj x_j

NumPy has no int8 x float matmul (`int8 @ int8` even overflows silently), so the integers are
widened to the activations' dtype a block of rows at a time, into a small buffer that stays in
cache, and each block goes to BLAS. bench/int8_matmul.py measures this against the other options.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Rows widened per block: about this many bytes of float buffer, the size of one core's L2
# cache here. bench/int8_matmul.py measured 32 KiB to 1 MiB blocks and the whole matrix: small
# blocks pay Python and BLAS call overhead per block, 1 MiB was as fast as widening the whole
# matrix (within noise) without a temporary as large as the float matrix.
BLOCK_BYTES = 1024 * 1024


def quantize_rows(w, bits: int = 8, group_size: int | None = None):
    """Symmetric quantization of a (out, in) matrix with one scale per row (or per group).

    Returns q: int8 (out, in) in [-qmax, qmax], and scale: float32 (out,) per row, or
    (out, in / group_size) per group. A group (or row) of zeros gets scale 1 (q = 0 there), so
    nothing is divided by zero. The scale is rounded to float32 *before* q is computed, so the
    bound |W - s q| <= s/2 holds for the stored scale.
    """
    w = np.asarray(w)
    if w.ndim != 2 or not np.issubdtype(w.dtype, np.floating):
        raise ValueError(f"w: expected a 2-D float matrix, got {w.dtype} {w.shape}")
    if not np.isfinite(w).all():
        raise ValueError("w: holds non-finite values (NaN or inf)")
    if isinstance(bits, bool) or not isinstance(bits, (int, np.integer)) or not 2 <= bits <= 8:
        raise ValueError(f"bits: must be an integer in [2, 8], got {bits!r}")
    out_features, in_features = w.shape
    size = in_features if group_size is None else group_size
    if (isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1
            or in_features % size):
        raise ValueError(f"group_size: must be a positive divisor of in_features={in_features}, "
                         f"got {group_size!r}")
    qmax = 2 ** (bits - 1) - 1
    groups = w.astype(np.float64).reshape(out_features, in_features // size, size)  # (out, G, g)
    scale = (np.abs(groups).max(axis=-1) / qmax).astype(np.float32)  # (out, G)
    scale[scale == 0] = 1.0  # an all-zero group (or one whose scale underflows)
    q = np.clip(np.rint(groups / scale[..., None]), -qmax, qmax).astype(np.int8)
    # Row-major whatever the input's layout: the matmul widens contiguous blocks of rows.
    q = np.ascontiguousarray(q.reshape(out_features, in_features))
    return q, (scale[:, 0] if group_size is None else scale)


@dataclass(eq=False)
class QuantizedWeight:
    """A linear weight W ~ s Q stored as int8 Q (out, in) and float32 scales s.

    scale: (out,) one per row, or (out, G) one per group of in / G consecutive values.
    `matmul(x)` returns x @ W.T in x's dtype; layers.linear() calls it for any quantized weight.
    It keeps no buffer between calls (each call allocates its own small block buffer), so one
    weight can be used from several threads at once and costs only its int8 bytes and scales.
    """

    q: np.ndarray
    scale: np.ndarray
    bits: int = 8

    @property
    def shape(self) -> tuple[int, int]:
        return self.q.shape

    @property
    def dtype(self) -> np.dtype:
        return self.q.dtype

    @property
    def group_size(self) -> int | None:
        return None if self.scale.ndim == 1 else self.q.shape[1] // self.scale.shape[1]

    @property
    def nbytes(self) -> int:
        """Resident bytes: the integers and the scales."""
        return self.q.nbytes + self.scale.nbytes

    @classmethod
    def from_float(cls, w, bits: int = 8, group_size: int | None = None) -> "QuantizedWeight":
        q, scale = quantize_rows(w, bits, group_size)
        return cls(q, scale, bits)

    def dequantize(self, dtype=np.float32) -> np.ndarray:
        """W_hat = s Q, a float (out, in) matrix (for inspection and tests, not for matmul)."""
        out_features, in_features = self.q.shape
        s = self.scale.reshape(out_features, -1, 1).astype(dtype)  # (out, G, 1)
        return (self.q.reshape(out_features, s.shape[1], -1) * s).reshape(out_features,
                                                                          in_features)

    def to_entries(self, name: str) -> dict:
        """The file entries (docs/FORMAT.md): int8 NAME, float32 NAME_scale, NAME_bits."""
        return {name: self.q, name + "_scale": self.scale,
                name + "_bits": np.array(self.bits, dtype=np.int64)}

    def matmul(self, x: np.ndarray) -> np.ndarray:
        """y = x @ W.T for x (..., in) -> (..., out), in x's dtype, by blocks of rows."""
        rows = x.reshape(-1, x.shape[-1])  # (N, in)
        dtype = np.result_type(x.dtype, np.float32)
        y_t = np.empty((self.q.shape[0], rows.shape[0]), dtype)  # (out, N): y transposed
        block = max(1, BLOCK_BYTES // (dtype.itemsize * self.q.shape[1]))
        buffer = np.empty((min(block, self.q.shape[0]), self.q.shape[1]), dtype)
        blocked_matmul(rows, self.q, self.scale, y_t, buffer)
        return y_t.T.reshape(*x.shape[:-1], self.q.shape[0])


def blocked_matmul(x, q, scale, y_t, buffer) -> None:
    """y_t = (s Q) @ x.T written into y_t (out, N), widening Q a block of rows at a time.

    Per row:   y_t[r] = s_r (Q_r @ x.T)     the scale applied once per output, after the sum.
    Per group: the scale of group g multiplies only its own partial sum, so it cannot come out
    of the whole row; here it is applied to the widened block (one multiply per weight, cheaper
    in NumPy than G separate small matmuls).
    The block is the left operand (block @ x.T, not x @ block.T): for a few rows of x, OpenBLAS
    is several times faster that way round (bench/int8_matmul.py, docs in bench/RESULTS.md).
    buffer: (R, in) scratch in y's dtype, R rows per block; it must belong to this call.
    """
    out_features, in_features = q.shape
    per_row = scale.ndim == 1
    for r0 in range(0, out_features, buffer.shape[0]):
        r1 = min(r0 + buffer.shape[0], out_features)
        block = buffer[:r1 - r0]
        np.copyto(block, q[r0:r1])  # int8 -> float, exact (|Q| <= 127)
        if not per_row:
            grouped = block.reshape(r1 - r0, scale.shape[1], -1)  # (R, G, g), a view
            grouped *= scale[r0:r1, :, None]
        np.matmul(block, x.T, out=y_t[r0:r1])
    if per_row:
        y_t *= scale[:, None]


LINEAR_SUFFIXES = ("attn.qkv.weight", "attn.out.weight", "mlp.up.weight", "mlp.gate_up.weight",
                   "mlp.down.weight", "lm_head.weight")


def is_linear_weight(name: str) -> bool:
    """True for the weights of linear layers, the ones quantization may replace."""
    return name.endswith(LINEAR_SUFFIXES)


def quantize(model, skip=("lm_head",), bits: int = 8, group_size: int | None = None):
    """A copy of `model` whose linear weights are QuantizedWeight (the float model is unchanged).

    Quantized: attn.qkv, attn.out, mlp.up / mlp.gate_up, mlp.down, and lm_head when the output
    layer is untied and not skipped. A name is skipped when it starts with an entry of `skip`.
    Embeddings, norms and biases stay float; a tied output layer *is* the float embedding, so
    quantizing never unties it. Already quantized weights are kept as they are.
    """
    from .model import Model

    if isinstance(skip, str):
        skip = (skip,)
    params = {}
    for name, value in model.params.items():
        if (is_linear_weight(name) and isinstance(value, np.ndarray)
                and not name.startswith(tuple(skip))):
            value = QuantizedWeight.from_float(value, bits, group_size)
        params[name] = value
    return Model(model.config, params, model.tokenizer)

