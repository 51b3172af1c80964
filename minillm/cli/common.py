"""What the commands share: the error type, the one loader of a model (by path or by fetched
name: files/registry.py knows the names), the prompt and the knobs as arguments, the writer of
the new text, and the thread setting of NumPy's BLAS.

Errors a user can cause become a UsageError (or a ValueError from the library): one line on
stderr and exit code 2.

The thread setting is `minillm.threads` (minillm/fast/blas.py), as in a Python program.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from ..fast.blas import threads
from ..files.registry import MODELS, fetched_path
from ..knobs import KNOBS
from ..stopping import find_stop, undecided_length

DEFAULT_MODEL = Path(__file__).resolve().parents[2] / "weights" / "target.npz"


class UsageError(Exception):
    """A problem with the user's input, reported as one line and exit code 2."""


# -- the model: a path, or the name of a model `minillm fetch` knows (files/registry.py) -----

def model_file(path, flag="--model_path"):
    """The file `path` names: a .npz file (the path as given), or a fetched model's name (such
    as smollm2-135m-instruct), or None for the shipped default; a missing one is a one-line
    error naming `flag`."""
    if path is None:
        if not DEFAULT_MODEL.exists():
            raise UsageError(f"--model_path: the default model {DEFAULT_MODEL} is missing from "
                             "this checkout; give --model_path FILE")
        return DEFAULT_MODEL
    if str(path) in MODELS and not Path(path).exists():
        fetched = fetched_path(str(path))
        if not fetched.is_file():
            raise UsageError(f"{flag}: {path} is not fetched yet; run: minillm fetch {path}")
        return fetched
    if not Path(path).exists():
        raise UsageError(f"{flag}: no such file or fetched model: {path} (known names: "
                         f"{', '.join(sorted(MODELS))})")
    return path


def load_model(path, flag="--model_path", int8=False, reference=False):
    """The one loader of every command: the model at `path` (see model_file).
    int8: quantize its linear weights on load (an already int8 file stays as it is).
    reference: the reference model (--reference), else the fast one unless MINILLM_FAST=0."""
    from ..files.npz import load

    # A folder or a GGUF file: load's error says what it is and what to run.
    model = load(model_file(path, flag), fast=False if reference else None)
    if int8:
        from ..quantize import quantize

        model = quantize(model)
    return model


# -- arguments: the prompt and the knobs --------------------------------------------------

def add_prompt_arguments(parser) -> None:
    parser.add_argument("text", nargs="?", default=None,
                        help="the prompt text (- reads it from standard input)")
    add_model_argument(parser, required=False)
    parser.add_argument("--prompt", default=None, help="the prompt text (needs a tokenizer)")
    parser.add_argument("--prompt_file", default=None, metavar="PATH",
                        help="read the prompt text from a UTF-8 file")
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
                                ("frequency_penalty", float, "F"),
                                ("presence_penalty", float, "P"),
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
    names = ("temperature", "top_k", "top_p", "min_p", "repetition_penalty", "frequency_penalty",
             "presence_penalty", "penalty_window", "max_new_tokens", "seed")
    knobs = {name: getattr(args, name) for name in names if hasattr(args, name)}
    if getattr(args, "greedy", False):
        knobs["temperature"] = 0.0
    return knobs


def prompt_ids(args, model) -> list[int]:
    """The prompt as token ids, from exactly one of TEXT, --prompt and --prompt_ids."""
    given = [name for name, value in (("TEXT", args.text), ("--prompt", args.prompt),
                                      ("--prompt_file", args.prompt_file),
                                      ("--prompt_ids", args.prompt_ids)) if value is not None]
    if len(given) != 1:
        raise UsageError("prompt: give exactly one of TEXT (- for standard input), --prompt "
                         f"TEXT, --prompt_file PATH or --prompt_ids 1,2,3 (got "
                         f"{', '.join(given) or 'none'})")
    if args.prompt_ids is not None:
        ids = parse_ids(args.prompt_ids, "--prompt_ids")
    else:
        if model.tokenizer is None:
            raise UsageError(f"{given[0]}: this model has no tokenizer; give token ids with "
                             "--prompt_ids 1,2,3")
        if args.prompt_file is not None:
            text = read_text_file(args.prompt_file, "--prompt_file")
        elif args.text == "-":
            text = utf8(sys.stdin.buffer.read(), "TEXT: standard input")
        else:
            text = args.text if args.prompt is None else args.prompt
        ids = list(model.tokenizer.encode(text, add_special_tokens=True))  # BOS if the file asks
    if not ids:
        raise UsageError(f"{given[0]}: empty prompt")
    vocab = model.config.vocab_size
    bad = [i for i in ids if not 0 <= i < vocab]
    if bad:
        raise UsageError(f"{given[0]}: token id {bad[0]} is outside the vocabulary [0, {vocab})")
    return ids


