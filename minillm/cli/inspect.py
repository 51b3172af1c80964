"""Print a model file's config, parameter count by part, dtypes and size, and its tokenizer:
whether it holds a chat template (what `minillm chat` needs) and the tokens that end a text."""
from __future__ import annotations

import os
from collections import defaultdict

import numpy as np

from .common import add_model_positional, load_model, model_and_output, model_file


def add_arguments(parser) -> None:
    add_model_positional(parser, "model_path", "a minillm .npz file, or the name of a fetched "
                                               "model")


def _part(name: str) -> str:
    """The part of the model a tensor belongs to: embeddings, attention, mlp, norms, head."""
    if name.startswith(("tok_emb", "pos_emb")):
        return "embeddings"
    if name.startswith("lm_head"):
        return "output layer"
    if "norm" in name:
        return "norms"
    return "attention" if ".attn." in name else "mlp"


def run(args) -> int:
    from ..fast import FastModel

    given, flag, _ = model_and_output(args, "model_path")
    path = model_file(given, flag)
    model = load_model(path, reference=args.reference)
    cfg = model.config
    print(f"{given}  ({os.path.getsize(path) / 2**20:.2f} MiB on disk)")
    for key, value in cfg.to_dict().items():
        print(f"  {key:15s} {value}")
    counts, dtypes = defaultdict(int), defaultdict(int)
    for name, value in model.params.items():
        size = int(np.prod(value.shape))
        counts[_part(name)] += size
        dtypes[str(value.dtype)] += size
    total = sum(counts.values())
    print(f"parameters: {total:,}" + ("  (output layer tied to the embedding)"
                                      if cfg.tie_embeddings else ""))
    for part, n in counts.items():
        print(f"  {part:15s} {n:>12,}  {100 * n / total:5.1f}%")
    print("dtypes: " + ", ".join(f"{d} {n:,}" for d, n in dtypes.items()))
    print(f"weights in memory: {model.nbytes / 2**20:.2f} MiB" + (
        "  (with a column-major copy of the tied output layer, for decoding)"
        if cfg.tie_embeddings and isinstance(model, FastModel) else ""))
    tok = model.tokenizer
    print("tokenizer: " + ("none" if tok is None else f"{len(tok):,} tokens"))
    if tok is not None:
        for line in tokenizer_lines(tok):
            print("  " + line)
    return 0


def tokenizer_lines(tok) -> list[str]:
    """What a chat needs of a tokenizer: its chat template, if any, and its end tokens (the
    default stop tokens), each as `text id`; BOS when it starts every prompt."""
    template = tok.chat_template
    lines = [f"{'chat template':15s} " + (
        "none: minillm chat needs --template FILE" if template is None
        else f"yes, {len(template):,} characters (minillm chat runs it)")]
    ends = ", ".join(f"{tok.token_of(i)} {i}" for i in tok.eos_token_ids) or "none"
    lines.append(f"{'end tokens':15s} {ends}")
    if tok.add_bos_token:
        lines.append(f"{'BOS':15s} {tok.token_of(tok.bos_token_id)} {tok.bos_token_id}, first "
                     "in every prompt")
    return lines
