"""Row-quantized integer weights: storage, the matmul that keeps the scale out of the sum, and
`quantize(model)`.

One scale per output row r (or per group of `group_size` consecutive values of a row):

    s_r = max_j |W_rj| / qmax,   qmax = 2^(bits-1) - 1   (127 for 8 bits)
    Q_rj = round(W_rj / s_r), clipped to [-qmax, qmax],   W_rj ~ s_r Q_rj,  |W_rj - s_r Q_rj| <= s_r/2

and the scale does not depend on j, so it comes out of the sum of a matmul:

    y_r = sum_j W_rj x_j  ~  s_r sum_j Q_rj x_j

The product below widens Q to the activations' dtype and applies the scale after the sum, as
the formula says.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np


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
    # W / s, rounded and clipped in place in the float64 copy: one temporary, not three.
    np.divide(groups, scale[..., None], out=groups)
    np.clip(np.rint(groups, out=groups), -qmax, qmax, out=groups)
    q = groups.astype(np.int8)
    return q.reshape(out_features, in_features), (scale[:, 0] if group_size is None else scale)


@dataclass(eq=False)
class QuantizedWeight:
    """A linear weight W ~ s Q stored as int8 Q (out, in) and float32 scales s.

    scale: (out,) one per row, or (out, G) one per group of in / G consecutive values.
    `matmul(x)` returns x @ W.T in x's dtype; layers.linear() calls it for any quantized weight.
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

    def __getitem__(self, rows) -> np.ndarray:
        """Rows of W_hat = s Q as float32, e.g. the embedding rows of some tokens: W[tokens]."""
        q = self.q[rows]  # (..., in)
        s = self.scale[rows]  # (...,) per row, or (..., G) per group
        if self.scale.ndim == 1:
            return q * s[..., None]
        return (q.reshape(*q.shape[:-1], s.shape[-1], -1) * s[..., None]).reshape(q.shape)

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
        """y = x @ W.T for x (..., in) -> (..., out), in x's dtype (float32 at least).

        Per row:   y_r = s_r sum_j Q_rj x_j              the scale comes out of the sum
        Per group: y_r = sum_g s_rg sum_{j in g} Q_rj x_j  each group's scale, its own sum
        (`int8 @ int8` would overflow silently: Q is widened to float first, exactly.)
        """
        dtype = np.result_type(x.dtype, np.float32)
        q = self.q.astype(dtype)  # (out, in), exact: |Q| <= 127
        if self.scale.ndim == 1:
            return (x.astype(dtype, copy=False) @ q.T) * self.scale.astype(dtype)
        out_features, groups = self.scale.shape
        xg = x.astype(dtype, copy=False).reshape(*x.shape[:-1], groups, -1)  # (..., G, g)
        qg = q.reshape(out_features, groups, -1)  # (out, G, g)
        partial = np.einsum("...gj,rgj->...rg", xg, qg)  # (..., out, G): one sum per group
        return (partial * self.scale.astype(dtype)).sum(axis=-1)


LINEAR_SUFFIXES = ("attn.qkv.weight", "attn.out.weight", "mlp.up.weight", "mlp.gate_up.weight",
                   "mlp.down.weight", "lm_head.weight")


def is_linear_weight(name: str) -> bool:
    """True for the weights of linear layers, the ones quantization may replace."""
    return name.endswith(LINEAR_SUFFIXES)


def quantize(model, skip=("lm_head",), bits: int = 8, group_size: int | None = None,
             embeddings: bool = False):
    """A copy of `model` whose linear weights are QuantizedWeight (the float model is unchanged).

    Quantized: attn.qkv, attn.out, mlp.up / mlp.gate_up, mlp.down, and lm_head when the output
    layer is untied and not skipped. A name is skipped when it starts with an entry of `skip`.
    embeddings: quantize the token embedding too, one scale per token's row (a lookup then
    reads s_t Q_t); a tied output layer *is* the embedding, so it is quantized with it and
    stays tied. Position embeddings, norms and biases always stay float. Already quantized
    weights are kept as they are.
    """
    params = {name: quantize_param(name, value, skip, bits, group_size, embeddings)
              for name, value in model.params.items()}
    return dataclasses.replace(model, params=params)


def quantize_param(name: str, value, skip=("lm_head",), bits: int = 8,
                   group_size: int | None = None, embeddings: bool = False):
    """One parameter as `quantize` keeps it: a QuantizedWeight if `quantize` quantizes it,
    else the value itself. A converter calls it on each tensor as it is built, so that the
    float model is never whole in memory (minillm.files.from_state_dict's int8)."""
    if isinstance(skip, str):
        skip = (skip,)
    quantizable = is_linear_weight(name) or (embeddings and name == "tok_emb.weight")
    if quantizable and not isinstance(value, QuantizedWeight) and not name.startswith(tuple(skip)):
        return QuantizedWeight.from_float(value, bits, group_size)
    return value
