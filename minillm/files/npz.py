"""The self-describing `.npz` weights format: save, load, and the checks between them.

The format is documented in docs/FORMAT.md. A loader never executes anything from the file
(`allow_pickle=False`) and answers a malformed file with one WeightsError naming the problem.
"""
from __future__ import annotations

import os
import tempfile
import zipfile

import numpy as np

from ..config import ModelConfig
from ..parameters import parameter_shapes
from ..plumbing.errors import WeightsError
from ..fast import accelerate
from ..fast.blas import settle_threads
from ..model import Model
from ..quantize import QuantizedWeight, is_linear_weight

FORMAT_VERSION = 1
VERSION_KEY = "minillm.format_version"
CONFIG_KEY = "minillm.config"
TOKENIZER_KEY = "minillm.tokenizer"
TOKENIZER_CONFIG_KEY = "minillm.tokenizer_config"
FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def save(model: Model, path) -> None:
    """Write the model (config, tensors, tokenizer if any) to one `.npz` file at `path`;
    a fast model is written as its reference, value for value."""
    arrays = {
        VERSION_KEY: np.array(FORMAT_VERSION, dtype=np.int64),
        CONFIG_KEY: np.array(model.config.to_json()),
    }
    if model.tokenizer is not None:
        arrays[TOKENIZER_KEY] = np.array(model.tokenizer.to_json())
        arrays[TOKENIZER_CONFIG_KEY] = np.array(model.tokenizer.config.to_json())
    for name, value in model.params.items():
        arrays.update(tensor_entries(name, value))
    write_replacing(path, lambda f: np.savez(f, **arrays))


