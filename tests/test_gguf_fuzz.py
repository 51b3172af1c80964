"""Mutated GGUF files: each is read, converted or refused in one line, never anything else.

A seeded generator makes mutants of the valid files the suite builds (gguf_files.valid_file_parts:
models of every kind and a tokenizer-only file), of these kinds:

    flip          1 to 8 bits flipped in the header, metadata or tensor table
    count         an 8-byte count, length, dimension or offset set to 0, huge or off by one
    type_id       a 4-byte value type, element type, dimension count or tensor type changed
    truncate      the file cut short; empty and all-zero files
    duplicate     a metadata entry or a tensor entry written twice
    swap          two metadata entries or two tensor entries swapped; two keys' values swapped
    remove        a metadata entry or a tensor left out
    wrong_type    a key minillm reads given a value of another type
    out_of_range  a key given a value of its type out of range (0, negative, huge, inf, NaN,
                  a token id past the vocabulary, a token type outside the enum)
    tensor_info   a tensor's shape, type, offset or name altered
    utf8          invalid UTF-8 in a key, a string value or a token
    nested        a value replaced by arrays nested 1 to 10 deep

Every mutant runs in a subprocess with an address-space limit (RLIMIT_AS) and a per-file alarm:
read_gguf, Tokenizer.from_gguf (when the file has tokenizer.ggml.model) and model_from_gguf must
each either succeed or raise WeightsError with a one-line message; a model that converts must
give finite logits (unless bytes reinterpreted as another tensor type made its weights huge:
MODERATE_WEIGHT) and save and load back to the same logits. Anything else (another exception
class, a MemoryError, a timeout, a dead worker) fails the test, listing the mutants.

Many mutants run in one worker process, so that the imports are paid once. Run it alone, with a
summary (count per kind, outcomes, slowest cases):

    PYTHONPATH=. python -m tests.test_gguf_fuzz [N_MUTANTS] [SEED]
"""
import json
import os
import random
import resource
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from tests.gguf_files import (ARRAY, BOOL, F16, F32, FLOAT32, FLOAT64, INT32, INT64, Q8_0, STRING,
                              UINT8, UINT32, UINT64, gguf_bytes, valid_file_parts)

N_MUTANTS = 1000
SEED = 29
ADDRESS_SPACE = 4 * 2**30  # bytes a worker may map: far above what any mutant honestly needs
SECONDS_PER_FILE = 20  # the alarm for one mutant (they take milliseconds)
ROOT = Path(__file__).resolve().parent.parent
# Below this magnitude no weight of these small models (widths n <= 40) can overflow float32:
# a normed activation is at most sqrt(n) * 100 ~ 632, a projection at most n * 100 * 632
# ~ 2.5e6, the SwiGLU product ~ 6.4e12, the down projection ~ 2.6e16, and the squares that the
# next RMSNorm sums ~ 40 * 6.6e32, below 3.4e38. Bytes reinterpreted as another tensor type
# reach 3e38 (BF16): a model that then overflows is the arithmetic's doing, as in any float32
# implementation, not the metadata's: it is counted apart, not a failure.
MODERATE_WEIGHT = 100


# ---------------------------------------------------------------------- the generator

# Values of every type, to put where a key expects another.
WRONG_VALUES = [(STRING, "x"), (STRING, ""), (UINT32, 7), (INT32, -1), (UINT64, 2**63),
                (INT64, -2**63), (UINT8, 255), (FLOAT32, float("nan")), (FLOAT32, float("inf")),
                (FLOAT64, 1e30), (BOOL, True), (ARRAY, (UINT32, [1, 2])),
                (ARRAY, (STRING, ["a b"])), (ARRAY, (FLOAT32, [0.5])), (ARRAY, (ARRAY, []))]
HUGE_INTS = [0, 1, 2**31, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**64 - 1]
BAD_FLOATS = [0.0, -0.0, -1.0, float("inf"), float("-inf"), float("nan"), 1e30, 1e-30, 1e-45]


def integer_entry(key, v):
    """(key, type, v) with the narrowest type that holds v."""
    if v < 0:
        return key, (INT32 if v >= -2**31 else INT64), v
    return key, (UINT32 if v < 2**32 else UINT64), v


