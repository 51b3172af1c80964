"""GGML's tensor encodings, decoded to float32: plain floats and llama.cpp's block quantizations.

A quantized row is cut into blocks of 32 values (Q4_0 ... Q8_0) or 256 values (the K-quants,
"super-blocks" of 8 or 16 sub-blocks, each with its own small integer scale). Every block holds
its scales as float16 `d` (and `dmin` or `m` for the formats with an offset) next to packed
integers `q`, and a value is rebuilt as

    x = d * q                      Q4_0, Q5_0, Q8_0
    x = d * q + m                  Q4_1, Q5_1
    x = (d * sc) * q               Q3_K, Q6_K
    x = (d * sc) * q - dmin * m    Q2_K, Q4_K, Q5_K

Each decoder below takes the raw blocks, an (n, bytes per block) uint8 array, and returns the
(n, values per block) float32 values. The arithmetic is float32 in ggml's order (the scale
product first, then the value, then the offset), so the results equal ggml's bit for bit.
All fields are little-endian. The byte layouts follow ggml's `block_*` structs.
"""
from __future__ import annotations

import numpy as np

QK = 32  # values per block of the simple formats
QK_K = 256  # values per super-block of the K-quants
DECODE_VALUES = 1 << 20  # values decoded at a time (4 MiB of float32)


def _f16(blocks, at: int) -> np.ndarray:
    """The float16 at byte `at` of every block, as float32: (n, 1)."""
    return blocks[:, at:at + 2].view("<f2").astype(np.float32)


