"""The GGUF reader: metadata of every type, the tensor table, every block format decoded bit for
bit as llama.cpp's gguf package decodes it, and one clear error for every malformed file."""
import struct
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minillm.files.gguf import read_gguf
from minillm.files.gguf_metadata import read
from minillm.files.gguf_quants import GGML_TYPES, dequantize
from minillm.files.npz import WeightsError
from tests.gguf_files import (ARRAY, BOOL, F32, FLOAT32, FLOAT64, INT8, INT16, INT32, INT64,
                              Q8_0, STRING, UINT8, UINT16, UINT32, UINT64, gguf_bytes)

# One value of every metadata type, and arrays of them (of strings, of arrays, empty ones).
METADATA = [
    ("u8", UINT8, 255), ("i8", INT8, -128), ("u16", UINT16, 65535), ("i16", INT16, -32768),
    ("u32", UINT32, 2**32 - 1), ("i32", INT32, -2**31), ("u64", UINT64, 2**64 - 1),
    ("i64", INT64, -2**63), ("f32", FLOAT32, 0.5), ("f64", FLOAT64, 1e-300),
    ("yes", BOOL, True), ("no", BOOL, False), ("text", STRING, "héllo ☃"), ("empty", STRING, ""),
    ("ints", ARRAY, (INT32, [1, -2, 3])), ("floats", ARRAY, (FLOAT32, [0.25, -1.5])),
    ("u64s", ARRAY, (UINT64, [2**64 - 1, 0])), ("bools", ARRAY, (BOOL, [True, False])),
    ("words", ARRAY, (STRING, ["Ġthe", "", "<|im_end|>"])), ("none", ARRAY, (UINT8, [])),
    ("nested", ARRAY, (ARRAY, [(INT8, [1, 2]), (STRING, ["a"]), (UINT16, [])])),
]


def read_bytes(tmp_path, data, name="m.gguf"):
    path = tmp_path / name
    path.write_bytes(data)
    return read_gguf(path)


def expected_value(value_type, v):
    if value_type == ARRAY:
        element_type, items = v
        return [expected_value(element_type, item) for item in items]
    return v


def test_metadata_of_every_type_round_trips(tmp_path):
    gguf = read_bytes(tmp_path, gguf_bytes(METADATA), "meta.gguf")
    assert gguf.version == 3
    assert gguf.metadata == {key: expected_value(t, v) for key, t, v in METADATA}
    assert gguf.tensors == {}
    assert isinstance(gguf.metadata["yes"], bool)


def test_version_2_reads_too(tmp_path):
    assert read_bytes(tmp_path, gguf_bytes(METADATA[:3], version=2)).version == 2


def test_tensors_come_in_numpy_order_and_are_read_from_the_data(tmp_path):
    w = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    h = np.linspace(-2, 2, 8).astype(np.float16)
    data = gguf_bytes([("general.alignment", UINT32, 64)],
                      [("w", w.shape, F32, w.tobytes()), ("h", h.shape, 1, h.tobytes())],
                      alignment=64)
    gguf = read_bytes(tmp_path, data)
    assert list(gguf.tensors) == ["w", "h"]
    assert gguf.tensors["w"].shape == (2, 3, 4) and gguf.tensors["w"].ggml_type == 0
    np.testing.assert_array_equal(gguf.tensors["w"].numpy(), w)
    assert gguf.tensors["h"].type_name == "F16"
    np.testing.assert_array_equal(gguf.tensors["h"].numpy(), h.astype(np.float32))


# --- block formats against llama.cpp's gguf package ---------------------------------------------