def out_of_range(rng, entry, n_tokens):
    key, value_type, v = entry
    if value_type in (UINT32, UINT64, INT32, INT64, UINT8):
        choices = HUGE_INTS + [v - 1, v + 1, 2 * v, -1, n_tokens]
        return integer_entry(key, rng.choice(choices))
    if value_type in (FLOAT32, FLOAT64):
        return key, FLOAT64, rng.choice(BAD_FLOATS)
    if value_type == STRING:
        return key, STRING, rng.choice(["", "none", "yarn", "gpt2", "llama", "qwen2", "phi3",
                                        "{{ raise_exception('x') }}", "{% for %}"])
    if value_type == BOOL:
        return key, BOOL, not v
    element_type, items = v
    if element_type == INT32 and items:  # token types: outside llama.cpp's enum
        items = list(items)
        items[rng.randrange(len(items))] = rng.choice([-1, 7, 2**31 - 1])
        return key, ARRAY, (INT32, items)
    if element_type == STRING and items:  # tokens or merges: fewer, more, or a bad merge
        change = rng.choice(["drop", "add", "merge"])
        if change == "drop":
            return key, ARRAY, (STRING, items[:rng.randrange(len(items))])
        if change == "add":
            return key, ARRAY, (STRING, items + ["zz", "a b c"])
        return key, ARRAY, (STRING, items[:-1] + [rng.choice(["ab", " a", "a ", "", " "])])
    return key, ARRAY, (element_type, [])


def nested(depth):
    value = (UINT32, [1])
    for _ in range(depth - 1):
        value = (ARRAY, [value])
    return ARRAY, value


