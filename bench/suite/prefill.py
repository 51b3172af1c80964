"""Workload 4: prefill, one forward pass over a long prompt into an empty cache."""
from __future__ import annotations

from . import contenders as C
from . import hf, torch_loop
from .timing import Missing, measure, rows


def run(ctx):
    s = ctx["settings"]
    out = []
    for size, cfg in s.sizes.items():
        prompt = C.prompts(cfg, 1, s.prefill)
        model = C.model(ctx, size)
        net, hf_net = C.torch_loop(ctx, size), C.transformers(ctx, size)
        contenders = {
            "minillm f32": lambda n: model.forward(prompt, model.new_cache()),
            "PyTorch loop": net if isinstance(net, Missing) else (
                lambda n: torch_loop.prefill(net, prompt)),
            "transformers": hf_net if isinstance(hf_net, Missing) else (
                lambda n: hf.prefill(hf_net, prompt)),
        }
        int8 = C.int8(ctx, size)
        contenders["minillm int8"] = int8 if isinstance(int8, Missing) else (
            lambda n: int8.forward(prompt, int8.new_cache()))
        seconds = measure(contenders, s.repeats, s.prefill, warm=s.prefill)
        out += rows("prefill", size, contenders, seconds, "tokens/s", s.prefill)
    return f"4. Prefill of {s.prefill} tokens, batch 1", out
