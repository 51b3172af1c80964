"""Workload 5: speculative decoding with the shipped target and draft, and with n-gram prompt
lookup, against plain cached decoding of the same prompt (greedy and temperature 0.8)."""
from __future__ import annotations

import os

import minillm

from . import contenders as C
from .timing import Missing, Row, measure, rows

WEIGHTS = "weights"
K = 3  # guesses per block: the fastest on the shipped pair (python -m bench.spec_table --k K)


def models(ctx):
    """(target, draft, prompt ids, label) or Missing; --quick uses a random tiny pair."""
    s = ctx["settings"]
    if not hasattr(minillm, "speculative_generate"):
        return Missing("minillm.speculative_generate not available yet")
    if s.quick:
        target = C.model(ctx, "student")
        draft = minillm.random_model(minillm.ModelConfig(**{
            **target.config.to_dict(), "n_layers": 1}), seed=1)
        return target, draft, C.prompts(target.config, 1, 16)[0], "random tiny pair (quick)"
    paths = [os.path.join(WEIGHTS, name) for name in ("target.npz", "draft.npz")]
    absent = [p for p in paths if not os.path.exists(p)]
    if absent:
        return Missing(f"{', '.join(absent)} not found (the shipped models)")
    target, draft = minillm.load(paths[0]), minillm.load(paths[1])
    return target, draft, prompt_ids(target), "shipped target + draft"


def prompt_ids(target, length: int = 64) -> list:
    """The first `length` tokens of the validation text (prompt lookup feeds on real text)."""
    tokenizer = target.tokenizer
    if tokenizer is None:
        from minillm.tokenizer import load_tokenizer
        tokenizer = load_tokenizer(os.path.join(WEIGHTS, "tokenizer.json"))
    with open(os.path.join(WEIGHTS, "web_valid.txt"), encoding="utf-8") as f:
        return tokenizer.encode(f.read(20000))[:length]


def run(ctx):
    s = ctx["settings"]
    title = f"5. Speculative decoding (k={K}) against plain cached decoding, {s.spec_tokens} tokens"
    found = models(ctx)
    if isinstance(found, Missing):
        return title, [Row("speculative", "target + draft, ngram", "all", "s",
                           missing=found.reason)]
    target, draft, prompt, label = found
    out = []
    for temperature in (0.0, 0.8):
        texts, stats = {}, {}

        def speculative(drafter, name):
            def fn(n):
                texts[name], stats[name] = minillm.speculative_generate(
                    target, drafter, prompt, n, k=K, temperature=temperature, seed=0)
            return fn

        def plain(n):
            texts["minillm f32"] = minillm.generate(target, prompt, n, temperature=temperature,
                                                    seed=0)
        contenders = {"minillm f32": plain, "speculative, draft model": speculative(
            draft, "speculative, draft model"), "speculative, ngram": speculative(
            "ngram", "speculative, ngram")}
        seconds = measure(contenders, s.repeats, s.spec_tokens, s.warm)
        notes = {name: note(st, texts[name], texts["minillm f32"], temperature)
                 for name, st in stats.items()}
        case = f"{label}, " + ("greedy" if temperature == 0 else f"temperature {temperature}")
        out += rows("speculative", case, contenders, seconds, "s", notes=notes)
    return title, out


def note(stats, text, plain, temperature) -> str:
    same = ""
    if temperature == 0:
        same = "; same text as plain" if list(text) == list(plain) else "; TEXT DIFFERS"
    return (f"acceptance {stats.acceptance_rate:.0%}, {stats.tokens_per_target_call:.2f} "
            f"tokens per target pass{same}")