def mutate_parts(rng, kind, metadata, tensors):
    """A mutant's (metadata, tensors, offsets) from a valid file's parts, and a description."""
    metadata, tensors, offsets = list(metadata), list(tensors), None
    n_tokens = next((len(v[1]) for k, t, v in metadata if k == "tokenizer.ggml.tokens"), 40)
    i = rng.randrange(len(metadata))
    key = metadata[i][0]
    if kind == "duplicate":
        if tensors and rng.random() < 0.5:
            j = rng.randrange(len(tensors))
            tensors.insert(rng.randrange(len(tensors) + 1), tensors[j])
            return metadata, tensors, offsets, f"tensor {tensors[j][0]} twice"
        metadata.insert(rng.randrange(len(metadata) + 1), metadata[i])
        return metadata, tensors, offsets, f"key {key} twice"
    if kind == "swap":
        j = rng.randrange(len(metadata))
        choice = rng.choice(["entries", "values", "tensors"] if len(tensors) > 1 else
                            ["entries", "values"])
        if choice == "entries":
            metadata[i], metadata[j] = metadata[j], metadata[i]
            return metadata, tensors, offsets, f"entries {key} and {metadata[i][0]} swapped"
        if choice == "values":
            (ki, ti, vi), (kj, tj, vj) = metadata[i], metadata[j]
            metadata[i], metadata[j] = (ki, tj, vj), (kj, ti, vi)
            return metadata, tensors, offsets, f"values of {ki} and {kj} swapped"
        a, b = rng.sample(range(len(tensors)), 2)
        tensors[a], tensors[b] = tensors[b], tensors[a]  # data follows: the offsets swap too
        return metadata, tensors, offsets, f"tensors {tensors[a][0]} and {tensors[b][0]} swapped"
    if kind == "remove":
        if tensors and rng.random() < 0.4:
            name = tensors.pop(rng.randrange(len(tensors)))[0]
            return metadata, tensors, offsets, f"tensor {name} removed"
        metadata.pop(i)
        return metadata, tensors, offsets, f"key {key} removed"
    if kind == "wrong_type":
        value_type, value = rng.choice(WRONG_VALUES)
        metadata[i] = (key, value_type, value)
        return metadata, tensors, offsets, f"{key} = type {value_type} {str(value)[:30]}"
    if kind == "out_of_range":
        metadata[i] = out_of_range(rng, metadata[i], n_tokens)
        return metadata, tensors, offsets, f"{key} = {str(metadata[i][2])[:40]}"
    if kind == "nested":
        depth = rng.randint(1, 10)
        metadata[i] = (key,) + nested(depth)
        return metadata, tensors, offsets, f"{key} = arrays nested {depth} deep"
    if kind == "utf8":
        bad = rng.choice([b"\xff", b"\xc3", b"\x80abc", b"a\xed\xa0\x80"])
        where = rng.choice(["key", "value", "token"])
        if where == "key":
            metadata[i] = (key.encode() + bad,) + metadata[i][1:]
        elif where == "token" and any(k == "tokenizer.ggml.tokens" for k, _, _ in metadata):
            j = next(j for j, e in enumerate(metadata) if e[0] == "tokenizer.ggml.tokens")
            tokens = list(metadata[j][2][1])
            tokens[rng.randrange(len(tokens))] = bad
            metadata[j] = ("tokenizer.ggml.tokens", ARRAY, (STRING, tokens))
        else:
            metadata[i] = (key, STRING, bad)
        return metadata, tensors, offsets, f"invalid UTF-8 in a {where} ({key})"
    if kind == "tensor_info" and tensors:
        j = rng.randrange(len(tensors))
        name, shape, ggml_type, raw = tensors[j]
        change = rng.choice(["shape", "type", "offset", "rename"])
        if change == "shape":
            shape = rng.choice([shape[::-1], shape[:-1] or (1,), shape + (1,),
                                tuple(d + 1 for d in shape), tuple(2 * d for d in shape),
                                (0,) + shape[1:], (2**40,) + shape[1:]])
        elif change == "type":
            ggml_type = rng.choice([F32, F16, Q8_0, 2, 12, 14, 30, 99])
        elif change == "offset":
            offsets = [sum(-(-len(t[3]) // 32) * 32 for t in tensors[:k]) for k in
                       range(len(tensors))]
            offsets[j] = rng.choice([0, offsets[j] + 32, offsets[j] - 32 if j else 64,
                                     offsets[-1], 2**40])
        else:
            name = rng.choice(["blk.7.attn_q.weight", "blk.0.unknown.weight", "output.weight",
                               "rope_freqs.weight", "blk..attn_q.weight", name + ".x"])
        tensors[j] = (name, shape, ggml_type, raw)
        return metadata, tensors, offsets, f"tensor {tensors[j][0]}: {change} altered"
    metadata[i] = out_of_range(rng, metadata[i], n_tokens)  # tensor_info of a tensorless file
    return metadata, tensors, offsets, f"{key} = {str(metadata[i][2])[:40]}"


def header_fields(data):
    """(offset, size) of every count, length, dimension, offset (8 bytes) and every type id or
    dimension count (4 bytes) of a well-formed file's header, metadata and tensor table."""
    fields, pos = [(8, 8), (16, 8)], 24
    n_tensors, n_metadata = struct.unpack_from("<QQ", data, 8)

    def skip_string():
        nonlocal pos
        fields.append((pos, 8))
        pos += 8 + struct.unpack_from("<Q", data, pos)[0]

    def skip_value(value_type):
        nonlocal pos
        if value_type == STRING:
            skip_string()
        elif value_type == ARRAY:
            element_type, count = struct.unpack_from("<IQ", data, pos)
            fields.extend([(pos, 4), (pos + 4, 8)])
            pos += 12
            for _ in range(count):
                skip_value(element_type)
        else:
            pos += {UINT8: 1, 1: 1, 2: 2, 3: 2, UINT32: 4, INT32: 4, FLOAT32: 4, BOOL: 1,
                    UINT64: 8, INT64: 8, FLOAT64: 8}[value_type]

    for _ in range(n_metadata):
        skip_string()
        fields.append((pos, 4))
        pos += 4
        skip_value(struct.unpack_from("<I", data, pos - 4)[0])
    for _ in range(n_tensors):
        skip_string()
        n_dims = struct.unpack_from("<I", data, pos)[0]
        fields.append((pos, 4))
        pos += 4
        fields.extend((pos + 8 * d, 8) for d in range(n_dims))
        pos += 8 * n_dims
        fields.extend([(pos, 4), (pos + 4, 8)])
        pos += 12
    return fields, pos


def mutate_bytes(rng, kind, data):
    """A byte-level mutant of a valid file, and a description."""
    fields, table_end = header_fields(data)
    if kind == "truncate":
        choice = rng.random()
        if choice < 0.1:
            return b"", "empty file"
        if choice < 0.2:
            return bytes(len(data)), "all zeros"
        if choice < 0.3:
            return b"GGUF", "magic only"
        cut = rng.randrange(len(data))
        return data[:cut], f"cut at {cut} of {len(data)}"
    out = bytearray(data)
    if kind == "flip":
        n = rng.randint(1, 8)
        for _ in range(n):
            out[rng.randrange(table_end)] ^= 1 << rng.randrange(8)
        return bytes(out), f"{n} bits flipped before offset {table_end}"
    eight = [f for f in fields if f[1] == 8]
    four = [f for f in fields if f[1] == 4]
    if kind == "count" or not four:
        pos, _ = rng.choice(eight)
        old = struct.unpack_from("<Q", data, pos)[0]
        new = rng.choice(HUGE_INTS + [max(old - 1, 0), old + 1])
        struct.pack_into("<Q", out, pos, new)
        return bytes(out), f"8-byte field at {pos}: {old} -> {new}"
    pos, _ = rng.choice(four)
    old = struct.unpack_from("<I", data, pos)[0]
    new = rng.choice([0, 5, 7, 8, 9, 13, 16, 99, 2**31, 2**32 - 1])
    struct.pack_into("<I", out, pos, new)
    return bytes(out), f"4-byte type field at {pos}: {old} -> {new}"


BYTE_KINDS = ("flip", "count", "type_id", "truncate")
PART_KINDS = ("duplicate", "swap", "remove", "wrong_type", "out_of_range", "tensor_info",
              "utf8", "nested")
KINDS = BYTE_KINDS + PART_KINDS


def mutants(n=N_MUTANTS, seed=SEED):
    """[(kind, seed file, description, bytes)]: n mutants, the kinds taken in turn."""
    rng = random.Random(seed)
    parts = valid_file_parts()
    names = sorted(parts)
    out = []
    for i in range(n):
        kind, name = KINDS[i % len(KINDS)], rng.choice(names)
        if kind in BYTE_KINDS:
            data, description = mutate_bytes(rng, kind, gguf_bytes(*parts[name]))
        else:
            metadata, tensors, offsets, description = mutate_parts(rng, kind, *parts[name])
            data = gguf_bytes(metadata, tensors, offsets=offsets)
        out.append((kind, name, description, data))
    return out


# ---------------------------------------------------------------------- the worker

class Timeout(BaseException):
    """The alarm of one mutant (a BaseException, so that no `except Exception` takes it)."""


def check_file(path):
    """{stage: "ok", "refused" or "FAILED <class>: <message>"} for read, tokenizer, convert."""
    import numpy as np

    import minillm
    from minillm.files import model_from_gguf, read_gguf
    from minillm.text.tokenizer import Tokenizer
    from minillm.files.npz import WeightsError

    def run(stage, f):
        try:
            f()
            outcome[stage] = "ok"
        except WeightsError as e:
            message = str(e)
            outcome[stage] = "refused" if message and "\n" not in message else \
                f"FAILED a WeightsError of {message.count(chr(10)) + 1} lines: {message!r}"
        except (Exception, MemoryError, RecursionError) as e:
            outcome[stage] = f"FAILED {type(e).__name__}: {str(e)[:300]}"

    outcome = {}
    gguf = []
    run("read", lambda: gguf.append(read_gguf(path)))
    if not gguf:
        return outcome
    metadata = gguf[0].metadata
    if "tokenizer.ggml.model" in metadata:
        run("tokenizer", lambda: Tokenizer.from_gguf(metadata))

    def convert():
        model = model_from_gguf(gguf[0])
        tokens = np.arange(min(8, model.config.context_length))[None] % model.config.vocab_size
        with np.errstate(all="ignore"):
            logits = model.forward(tokens)
        if not np.isfinite(logits).all():
            if max(np.abs(w).max() for w in model.params.values()) <= MODERATE_WEIGHT:
                raise AssertionError("the converted model's logits are not finite")
            outcome["overflow"] = "huge weights"
        npz = path + ".npz"
        minillm.save(model, npz)
        try:
            loaded = minillm.load(npz, fast=False)
        except WeightsError as e:
            raise AssertionError(f"convert wrote what load refuses: {e}") from None
        finally:
            os.unlink(npz)
        with np.errstate(all="ignore"):
            same = np.array_equal(loaded.forward(tokens), logits, equal_nan=True)
        if not same:
            raise AssertionError("the loaded model's logits differ from the converted one's")

    run("convert", convert)
    return outcome


def worker():
    """Check the files named on stdin (one JSON list), one JSON line per file on stdout; a
    line "start i" before each, so that the parent knows which file a dead worker was on."""
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))

    def alarm(signum, frame):
        raise Timeout()

    signal.signal(signal.SIGALRM, alarm)
    for i, path in json.load(sys.stdin):
        print(json.dumps({"start": i}), flush=True)
        start = time.perf_counter()
        signal.alarm(SECONDS_PER_FILE)
        try:
            outcome = check_file(path)
        except Timeout:
            outcome = {"any": f"FAILED no answer within {SECONDS_PER_FILE} s"}
        finally:
            signal.alarm(0)
        print(json.dumps({"i": i, "outcome": outcome, "seconds": time.perf_counter() - start}),
              flush=True)


