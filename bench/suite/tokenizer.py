"""Workload 7: tokenizer throughput, encoding the validation text, against `tokenizers`."""
from __future__ import annotations

import os

from .timing import Missing, Row, measure, rows

TOKENIZER = os.path.join("weights", "tokenizer.json")
TEXT = os.path.join("weights", "web_valid.txt")


def run(ctx):
    s = ctx["settings"]
    title = "7. Tokenizer: encoding the validation text (a fresh tokenizer each run: cold cache)"
    try:
        from minillm.tokenizer import Tokenizer
    except ImportError as e:
        return title, [Row("tokenizer", "encode", "minillm", "MB/s", missing=str(e))]
    absent = [p for p in (TOKENIZER, TEXT) if not os.path.exists(p)]
    if absent:
        return title, [Row("tokenizer", "encode", "minillm", "MB/s",
                           missing=f"{', '.join(absent)} not found")]
    with open(TOKENIZER, encoding="utf-8") as f:
        spec = f.read()
    with open(TEXT, encoding="utf-8") as f:
        text = f.read()[:s.text_bytes]
    size = len(text.encode("utf-8"))
    ids = {}

    def ours(n):
        ids["minillm"] = Tokenizer.from_json(spec).encode(text)

    contenders = {"minillm": ours, "tokenizers": theirs(spec, text, ids)}
    seconds = measure(contenders, s.repeats, size)
    notes = {}
    if "tokenizers" in ids:
        notes["tokenizers"] = ("same ids" if ids["tokenizers"] == ids["minillm"]
                               else "IDS DIFFER from minillm")
    case = f"{size / 1e3:.0f} kB, {len(ids['minillm'])} tokens"
    return title, rows("tokenizer", case, contenders, seconds, "MB/s", size / 1e6, notes)


def theirs(spec, text, ids):
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return Missing("tokenizers not installed")

    def fn(n):
        ids["tokenizers"] = Tokenizer.from_str(spec).encode(text).ids
    return fn
