"""Real model 3: speculative decoding on SmolLM2-135M-Instruct, against plain decoding.

    python -m bench --only real-speculative [--real-layers 4,8,15] [--real-tokens 128]

Two drafters, each timed against minillm.generate with the same prompt and knobs (interleaved
rounds, a warm-up each):

- prompt lookup (draft="ngram"), greedy, on a chat request that asks for a paragraph of its
  input word for word: the answer quotes the prompt, so the lookup's guesses are mostly kept.
  Both stop at the tokenizer's end token; the texts must be identical.
- a self-speculative drafter: the target's own first L layers, its final norm and output layer
  (minillm.drafters.first_layers, sharing the weights: no second model to train or store), for
  several L, greedy and at temperature 0.8, on the decode table's 128-token prompt.

Each row: seconds for the new tokens (the table's ratio column is the speed-up's inverse), and
in the note the speed-up (plain decoding's median seconds over the row's), the guesses kept,
tokens per target pass and whether the greedy text is the same as plain decoding's.
"""
from __future__ import annotations

import statistics

import minillm

from . import real, speculative
from .timing import Missing, Row, measure, rows

# Guesses per round for prompt lookup: quoted text is kept in long runs, so a round of 8
# guesses, whose verify pass costs little more than one of 4, pays more (the table has both).
K_NGRAM = (4, 8)
K_LAYERS = 3  # guesses per round for the self-speculative drafter (the suite's k)


def first_layers():
    """minillm.drafters.first_layers, or Missing when it has not landed."""
    from minillm import drafters

    if not hasattr(drafters, "first_layers"):
        return Missing("minillm.drafters.first_layers not available yet")
    return drafters.first_layers


def note(stats, text, plain, temperature) -> str:
    """The speculative workload's note (acceptance, tokens per pass, same text), with the count
    of new tokens: the real model stops at its end token."""
    return f"{stats.new_tokens} tokens, " + speculative.note(stats, text, plain, temperature)


def compare(target, drafters: dict, prompt, n, temperature, stops, repeats, warm):
    """Rows' inputs: (contenders, seconds, notes) of plain decoding and each drafter.
    drafters: {name: (drafter, k guesses per round)}."""
    texts, stats = {}, {}

    def plain(m):
        texts["minillm f32"] = minillm.generate(target, prompt, max_new_tokens=m,
                                                temperature=temperature,
                                                seed=0, stop_tokens=stops)

    def speculative(name, drafter, k):
        def fn(m):
            texts[name], stats[name] = minillm.speculative_generate(
                target, drafter, prompt, max_new_tokens=m, k=k, temperature=temperature, seed=0,
                stop_tokens=stops)
        return fn
    contenders = {"minillm f32": plain}
    contenders.update({name: d if isinstance(d, Missing) else speculative(name, d, k)
                       for name, (d, k) in drafters.items()})
    seconds = measure(contenders, repeats, n, warm)
    plain_s = statistics.median(seconds["minillm f32"])
    notes = {name: f"{plain_s / statistics.median(seconds[name]):.2f}× plain's speed; "
                   + note(st, texts[name], texts["minillm f32"], temperature)
             for name, st in stats.items()}
    made = len(texts["minillm f32"]) - len(prompt)
    notes["minillm f32"] = f"{made} tokens, plain decoding"
    return contenders, seconds, notes


def run(ctx):
    s = ctx["settings"]
    title = (f"R3. Real model: speculative decoding against plain decoding, up to "
             f"{s.real_tokens} new tokens")
    missing = real.missing_rows("real-speculative", "s")
    if missing:
        return title, missing
    target = real.model(ctx)
    tok = target.tokenizer
    out = []
    quote = real.chat_ids(tok, real.QUOTE)
    case = f"quoting request ({len(quote)}-token prompt), greedy"
    lookups = {f"prompt lookup (ngram), k={k}": ("ngram", k) for k in K_NGRAM}
    found = compare(target, lookups, quote, s.real_tokens, 0.0, real.stop_tokens(tok),
                    s.repeats, s.warm)
    out += rows("real-speculative", case, *found[:2], "s", notes=found[2])

    cut = first_layers()
    if isinstance(cut, Missing):
        return title, out + [Row("real-speculative", "self-speculative: first L layers + head",
                                 f"L = {', '.join(map(str, s.real_layers))}", "s",
                                 missing=cut.reason)]
    prompt = real.prompt(tok, s.real_prompt)
    drafters = {f"first {L} layers + head, k={K_LAYERS}": (cut(target, L), K_LAYERS)
                for L in s.real_layers}
    for temperature in (0.0, 0.8):
        case = (f"guide-book request ({len(prompt)} tokens), "
                + ("greedy" if temperature == 0 else f"temperature {temperature}"))
        found = compare(target, drafters, prompt, s.real_tokens, temperature, (), s.repeats,
                        s.warm)
        out += rows("real-speculative", case, *found[:2], "s", notes=found[2])
    return title, out