def run_mutants(cases, folder):
    """{i: (outcome, seconds)} for every case, in as few worker processes as crashes allow."""
    paths = []
    for i, (_, _, _, data) in enumerate(cases):
        paths.append((i, os.path.join(folder, f"mutant_{i:04d}.gguf")))
        Path(paths[-1][1]).write_bytes(data)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
           "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    results, pending = {}, paths
    while pending:
        proc = subprocess.run(
            [sys.executable, "-c", "from tests.test_gguf_fuzz import worker; worker()"],
            input=json.dumps(pending), capture_output=True, text=True, cwd=ROOT, env=env,
            timeout=SECONDS_PER_FILE * len(pending) + 60)
        current = None
        for line in proc.stdout.splitlines():
            record = json.loads(line)
            if "start" in record:
                current = record["start"]
            else:
                results[record["i"]] = (record["outcome"], record["seconds"])
                current = None
        if current is None and proc.returncode != 0:  # died before its first file
            raise AssertionError(f"the fuzz worker failed: {proc.stderr[-2000:]}")
        if current is not None:  # the worker died on this file
            results[current] = ({"any": f"FAILED the worker died (exit {proc.returncode}): "
                                        f"{proc.stderr.strip()[-300:]}"}, float("nan"))
        pending = [(i, p) for i, p in pending if i not in results]
    return results


