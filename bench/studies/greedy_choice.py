"""What the fast model's greedy choice (fast.FastModel.next_tokens) saves in the decode loop.

    python -m bench.studies.greedy_choice [--tokens 200] [--repeats 5]

Greedy decoding without a penalty only needs the argmax of the logits; the reference builds the
filtered distribution first (a float64 copy, its checks, the one-hot) and takes its argmax. Two
measurements, each the fast model with its own choice against the same fast model asked to
choose as the reference does, alternated in one process, best of `repeats`:
- one choice on a row of logits of each vocabulary size (microseconds a step);
- greedy `minillm.generate` of `tokens` new tokens after the benchmark's 16-token prompt, on the
  shipped model and on random models of the decode workload's sizes (bench.suite.shapes), the
  tokens checked equal.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import minillm
from minillm.generate import Step, next_tokens
from minillm.fast import model as fast

from ..suite.machine import set_threads
from ..suite.shapes import FULL_SIZES
from ..suite.speculative import shipped_pair
from ..suite.timing import Missing

GREEDY = minillm.SamplingConfig(temperature=0.0)


def reference_choice(step, rng):
    """The decode loop's default: choose from the step's filtered distributions."""
    return next_tokens(None, step, rng)


def best(run, repeats: int) -> float:
    """The shortest of `repeats` timed calls of run(), seconds."""
    times = []
    for _ in range(repeats):
        start = time.process_time()  # CPU time: the other processes of a busy machine count less
        run()
        times.append(time.process_time() - start)
    return min(times)


def choice_per_step(vocab: int, repeats: int) -> tuple[float, float]:
    """(fast, reference) seconds of one greedy choice on a (1, vocab) float32 row."""
    z = np.random.default_rng(0).standard_normal((1, vocab)).astype(np.float32)
    seen = np.zeros((1, 16), dtype=np.int64)
    model = fast.accelerate(minillm.random_model(minillm.ModelConfig(
        arch="modern", vocab_size=vocab, context_length=8, d_model=8, n_layers=1, n_heads=2)))
    calls = 200

    def loop(choose):
        for _ in range(calls):
            choose(Step(np.arange(1), z, seen, GREEDY), None)

    times = [np.inf, np.inf]
    for _ in range(repeats):  # alternated
        for i, choose in enumerate((model.next_tokens, reference_choice)):
            times[i] = min(times[i], best(lambda: loop(choose), 1))
    return times[0] / calls, times[1] / calls


def generation(model, tokens: int, repeats: int) -> tuple[float, float]:
    """(fast, reference) seconds of greedy generation of `tokens` tokens, alternated."""
    prompt = list(range(1, 17))
    reference_model = fast.accelerate(model)
    reference_model.next_tokens = reference_choice  # the same fast products, the loop's choice
    ids = [minillm.generate(m, prompt, max_new_tokens=tokens, temperature=0)
           for m in (model, reference_model)]
    assert ids[0] == ids[1], "the two choices gave different tokens"
    times = [np.inf, np.inf]
    for _ in range(repeats):
        for i, m in enumerate((model, reference_model)):
            times[i] = min(times[i], best(lambda: minillm.generate(
                m, prompt, max_new_tokens=tokens, temperature=0), 1))
    return times[0], times[1]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.studies.greedy_choice")
    p.add_argument("--tokens", type=int, default=200)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--sizes", default="student,Sprout,GPT-2-small",
                   help="comma-separated sizes of bench.suite.shapes (default: all three)")
    args = p.parse_args(argv)
    print(set_threads(1)[0])
    print("one greedy choice, (1, V) float32 logits: fast / reference")
    for vocab in (2048, 4096, 8192, 50257):
        f, r = choice_per_step(vocab, args.repeats)
        print(f"  V = {vocab:6d}: {f * 1e6:7.1f} µs / {r * 1e6:7.1f} µs = {f / r:.2f}x")
    print(f"greedy generate, {args.tokens} new tokens after 16: fast / reference choice")
    models = {}
    pair = shipped_pair()
    if not isinstance(pair, Missing):
        models["shipped target"] = pair[0]
    for name in args.sizes.split(","):
        cfg = minillm.ModelConfig(**FULL_SIZES[name])
        models[name] = fast.accelerate(minillm.random_model(cfg, seed=0))
    for name, model in models.items():
        f, r = generation(model, args.tokens, args.repeats)
        print(f"  {name:15s}: {f:.3f} s / {r:.3f} s = {f / r:.3f}x "
              f"({args.tokens / f:.0f} / {args.tokens / r:.0f} tokens/s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
