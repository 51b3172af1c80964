"""Where a round of speculative decoding spends its time, in units of one plain decoding step.

    python -m bench.studies.spec_round [--k 3] [--tokens 200] [--repeats 5]

On the shipped pair and the benchmark's prompt (bench.suite.speculative), greedy. A round is one
verify pass of the target over the k guesses and the token before them, the draft's forward
passes that made the guesses, and the rest (the accept rule, sampling, bookkeeping). With a
plain step costing P, a round costing R and yielding n tokens on average, speculative decoding
is n P / R times as fast as plain decoding: the table says which term keeps it where it is.
Both sides include their share of the prompt's prefill (P is plain decoding's time per token).
"""
from __future__ import annotations

import argparse
import time
from collections import defaultdict

import minillm

from ..suite.machine import set_threads
from ..suite.speculative import prompt_ids, shipped_pair
from ..suite.timing import Missing
from .profile_step import timed


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.studies.spec_round")
    p.add_argument("--k", type=int, default=3)
    p.add_argument("--tokens", type=int, default=200)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)
    print(set_threads(1)[0])
    pair = shipped_pair()
    if isinstance(pair, Missing):
        print(f"missing: {pair.reason}")
        return 1
    target, draft = pair
    prompt = prompt_ids(target)
    totals = defaultdict(lambda: [0.0, 0])  # "verify" / "draft": [seconds, calls] of forward
    target.forward = timed(target.forward, "verify", totals)
    draft.forward = timed(draft.forward, "draft", totals)
    plain, spec, rounds, draft_calls = [], [], 0, 0
    for _ in range(args.repeats + 1):  # the first of each is a warm-up
        start = time.perf_counter()
        minillm.generate(target, prompt, max_new_tokens=args.tokens, temperature=0)
        plain.append(time.perf_counter() - start)
        totals.clear()  # count the speculative run only
        start = time.perf_counter()
        _, stats = minillm.speculative_generate(target, draft, prompt, max_new_tokens=args.tokens,
                                                k=args.k,
                                                temperature=0)
        spec.append((time.perf_counter() - start, {k: s for k, (s, _) in totals.items()}))
        rounds, draft_calls = stats.target_calls, stats.draft_calls
    step = min(plain[1:]) / args.tokens  # P: one plain token, its share of the loop included
    wall, parts = min(spec[1:], key=lambda run: run[0])  # the fastest speculative run
    per_round = {"target verify pass": parts["verify"] / rounds,
                 f"draft forward passes ({draft_calls / rounds:.1f} a round)":
                     parts["draft"] / rounds}
    per_round["the rest: accept rule, sampling, bookkeeping"] = \
        wall / rounds - sum(per_round.values())
    tokens = args.tokens / rounds
    print(f"\nshipped pair, greedy, k = {args.k}, {args.tokens} tokens: plain decoding "
          f"{step * 1e6:.0f} µs a token; speculative {rounds} rounds, {tokens:.2f} tokens a "
          f"round\n")
    print("| piece | µs a round | plain steps |\n| --- | ---: | ---: |")
    for name, seconds in per_round.items():
        print(f"| {name} | {seconds * 1e6:.0f} | {seconds / step:.2f} |")
    cost = wall / rounds / step
    print(f"| round | {wall / rounds * 1e6:.0f} | {cost:.2f} |")
    print(f"\nspeed-up: {tokens:.2f} tokens / {cost:.2f} steps = {tokens / cost:.2f}x "
          f"(measured: {min(plain[1:]) / wall:.2f}x); 1.5x would need a round of at most "
          f"{tokens / 1.5:.2f} steps")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
