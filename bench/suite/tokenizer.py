"""Workload 7: tokenizer throughput, encoding the validation text, against `tokenizers`.

    python -m bench --only tokenizer [--quick]         # the suite's table: a cold cache
    python -m bench.suite.tokenizer [--repeats 5] [--bytes N] [--text T] [--tokenizer J]

MB/s are UTF-8 bytes of text encoded per second; `tokenizers` runs on one thread
(RAYON_NUM_THREADS), like minillm's pure-Python BPE. The suite times a fresh tokenizer each
run: its word cache is empty, so every word is merged from its bytes. Run alone, the module
also times a warm cache (one tokenizer encoding the same text again, every word looked up) and
the setup of minillm's tokenizer (reading the JSON, building the split pattern's Unicode
classes), and gives the text's bytes per token.
"""
from __future__ import annotations

import argparse
import os
import time

from .machine import set_threads
from .table import markdown
from .timing import Missing, Row, measure, rows

TOKENIZER = os.path.join("weights", "tokenizer.json")
TEXT = os.path.join("weights", "web_valid.txt")


def run(ctx):
    s = ctx["settings"]
    title = "7. Tokenizer: encoding the validation text (a fresh tokenizer each run: cold cache)"
    try:
        from minillm.tokenizer import Tokenizer  # noqa: F401
    except ImportError as e:
        return title, [Row("tokenizer", "encode", "minillm", "MB/s", missing=str(e))]
    absent = [p for p in (TOKENIZER, TEXT) if not os.path.exists(p)]
    if absent:
        return title, [Row("tokenizer", "encode", "minillm", "MB/s",
                           missing=f"{', '.join(absent)} not found")]
    spec, text = read(TOKENIZER, TEXT, s.text_bytes)
    return title, encoding_rows(spec, text, s.repeats, cold=True)


def read(tokenizer_path, text_path, text_bytes=None):
    """(the tokenizer.json text, the first `text_bytes` characters of the text or all of it)."""
    with open(tokenizer_path, encoding="utf-8") as f:
        spec = f.read()
    with open(text_path, encoding="utf-8") as f:
        text = f.read()[:text_bytes]
    return spec, text


def encoding_rows(spec, text, repeats, cold=True) -> list:
    """Table rows: MB/s of minillm and `tokenizers` encoding `text`, and whether their ids agree.

    cold: a fresh tokenizer for each run. Otherwise one tokenizer per contender, warmed up by an
    untimed run over the same text, so that the timed runs find every word in its cache.
    """
    from minillm.tokenizer import Tokenizer

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
    case = f"{size / 1e3:.0f} kB, {len(ids['minillm'])} tokens"
    return rows("tokenizer", case, contenders, seconds, "MB/s", size / 1e6, notes)


def theirs(spec, text, ids, cold=True):
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return Missing("tokenizers not installed")
    warm = None if cold else Tokenizer.from_str(spec)

    def fn(n):
        tokenizer = Tokenizer.from_str(spec) if cold else warm
        ids["tokenizers"] = tokenizer.encode(text).ids
    return fn


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.suite.tokenizer",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--text", default=TEXT)
    parser.add_argument("--tokenizer", default=TOKENIZER)
    parser.add_argument("--bytes", type=int, default=None,
                        help="encode only the first BYTES characters of the text (all of it)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per contender (5)")
    parser.add_argument("--threads", type=int, default=1, help="threads of `tokenizers` (1)")
    args = parser.parse_args(argv)
    print(set_threads(args.threads)[0] + "\n")  # before `tokenizers` is imported
    from minillm.tokenizer import Tokenizer, gpt2_split_pattern

    spec, text = read(args.tokenizer, args.text, args.bytes)
    start = time.perf_counter()
    ours = Tokenizer.from_json(spec)  # reads the JSON
    gpt2_split_pattern()  # builds the Unicode classes once (cached for the process)
    setup = time.perf_counter() - start
    for cold in (True, False):
        title = ("Cold cache: a fresh tokenizer each run" if cold else
                 "Warm cache: one tokenizer, encoding the text it has already encoded")
        found = encoding_rows(spec, text, args.repeats, cold)
        print(markdown(title, found))
    tokens = len(ours.encode(text))
    size = len(text.encode("utf-8"))
    print(f"{size:,} bytes, {tokens:,} tokens: {size / tokens:.2f} bytes per token; minillm's "
          f"setup {setup:.2f} s (the JSON, the split pattern's Unicode classes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
