"""Workload 2: cached against uncached generation at growing lengths (student size).

Without the cache, token n costs a forward pass over the whole visible text; with it, a pass
over one token that attends to the cached keys and values.
"""
from __future__ import annotations

import minillm

from . import contenders as C
from .timing import measure, rows


def run(ctx):
    s = ctx["settings"]
    size = "student"
    model = C.model(ctx, size)
    prompt = C.prompts(model.config, 1, s.prompt)[0]
    contenders = {
        "minillm f32": lambda n: minillm.generate(model, prompt, n, temperature=0),
        "minillm uncached": lambda n: minillm.generate(model, prompt, n, temperature=0,
                                                       use_cache=False),
    }
    out = []
    for n in s.cache_lengths:
        seconds = measure(contenders, s.repeats, n, warm=s.warm if n == s.cache_lengths[0]
                          else None)
        out += rows("cache", f"{size}, {n} tokens", contenders, seconds, "tokens/s", n)
    window = model.config.context_length
    return (f"2. Cached vs uncached, {size} size, {s.prompt}-token prompt, greedy "
            f"(window {window}: longer texts slide)"), out
