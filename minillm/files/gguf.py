"""Reading GGUF files (llama.cpp's format), versions 2 and 3, in NumPy; tensors read when used.

    gguf = read_gguf("model.gguf")
    gguf.metadata["llama.block_count"]           # 30
    t = gguf.tensors["blk.0.attn_q.weight"]      # t.shape (576, 576), t.ggml_type 3 (Q4_1)
    w = t.numpy()                                 # float32, dequantized when asked for

The layout, every number little-endian:

    header    "GGUF" | version u32 | tensor count u64 | metadata count u64
    metadata  count x (key: string | value type u32 | value)
    tensors   count x (name: string | n_dims u32 | dims u64 x n_dims | ggml type u32 | offset u64)
    padding   to a multiple of `general.alignment` (32 when absent)
    data      each tensor's bytes at data start + its offset (a multiple of the alignment),
              in the order of the table, no two overlapping

A string is a u64 byte length and UTF-8 bytes; an array is an element type u32, a u64 count and
the elements (arrays of strings and of arrays too). Dims are listed fastest-varying first, so a
(rows, columns) matrix is stored as [columns, rows]: the NumPy shape is the reversed list.

The file is untrusted: every count and length is checked against the bytes left before anything
is allocated, and a malformed file is one WeightsError naming the problem.

Memory. The header is parsed through a memory map, closed once the header is read. A tensor's
data is read from the file when the tensor is asked for, with plain reads, a slice of blocks at
a time decoded straight into the array that is kept (gguf_quants.dequantize_from): the pages of
a mapped file would count in the process's resident memory as they are read, the whole file's
by the end of a conversion (241 MiB for Gemma 3 270M, docs/CONVERT.md).
"""
from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass

import numpy as np

from .npz import WeightsError
from .gguf_metadata import read
from .gguf_quants import check_type, dequantize_from, tensor_nbytes, type_name

MAGIC = b"GGUF"
VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4  # as ggml
MAX_NESTING = 8  # arrays of arrays: deeper than any real file, shallow enough for recursion

# Metadata value types: id -> struct format of a scalar (8 = string, 9 = array).
STRING, ARRAY, BOOL = 8, 9, 7
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<B",
           10: "<Q", 11: "<q", 12: "<d"}
# The fewest bytes a value of each type takes (an empty string or array), to bound counts.
_MIN_BYTES = {**{t: struct.calcsize(f) for t, f in SCALARS.items()}, STRING: 8, ARRAY: 12}


@dataclass(frozen=True)
class GGUFTensor:
    """One tensor: NumPy-order shape, ggml type id, and where its bytes lie in the file (not
    read until used)."""

    name: str
    shape: tuple
    ggml_type: int
    path: str
    start: int  # the offset of its first byte in the file
    nbytes: int

    @property
    def type_name(self) -> str:
        return type_name(self.ggml_type)

    def numpy(self) -> np.ndarray:
        """The values as a new float32 array of `shape`, read and decoded a slice at a time."""
        with open(self.path, "rb") as f:
            def read(start, stop):
                f.seek(self.start + start)
                data = f.read(stop - start)
                if len(data) != stop - start:  # the file shrank since its header was read
                    raise WeightsError(f"tensor {self.name!r}: the file ends before its "
                                       "data does")
                return np.frombuffer(data, dtype=np.uint8)
            return dequantize_from(read, self.ggml_type, self.shape)


@dataclass(frozen=True)
class GGUFFile:
    path: str
    version: int
    metadata: dict  # key -> int, float, bool, str or list
    tensors: dict  # name -> GGUFTensor, in file order


def read_gguf(path) -> GGUFFile:
    """Parse the header, metadata and tensor table of a GGUF file; map its data."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise WeightsError(f"{path}: no such file")
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < 4:
            raise WeightsError(f"{path}: truncated header: the file has {size} bytes")
        buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        return _parse(buf, path)
    except WeightsError as e:
        raise WeightsError(f"{path}: {e}") from None
    finally:
        buf.close()  # every value read from it is a copy


def is_gguf(path) -> bool:
    """Whether the file at `path` starts with the GGUF magic."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == MAGIC
    except OSError:
        return False


