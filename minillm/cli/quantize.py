"""Quantize a model's linear weights to int8 with one scale per row (or per group).

The norms and biases stay float; so do the embeddings and the output layer (tied to the
embedding in the modern model) unless --embeddings / --quantize_lm_head ask otherwise.
Prints the file size and the resident weight bytes before and after.
"""
from __future__ import annotations

import os

from .common import add_model_positional, load_model, model_and_output, model_file

USAGE = "%(prog)s (INPUT | --model_path INPUT) OUTPUT [options]"


def add_arguments(parser) -> None:
    add_model_positional(parser, "input", "a minillm .npz file (float weights), or the name of "
                                          "a fetched model", then="output",
                         then_help="where to write the quantized .npz file")
    parser.add_argument("--bits", type=int, default=8,
                        help="bits per weight, 2 to 8, stored as int8 (default 8)")
    parser.add_argument("--group_size", type=int, default=None,
                        help="one scale per this many consecutive values of a row "
                             "(default: one scale per row)")
    parser.add_argument("--quantize_lm_head", action="store_true",
                        help="quantize an untied output layer too (skipped by default)")
    parser.add_argument("--embeddings", action="store_true",
                        help="quantize the token embedding too (and with it a tied output layer)")


def _mib(n: int) -> str:
    return f"{n / 2**20:.2f} MiB"


def run(args) -> int:
    from ..quantize import quantize
    from ..files.npz import check_folder, save

    given, flag, output = model_and_output(args, "input", "output")
    check_folder(output)
    path = model_file(given, flag)
    model = load_model(path, reference=args.reference)  # float: quantized below, as asked
    before = os.path.getsize(path)  # before writing: the output may replace the input
    model8 = quantize(model, skip=() if args.quantize_lm_head else ("lm_head",), bits=args.bits,
                      group_size=args.group_size, embeddings=args.embeddings)
    save(model8, output)
    after = os.path.getsize(output)
    resident, resident8 = model.nbytes, model8.nbytes
    print(f"{'':18s} {'before':>12s} {'after':>12s}")
    print(f"{'file':18s} {_mib(before):>12s} {_mib(after):>12s}  ({before / after:.2f}x smaller)")
    print(f"{'weights in memory':18s} {_mib(resident):>12s} {_mib(resident8):>12s}  "
          f"({resident / resident8:.2f}x smaller)")
    print(f"wrote {output} ({args.bits} bits, "
          + ("one scale per row)" if args.group_size is None
             else f"one scale per {args.group_size} values)"))
    return 0
