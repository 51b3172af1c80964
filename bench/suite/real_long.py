"""Real model 5: long contexts. Prefill of 256 to 8,192 tokens and decode at growing positions,
SmolLM2-135M-Instruct, batch 1, greedy: minillm float32, transformers on the same weights and
llama.cpp on the original Q4_1 file, each in a process of its own, with its peak memory.

    python -m bench --only real-long                    # 45 minutes on a busy 2-core machine
    python -m bench --quick --only real-long            # 256 and 512 tokens: a check that runs

One thread whatever --threads says. The prompts are random token ids (seeded), as long as the
case says; every contender reads the same ids. A run is the prompt then n new tokens into a
fresh cache (real_worker): its prefill is the prompt's tokens over the time to the first new
token, its decode the other n - 1 tokens over the time after it, at positions just past the
prompt. Prefill runs ask for one new token; the decode positions are prompts of that length
with DECODE_TOKENS new ones (their prefill is a row too). Lengths go up one at a time, every
contender once per round (A B C), so a slow minute of the shared machine hits all of them; the
long cases run once. Each prefill row's note gives the process's peak resident memory so far
(VmHWM, loading included): since lengths only grow, it is the peak of the longest text read
yet.

The slide: after a prompt as long as the context (8,192 tokens), minillm asks for a second new
token, which no longer fits the window: that step keeps the newest half of the text (4,096
tokens) and reads it again from scratch. Its time is the "slide" row, next to the prefill of
4,096 tokens. (transformers and llama.cpp have no sliding window: past their context they
fail or leave the trained positions, so they are not asked.)
"""
from __future__ import annotations

import numpy as np

from . import real
from .real_decode import start
from .timing import Missing, Row

CONTENDERS = ("minillm f32", "transformers", "llama.cpp")
PREFILL = (256, 512, 1024, 2048, 4096, 8192)
DECODE_AT = (512, 2048, 4096, 8000)
QUICK = ((256, 512), (512,))  # --quick: (prefill lengths, decode positions)
DECODE_TOKENS = 32  # new tokens of a decode run (--quick: 4)
REPEATED_UP_TO = 1024  # longer runs are timed once, shorter ones --repeats times
CONTEXT = 8192  # SmolLM2's context: llama.cpp's n_ctx
THREADS = 1  # the goals are at one thread


def cases(quick: bool) -> list:
    """[(prompt length, new tokens)], shortest first: the prefill lengths (one new token) and
    the decode positions (DECODE_TOKENS), a length in both read once, with the new tokens."""
    prefill, decode = QUICK if quick else (PREFILL, DECODE_AT)
    new = 4 if quick else DECODE_TOKENS
    runs = {length: 1 for length in prefill}
    runs.update({length: new for length in decode})
    return sorted(runs.items())


def prompt_ids(length: int, vocab: int) -> list:
    """`length` random token ids, the same for every contender and every run."""
    return np.random.default_rng(length).integers(0, vocab, size=length).tolist()


def slides(name: str, length: int) -> int:
    """1 when this run adds a token that makes `name` slide its window (minillm only), else 0."""
    return int(name == "minillm f32" and length == CONTEXT)


def measure(threads: int, runs: list, vocab: int, repeats: int) -> tuple:
    """({name: Worker or Missing}, {(length, name): [answers]}): every contender once per round,
    length by length, the shortest first."""
    workers = {name: start(name, threads, CONTEXT) for name in CONTENDERS}
    for name, w in workers.items():  # warm-up: a short run each
        if not isinstance(w, Missing):
            reply = w.ask({"prompt": prompt_ids(32, vocab), "new": 2})
            if "error" in reply:
                w.quit()
                workers[name] = Missing(reply["error"])
    answers = {}
    for length, new in runs:
        ids = prompt_ids(length, vocab)
        for _ in range(repeats if length <= REPEATED_UP_TO else 1):
            for name, w in workers.items():
                if isinstance(w, Missing):
                    continue
                reply = w.ask({"prompt": ids, "new": new + slides(name, length)})
                if "error" in reply:
                    w.quit()
                    workers[name] = Missing(reply["error"])
                else:
                    answers.setdefault((length, name), []).append(reply)
    for w in workers.values():
        if not isinstance(w, Missing):
            w.quit()
    return workers, answers


def run(ctx):
    s = ctx["settings"]
    title = ("R5. Real model, long contexts: prefill of random token ids, then decode at the "
             "position the prompt ends, batch 1, greedy, one process per contender, "
             f"{THREADS} thread")
    missing = real.missing_rows("real-long", "tokens/s")
    if missing:
        return title, missing
    runs = cases(s.quick)
    workers, answers = measure(THREADS, runs, real.model(ctx).config.vocab_size, s.repeats)
    return title, rows(runs, workers, answers)


def rows(runs, workers, answers) -> list:
    """The prefill rows (every length), then the decode rows (the decode positions), then the
    slide's."""
    prefill, decode, slide = [], [], []
    for length, new in runs:
        for name, w in workers.items():
            got = answers.get((length, name))
            case = f"prefill {length} tokens"
            if not got:
                why = w.reason if isinstance(w, Missing) else "did not reach this length"
                prefill.append(Row("real-long", case, name, "tokens/s", missing=why))
                if new > 1:
                    decode.append(Row("real-long", f"decode at {length}", name, "tokens/s",
                                      missing=why))
                continue
            prefill.append(Row("real-long", case, name, "tokens/s",
                               [length / a["prefill_s"] for a in got],
                               note=f"peak RSS {got[-1]['peak_rss_mib']:.0f} MiB; "
                                    f"{got[-1]['prefill_s']:.1f} s"))
            if new > 1:
                reference = answers.get((length, "minillm f32"), [{}])[-1].get("tokens")
                same = (f"; tokens {'=' if got[-1]['tokens'] == reference else '≠'} minillm's"
                        if name != "minillm f32" and reference else "")
                decode.append(Row("real-long", f"decode at {length}", name, "tokens/s",
                                  [(new - 1) / a["decode_s"] for a in got],
                                  note=f"{new - 1} tokens after the first{same}"))
            if slides(name, length):
                half = answers.get((length // 2, name), [{}])[-1].get("prefill_s")
                compared = f"; a prefill of {length // 2} tokens: {half:.1f} s" if half else ""
                slide.append(Row("real-long", f"slide of a full {length}-token window", name,
                                 "s", [a["decode_s"] for a in got],
                                 note=f"one step: the newest {length // 2} tokens read "
                                      f"again{compared}"))
    return prefill + decode + slide
