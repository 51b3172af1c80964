"""Real model 4: 8 prompts decoded together against one, tokens/s (minillm float32, greedy).

    python -m bench --only real-batch [--real-tokens 128]

Batch-1 decoding reads every weight for one token; a batch of 8 reads them once for 8 tokens,
so its tokens/s can approach 8 times batch 1's while the weights, not the arithmetic, are the
bottleneck. The 8 prompts are 8 chat requests about the same paragraph, each cut to 128 tokens;
batch 1 decodes the first of them alone. Both make the same number of new tokens per prompt.
The figure is the decode steps' tokens/s: all rows' new tokens after the first, over the time
after the first (the prefill of 8 x 128 tokens is timed apart and shown in the note).
"""
from __future__ import annotations

import statistics
import time

from . import real
from .timing import Row

TASKS = ("Summarise this paragraph in two sentences.",
         "List every date in this paragraph and what happened then.",
         "Write three questions a visitor might ask about this lighthouse.",
         "Rewrite this paragraph for a ten-year-old reader.",
         "Translate this paragraph into French.",
         "Give this paragraph a title and explain the choice.",
         "Which facts in this paragraph could a visitor check on the spot?",
         "Turn this paragraph into a short poem.")


def batch_prompts(tokenizer, length: int) -> list:
    return [real.chat_ids(tokenizer, f"{task}\n\n{real.PARAGRAPH} {real.PARAGRAPH}", length)
            for task in TASKS]


def agreement(row, alone) -> str:
    """Does a batch's row say what the prompt decoded alone says? (A batched product may sum
    in another order, which can flip a near tie between two tokens.)"""
    if row == alone:
        return "is the same text as batch 1"
    step = next(i for i, (a, b) in enumerate(zip(row, alone)) if a != b)
    return f"differs from batch 1 from new token {step} on"


def decode(model, prompts, n: int):
    """(prefill seconds, decode seconds, each row's new tokens) of greedy decoding: the clock
    reads when every row's first new token is known (after the prefill) and after the n-th."""
    from minillm.generate import stream

    texts = [[] for _ in prompts]
    start = time.perf_counter()
    first = start
    for step in stream(model, prompts, max_new_tokens=n, temperature=0, stop_tokens=()):
        if not texts[0]:
            first = time.perf_counter()
        for row, token in step.items():
            texts[row].append(token)
    return first - start, time.perf_counter() - first, texts


def run(ctx):
    s = ctx["settings"]
    B, N = len(TASKS), s.real_tokens
    title = (f"R4. Real model: {B} prompts of {s.real_prompt} tokens decoded together against "
             f"one, {N} new tokens each, greedy, decode steps only")
    missing = real.missing_rows("real-batch", "tokens/s")
    if missing:
        return title, missing
    model = real.model(ctx)
    prompts = batch_prompts(model.tokenizer, s.real_prompt)
    batches = {"minillm f32, batch 1": prompts[:1], f"minillm f32, batch {B}": prompts}
    for rows in batches.values():  # warm-up
        decode(model, rows, s.warm)
    runs = {name: [] for name in batches}
    for _ in range(s.repeats):  # interleaved
        for name, rows in batches.items():
            runs[name].append(decode(model, rows, N))
    out = []
    for name, rows in batches.items():
        speeds = [len(rows) * (N - 1) / d for _, d, _ in runs[name]]
        prefill = statistics.median(len(rows) * s.real_prompt / p for p, _, _ in runs[name])
        out.append(Row("real-batch", "float32", name, "tokens/s", speeds,
                       note=f"prefill {prefill:.0f} tokens/s (not counted)"))
    alone, together = (runs[name][-1][2][0] for name in batches)  # the first prompt's tokens
    out[1].note = (f"{out[1].median / out[0].median:.2f}× the tokens/s of batch 1; its first row "
                   f"{agreement(together, alone)}; {out[1].note}")
    return title, out