def _nibbles(qs) -> np.ndarray:
    """Bytes (..., k) -> 4-bit values (..., 2k): the k low nibbles, then the k high ones."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=-1)


def _two_bit_fields(qs) -> np.ndarray:
    """Bytes (n, 32m) -> 2-bit values (n, 128m): each run of 32 bytes gives 4 runs of 32
    values, the bits 0-1 of its bytes, then bits 2-3, 4-5, 6-7:
        value[128a + 32j + l] = (qs[32a + l] >> 2j) & 3."""
    n = qs.shape[0]
    shifts = np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)
    return ((qs.reshape(n, -1, 1, 32) >> shifts) & 3).reshape(n, -1)


def _bit_planes(qh) -> np.ndarray:
    """Bytes (n, 32) -> bits (n, 256): bit s of byte l is value 32s + l (one bit per value of
    sub-block s; Q3_K's and Q5_K's high bits)."""
    n = qh.shape[0]
    shifts = np.arange(8, dtype=np.uint8).reshape(1, 8, 1)
    return ((qh.reshape(n, 1, 32) >> shifts) & 1).reshape(n, QK_K)


# --- plain floats ------------------------------------------------------------------------------

def decode_f32(raw) -> np.ndarray:
    return raw.view("<f4").astype(np.float32)


def decode_f16(raw) -> np.ndarray:
    return raw.view("<f2").astype(np.float32)


def decode_bf16(raw) -> np.ndarray:
    """bfloat16 is the top half of a float32: shift the 16 bits up."""
    return (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)


# --- 32-value blocks ---------------------------------------------------------------------------

def decode_q4_0(blocks) -> np.ndarray:
    """Q4_0, 18 bytes: d f16 | qs[16], value j in the low nibble of qs[j], value 16 + j in the
    high nibble.  x = d * (q - 8)."""
    d = _f16(blocks, 0)
    q = _nibbles(blocks[:, 2:18]).astype(np.int8) - 8  # (n, 32)
    return d * q.astype(np.float32)


def decode_q4_1(blocks) -> np.ndarray:
    """Q4_1, 20 bytes: d f16 | m f16 | qs[16] (nibbles as Q4_0).  x = d * q + m."""
    d, m = _f16(blocks, 0), _f16(blocks, 2)
    q = _nibbles(blocks[:, 4:20]).astype(np.float32)
    return d * q + m


def _five_bit(qh, qs) -> np.ndarray:
    """Q5 values (n, 32): the low 4 bits as Q4's nibbles, the 5th bit of value j is bit j of
    the little-endian 32-bit qh."""
    high = np.unpackbits(qh, axis=-1, bitorder="little")  # (n, 32): bit j of qh
    return _nibbles(qs) | (high << 4)


def decode_q5_0(blocks) -> np.ndarray:
    """Q5_0, 22 bytes: d f16 | qh[4] | qs[16].  x = d * (q - 16)."""
    d = _f16(blocks, 0)
    q = _five_bit(blocks[:, 2:6], blocks[:, 6:22]).astype(np.int8) - 16
    return d * q.astype(np.float32)


def decode_q5_1(blocks) -> np.ndarray:
    """Q5_1, 24 bytes: d f16 | m f16 | qh[4] | qs[16].  x = d * q + m."""
    d, m = _f16(blocks, 0), _f16(blocks, 2)
    q = _five_bit(blocks[:, 4:8], blocks[:, 8:24]).astype(np.float32)
    return d * q + m


def decode_q8_0(blocks) -> np.ndarray:
    """Q8_0, 34 bytes: d f16 | qs[32] int8.  x = d * q."""
    d = _f16(blocks, 0)
    return d * blocks[:, 2:34].view(np.int8).astype(np.float32)


# --- 256-value super-blocks (K-quants) ---------------------------------------------------------

def decode_q2_k(blocks) -> np.ndarray:
    """Q2_K, 84 bytes: scales[16] | qs[64] | d f16 | dmin f16.

    Sixteen sub-blocks of 16 values; scales[s] holds sub-block s's scale (low nibble) and
    min (high nibble); q is 2 bits (see _two_bit_fields).  x = (d * sc) * q - dmin * m.
    """
    n = blocks.shape[0]
    scales = blocks[:, 0:16]
    d, dmin = _f16(blocks, 80), _f16(blocks, 82)
    dl = (d * (scales & 0x0F).astype(np.float32)).reshape(n, 16, 1)
    ml = (dmin * (scales >> 4).astype(np.float32)).reshape(n, 16, 1)
    q = _two_bit_fields(blocks[:, 16:80]).reshape(n, 16, 16).astype(np.float32)
    return (dl * q - ml).reshape(n, QK_K)


def _q3_k_scales(packed) -> np.ndarray:
    """Sixteen signed 6-bit scales from 12 bytes: the low 4 bits of scale s are nibble s // 8
    of byte s % 8, the high 2 bits are bits 2(s // 4) and 2(s // 4) + 1 of byte 8 + s % 4; the
    stored value is the scale + 32."""
    n = packed.shape[0]
    low = _nibbles(packed[:, 0:8])  # (n, 16): scales 0-7 in the low nibbles, 8-15 in the high
    shifts = np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 4, 1)
    high = ((packed[:, 8:12].reshape(n, 1, 4) >> shifts) & 3).reshape(n, 16)
    return (low | (high << 4)).astype(np.int8) - 32


def decode_q3_k(blocks) -> np.ndarray:
    """Q3_K, 110 bytes: hmask[32] | qs[64] | scales[12] | d f16.

    Sixteen sub-blocks of 16 values. The low 2 bits of q come from qs (see _two_bit_fields);
    the value is q2 - 4, or q2 itself when its bit in hmask is set (see _bit_planes).
    x = (d * sc) * q.
    """
    n = blocks.shape[0]
    d = _f16(blocks, 108)
    dl = (d * _q3_k_scales(blocks[:, 96:108]).astype(np.float32)).reshape(n, 16, 1)
    low = _two_bit_fields(blocks[:, 32:96]).astype(np.int8)
    high = _bit_planes(blocks[:, 0:32]).astype(np.int8)
    q = (low - 4 * (1 - high)).reshape(n, 16, 16).astype(np.float32)
    return (dl * q).reshape(n, QK_K)


def _k4_scales(packed):
    """Eight 6-bit scales and eight 6-bit mins from 12 bytes (Q4_K, Q5_K), sub-block j:
        j < 4:  sc = p[j] & 63,                          m = p[j + 4] & 63
        j >= 4: sc = (p[j + 4] & 15) | (p[j - 4] >> 6) << 4,  m = (p[j + 4] >> 4) | (p[j] >> 6) << 4
    """
    p = packed
    sc = np.concatenate([p[:, 0:4] & 63, (p[:, 8:12] & 0x0F) | ((p[:, 0:4] >> 6) << 4)], axis=1)
    m = np.concatenate([p[:, 4:8] & 63, (p[:, 8:12] >> 4) | ((p[:, 4:8] >> 6) << 4)], axis=1)
    return sc, m


def _k4_values(d, dmin, packed_scales, q) -> np.ndarray:
    """x = (d * sc) * q - dmin * m over eight sub-blocks of 32 values; q: (n, 8, 32)."""
    n = q.shape[0]
    sc, m = _k4_scales(packed_scales)
    dl = (d * sc.astype(np.float32)).reshape(n, 8, 1)
    ml = (dmin * m.astype(np.float32)).reshape(n, 8, 1)
    return (dl * q.astype(np.float32) - ml).reshape(n, QK_K)


def decode_q4_k(blocks) -> np.ndarray:
    """Q4_K, 144 bytes: d f16 | dmin f16 | scales[12] | qs[128].

    Eight sub-blocks of 32 values: each run of 32 bytes of qs holds two sub-blocks, the first
    in its low nibbles, the second in its high ones.  x = (d * sc) * q - dmin * m.
    """
    n = blocks.shape[0]
    q = _nibbles(blocks[:, 16:144].reshape(n, 4, 32)).reshape(n, 8, 32)
    return _k4_values(_f16(blocks, 0), _f16(blocks, 2), blocks[:, 4:16], q)


def decode_q5_k(blocks) -> np.ndarray:
    """Q5_K, 176 bytes: d f16 | dmin f16 | scales[12] | qh[32] | qs[128].

    As Q4_K, with a 5th bit for value l of sub-block s in bit s of qh[l] (see _bit_planes).
    """
    n = blocks.shape[0]
    low = _nibbles(blocks[:, 48:176].reshape(n, 4, 32)).reshape(n, 8, 32)
    high = _bit_planes(blocks[:, 16:48]).reshape(n, 8, 32)
    return _k4_values(_f16(blocks, 0), _f16(blocks, 2), blocks[:, 4:16], low | (high << 4))


def decode_q6_k(blocks) -> np.ndarray:
    """Q6_K, 210 bytes: ql[128] | qh[64] | scales[16] int8 | d f16.

    Two halves of 128 values. In half a, the low 4 bits are the nibbles of ql[64a:64a + 64]
    (low nibbles, then high), the high 2 bits come from qh[32a:32a + 32] (see _two_bit_fields).
    Sixteen sub-blocks of 16 values, each with a signed 8-bit scale.  x = (d * sc) * (q - 32).
    """
    n = blocks.shape[0]
    d = _f16(blocks, 208)
    dl = (d * blocks[:, 192:208].view(np.int8).astype(np.float32)).reshape(n, 16, 1)
    low = _nibbles(blocks[:, 0:128].reshape(n, 2, 64)).reshape(n, QK_K)
    high = _two_bit_fields(blocks[:, 128:192])
    q = (low | (high << 4)).astype(np.int8) - 32
    return (dl * q.reshape(n, 16, 16).astype(np.float32)).reshape(n, QK_K)


# --- the table ---------------------------------------------------------------------------------

# ggml type id (as numbered in the GGUF spec) -> (name, values per block, bytes per block,
# decoder). The plain floats are "blocks" of one value (4 or 2 bytes).
GGML_TYPES = {
    0: ("F32", 1, 4, decode_f32),
    1: ("F16", 1, 2, decode_f16),
    2: ("Q4_0", QK, 18, decode_q4_0),
    3: ("Q4_1", QK, 20, decode_q4_1),
    6: ("Q5_0", QK, 22, decode_q5_0),
    7: ("Q5_1", QK, 24, decode_q5_1),
    8: ("Q8_0", QK, 34, decode_q8_0),
    10: ("Q2_K", QK_K, 84, decode_q2_k),
    11: ("Q3_K", QK_K, 110, decode_q3_k),
    12: ("Q4_K", QK_K, 144, decode_q4_k),
    13: ("Q5_K", QK_K, 176, decode_q5_k),
    14: ("Q6_K", QK_K, 210, decode_q6_k),
    30: ("BF16", 1, 2, decode_bf16),
}
# Types a GGUF file may hold that minillm does not decode, named for the error message.
OTHER_TYPES = {9: "Q8_1", 15: "Q8_K", 16: "IQ2_XXS", 17: "IQ2_XS", 18: "IQ3_XXS", 19: "IQ1_S",
               20: "IQ4_NL", 21: "IQ3_S", 22: "IQ2_S", 23: "IQ4_XS", 24: "I8", 25: "I16",
               26: "I32", 27: "I64", 28: "F64", 29: "IQ1_M", 34: "TQ1_0", 35: "TQ2_0",
               39: "MXFP4", 40: "NVFP4", 41: "Q1_0"}


def type_name(ggml_type: int) -> str:
    if ggml_type in GGML_TYPES:
        return GGML_TYPES[ggml_type][0]
    return OTHER_TYPES.get(ggml_type, f"type {ggml_type}")


def check_type(ggml_type: int) -> None:
    """Raise ValueError unless minillm decodes this type."""
    if ggml_type not in GGML_TYPES:
        supported = ", ".join(name for name, *_ in GGML_TYPES.values())
        raise ValueError(f"unsupported tensor type {type_name(ggml_type)} (id {ggml_type}); "
                         f"minillm reads {supported}")


def tensor_nbytes(ggml_type: int, shape) -> int:
    """Bytes of a tensor of this type and NumPy shape; its rows must be whole blocks."""
    check_type(ggml_type)
    name, block_values, block_bytes, _ = GGML_TYPES[ggml_type]
    row = shape[-1] if len(shape) else 1
    if row % block_values:
        raise ValueError(f"rows of {row} values are not whole {name} blocks of {block_values}")
    count = 1
    for dim in shape:
        count *= dim
    return count // block_values * block_bytes


def dequantize(raw, ggml_type: int, shape) -> np.ndarray:
    """float32 values of `shape` (NumPy order) from the raw bytes of a tensor of `ggml_type`."""
    shape = tuple(int(dim) for dim in shape)
    raw = np.asarray(raw)
    if raw.dtype != np.uint8 or raw.ndim != 1:
        raise ValueError(f"raw: expected a 1-D uint8 array, got {raw.dtype} {raw.shape}")
    expected = tensor_nbytes(ggml_type, shape)
    if raw.size != expected:
        raise ValueError(f"a {type_name(ggml_type)} tensor of shape {shape} has {expected} "
                         f"bytes, got {raw.size}")
    return dequantize_from(lambda start, stop: raw[start:stop], ggml_type, shape)


def dequantize_from(read, ggml_type: int, shape) -> np.ndarray:
    """float32 values of `shape` from a tensor of `ggml_type` whose bytes [start, stop) are
    read(start, stop), a 1-D uint8 array.

    A slice of blocks (DECODE_VALUES values) is read and decoded at a time, into the array that
    is kept: the raw bytes held and the decoders' temporaries (several times a slice's values)
    stay small however large the tensor.
    """
    _, block_values, block_bytes, decode = GGML_TYPES[ggml_type]
    out = np.empty(shape, dtype=np.float32)
    blocks_out = out.reshape(-1, block_values)  # (n blocks, values per block), a view
    step = max(1, DECODE_VALUES // block_values)
    for start in range(0, len(blocks_out), step):
        stop = min(start + step, len(blocks_out))
        blocks = read(start * block_bytes, stop * block_bytes).reshape(-1, block_bytes)
        blocks_out[start:stop] = decode(blocks).reshape(-1, block_values)
    return out