def write_replacing(path, write) -> None:
    """Write a file beside `path` and rename it into place: a crash never leaves half a file
    under the real name. write(f) fills the open binary file f.

    The file gets the permissions open() would give it, 0o666 less the umask: mkstemp
    creates its files readable by their owner only (0o600), fine for a temporary file, not
    for a model others on the machine may read.
    """
    check_folder(path)  # else mkstemp's error would name its temporary file
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(suffix=".tmp", prefix=".", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.chmod(tmp, 0o666 & ~current_umask())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def check_folder(path) -> None:
    """The folder a file is to be written into exists, or an error names it (a command checks
    this before its long work, not after)."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(folder):
        return
    given = os.path.dirname(os.fspath(path))
    if os.path.exists(folder):
        raise NotADirectoryError(f"{path}: {given} is a file, not a folder")
    raise FileNotFoundError(f"{path}: no folder {given} to write into (create it first)")


def current_umask() -> int:
    """The process's umask. The only way to read it is to set it, so set it back at once."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def tensor_entries(name, value) -> dict:
    """The file entries for one parameter: a quantized weight's parts, or the array itself
    (np.asarray also reads a weight the fast path prepared)."""
    if isinstance(value, QuantizedWeight):
        return value.to_entries(name)
    return {name: np.asarray(value)}


def load(path, fast: bool | None = None, progress=None) -> Model:
    """Read a `.npz` written by `save` (or by an exporter following docs/FORMAT.md).

    fast: return the model of minillm.fast (the same values, faster products: see
    docs/PERFORMANCE.md) rather than the reference Model. None means yes, unless the
    environment sets MINILLM_FAST=0: the one switch that makes every command, the chat and the
    bench run the reference.
    progress: None, or called as progress(entries read, of how many) as the file is read.
    NumPy's BLAS then runs one thread, as the command line's, unless the program chose a count
    first: minillm.threads(n), or OPENBLAS_NUM_THREADS (or OMP_NUM_THREADS, ...) in the
    environment (minillm/fast/blas.py, settle_threads).
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise WeightsError(f"{path}: no such file")
    if os.path.isdir(path) or not zipfile.is_zipfile(path):
        raise WeightsError(f"{path}: {_not_npz(path)}")
    try:
        archive = np.load(path, allow_pickle=False)
    except Exception as e:  # a damaged archive: report it, whatever numpy raised
        raise WeightsError(f"{path}: cannot open the archive ({e})") from None
    with archive:
        entries = {}
        for name in archive.files:
            entries[name] = _read_entry(archive, name, path)
            if progress is not None:
                progress(len(entries), len(archive.files))
    try:
        model = model_from_entries(entries)
    except WeightsError as e:
        raise WeightsError(f"{path}: {e}") from None
    del entries  # the model's arrays are its own now: the fast layouts can replace them
    if wants_fast(fast):
        return accelerate(model, own=True)  # which settles the threads
    settle_threads(stacklevel=2)
    return model


def read_chat_template(path) -> str | None:
    """The chat template a minillm .npz keeps in its tokenizer config, read without its
    tensors; None when it keeps none. A file that is no .npz of this format: WeightsError."""
    from ..text.tokenizer import TokenizerConfig

    path = os.fspath(path)
    if not zipfile.is_zipfile(path):
        raise WeightsError(f"{path}: {_not_npz(path)}")
    try:
        with np.load(path, allow_pickle=False) as archive:
            if TOKENIZER_CONFIG_KEY not in archive.files:
                return None
            text = _read_string(archive[TOKENIZER_CONFIG_KEY], TOKENIZER_CONFIG_KEY)
        return TokenizerConfig.from_json(text).chat_template
    except (ValueError, KeyError, TypeError, OSError) as e:
        raise WeightsError(f"{path}: cannot read its tokenizer config ({e})") from None


def wants_fast(fast: bool | None = None) -> bool:
    """An explicit choice, else the environment's: fast unless MINILLM_FAST=0."""
    return os.environ.get("MINILLM_FAST", "1") != "0" if fast is None else bool(fast)


def _not_npz(path) -> str:
    """What a path that is not a minillm .npz holds, and what to do with it, in a few words."""
    convert = f"convert it first: minillm convert {path} model.npz"
    if os.path.isdir(path):
        if os.path.exists(os.path.join(path, "config.json")):
            return f"a folder (a Hugging Face model folder?), not an .npz file; {convert}"
        return "a folder, not an .npz file"
    with open(path, "rb") as f:
        if f.read(4) == b"GGUF":  # the magic of llama.cpp's files (convert/gguf.py reads them)
            return f"a GGUF file, not an .npz file; {convert}"
    return "not an .npz file (not a zip archive)"


def _read_entry(archive, name, path) -> np.ndarray:
    try:
        return archive[name]
    except ValueError as e:
        if "pickle" in str(e):
            raise WeightsError(f"{path}: entry {name!r} is an object array, which the "
                               "format forbids") from None
        raise WeightsError(f"{path}: entry {name!r} cannot be read ({e})") from None
    except Exception as e:
        raise WeightsError(f"{path}: entry {name!r} cannot be read ({e})") from None


def model_from_entries(entries: dict[str, np.ndarray], tokenizer=None) -> Model:
    """Check a dict of file entries against the format and build the Model. `tokenizer`: one
    read already by read_tokenizer, for entries that hold none."""
    entries = dict(entries)
    _check_version(entries.pop(VERSION_KEY, None))
    config = _read_config(entries.pop(CONFIG_KEY, None))
    tokenizer_json = entries.pop(TOKENIZER_KEY, None)
    tokenizer_config = entries.pop(TOKENIZER_CONFIG_KEY, None)
    if tokenizer is None:
        tokenizer = read_tokenizer(
            None if tokenizer_json is None else _read_string(tokenizer_json, TOKENIZER_KEY),
            None if tokenizer_config is None else _read_string(tokenizer_config,
                                                                TOKENIZER_CONFIG_KEY))
    params = _read_tensors(entries, parameter_shapes(config))
    if tokenizer is not None and len(tokenizer) > config.vocab_size:
        raise WeightsError(f"tokenizer: {len(tokenizer)} tokens do not fit the model's "
                           f"vocab_size {config.vocab_size}")
    return Model(config, params, tokenizer)


def _check_version(value) -> None:
    if value is None:
        raise WeightsError(f"missing {VERSION_KEY!r}: not a minillm weights file")
    if value.shape != () or not np.issubdtype(value.dtype, np.integer):
        raise WeightsError(f"{VERSION_KEY!r} must be an integer scalar, got {value.dtype} "
                           f"{value.shape}")
    if int(value) != FORMAT_VERSION:
        raise WeightsError(f"unknown format version {int(value)}; this minillm reads version "
                           f"{FORMAT_VERSION}")


def _read_string(value, key) -> str:
    if value.shape != () or value.dtype.kind != "U":
        raise WeightsError(f"{key!r} must be a string scalar, got {value.dtype} {value.shape}")
    return str(value)


def _read_config(value) -> ModelConfig:
    if value is None:
        raise WeightsError(f"missing {CONFIG_KEY!r} (the model's JSON config)")
    try:
        return ModelConfig.from_json(_read_string(value, CONFIG_KEY))
    except (ValueError, TypeError) as e:
        raise WeightsError(f"bad config: {e}") from None


def read_tokenizer(tokenizer_json: str | None, tokenizer_config_json: str | None = None):
    """The tokenizer of a file's tokenizer.json text and, if present, its tokenizer config
    text, as `load` reads them; None without a tokenizer.json."""
    from ..text.tokenizer import Tokenizer, TokenizerConfig

    if tokenizer_json is None:
        if tokenizer_config_json is not None:
            raise WeightsError(f"{TOKENIZER_CONFIG_KEY!r} without {TOKENIZER_KEY!r}")
        return None
    try:
        config = (None if tokenizer_config_json is None
                  else TokenizerConfig.from_json(tokenizer_config_json))
        return Tokenizer.from_json(tokenizer_json, config)
    except (ValueError, KeyError, TypeError) as e:
        raise WeightsError(f"bad tokenizer: {e}") from None


def _read_tensors(entries: dict, shapes: dict) -> dict:
    """Check names, shapes, dtypes and finiteness; return the parameters by canonical name."""
    missing = [name for name in shapes if name not in entries]
    if missing:
        raise WeightsError(f"missing tensor(s): {', '.join(missing[:8])}"
                           + (f" and {len(missing) - 8} more" if len(missing) > 8 else ""))
    params = {}
    for name, shape in shapes.items():
        params[name] = _read_tensor(name, shape, entries)
    unexpected = sorted(set(entries) - set(shapes) - _consumed(params))
    if unexpected:
        raise WeightsError(f"unexpected tensor(s): {', '.join(unexpected[:8])}")
    dtypes = {p.dtype for p in params.values() if isinstance(p, np.ndarray)}
    if len(dtypes) > 1:
        raise WeightsError(f"float tensors must share one dtype, found {sorted(map(str, dtypes))}")
    return params


def _read_tensor(name, shape, entries):
    value = entries[name]
    if value.dtype == np.int8:
        return _read_quantized(name, shape, entries)
    if value.dtype not in FLOAT_DTYPES:
        raise WeightsError(f"tensor {name!r} has dtype {value.dtype}; expected float32 or "
                           "float64")
    if value.shape != shape:
        raise WeightsError(f"tensor {name!r} has shape {value.shape}; expected {shape}")
    if not all_finite(value):
        raise WeightsError(f"tensor {name!r} holds non-finite values (NaN or inf)")
    return value


def all_finite(x: np.ndarray, step: int = 1 << 16) -> bool:
    """np.isfinite(x).all(), `step` values at a time: checked whole, a tensor would need a
    bool array of its own size beside it (160 MiB for Gemma 3's embedding)."""
    flat = x.ravel(order="K")  # a view of a contiguous array, in either order
    return all(np.isfinite(flat[start:start + step]).all()
               for start in range(0, flat.size, step))


def _consumed(params) -> set:
    """Names of extra file entries that belong to a parameter (a quantized weight's scales)."""
    return {name + suffix for name, value in params.items() if isinstance(value, QuantizedWeight)
            for suffix in ("_scale", "_bits")}


def _read_quantized(name, shape, entries) -> QuantizedWeight:
    """int8 NAME, float32 NAME_scale (out,) or (out, G), integer NAME_bits (docs/FORMAT.md)."""
    if not (is_linear_weight(name) or name == "tok_emb.weight"):
        raise WeightsError(f"tensor {name!r} is int8, but only linear-layer weights and the "
                           "token embedding may be quantized; it must be float32 or float64")
    q = entries[name]
    if q.shape != shape:
        raise WeightsError(f"tensor {name!r} has shape {q.shape}; expected {shape}")
    for part in ("_scale", "_bits"):
        if name + part not in entries:
            raise WeightsError(f"int8 tensor {name!r} has no {name + part!r} entry")
    scale, bits = entries[name + "_scale"], entries[name + "_bits"]
    if bits.shape != () or not np.issubdtype(bits.dtype, np.integer) or not 2 <= bits <= 8:
        raise WeightsError(f"{name + '_bits'!r} must be an integer scalar in [2, 8], got "
                           f"{bits.dtype} {bits.shape} {bits.tolist()}")
    if scale.dtype != np.float32:
        raise WeightsError(f"{name + '_scale'!r} has dtype {scale.dtype}; expected float32")
    out_features, in_features = shape
    if not (scale.shape == (out_features,) or (scale.ndim == 2 and scale.shape[0] == out_features
                                               and 0 < scale.shape[1] <= in_features
                                               and in_features % scale.shape[1] == 0)):
        raise WeightsError(f"{name + '_scale'!r} has shape {scale.shape}; expected "
                           f"({out_features},) or ({out_features}, G) with G dividing "
                           f"{in_features}")
    if not (np.isfinite(scale).all() and (scale > 0).all()):
        raise WeightsError(f"{name + '_scale'!r} holds non-finite, zero or negative scales")
    qmax = 2 ** (int(bits) - 1) - 1
    if q.size and (q.min() < -qmax or q.max() > qmax):
        raise WeightsError(f"int8 tensor {name!r} holds values in [{q.min()}, {q.max()}], "
                           f"outside [-{qmax}, {qmax}] for {int(bits)} bits")
    return QuantizedWeight(q, scale, int(bits))
