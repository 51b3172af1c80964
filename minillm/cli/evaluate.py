"""Held-out loss of a model on a text: nats/token, perplexity and bits per byte.

    minillm eval                                    # the shipped model on its held-out text
    minillm eval --model_path M.npz --int8 --text my_text.txt

The text is encoded with the model's tokenizer and read in non-overlapping windows of the
context length (see minillm/study/evaluate.py); a progress line shows on stderr as it goes.
"""
from __future__ import annotations

import math
import sys
import time
from pathlib import Path

from ..shipped import HELD_OUT
from .common import UsageError, add_model_argument

DEFAULT_TEXT = HELD_OUT  # shipped inside the package (minillm/shipped/)


def add_arguments(parser) -> None:
    add_model_argument(parser, required=False)
    parser.add_argument("--text", default=None, metavar="FILE",
                        help="a UTF-8 text file (default: weights/web_valid.txt, held out)")
    parser.add_argument("--int8", action="store_true",
                        help="quantize the linear weights to int8 first (one scale per row)")
    parser.add_argument("--window", type=int, default=None, metavar="N",
                        help="tokens per window (default: the context length)")
    parser.add_argument("--max_tokens", type=int, default=None, metavar="N",
                        help="score only the first N tokens of the text")


def run(args) -> int:
    from ..study.evaluate import bits_per_byte, evaluate
    from .common import load_model, read_text_file

    model = load_model(args.model_path, int8=args.int8, reference=args.reference)
    if model.tokenizer is None:
        raise UsageError("--model_path: this model has no tokenizer, so it cannot read a text")
    path = Path(args.text) if args.text is not None else DEFAULT_TEXT
    text = read_text_file(path, "--text")
    ids = model.tokenizer.encode(text)
    if args.max_tokens is not None:
        if args.max_tokens < 2:
            raise UsageError(f"--max_tokens: must be at least 2, got {args.max_tokens}")
        ids = ids[:args.max_tokens]
        text = model.tokenizer.decode(ids)
    if len(ids) < 2:
        raise UsageError(f"--text: {path} holds fewer than two tokens")
    start = time.perf_counter()
    live = sys.stderr.isatty()  # a progress line only where it can be redrawn in place
    if args.window is not None and not 1 <= args.window <= model.config.context_length:
        raise UsageError(f"--window: must be in [1, {model.config.context_length}] (the context "
                         f"length), got {args.window}")
    loss = evaluate(model, ids, args.window, progress=_progress if live else None)
    seconds = time.perf_counter() - start
    if live:
        print(file=sys.stderr)
    n_bytes = len(text.encode("utf-8"))
    print(f"{path.name}: {len(ids):,} tokens, {n_bytes:,} bytes"
          + (" (int8 weights)" if args.int8 else ""))
    print(f"loss        {loss:.4f} nats/token")
    print(f"perplexity  {math.exp(min(loss, 700.0)):.2f}")
    print(f"bits/byte   {bits_per_byte(loss, len(ids) - 1, n_bytes):.4f}")
    print(f"[{len(ids) / seconds:,.0f} tokens/s]", file=sys.stderr)
    return 0


def _progress(done: int, total: int) -> None:
    print(f"\r  {done:,} / {total:,} tokens ({100 * done / total:.0f}%)", end="",
          file=sys.stderr, flush=True)