def failures(cases, results):
    return [f"#{i} {cases[i][0]} of {cases[i][1]} ({cases[i][2]}): {stage}: {outcome}"
            for i, (outcomes, _) in sorted(results.items())
            for stage, outcome in outcomes.items() if outcome.startswith("FAILED")]


STAGES = ("read", "tokenizer", "convert")


def summary(cases, results) -> str:
    kinds = Counter(kind for kind, _, _, _ in cases)
    lines = [f"{len(cases)} mutants: " + ", ".join(f"{k} {kinds[k]}" for k in KINDS)]
    for stage in STAGES:
        counts = Counter(outcomes[stage].split(" ")[0] for outcomes, _ in results.values()
                         if stage in outcomes)
        lines.append(f"{stage}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    overflows = sum("overflow" in outcomes for outcomes, _ in results.values())
    lines.append(f"converted with weights past {MODERATE_WEIGHT:g} and non-finite logits: "
                 f"{overflows}")
    slowest = sorted(results, key=lambda i: -results[i][1])[:5]
    lines.append("slowest: " + "; ".join(f"#{i} {cases[i][0]} of {cases[i][1]} "
                                         f"({cases[i][2]}) {results[i][1]:.2f} s"
                                         for i in slowest))
    return "\n".join(lines)


def test_every_mutant_is_read_converted_or_refused_in_one_line():
    cases = mutants()
    assert Counter(kind for kind, *_ in cases).keys() == set(KINDS)
    with tempfile.TemporaryDirectory() as folder:
        results = run_mutants(cases, folder)
    assert len(results) == len(cases)
    print(summary(cases, results))
    bad = failures(cases, results)
    assert not bad, f"{len(bad)} failures:\n" + "\n".join(bad[:30])
    # The generator reaches past the reader: some mutants read and are then refused by the
    # tokenizer or the conversion, and some convert.
    outcomes = [o for o, _ in results.values()]
    assert any(o.get("convert") == "refused" for o in outcomes)
    assert any(o.get("tokenizer") == "refused" for o in outcomes)
    assert any(o.get("convert") == "ok" for o in outcomes)


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else N_MUTANTS
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else SEED
    cases = mutants(n, seed)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        results = run_mutants(cases, folder)
    print(summary(cases, results))
    print(f"{time.perf_counter() - start:.1f} s")
    print("\n".join(failures(cases, results)) or "no failures")
