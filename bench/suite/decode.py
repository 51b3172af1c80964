"""Workload 1: batch-1 greedy decoding at three sizes, against the peers and the roofline."""
from __future__ import annotations

import minillm

from . import contenders as C
from . import hf, roofline, torch_loop
from .timing import Missing, Row, measure, rows


def bandwidth(ctx) -> float:
    """The roofline's read bandwidth (bytes/s), measured once per run."""
    if "bandwidth" not in ctx:
        ctx["bandwidth"] = roofline.bandwidth(ctx["settings"].bandwidth_mib)
    return ctx["bandwidth"]


def tokens_for(s, size) -> int:
    return (s.slow_decode_tokens or {}).get(size, s.decode_tokens)


def decoders(ctx, size, prompt, outputs) -> dict:
    """{name: fn(n)} generating n greedy tokens after `prompt` (1, T), keeping the tokens."""
    model = C.model(ctx, size)
    found = {"minillm f32": lambda n: minillm.generate(
        model, prompt[0], max_new_tokens=n, temperature=0)[prompt.shape[1]:]}
    net = C.torch_loop(ctx, size)
    found["PyTorch loop"] = net if isinstance(net, Missing) else (
        lambda n: torch_loop.generate(net, prompt, n)[0])
    hf_net = C.transformers(ctx, size)
    found["transformers"] = hf_net if isinstance(hf_net, Missing) else (
        lambda n: hf.generate(hf_net, prompt, n)[0])
    return {name: fn if isinstance(fn, Missing) else C.recorded(outputs, name, fn)
            for name, fn in found.items()}


def run(ctx):
    s = ctx["settings"]
    out = []
    for size, cfg in s.sizes.items():
        n = tokens_for(s, size)
        case = f"{size} ({cfg.n_params() / 1e6:.3g}M), {n} tokens"
        prompt = C.prompts(cfg, 1, s.prompt)
        outputs = {}
        contenders = decoders(ctx, size, prompt, outputs)
        seconds = measure(contenders, s.repeats, n, s.warm)
        notes = {name: C.same_tokens(outputs["minillm f32"], tokens)
                 for name, tokens in outputs.items() if name != "minillm f32"}
        found = rows("decode", case, contenders, seconds, "tokens/s", n, notes)
        out += found + [roofline_row(ctx, size, case, found[0])]
    title = f"1. Decode, batch 1, {s.prompt}-token prompt, greedy"
    return title, out


def roofline_row(ctx, size, case, minillm_row) -> Row:
    weights = roofline.bytes_per_token(C.model(ctx, size))
    bw = bandwidth(ctx)
    best = bw / weights
    share = f"; minillm f32 at {minillm_row.median / best:.0%}" if minillm_row.values else ""
    return Row("decode", case, "roofline", "tokens/s", [best],
               note=f"{weights / 2**20:.1f} MiB of weights per token at {bw / 1e9:.1f} GB/s"
                    f"{share}")
