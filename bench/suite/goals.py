"""The benchmark's goals (the speeds minillm aims at against its peers, its roofline and
plain decoding), checked against this run's figures: one line per goal, met or not.

Speed ratios are minillm float32's median speed over the other row's median (> 1: minillm
is faster), the same figure as the tables' ratio column.
"""
from __future__ import annotations

DECODE = [  # (size, contender, at least)
    ("student", "transformers", 1.5), ("student", "PyTorch loop", 1.5),
    ("Sprout", "transformers", 2.0), ("Sprout", "PyTorch loop", 1.5),
    ("GPT-2-small", "transformers", 2.0), ("GPT-2-small", "PyTorch loop", 1.5)]
ROOFLINE = [("Sprout", 0.5), ("GPT-2-small", 0.8)]


def find(results, workload, case, contender):
    """The row of `contender` in the first case of `workload` starting with `case`, or None."""
    for name, _, rows in results:
        for row in rows:
            if (name == workload and row.case.startswith(case) and row.contender == contender
                    and row.missing is None and row.values):
                return row
    return None


def speed_ratio(mine, other) -> float:
    if mine.unit == "s":
        return other.median / mine.median
    return mine.median / other.median


def check(results) -> list:
    """[(goal, measured, verdict)] for every goal whose rows this run has."""
    lines = []

    def compare(goal, mine, other, target, fmt="{:.2f}×"):
        if mine is None or other is None:
            lines.append((goal, "not measured", "—"))
            return
        r = speed_ratio(mine, other)
        lines.append((goal, fmt.format(r), "met" if r >= target else "missed"))

    for size, peer, target in DECODE:
        compare(f"decode {size}: minillm f32 ≥ {target}× {peer}",
                find(results, "decode", size, "minillm f32"), find(results, "decode", size, peer),
                target)
    for size, target in ROOFLINE:
        compare(f"decode {size}: minillm f32 ≥ {target:.0%} of the roofline",
                find(results, "decode", size, "minillm f32"),
                find(results, "decode", size, "roofline"), target, "{:.0%}")
    for peer, target in (("transformers", 2.0), ("PyTorch loop", 1.2)):
        compare(f"batched rollouts: minillm f32 ≥ {target}× {peer}",
                find(results, "batch", "", "minillm f32"), find(results, "batch", "", peer),
                target)
    for size in ("student", "Sprout", "GPT-2-small"):
        f32 = find(results, "int8", f"{size}, linear", "minillm f32")
        q8 = find(results, "int8", f"{size}, linear", "minillm int8")
        if f32 and q8:
            share = q8.median / f32.median
            lines.append((f"int8 {size}: linear-layer bytes ≤ 30% of float32", f"{share:.1%}",
                          "met" if share <= 0.30 else "missed"))
    for size, target in (("GPT-2-small", 1.3), ("Sprout", 1.0)):
        compare(f"int8 {size}: decode ≥ {target}× float32",
                find(results, "int8", f"{size}, decode", "minillm int8"),
                find(results, "int8", f"{size}, decode", "minillm f32"), target)
    compare("speculative, shipped pair, greedy: ≥ 1.5× plain cached decoding",
            find(results, "speculative", "shipped target + draft, greedy",
                 "speculative, draft model"),
            find(results, "speculative", "shipped target + draft, greedy", "minillm f32"), 1.5)
    real_goals(results, compare, lines)
    long_goals(results, compare, lines)
    return lines


def real_goals(results, compare, lines):
    """The real model's goals (SmolLM2-135M-Instruct), from the real-model tables, 1 thread."""
    from .real_speculative import K_NGRAM

    def decode(contender):
        return find(results, "real-decode", "1 thread, decode", contender)

    compare("real model decode, 1 thread: minillm f32 ≥ 90% of the roofline",
            decode("minillm f32"), decode("roofline, float32"), 0.9, "{:.0%}")
    compare("real model decode, 1 thread: minillm f32 ≥ 2× transformers",
            decode("minillm f32"), decode("transformers"), 2.0)
    compare("real model prefill, 1 thread: minillm f32 ≥ transformers",
            find(results, "real-decode", "1 thread, prefill", "minillm f32"),
            find(results, "real-decode", "1 thread, prefill", "transformers"), 1.0)
    for kind in ("float32", "int8"):
        passes = [find(results, "real-passes", kind, f"pass of {T} tokens") for T in (2, 3, 5, 8)]
        passes = [row for row in passes if row is not None and row.case == kind]
        if passes:
            worst = max(row.median for row in passes)
            lines.append((f"real model {kind}: a pass of 2-8 tokens ≤ 1.3 one-token steps",
                          f"{worst:.2f} steps at most", "met" if worst <= 1.3 else "missed"))
        else:
            lines.append((f"real model {kind}: a pass of 2-8 tokens ≤ 1.3 one-token steps",
                          "not measured", "—"))
    for name in ("minillm int8", "minillm int8 + emb"):
        if name == "minillm int8" or decode(name):
            compare(f"real model decode, 1 thread: {name} ≥ 1.5× float32", decode(name),
                    decode("minillm f32"), 1.5)
    k = max(K_NGRAM)
    compare(f"real model, quoting request: prompt lookup (k={k}) ≥ 1.8× plain greedy",
            find(results, "real-speculative", "quoting request", f"prompt lookup (ngram), k={k}"),
            find(results, "real-speculative", "quoting request", "minillm f32"), 1.8)
    compare("real model: batch 8 ≥ 5× the tokens/s of batch 1",
            find(results, "real-batch", "float32", "minillm f32, batch 8"),
            find(results, "real-batch", "float32", "minillm f32, batch 1"), 5.0)


def long_goals(results, compare, lines) -> None:
    """The long-context goals (issue: prefill at most transformers' time at every length,
    decode at position 4,096 at least 1.5x transformers), from the R5 table (real_long)."""
    lengths = sorted({int(row.case.split()[1]) for name, _, table in results
                      if name == "real-long" for row in table if row.case.startswith("prefill")})
    for length in lengths:
        case = f"prefill {length} tokens"
        compare(f"long context, {case}: minillm f32 ≥ transformers",
                find(results, "real-long", case, "minillm f32"),
                find(results, "real-long", case, "transformers"), 1.0)
    if lengths:
        compare("long context, decode at 4096: minillm f32 ≥ 1.5× transformers",
                find(results, "real-long", "decode at 4096", "minillm f32"),
                find(results, "real-long", "decode at 4096", "transformers"), 1.5)


def markdown(results, quick: bool = False) -> str:
    lines = ["### Goals", ""]
    if quick:
        lines += ["(--quick: tiny shapes, so these verdicts say nothing about the goals)", ""]
    lines += ["| goal | this run | |", "| --- | --- | --- |"]
    lines += [f"| {goal} | {measured} | {verdict} |" for goal, measured, verdict in
              check(results)]
    return "\n".join(lines) + "\n"
