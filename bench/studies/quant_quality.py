"""Quantization quality on held-out text: float vs int8, and the lower-bit experiment.

    python -m bench.studies.quant_quality MODEL.npz --text weights/web_valid.txt [--tokenizer T]
    python -m bench.studies.quant_quality --random  # no trained model: a random Sprout-size one
    ... --plot bench/plots/quant_bits.png           # and a picture of table 2 (matplotlib)

Table 1 (float32 vs int8 with one scale per row): file size, resident weight bytes, logit cosine
similarity, share of positions with the same top token, held-out loss (nats/token).
Table 2: held-out loss when every linear weight is rounded to 8, 6, 5, 4, 3, 2 bits, with one
scale per row and with one scale for the whole matrix. The output layer stays float throughout.
A random model's losses say nothing about language; they only show the tooling runs.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

import minillm
from minillm.study.quality import compare, loss, windows
from minillm.quantize import QuantizedWeight, is_linear_weight

from ..suite.plots import pyplot

SPROUT = minillm.ModelConfig(arch="modern", vocab_size=8192, context_length=512, d_model=384,
                             n_layers=8, n_heads=6, d_ff=1024)


def per_matrix(model, bits: int):
    """Every linear weight but lm_head rounded with one scale for the whole matrix."""
    qmax = 2 ** (bits - 1) - 1
    params = {}
    for name, w in model.params.items():
        if is_linear_weight(name) and not name.startswith("lm_head"):
            s = np.float32(max(np.abs(w).max() / qmax, np.finfo(np.float32).tiny))
            q = np.clip(np.rint(w / s), -qmax, qmax).astype(np.int8)
            w = QuantizedWeight(q, np.full(w.shape[0], s, np.float32), bits)
        params[name] = w
    return minillm.Model(model.config, params, model.tokenizer)


def file_size(model) -> int:
    with tempfile.TemporaryDirectory() as folder:
        minillm.save(model, os.path.join(folder, "m.npz"))
        return os.path.getsize(os.path.join(folder, "m.npz"))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_path", nargs="?", help="a float minillm .npz model")
    parser.add_argument("--text", default="weights/web_valid.txt", help="held-out text")
    parser.add_argument("--tokenizer", default=None,
                        help="tokenizer.json, if the model file carries none")
    parser.add_argument("--random", action="store_true",
                        help="a random Sprout-size model on random tokens")
    parser.add_argument("--windows", type=int, default=16)
    parser.add_argument("--length", type=int, default=256, help="tokens per window")
    parser.add_argument("--bits", type=int, nargs="+", default=[8, 6, 5, 4, 3, 2])
    parser.add_argument("--plot", metavar="PNG", help="draw table 2 here (needs matplotlib)")
    args = parser.parse_args(argv)
    if args.random:
        model = minillm.random_model(SPROUT, seed=0)
        n_ids = args.windows * args.length + 1  # windows share their edge token
        ids = np.random.default_rng(0).integers(0, SPROUT.vocab_size, n_ids)
        print("random Sprout-size model on random tokens (losses are not language figures)")
    elif args.model_path:
        model = minillm.load(args.model_path, fast=False)
        tokenizer = model.tokenizer
        if args.tokenizer:
            from minillm.text.tokenizer import load_tokenizer
            tokenizer = load_tokenizer(args.tokenizer)
        if tokenizer is None:
            parser.error("the model has no tokenizer: give --tokenizer")
        ids = tokenizer.encode(Path(args.text).read_text(encoding="utf-8"))
        print(f"{args.model_path} on {args.text} ({len(ids):,} tokens)")
    else:
        parser.error("give MODEL.npz or --random")
    length = min(args.length, model.config.context_length)
    wins = windows(ids, length, args.windows)
    print(f"{len(wins)} windows of {length} tokens\n")

    model8 = minillm.quantize(model)
    r = compare(model, model8, wins)
    mib = 2 ** 20
    print(f"{'model':8s} {'file':>10s} {'resident':>10s} {'cosine':>9s} {'same top':>9s} "
          f"{'loss':>7s}")
    print(f"{'float32':8s} {file_size(model) / mib:>6.2f} MiB {model.nbytes / mib:>6.2f} "
          f"MiB {1:>9.5f} {100:>8.1f}% {r.loss_float:>7.4f}")
    print(f"{'int8':8s} {file_size(model8) / mib:>6.2f} MiB {model8.nbytes / mib:>6.2f} "
          f"MiB {r.cosine:>9.5f} {100 * r.same_top:>8.1f}% {r.loss_quant:>7.4f}")

    print(f"\nloss (nats/token); float32: {r.loss_float:.4f}")
    print(f"{'bits':>4s} {'per row':>9s} {'per matrix':>11s}")
    curve = []
    for bits in args.bits:
        row = loss(minillm.quantize(model, bits=bits), wins)
        matrix = loss(per_matrix(model, bits), wins)
        print(f"{bits:>4d} {row:>9.4f} {matrix:>11.4f}", flush=True)
        curve.append((bits, row, matrix))
    if args.plot:
        name = "random Sprout-size model" if args.random else os.path.basename(args.model_path)
        print("\n" + plot_bits(curve, r.loss_float, args.plot, name))
    return 0


def plot_bits(curve, float_loss: float, path: str, name: str) -> str:
    """Held-out loss against bits per weight, per-row and per-matrix scales, float32 for scale."""
    plt = pyplot()
    if plt is None:
        return "plot: missing (matplotlib not installed)"
    bits, per_row, per_matrix_ = zip(*curve)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(bits, per_row, marker="o", label="one scale per row (minillm.quantize)")
    ax.plot(bits, per_matrix_, marker="s", label="one scale per matrix")
    ax.axhline(float_loss, color="gray", linestyle="--", label=f"float32 ({float_loss:.4f})")
    ax.set_xlabel("bits per weight (every linear layer of the blocks)")
    ax.set_ylabel("held-out loss, nats/token (log scale)")
    ax.set_yscale("log")
    ax.set_title(f"Loss against bit width: {name}", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return f"plot: {path}"


if __name__ == "__main__":
    sys.exit(main())
