"""Workload 2: cached against uncached generation at growing lengths (student size).

Without the cache, token n costs a forward pass over the whole visible text; with it, a pass
over one token that attends to the cached keys and values. The cache must not change the
text: the uncached run's tokens are compared with the cached run's, and the note says so.

    python -m bench --only cache [--quick]
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
    outputs = {}
    contenders = {
        "minillm f32": lambda n: minillm.generate(model, prompt, max_new_tokens=n, temperature=0),
        "minillm uncached": lambda n: minillm.generate(model, prompt, max_new_tokens=n,
                                                       temperature=0,
                                                       use_cache=False),
    }
    contenders = {name: C.recorded(outputs, name, fn) for name, fn in contenders.items()}
    out = []
    for n in s.cache_lengths:
        seconds = measure(contenders, s.repeats, n, warm=s.warm if n == s.cache_lengths[0]
                          else None)
        notes = {"minillm uncached": C.same_tokens(outputs["minillm f32"],
                                                   outputs["minillm uncached"], "cached")}
        out += rows("cache", f"{size}, {n} tokens", contenders, seconds, "tokens/s", n, notes)
    window = model.config.context_length
    return (f"2. Cached vs uncached, {size} size, {s.prompt}-token prompt, greedy "
            f"(window {window}: longer texts slide)"), out
