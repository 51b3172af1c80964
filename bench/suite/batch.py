"""Workload 3: batched rollouts, the RL measurement: B prompts of P tokens, N new tokens each."""
from __future__ import annotations

import minillm

from . import contenders as C
from . import hf, torch_loop
from .timing import Missing, measure, rows


def run(ctx):
    s = ctx["settings"]
    B, P, N = s.batch
    size = "student"
    model = C.model(ctx, size)
    prompts = C.prompts(model.config, B, P)
    outputs = {}
    net, hf_net = C.torch_loop(ctx, size), C.transformers(ctx, size)
    found = {
        "minillm f32": lambda n: [row[P:] for row in
                                  minillm.generate(model, prompts, max_new_tokens=n,
                                                   temperature=0)],
        "minillm uncached": lambda n: minillm.generate(model, prompts, max_new_tokens=n,
                                                       temperature=0,
                                                       use_cache=False),
        "PyTorch loop": net if isinstance(net, Missing) else (
            lambda n: torch_loop.generate(net, prompts, n)),
        "transformers": hf_net if isinstance(hf_net, Missing) else (
            lambda n: hf.generate(hf_net, prompts, n)),
    }
    contenders = {name: fn if isinstance(fn, Missing) else C.recorded(outputs, name, fn)
                  for name, fn in found.items()}
    seconds = measure(contenders, s.repeats, N, s.warm)
    notes = {name: C.same_tokens(outputs["minillm f32"], outputs[name])
             for name in ("PyTorch loop", "transformers") if name in outputs}
    out = rows("batch", f"{size}, {B}×{P} → +{N}", contenders, seconds, "s", notes=notes)
    return f"3. Batched rollouts: {B} prompts of {P} tokens, {N} new tokens each, greedy", out
