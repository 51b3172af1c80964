"""b-bit integers packed end to end: what a squeezed weight matrix weighs when stored.

minillm keeps a quantized matrix one int8 per value (quantize.QuantizedWeight: NumPy has no
smaller integer, and a matmul widens them anyway), so at 8, 6, 5, 4, 3 or 2 bits it holds the
same bytes in memory. Stored, a value of b bits needs b bits: the values' two's complement low
b bits one after another, most significant bit first, the last byte padded with zeros:

    values  -1  3  0  -2   at 3 bits   111 011 000 110   ->   11101100 01100000   2 bytes

so a matrix of n values takes ceil(n b / 8) bytes, plus its scales (one float32 per row). The
bits widget packs every matrix of the squeezed model this way and counts the bytes; `unpack`
reads them back (tests/test_desk.py: the same values, the size ceil(n b / 8)).
"""
from __future__ import annotations

import math

import numpy as np

CHUNK = 1 << 20  # values packed at once: a multiple of 8, so chunks meet on a byte boundary


def pack(q: np.ndarray, bits: int) -> np.ndarray:
    """The integers q (each in [-2^(b-1), 2^(b-1) - 1]) as one stream of b-bit fields:
    uint8, ceil(q.size * bits / 8) bytes."""
    low = q.reshape(-1).astype(np.uint8) & ((1 << bits) - 1)  # two's complement, low b bits
    planes = np.unpackbits(low[:, None], axis=1)[:, 8 - bits:]  # (n, b), the b bits of each
    return np.packbits(planes)  # end to end, zero-padded to a whole byte


def unpack(data: np.ndarray, bits: int, shape) -> np.ndarray:
    """The int8 values of `shape` that pack() wrote into `data`."""
    n = math.prod(shape)
    planes = np.unpackbits(data)[:n * bits].reshape(n, bits)
    low = np.packbits(np.pad(planes, ((0, 0), (8 - bits, 0))), axis=1)[:, 0]  # (n,) uint8
    signed = low.astype(np.int16) - ((low >= 1 << (bits - 1)) << bits)  # the sign bit back
    return signed.astype(np.int8).reshape(shape)


def packed_bytes(q: np.ndarray, bits: int) -> int:
    """The bytes of pack(q, bits), packed a chunk at a time (a real model's embedding would
    otherwise need eight bytes per value at once)."""
    flat = q.reshape(-1)
    return sum(pack(flat[start:start + CHUNK], bits).size
               for start in range(0, flat.size, CHUNK))


def stored_bytes(model) -> dict:
    """What the model's parameters weigh stored: every quantized matrix packed (`values`) with
    its float32 scales (`scales`); every float parameter (norms, biases, a float model's
    matrices) at its dtype's width, once (`floats`; the fast path's second copy of a tied output
    layer is not counted)."""
    from ..quantize import QuantizedWeight

    values = scales = floats = 0
    for w in model.params.values():
        if isinstance(w, QuantizedWeight):
            values += packed_bytes(w.q, w.bits)
            scales += w.scale.nbytes
        else:
            floats += math.prod(w.shape) * np.dtype(w.dtype).itemsize
    return {"values": values, "scales": scales, "floats": floats,
            "total": values + scales + floats}
