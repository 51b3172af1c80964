"""Workload 5: speculative decoding with the shipped target and draft, and with n-gram prompt
lookup, against plain cached decoding of the same prompt (greedy and temperature 0.8).

    python -m bench --only speculative [--quick]     # the suite's table: one 64-token prompt
    python -m bench.suite.speculative [--prompts 10] [--tokens 100] [--k 4] [--repeats 3]

Run alone, the module prints the seed's table instead, over several prompts: guesses kept,
tokens per target pass, target passes for 1,000 tokens, and wall time against plain cached
decoding. Prompts are 32-token slices of the held-out text, spread over it; the same prompts,
seeds and knobs go to minillm.generate (plain) and minillm.speculative_generate. Each prompt
runs plain and speculative alternately `--repeats` times and keeps the fastest time of each,
so that a burst of load on the machine does not land on one side only.
"""
from __future__ import annotations

import argparse
import os
import time

import minillm
from minillm.fast import accelerate

from . import contenders as C
from .machine import set_threads
from .timing import Missing, Row, measure, rows

WEIGHTS = "weights"
K = 3  # guesses per block: the fastest on the shipped pair (bench.suite.speculative's main)


def models(ctx):
    """(target, draft, prompt ids, label) or Missing; --quick uses a random tiny pair."""
    s = ctx["settings"]
    if not hasattr(minillm, "speculative_generate"):
        return Missing("minillm.speculative_generate not available yet")
    if s.quick:
        target = C.model(ctx, "student")
        draft = accelerate(minillm.random_model(minillm.ModelConfig(**{
            **target.config.to_dict(), "n_layers": 1}), seed=1))
        return target, draft, C.prompts(target.config, 1, 16)[0], "random tiny pair (quick)"
    pair = shipped_pair()
    if isinstance(pair, Missing):
        return pair
    target, draft = pair
    return target, draft, prompt_ids(target), "shipped target + draft"


def shipped_pair():
    """(target, draft) read from weights/, or Missing when they are not there."""
    paths = [os.path.join(WEIGHTS, name) for name in ("target.npz", "draft.npz")]
    absent = [p for p in paths if not os.path.exists(p)]
    if absent:
        return Missing(f"{', '.join(absent)} not found (the shipped models)")
    return minillm.load(paths[0]), minillm.load(paths[1])


def held_out_ids(target, chars: int | None = None) -> list:
    """The validation text's token ids: its first `chars` characters, or all of it."""
    tokenizer = target.tokenizer
    if tokenizer is None:
        from minillm.text.tokenizer import load_tokenizer
        tokenizer = load_tokenizer(os.path.join(WEIGHTS, "tokenizer.json"))
    with open(os.path.join(WEIGHTS, "web_valid.txt"), encoding="utf-8") as f:
        return tokenizer.encode(f.read() if chars is None else f.read(chars))


def prompt_ids(target, length: int = 64) -> list:
    """The first `length` tokens of the validation text (prompt lookup feeds on real text)."""
    return held_out_ids(target, 20000)[:length]


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
                    target, drafter, prompt, max_new_tokens=n, k=K, temperature=temperature,
                    seed=0)
            return fn

        def plain(n):
            texts["minillm f32"] = minillm.generate(target, prompt, max_new_tokens=n,
                                                    temperature=temperature,
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


def main(argv=None) -> int:
    """The seed's table on the shipped pair (see the module's docstring)."""
    parser = argparse.ArgumentParser(prog="python -m bench.suite.speculative",
                                     description="The seed's speculative-decoding table on the "
                                                 "shipped pair.")
    parser.add_argument("--prompts", type=int, default=10)
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--k", type=int, default=4, help="guesses per block (4, the seed's)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    print(set_threads(1)[0])
    pair = shipped_pair()
    if isinstance(pair, Missing):
        print(f"missing: {pair.reason}")
        return 1
    target, draft = pair
    ids = held_out_ids(target)
    step = len(ids) // args.prompts
    prompts = [ids[i * step:i * step + 32] for i in range(args.prompts)]
    print(f"\n{args.prompts} prompts of 32 tokens, {args.tokens} new tokens each, k = {args.k}\n")
    print("| decoding | drafter | guesses kept | tokens per target pass | target passes for "
          "1,000 tokens | seconds, plain | seconds, speculative | speed-up | same text |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for temperature in (0.0, 0.8):
        for name, drafter in (("draft model", draft), ("n-gram lookup", "ngram")):
            print(seed_row(target, drafter, name, prompts, args, temperature), flush=True)
    return 0


def seed_row(target, drafter, name, prompts, args, temperature) -> str:
    """One line of the seed's table: one drafter at one temperature, summed over the prompts."""
    kept = proposed = passes = made = 0
    plain_s = spec_s = 0.0
    same = True
    for seed, prompt in enumerate(prompts):
        times = {"plain": [], "speculative": []}
        for _ in range(args.repeats):
            start = time.perf_counter()
            plain = minillm.generate(target, prompt, max_new_tokens=args.tokens,
                                     temperature=temperature,
                                     seed=seed)
            times["plain"].append(time.perf_counter() - start)
            start = time.perf_counter()
            out, stats = minillm.speculative_generate(target, drafter, prompt,
                                                      max_new_tokens=args.tokens,
                                                      k=args.k, temperature=temperature,
                                                      seed=seed)
            times["speculative"].append(time.perf_counter() - start)
        plain_s += min(times["plain"])
        spec_s += min(times["speculative"])
        same &= out == plain
        kept, proposed = kept + stats.accepted, proposed + stats.guesses
        passes, made = passes + stats.target_calls, made + stats.new_tokens
    mode = "greedy" if temperature == 0 else f"sampling, T = {temperature}"
    same_text = ("yes" if same else "NO") if temperature == 0 else "n/a (sampled)"
    return (f"| {mode} | {name} | {kept / proposed:.0%} | {made / passes:.2f} | "
            f"{1000 * passes / made:.0f} | {plain_s:.2f} | {spec_s:.2f} | "
            f"{plain_s / spec_s:.2f}x | {same_text} |")


if __name__ == "__main__":
    raise SystemExit(main())
