"""How often `minillm chat`'s replies end by themselves: 20 first messages, 3 seeds each, with
llama.cpp's sampling chain (the chat's filters) and with the knobs that could change it (a
repetition penalty, a larger cap on a reply's length).

    python -m bench.studies.chat_endings --model_path smollm2-135m-instruct
    python -m bench.studies.chat_endings --variant repetition_penalty=1.1 --cap 512

Each message is rendered as the chat renders a first turn (the model's template, its default
system message), and its reply drawn as `minillm chat --seed S` draws it: from llama.cpp's
chain (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05; the chat's defaults before it took a
repetition penalty and 512 tokens from this study) with the variant's knobs on top
(repetition_penalty=1.1: the chat's defaults now), up to --cap new tokens, ending at the model's
end tokens. The replies run side by side through the serving engine, each exactly as
if alone (tests/test_serving.py), so that one run at a cap answers every smaller cap too: a
reply that ends by itself within 200 tokens is the same reply at a cap of 200 or of 512.

For every variant and cap the table gives how many of the replies ended by themselves (an end
token), how many were cut at the cap, and how many of those cut repeat themselves (a run of
LOOP tokens that occurs LOOP_TIMES times or more in the reply), with the median length of the
replies that ended.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

PROMPTS = [
    "Tell me about dogs.",
    "What is the capital of France?",
    "Write a short poem about the sea.",
    "How do I boil an egg?",
    "Explain photosynthesis.",
    "What is 12 times 7?",
    "Give me three tips for studying.",
    "Who wrote Romeo and Juliet?",
    "What is machine learning?",
    "Describe a sunset.",
    "Why is the sky blue?",
    "How does a car engine work?",
    "Tell me a joke.",
    "What should I cook for dinner tonight?",
    "Summarize the story of Cinderella.",
    "What are the benefits of exercise?",
    "How do you say good morning in Spanish?",
    "How many legs does a spider have?",
    "What is the difference between weather and climate?",
    "Write a haiku about autumn.",
]
LOOP, LOOP_TIMES = 8, 3  # a reply "repeats itself" when some 8 tokens occur 3 times or more


def repeats_itself(tokens) -> bool:
    counts = {}
    for i in range(len(tokens) - LOOP + 1):
        key = tuple(tokens[i:i + LOOP])
        counts[key] = counts.get(key, 0) + 1
        if counts[key] >= LOOP_TIMES:
            return True
    return False


def parse_variant(text: str) -> dict:
    """"repetition_penalty=1.1,max_new_tokens=400" -> {"repetition_penalty": 1.1, ...}"""
    knobs = {}
    for item in filter(None, text.split(",")):
        name, _, value = item.partition("=")
        knobs[name.strip()] = float(value) if "." in value else int(value)
    return knobs


def replies(model, prompts, seeds, knobs, cap):
    """{(prompt index, seed): (new tokens, ended by itself)} for every prompt and seed."""
    from minillm.serving import Engine

    engine = Engine(model, max_batch_tokens=512)
    ids = {}
    for p, prompt in enumerate(prompts):
        for seed in seeds:
            ids[engine.add_request(prompt, **knobs, max_new_tokens=cap, seed=seed)] = (p, seed)
    new, ended = {key: [] for key in ids.values()}, {}
    while engine.has_unfinished():
        for out in engine.step():
            key = ids[out.request_id]
            new[key].append(out.token)
            if out.finished:
                ended[key] = out.reason == "stop"
    return {key: (new[key], ended[key]) for key in new}


def table(results, caps, stops) -> list[str]:
    lines = ["| variant | cap | ended by itself | cut at the cap | of those cut, repeating "
             "themselves | median length of the replies that ended (tokens) |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for name, found in results.items():
        n = len(found)
        for cap in caps:
            ended = [len(tokens) for tokens, done in found.values()
                     if done and len(tokens) <= cap]
            cut = [tokens[:cap] for tokens, done in found.values()
                   if not (done and len(tokens) <= cap)]
            looping = sum(repeats_itself([t for t in tokens if t not in stops]) for tokens in cut)
            median = f"{statistics.median(ended):.0f}" if ended else "-"
            lines.append(f"| {name} | {cap} | {len(ended)} of {n} | {len(cut)} | {looping} | "
                         f"{median} |")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model_path", default="smollm2-135m-instruct")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first_seed", type=int, default=0, help="the seeds: first_seed, ...")
    parser.add_argument("--cap", type=int, default=512, help="the longest reply drawn")
    parser.add_argument("--caps", type=int, nargs="+", default=[200, 300, 400, 512],
                        help="the caps the table reports (each at most --cap)")
    parser.add_argument("--variant", action="append", default=[],
                        help="knobs on top of llama.cpp's chain, as name=value,name=value "
                             "(repeatable; the chain alone always runs first)")
    args = parser.parse_args(argv)

    import minillm
    from minillm.cli.common import load_model
    from minillm.knobs import CHAT_DEFAULTS
    from minillm.text.chat_template import chat_prompt_ids

    chain = {name: CHAT_DEFAULTS[name] for name in ("temperature", "top_k", "top_p", "min_p")}

    minillm.threads(1)
    model = load_model(args.model_path)
    tok = model.tokenizer
    prompts = [chat_prompt_ids(tok, [{"role": "user", "content": text}]) for text in PROMPTS]
    caps = [cap for cap in args.caps if cap <= args.cap]
    results = {}
    for variant in [""] + args.variant:
        knobs = {**chain, **parse_variant(variant)}
        start = time.perf_counter()
        seeds = range(args.first_seed, args.first_seed + args.seeds)
        found = replies(model, prompts, seeds, knobs, args.cap)
        tokens = sum(len(t) for t, _ in found.values())
        print(f"[{variant or 'the chain'}: {tokens:,} tokens in "
              f"{time.perf_counter() - start:.0f} s]", file=sys.stderr, flush=True)
        results[variant or "llama.cpp's chain"] = found
    print(f"{len(PROMPTS)} first messages x {args.seeds} seeds (from {args.first_seed}), "
          f"{args.model_path}; llama.cpp's chain: "
          f"{', '.join(f'{k} {v}' for k, v in chain.items())}")
    print()
    print("\n".join(table(results, caps, set(tok.eos_token_ids))))
    print()
    print("Replies cut at 200 tokens, per message (of the seeds), by variant:")
    for p, text in enumerate(PROMPTS):
        cut = [sum(1 for (q, _), (tokens, done) in found.items()
                   if q == p and not (done and len(tokens) <= 200)) for found in results.values()]
        print(f"- {text} " + " / ".join(map(str, cut)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