# Byte offsets of the float16 scale fields of each block format: drawn finite in the tests
# (random bytes elsewhere), since a NaN would compare unequal to itself.
F16_FIELDS = {"Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,),
              "Q2_K": (80, 82), "Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,)}


def random_raw(rng, ggml_type, n_blocks):
    """Random bytes for n_blocks blocks of a type, with every float field finite."""
    name, _, block_bytes, _ = GGML_TYPES[ggml_type]
    raw = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    halves = {"F16": [0], "BF16": [0]}.get(name, F16_FIELDS.get(name, ()))
    for at in halves:
        bits = rng.integers(0, 2**16, size=n_blocks, dtype=np.uint16)
        exponent = 0x7C00 if name != "BF16" else 0x7F80
        bits[(bits & exponent) == exponent] &= ~np.uint16(0x4000)  # inf/NaN -> a finite value
        raw[:, at:at + 2] = bits.view(np.uint8).reshape(n_blocks, 2)
    if name == "F32":
        raw = rng.standard_normal(n_blocks).astype(np.float32).view(np.uint8).reshape(-1, 4)
    return raw.reshape(-1)


@pytest.mark.parametrize("ggml_type", sorted(GGML_TYPES), ids=lambda t: GGML_TYPES[t][0])
@settings(max_examples=10)
@given(seed=st.integers(0, 2**32 - 1), rows=st.integers(1, 3), blocks_per_row=st.integers(1, 3))
def test_every_type_decodes_bit_for_bit_as_gguf_does(ggml_type, seed, rows, blocks_per_row):
    gguf = pytest.importorskip("gguf")
    name, block_values, block_bytes, _ = GGML_TYPES[ggml_type]
    raw = random_raw(np.random.default_rng(seed), ggml_type, rows * blocks_per_row)
    ours = dequantize(raw, ggml_type, (rows, blocks_per_row * block_values))
    theirs = gguf.quants.dequantize(raw.reshape(rows, blocks_per_row * block_bytes),
                                    gguf.GGMLQuantizationType(ggml_type))
    assert ours.dtype == np.float32 and ours.shape == theirs.shape
    np.testing.assert_array_equal(ours.view(np.uint32), theirs.view(np.uint32))


@pytest.mark.parametrize("ggml_type", sorted(GGML_TYPES), ids=lambda t: GGML_TYPES[t][0])
def test_decoding_a_slice_of_blocks_at_a_time_changes_no_bit(ggml_type, monkeypatch):
    """dequantize decodes DECODE_VALUES values at a time into the kept array; slices of one
    and of two blocks (with a short last slice) give the bits of one slice for all."""
    from minillm.files import gguf_quants
    _, block_values, _, _ = GGML_TYPES[ggml_type]
    raw = random_raw(np.random.default_rng(7), ggml_type, 15)
    whole = dequantize(raw, ggml_type, (3, 5 * block_values))
    for blocks in (1, 2):
        monkeypatch.setattr(gguf_quants, "DECODE_VALUES", blocks * block_values)
        sliced = dequantize(raw, ggml_type, (3, 5 * block_values))
        np.testing.assert_array_equal(sliced.view(np.uint32), whole.view(np.uint32))


@pytest.mark.parametrize("name", ["F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"])
def test_gguf_quantized_values_come_back(name):
    gguf = pytest.importorskip("gguf")
    qtype = gguf.GGMLQuantizationType[name]
    w = np.random.default_rng(0).standard_normal((3, 64)).astype(np.float32)
    raw = gguf.quants.quantize(w, qtype)
    ours = dequantize(raw.view(np.uint8).reshape(-1), int(qtype), w.shape)
    np.testing.assert_array_equal(ours, gguf.quants.dequantize(raw, qtype).reshape(w.shape))
    assert np.abs(ours - w).max() < 0.3  # 4 bits over a range of about 6: steps of 0.4


def test_a_file_written_by_gguf_reads_the_same(tmp_path):
    gguf = pytest.importorskip("gguf")
    writer = gguf.GGUFWriter(tmp_path / "w.gguf", "llama")
    writer.add_uint32("llama.block_count", 3)
    writer.add_float32("llama.rope.freq_base", 1e4)
    writer.add_bool("flag", True)
    writer.add_string("name", "tiny")
    writer.add_array("tokens", ["a", "b c", "☃"])
    writer.add_array("scores", [0.5, -1.0])
    w = np.random.default_rng(1).standard_normal((4, 64)).astype(np.float32)
    writer.add_tensor("q8", gguf.quants.quantize(w, gguf.GGMLQuantizationType.Q8_0),
                      raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.add_tensor("f32", w[:2, :3].copy())
    for step in (writer.write_header_to_file, writer.write_kv_data_to_file,
                 writer.write_tensors_to_file, writer.close):
        step()
    ours, theirs = read_gguf(tmp_path / "w.gguf"), gguf.GGUFReader(tmp_path / "w.gguf")
    assert ours.metadata == {"general.architecture": "llama", "llama.block_count": 3,
                             "llama.rope.freq_base": 1e4, "flag": True, "name": "tiny",
                             "tokens": ["a", "b c", "☃"], "scores": [0.5, -1.0]}
    for t in theirs.tensors:
        ref = gguf.quants.dequantize(t.data, t.tensor_type)
        np.testing.assert_array_equal(ours.tensors[t.name].numpy(), ref.reshape(ref.shape))
    assert ours.tensors["q8"].shape == (4, 64) and ours.tensors["f32"].shape == (2, 3)


# --- malformed files ---------------------------------------------------------------------------

VALID_TENSOR = ("w", (2, 8), F32, np.ones((2, 8), np.float32).tobytes())


def header(version=3, n_tensors=0, n_metadata=0):
    return b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_metadata)


MALFORMED = {
    "too short for a header": (b"GG", "truncated header"),
    "truncated header": (header()[:10], "truncated file: the header needs 8 bytes"),
    "wrong magic": (b"GGML" + header()[4:], "not a GGUF file"),
    "version 1": (header(version=1), "GGUF version 1 is not supported"),
    "version 4": (header(version=4), "GGUF version 4 is not supported"),
    "big-endian": (b"GGUF" + struct.pack(">IQQ", 3, 0, 0), "big-endian"),
    "tensor count beyond the file": (header(n_tensors=10**12),
                                     "1000000000000 tensors cannot fit"),
    "metadata count beyond the file": (header(n_metadata=2**63), "metadata entries cannot fit"),
    "key length beyond the file": (header(n_metadata=1) + struct.pack("<Q", 2**40) + b"k" * 16,
                                   "a string of 1099511627776 bytes at offset 32 runs past"),
    "truncated metadata value": (header(n_metadata=1) + b"\1\0\0\0\0\0\0\0x"
                                 + struct.pack("<I", UINT64) + b"\7\0\0",
                                 "truncated file: metadata 'x' needs 8 bytes at offset 37"),
    "unknown value type": (header(n_metadata=1) + b"\1\0\0\0\0\0\0\0x"
                           + struct.pack("<I", 13) + b"\0" * 16, "unknown value type 13"),
    "array count beyond the file": (header(n_metadata=1) + b"\1\0\0\0\0\0\0\0x"
                                    + struct.pack("<IIQ", ARRAY, UINT32, 2**40) + b"\0" * 16,
                                    "array elements of metadata 'x' cannot fit"),
    "arrays nested too deep": (header(n_metadata=1) + b"\1\0\0\0\0\0\0\0x"
                               + struct.pack("<I", ARRAY)
                               + struct.pack("<IQ", ARRAY, 1) * 20 + b"\0" * 16,
                               "nested more than"),
    "a bool that is not 0 or 1": (header(n_metadata=1) + b"\1\0\0\0\0\0\0\0x"
                                  + struct.pack("<IB", BOOL, 2), "a bool must be 0 or 1"),
    "not UTF-8": (gguf_bytes([("x", STRING, b"\xff\xfe")]), "is not UTF-8"),
    "duplicate key": (gguf_bytes([("x", UINT8, 1), ("x", UINT8, 2)]), "appears twice"),
    "alignment not a power of two": (gguf_bytes([("general.alignment", UINT32, 24)]),
                                     "general.alignment must be a power of two"),
    "unsupported type id": (gguf_bytes([], [("w", (2, 8), 16, b"\0" * 64)]),
                            "unsupported tensor type IQ2_XXS (id 16)"),
    "unknown type id": (gguf_bytes([], [("w", (2, 8), 99, b"\0" * 64)]),
                        "unsupported tensor type type 99"),
    "rows not whole blocks": (gguf_bytes([], [("w", (2, 16), Q8_0, b"\0" * 64)]),
                              "rows of 16 values are not whole Q8_0 blocks of 32"),
    "five dimensions": (gguf_bytes([], [("w", (1, 1, 1, 1, 2), F32, b"\0" * 8)]),
                        "has 5 dimensions"),
    "dims whose product overflows": (gguf_bytes([], [("w", (2**32, 2**32, 2**32), F32, b"")]),
                                     "runs past the end of the file"),
    "a shape larger than its data": (gguf_bytes([], [("w", (1000, 8), F32, b"\0" * 64)]),
                                     "runs past the end of the file"),
    "data offset past the end": (gguf_bytes([], [VALID_TENSOR], offsets=[2**40]),
                                 "runs past the end of the file"),
    "misaligned offset": (gguf_bytes([], [VALID_TENSOR], offsets=[4]),
                          "data offset 4 is not a multiple of the alignment 32"),
    "truncated tensor table": (header(n_tensors=1) + b"\1\0\0\0\0\0\0\0w"
                               + struct.pack("<IQ", 2, 8) + b"\0" * 12,
                               "truncated file: tensor 'w' needs 8 bytes"),
    "truncated data": (gguf_bytes([], [VALID_TENSOR])[:-1], "runs past the end of the file"),
    "duplicate tensor": (gguf_bytes([], [VALID_TENSOR, VALID_TENSOR]), "'w' appears twice"),
    "overlapping data": (gguf_bytes([], [VALID_TENSOR, ("v",) + VALID_TENSOR[1:]],
                                    offsets=[0, 32]),
                         "tensor 'v': data at offset 32 overlaps or precedes the data of "
                         "tensor 'w', which ends at 64"),
    "data out of order": (gguf_bytes([], [VALID_TENSOR, ("v",) + VALID_TENSOR[1:]],
                                     offsets=[64, 0]),
                          "tensor 'v': data at offset 0 overlaps or precedes"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_file_is_one_clear_error(tmp_path, case):
    data, message = MALFORMED[case]
    with pytest.raises(WeightsError, match="m.gguf: ") as error:
        read_bytes(tmp_path, data)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(WeightsError, match="no such file"):
        read_gguf(tmp_path / "absent.gguf")


def test_tensor_data_is_read_from_the_file_when_asked_for(tmp_path):
    """The data is read when a tensor is asked for, not kept from the header's reading: a file
    cut short since then is one error naming the tensor."""
    w = np.arange(64, dtype=np.float32).reshape(2, 32)
    path = tmp_path / "m.gguf"
    path.write_bytes(gguf_bytes([], [("w", w.shape, F32, w.tobytes())]))
    gguf = read_gguf(path)
    path.write_bytes(path.read_bytes()[:-4])
    with pytest.raises(WeightsError, match="tensor 'w': the file ends before its data does"):
        gguf.tensors["w"].numpy()


@settings(max_examples=60)
@given(data=st.data())
def test_a_damaged_file_is_read_or_refused_never_a_crash(data):
    """Truncate a valid file anywhere, or overwrite a few bytes: WeightsError or a good read."""
    w = np.arange(64, dtype=np.float32).reshape(2, 32)
    good = bytearray(gguf_bytes(METADATA[:14] + METADATA[-3:],
                                [("w", w.shape, F32, w.tobytes()),
                                 ("q", (1, 32), Q8_0, bytes(34))]))
    if data.draw(st.booleans(), label="truncate"):
        good = good[:data.draw(st.integers(0, len(good) - 1), label="length")]
    else:
        for _ in range(data.draw(st.integers(1, 4), label="changes")):
            good[data.draw(st.integers(0, len(good) - 1))] = data.draw(st.integers(0, 255))
    with tempfile.TemporaryDirectory() as folder:
        try:
            gguf = read_bytes(Path(folder), bytes(good))
        except WeightsError as e:
            assert "\n" not in str(e)
        else:
            for tensor in gguf.tensors.values():
                assert tensor.numpy().shape == tensor.shape


# ---------------------------------------------------------------------- the typed reading

@pytest.mark.parametrize("value, gguf_type, bounds, found", [
    ("30", "uint32", {}, "found string '30', expected uint32"),
    (30.0, "uint32", {}, "found float 30.0, expected uint32"),
    (True, "uint32", {}, "found bool true, expected uint32"),
    ([30], "uint32", {}, "found array of 1 integers, expected uint32"),
    (-1, "uint32", {}, "found integer -1, expected uint32"),
    (2**32, "uint32", {}, "found integer 4294967296, expected uint32"),
    (0, "uint32", {"low": 1}, "found integer 0, expected uint32 >= 1"),
    (9, "uint32", {"low": 1, "high": 8}, "found integer 9, expected uint32 in [1, 8]"),
    (10000, "float32", {}, "found integer 10000, expected finite float32"),
    (float("inf"), "float32", {}, "found float inf, expected finite float32"),
    (float("nan"), "float32", {"low": 0.0}, "found float nan, expected float32 >= 0.0"),
    (1e39, "float32", {}, "found float 1e+39, expected finite float32"),
    (1, "bool", {}, "found integer 1, expected bool"),
    (7, "string", {}, "found integer 7, expected string"),
])
def test_read_names_the_key_what_it_found_and_what_it_expected(value, gguf_type, bounds, found):
    with pytest.raises(WeightsError) as error:
        read({"k": value}, "k", gguf_type, **bounds)
    assert str(error.value) == f"k: {found}"


def test_read_checks_every_element_of_an_array():
    assert read({"k": ["a b", "c"]}, "k", "array", element="string") == ["a b", "c"]
    with pytest.raises(WeightsError, match=r"^k\[1\]: found integer 3, expected string$"):
        read({"k": ["a", 3]}, "k", "array", element="string")
    with pytest.raises(WeightsError, match=r"^k\[0\]: found array of 1 strings, expected string"):
        read({"k": [["a"]]}, "k", "array", element="string")
    with pytest.raises(WeightsError, match=r"^k: found string 'ab', expected array of string$"):
        read({"k": "ab"}, "k", "array", element="string")
    with pytest.raises(WeightsError, match=r"^k\[2\]: found integer 7, expected int32 in \[0, 6\]"):
        read({"k": [1, 6, 7]}, "k", "array", element="int32", low=0, high=6)
    with pytest.raises(WeightsError, match=r"^k\[1\]: found bool true, expected int32$"):
        read({"k": [1, True]}, "k", "array", element="int32")
    for scores in ([0.5, float("nan")], [float("nan"), 0.5]):  # NaN hides from min and max
        with pytest.raises(WeightsError, match=r"found float nan, expected finite float32$"):
            read({"k": scores}, "k", "array", element="float32")


def test_read_gives_the_default_of_a_missing_key_and_refuses_a_missing_required_one():
    assert read({}, "k", "float32", default=10000.0) == 10000.0
    assert read({}, "k", "string", default=None) is None
    with pytest.raises(WeightsError, match=r"^k: missing, expected uint32 >= 1$"):
        read({}, "k", "uint32", low=1)
    # A value is taken as read, with the type it has: an integer stored wider reads when it fits.
    assert read({"k": 30}, "k", "uint32") == 30 and read({"k": 0.5}, "k", "float32") == 0.5