def read_text_file(path, flag: str) -> str:
    """A UTF-8 text file's contents, or a one-line error naming the file."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"{flag}: {path} is a folder, not a text file")
    if not path.is_file():
        raise UsageError(f"{flag}: no such file: {path}")
    return utf8(path.read_bytes(), f"{flag}: {path}")


def utf8(data: bytes, where: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(f"{where} is not UTF-8 text (byte 0x{data[e.start]:02x} at offset "
                         f"{e.start}); save it as UTF-8") from None


def parse_ids(text: str, flag: str) -> list[int]:
    items = [item for item in text.replace(",", " ").split()]
    try:
        return [int(item) for item in items]
    except ValueError:
        raise UsageError(f"{flag}: expected comma-separated integers, got {text!r}") from None


ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}
ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|.?)", re.DOTALL)  # a backslash and what follows


def escaped(text: str) -> str:
    """A text as typed on the command line, its escapes decoded: \\n, \\t, \\r, \\\\ and
    \\uXXXX (a shell passes "\\n" as a backslash and an n). An argparse type: any other
    escape is the argument's error."""
    def decode(match):
        code = match.group(1)
        if code in ESCAPES:
            return ESCAPES[code]
        if len(code) == 5:  # uXXXX
            return chr(int(code[1:], 16))
        raise argparse.ArgumentTypeError(
            f"unknown escape \\{code} in \"{text}\"; known: \\n \\t \\r \\\\ \\uXXXX (a "
            "backslash itself is \\\\)")
    return ESCAPE.sub(decode, text)


def add_stop_argument(parser) -> None:
    parser.add_argument("--stop", action="append", default=[], metavar="TEXT", type=escaped,
                        help="end when the new text contains TEXT, and print the text before "
                             "it (repeatable; \\n, \\t, \\r, \\\\ and \\uXXXX are decoded; "
                             "needs a tokenizer)")


def stop_tokens(text, model) -> list[int]:
    """--stop_ids, or by default every end token the tokenizer names (<|im_end|> for a chat
    model)."""
    if text is None:
        return [] if model.tokenizer is None else list(model.tokenizer.eos_token_ids)
    return parse_ids(text, "--stop_ids")


# -- printing the new text --------------------------------------------------------------

def text_writer(tokenizer, out, stop_strings=(), hidden=()):
    """write(ids) prints tokens as they come: text through the tokenizer's incremental
    decoder (never half a UTF-8 character), or the ids themselves when there is none.

    The new text (new=True) is printed up to the first stop string, never into it: its end,
    while it may still grow into a stop string, waits for the next token. New tokens in
    `hidden` (the end tokens, such as <|im_end|>) are not printed.
    """
    decoder = None if tokenizer is None else tokenizer.stream_decoder()
    known = 0 if tokenizer is None else len(tokenizer)  # a model may have spare ids beyond
    pending = ""  # new text not printed yet
    stopped = False

    def write(ids, end=False, new=True):
        if new and hidden:
            ids = [i for i in ids if i not in hidden]
        if decoder is None:
            out.write("".join(f"{i} " for i in ids))
        else:
            text = "".join(decoder.push(i) if i < known else f"<{i}>" for i in ids) \
                + (decoder.flush() if end else "")
            if new and stop_strings:
                text = printable(text, end)
            out.write(text)
        out.flush()

    def printable(text, end):
        nonlocal pending, stopped
        if stopped:
            return ""
        pending += text
        cut = find_stop(pending, stop_strings)
        if cut is not None:
            stopped = True
            return pending[:cut]
        ready = len(pending) - (0 if end else undecided_length(pending, stop_strings))
        text, pending = pending[:ready], pending[ready:]
        return text

    return write


# -- the thread setting (minillm/fast/blas.py) ------------------------------------------------

def blas_threads(n: int):
    """A context manager running the command with NumPy's BLAS on n threads (--threads)."""
    if n < 1:
        raise UsageError(f"--threads: must be at least 1, got {n}")
    return threads(n)