def _parse(buf, path) -> GGUFFile:
    if buf[:4] != MAGIC:
        raise WeightsError(f"not a GGUF file: it starts with {bytes(buf[:4])!r}, not {MAGIC!r}")
    pos = 4
    version, pos = _scalar(buf, pos, "<I", "the header")
    if version not in VERSIONS:
        if int.from_bytes(version.to_bytes(4, "little"), "big") in VERSIONS:
            raise WeightsError("a big-endian GGUF file; minillm reads little-endian files only")
        raise WeightsError(f"GGUF version {version} is not supported; minillm reads versions "
                           f"{' and '.join(map(str, VERSIONS))}")
    n_tensors, pos = _scalar(buf, pos, "<Q", "the header")
    n_metadata, pos = _scalar(buf, pos, "<Q", "the header")
    _check_count(buf, pos, n_metadata, 8 + 4 + 1, "metadata entries")
    _check_count(buf, pos, n_tensors, 8 + 4 + 4 + 8, "tensors")

    metadata = {}
    for _ in range(n_metadata):
        key, pos = _string(buf, pos, "a metadata key")
        value_type, pos = _scalar(buf, pos, "<I", f"metadata {key!r}")
        value, pos = _value(buf, pos, value_type, f"metadata {key!r}", 0)
        if key in metadata:
            raise WeightsError(f"metadata key {key!r} appears twice")
        metadata[key] = value
    alignment = _alignment(metadata)

    infos = []
    for _ in range(n_tensors):
        info, pos = _tensor_info(buf, pos)
        infos.append(info)
    data_start = -(-pos // alignment) * alignment  # the next multiple of the alignment

    tensors, end, previous = {}, 0, None  # end: where the previous tensor's data ends
    for name, shape, ggml_type, offset in infos:
        if name in tensors:
            raise WeightsError(f"tensor {name!r} appears twice")
        tensors[name] = _tensor(buf, path, name, shape, ggml_type, offset, data_start,
                                alignment)
        if tensors[name].nbytes:  # as ggml: the data regions follow the table's order
            if offset < end:
                raise WeightsError(f"tensor {name!r}: data at offset {offset} overlaps or "
                                   f"precedes the data of tensor {previous!r}, which ends at "
                                   f"{end}; the regions must follow the table's order")
            end, previous = offset + tensors[name].nbytes, name
    return GGUFFile(path, version, metadata, tensors)


def _check_room(buf, pos, n, what) -> None:
    if n > len(buf) - pos:
        raise WeightsError(f"truncated file: {what} needs {n} bytes at offset {pos}, but the "
                           f"file has {len(buf) - pos} left")


def _check_count(buf, pos, count, min_bytes, what) -> None:
    """A count of items of at least `min_bytes` each must fit in the rest of the file."""
    if count * min_bytes > len(buf) - pos:
        raise WeightsError(f"{count} {what} cannot fit in the {len(buf) - pos} bytes left "
                           f"at offset {pos}")


def _scalar(buf, pos, fmt, what):
    size = struct.calcsize(fmt)
    _check_room(buf, pos, size, what)
    return struct.unpack_from(fmt, buf, pos)[0], pos + size


def _string(buf, pos, what):
    length, pos = _scalar(buf, pos, "<Q", what)
    if length > len(buf) - pos:
        raise WeightsError(f"{what}: a string of {length} bytes at offset {pos} runs past the "
                           f"end of the file ({len(buf) - pos} bytes left)")
    try:
        return buf[pos:pos + length].decode("utf-8"), pos + length
    except UnicodeDecodeError:
        raise WeightsError(f"{what}: the string at offset {pos} is not UTF-8") from None


def _value(buf, pos, value_type, what, depth):
    """One metadata value of `value_type` at `pos` -> (Python value, position after it)."""
    if value_type == STRING:
        return _string(buf, pos, what)
    if value_type == ARRAY:
        return _array(buf, pos, what, depth)
    if value_type not in SCALARS:
        raise WeightsError(f"{what}: unknown value type {value_type}")
    value, end = _scalar(buf, pos, SCALARS[value_type], what)
    if value_type == BOOL:
        if value > 1:
            raise WeightsError(f"{what}: a bool must be 0 or 1, got {value}")
        value = bool(value)
    return value, end


def _array(buf, pos, what, depth):
    """An array: element type u32, count u64, elements. Numbers are read in one piece."""
    if depth >= MAX_NESTING:
        raise WeightsError(f"{what}: arrays nested more than {MAX_NESTING} deep")
    element_type, pos = _scalar(buf, pos, "<I", what)
    count, pos = _scalar(buf, pos, "<Q", what)
    if element_type not in _MIN_BYTES:
        raise WeightsError(f"{what}: unknown array element type {element_type}")
    _check_count(buf, pos, count, _MIN_BYTES[element_type], f"array elements of {what}")
    if element_type in SCALARS and element_type != BOOL:
        dtype = np.dtype(SCALARS[element_type])
        values = np.frombuffer(buf, dtype=dtype, count=count, offset=pos)
        return values.tolist(), pos + count * dtype.itemsize
    values = []
    for _ in range(count):
        value, pos = _value(buf, pos, element_type, what, depth + 1)
        values.append(value)
    return values, pos


def _alignment(metadata) -> int:
    alignment = read(metadata, "general.alignment", "uint32", default=DEFAULT_ALIGNMENT)
    if alignment <= 0 or alignment & (alignment - 1):
        raise WeightsError(f"general.alignment must be a power of two, got {alignment!r}")
    return alignment


def _tensor_info(buf, pos):
    """(name, NumPy shape, ggml type, offset), position after the entry."""
    name, pos = _string(buf, pos, "a tensor name")
    n_dims, pos = _scalar(buf, pos, "<I", f"tensor {name!r}")
    if not 1 <= n_dims <= MAX_DIMS:
        raise WeightsError(f"tensor {name!r} has {n_dims} dimensions; GGUF allows 1 to "
                           f"{MAX_DIMS}")
    dims = []
    for _ in range(n_dims):
        dim, pos = _scalar(buf, pos, "<Q", f"tensor {name!r}")
        dims.append(dim)
    ggml_type, pos = _scalar(buf, pos, "<I", f"tensor {name!r}")
    offset, pos = _scalar(buf, pos, "<Q", f"tensor {name!r}")
    return (name, tuple(reversed(dims)), ggml_type, offset), pos


def _tensor(buf, path, name, shape, ggml_type, offset, data_start, alignment) -> GGUFTensor:
    """Check a tensor's type, size and place against the file."""
    try:
        check_type(ggml_type)
        nbytes = tensor_nbytes(ggml_type, shape)
    except ValueError as e:
        raise WeightsError(f"tensor {name!r}: {e}") from None
    if offset % alignment:
        raise WeightsError(f"tensor {name!r}: data offset {offset} is not a multiple of the "
                           f"alignment {alignment}")
    start = data_start + offset
    if start + nbytes > len(buf):  # Python integers: a lying shape cannot overflow here
        raise WeightsError(f"tensor {name!r}: {type_name(ggml_type)} data of shape {shape} "
                           f"({nbytes} bytes at offset {start}) runs past the end of the file "
                           f"({len(buf)} bytes)")
    return GGUFTensor(name, shape, ggml_type, path, start, nbytes)

