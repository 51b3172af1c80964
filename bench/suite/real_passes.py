"""Real model 2: the cost of one forward pass with a cache, per pass length, in one-token steps.

    python -m bench --only real-passes [--repeats 3]

Speculative decoding's verify pass reads k + 1 tokens at once; it pays off when that pass costs
little more than a one-token step, because batch-1 decoding is bound by reading the weights,
which one pass reads once whatever its length. After the 128-token prompt is in the cache, a
pass of T tokens (T = 1, 2, 3, 5, 8) is timed `CALLS` times in a row, rolling the cache back
after each (cache.truncate), with the logits of every position (as a verify pass needs them).
Each round times every length; its figure for T is the seconds of a T-token pass over those of
a one-token pass in the same round. Float32 and int8 (and int8 with the embeddings quantized,
when minillm.quantize has that option). "Products alone" times only the pass's matrix products,
the same way: how much of a pass's extra cost is BLAS multiplying T rows instead of one, and
what share of a step the products are (the rest, attention, norms and glue, is minillm's own).
"""
from __future__ import annotations

import time

import numpy as np

from . import real
from .timing import Row

LENGTHS = (1, 2, 3, 5, 8)
CALLS = 10


def pass_seconds(model, cache, tokens, start: int, calls: int) -> float:
    """Mean seconds of model.forward(tokens, cache) after `start` cached tokens."""
    began = time.perf_counter()
    for _ in range(calls):
        model.forward(tokens, cache)
        cache.truncate(start)
    return (time.perf_counter() - began) / calls


def products_seconds(model, T: int, calls: int) -> float:
    """Mean seconds of the matrix products alone of a T-token pass: x (T, in) times every
    matrix a forward pass multiplies by (each layer's, then the output layer), through the same
    products as forward (minillm.fast), with nothing between them: no attention, no norms, no
    Python glue. What a pass would cost if the rest were free."""
    matrices = [w for name, w in model.params.items()  # embeddings are looked up, not multiplied
                if hasattr(w, "matmul") and not name.endswith(("emb.weight", "lm_head.weight"))]
    matrices.append(model.output_weight)
    rng = np.random.default_rng(0)
    inputs = {w.shape[1]: rng.standard_normal((T, w.shape[1])).astype(model.dtype)
              for w in matrices}
    began = time.perf_counter()
    for _ in range(calls):
        for w in matrices:
            w.matmul(inputs[w.shape[1]])
    return (time.perf_counter() - began) / calls


def products_rows(kind, model, repeats: int, calls: int, step_seconds) -> list:
    """The products alone: each length in one-token product sets, and their share of a step."""
    seconds = {T: [] for T in LENGTHS}
    products_seconds(model, max(LENGTHS), 1)  # warm-up
    for _ in range(repeats):
        for T in LENGTHS:
            seconds[T].append(products_seconds(model, T, calls))
    case = f"{kind}, products alone"
    out = [Row("real-passes", case, f"pass of {T} token{'s' * (T > 1)}", "steps",
               [t / one for t, one in zip(seconds[T], seconds[1])]) for T in LENGTHS[1:]]
    share = float(np.median(seconds[1]) / np.median(step_seconds))
    out[0].note = (f"the products of a one-token step take {share:.0%} of the whole step "
                   f"({float(np.median(seconds[1])) * 1e3:.1f} ms)")
    return out


def run(ctx):
    s = ctx["settings"]
    title = (f"R2. Real model: one forward pass of T tokens with {s.real_prompt} cached, in "
             "one-token steps (a speculative verify pass reads k + 1 tokens)")
    missing = real.missing_rows("real-passes", "steps")
    if missing:
        return title, missing
    f32 = real.model(ctx)
    prompt = np.array([real.prompt(f32.tokenizer, s.real_prompt)])
    models = {"float32": f32}
    models.update({name.replace("minillm ", ""): real.int8(ctx, name)
                   for name in real.int8_kinds()})
    out = []
    for kind, model in models.items():
        cache = model.new_cache()  # as a user makes one: it grows as it fills
        began = time.perf_counter()
        model.forward(prompt, cache, last=1)
        prefill = prompt.shape[1] / (time.perf_counter() - began)
        start = cache.length
        calls = 1 if s.quick else CALLS
        seconds = {T: [] for T in LENGTHS}
        pass_seconds(model, cache, prompt[:, :max(LENGTHS)], start, 1)  # warm-up
        for _ in range(s.repeats):  # interleaved: every length once per round
            for T in LENGTHS:
                seconds[T].append(pass_seconds(model, cache, prompt[:, :T], start, calls))
        for T in LENGTHS:
            steps = [t / one for t, one in zip(seconds[T], seconds[1])]
            ms = float(np.median(seconds[T])) * 1e3
            note = f"{ms:.1f} ms per pass, {ms / T:.1f} ms per token"
            if T == 1:
                note += (f"; the prompt's prefill into a fresh model.new_cache(): "
                         f"{prefill:.0f} tokens/s")
            out.append(Row("real-passes", kind, f"pass of {T} token{'s' * (T > 1)}", "steps",
                           steps, note=note))
        out += products_rows(kind, model, s.repeats, calls, seconds[1])
    if "minillm int8 + emb" not in real.int8_kinds():
        out.append(Row("real-passes", "int8 + emb", "all", "steps", missing=real.EMB_MISSING))
    return title, out
