"""The sampling desk: the next-token distribution for a prompt, and what the knobs keep.

    minillm next "Once upon a" --top_p 0.9
    minillm next --model_path M.npz --prompt_ids 1,2,3 --temperature 0.7 --top_k 5

For the top candidates: the model's probability (temperature 1) as a bar, then the
probability each survivor gets after the knobs, renormalised (a dot marks a cut candidate).
Below: the mass of the tail, the entropy H and the "effective choices" e^H, the size of the
die that is as uncertain as this distribution.
"""
from __future__ import annotations

import math

import numpy as np

from .common import (UsageError, add_knob_arguments, add_prompt_arguments, knobs_of, load_model,
                     prompt_ids)

BAR = 32  # characters for probability 1
EIGHTHS = " ▏▎▍▌▋▊▉"


def add_arguments(parser) -> None:
    add_prompt_arguments(parser)
    add_knob_arguments(parser, generation=False)
    parser.add_argument("--top", type=int, default=12, metavar="N",
                        help="how many candidates to show (default 12)")


def bar(p: float, width: int = BAR) -> str:
    """A horizontal bar of length p * width, drawn to an eighth of a character."""
    eighths = int(round(p * width * 8))
    full, part = divmod(eighths, 8)
    return ("█" * full + (EIGHTHS[part] if part else "")).ljust(width)


def token_label(model, token: int) -> str:
    if model.tokenizer is None:
        return f"#{token}"
    return repr(model.tokenizer.decode([token]))


def run(args) -> int:
    from ..study.explain import entropy
    from ..sampling import filtered_probs

    if args.top < 1:
        raise UsageError(f"--top: must be at least 1, got {args.top}")
    knobs = knobs_of(args)  # checked before the model's load
    model = load_model(args.model_path, reference=args.reference)
    ids = prompt_ids(args, model)
    window = ids[-model.config.context_length:]
    logits = model.forward(np.array([window]))[0, -1].astype(np.float64)  # (V,)
    model_p = filtered_probs(logits, temperature=1.0)
    kept_p = filtered_probs(logits, history=window, **knobs)

    V = model_p.size
    order = np.argsort(-model_p, kind="stable")[:min(args.top, V)]
    label_width = max(len(token_label(model, t)) for t in order) + 2
    print(f"prompt: {len(ids)} tokens; next-token candidates ({V} in the vocabulary)\n")
    print(f"  {'rank':>4}  {'token':<{label_width}} {'model (T=1)':<{BAR + 8}}  after knobs")
    for rank, t in enumerate(order, 1):
        after = f"{kept_p[t]:7.4f}  {bar(kept_p[t], 12)}" if kept_p[t] > 0 else "     ·"
        print(f"  {rank:>4}  {token_label(model, t):<{label_width}} {model_p[t]:7.4f} "
              f"{bar(model_p[t])}  {after}")
    rest = np.ones(V, dtype=bool)
    rest[order] = False
    print(f"  {'':>4}  {f'the other {rest.sum()}':<{label_width}} {model_p[rest].sum():7.4f} "
          f"{'':{BAR}}  {kept_p[rest].sum():7.4f}")

    h, h_kept = entropy(model_p), entropy(kept_p)
    print(f"\nmodel:       entropy {h:.3f} nats = {math.exp(h):8.1f} effective choices (e^H)")
    print(f"after knobs: entropy {h_kept:.3f} nats = {math.exp(h_kept):8.1f} effective choices; "
          f"{int((kept_p > 0).sum())} of {V} tokens survive")
    if all(knobs[name] is None for name in ("repetition_penalty", "frequency_penalty",
                                            "presence_penalty")):  # the window of no penalty
        del knobs["penalty_window"]
    on = [f"{k} {v}" for k, v in knobs.items() if v is not None]
    print("knobs: " + ", ".join(on) + ("  (temperature 0: greedy)" if args.temperature == 0
                                       else ""))
    return 0
