"""Constrained decoding's costs on a real vocabulary: building the index for five regular
expressions and five JSON Schemas, minillm against outlines-core and llguidance, one process
per contender; the mask's cost per decoded token as a share of a decode step; the index's
memory.

    python -m bench.studies.constrain_index [--model_path smollm2-135m-instruct | FILE.npz]
                                            [--rounds 3] [--contenders NAME ...]
                                            [--tokens 32] [--profile 12]

The contenders, each in a fresh process (the tokenizer read first, outside the times):
    minillm full     regex()/json_schema() (pattern, automaton, the vocabulary read, the lazy
                     index) and then every state's row (index.full): the whole index
    minillm lazy     the same constraint, then only the rows of the states the case's
                     output visits (its tokenization walked with advance): what a generation
                     of that output builds
    outlines-core    outlines_core.Index(pattern, Vocabulary): its whole index, eagerly, in
                     Rust (for a schema, the pattern of build_regex_from_schema: its language
                     differs from minillm's in small ways, docs/CONSTRAINED.md); the
                     Vocabulary of the tokenizer's bytes is made once, outside the times
    llguidance       an LLMatcher of the grammar (regex, or the schema with minillm's
                     whitespace options), then compute_bitmask at every step of the same
                     output: llguidance has no index to build ahead, it computes each step's
                     mask by walking a token trie against its lexer and Earley parser; its
                     LLTokenizer is made once, outside the times
Times are the median of --rounds, CPU time of one thread (OPENBLAS_NUM_THREADS=1 is set for
every child). The ratio column is the contender's time over minillm full's.

Then, in this process: the mask's cost per decoded token. A greedy generate of --tokens new
tokens with the constraint `(?:.|\\n)*` (any text: the same tokens as without it, checked)
against the same generate unconstrained, alternated --rounds times; the difference per token as
a share of an unconstrained step, and the time of the mask's own calls inside that loop
(generate's masked_logits and advanced, wrapped with a timer), which a busy machine's noise
does not hide. And the mask alone (allowed + advance, the rows already
built) along each case's output, per token, as a share of the same step. The index's memory:
the full index's rows (states x vocabulary x int32), and the rows a generation builds.
--profile N: cProfile of minillm full over all cases, the N functions of most own time.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from minillm.testing.adapters.grammars import llguidance_tokenizer, outlines_vocabulary

REGEXES = {  # outlines-core's benchmarks/bench_regex_guide.py (time: \d, \s spelled [0-9], [ ])
    "email": (r"[a-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[a-z0-9!#$%&'*+/=?^_`{|}~-]+)*@(?:[a-z0-9]"
              r"(?:[a-z0-9-]*[a-z0-9])?\.)+[a-z0-9](?:[a-z0-9-]*[a-z0-9])?",
              "jane.doe@example.com"),
    "date": (r"([1-9]|0[1-9]|1[0-9]|2[0-9]|3[0-1])(\.|-|/)([1-9]|0[1-9]|1[0-2])(\.|-|/)"
             r"([0-9][0-9]|19[0-9][0-9]|20[0-9][0-9])|([0-9][0-9]|19[0-9][0-9]|20[0-9][0-9])"
             r"(\.|-|/)([1-9]|0[1-9]|1[0-2])(\.|-|/)([1-9]|0[1-9]|1[0-9]|2[0-9]|3[0-1])",
             "2024-06-30"),
    "time": (r"(0?[1-9]|1[0-2]):[0-5][0-9][ ]?(am|pm)?", "11:45 pm"),
    "ip": (r"(?:(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)\.){3}(?:25[0-5]|2[0-4][0-9]|"
           r"[01]?[0-9][0-9]?)", "192.168.0.1"),
    "phone": (r"\+?[1-9][0-9]{7,14}", "+441234567890"),
}
SCHEMAS = {  # from llguidance's parser/tests/test_json_*.rs and outlines-core's json_schema
    "nested": ({"type": "object", "properties": {"name": {"type": "string"}, "info": {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"]}}, "required": ["name", "info"]},
        '{"name": "Test", "info": {"a": 123, "b": 456}}'),
    "with array": ({"type": "object", "properties": {"name": {"type": "string"}, "values": {
        "type": "array", "items": {"type": "integer"}}}, "required": ["name", "values"]},
        '{"name": "Test", "values": [1, 2, 3]}'),
    "bounded array": ({"type": "array", "items": {"type": "integer"}, "minItems": 2,
                       "maxItems": 4}, "[1,2, 3]"),
    "bounded string": ({"type": "string", "minLength": 3, "maxLength": 5}, '"abcd"'),
    "person": ({"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 12},
        "kind": {"enum": ["king", "shepherd", "prophet"]}, "alive": {"type": "boolean"},
        "age": {"type": "integer"}}, "required": ["name", "kind", "alive"]},
        '{"name": "Job", "kind": "shepherd", "alive": true, "age": 70}'),
}
CONTENDERS = ["minillm full", "minillm lazy", "outlines-core", "llguidance"]
ANY_TEXT = r"(?:.|\n)*"
LLG_JSON = {"whitespace_flexible": True, "whitespace_pattern": "[ ]?", "item_separator": ",",
            "key_separator": ":"}


def cases():
    """(name, kind, source, output text) for every case."""
    return ([(n, "regex", p, t) for n, (p, t) in REGEXES.items()] +
            [(n, "schema", s, t) for n, (s, t) in SCHEMAS.items()])


# -- a contender, in its own process ------------------------------------------------------------

def child(contender: str, path: str, rounds: int) -> dict:
    """{case: {"ms": median build ms, ...}} for one contender."""
    import minillm

    tok = minillm.load(path).tokenizer
    build = {"minillm full": minillm_full, "minillm lazy": minillm_lazy,
             "outlines-core": outlines_core_index, "llguidance": llguidance_masks}[contender]
    start = time.process_time()
    make = build(tok)  # the vocabulary, read once per tokenizer
    out = {"vocabulary": {"ms": 1e3 * (time.process_time() - start)}}
    for name, kind, source, text in cases():
        ids = tok.encode(text)
        times, extra = [], {}
        for _ in range(rounds):
            start = time.process_time()
            extra = make(kind, source, ids) or {}
            times.append(time.process_time() - start)
        out[name] = {"ms": 1e3 * statistics.median(times), **extra}
    return out


def minillm_full(tok):
    from minillm.constrain.index import full, vocabulary

    vocabulary(tok)

    def make(kind, source, ids):
        c = constraint(tok, kind, source)
        rows = full(c.automaton, c.index.vocabulary)
        return {"states": len(rows), "bytes": sum(r.nbytes for r in rows.values()),
                "allowed": int(sum((r >= 0).sum() for r in rows.values()))}
    return make


def minillm_lazy(tok):
    from minillm.constrain.constraint import advance
    from minillm.constrain.index import vocabulary

    vocabulary(tok)

    def make(kind, source, ids):
        c = constraint(tok, kind, source)
        state = 0
        for t in ids:
            state = advance(c, state, t)
        return {"rows": len(c.index.rows), "bytes": sum(r.nbytes for r in c.index.rows.values())}
    return make


def constraint(tok, kind, source):
    from minillm.constrain import json_schema, regex

    return regex(source, tok) if kind == "regex" else json_schema(source, tok)


def outlines_core_index(tok):
    import outlines_core

    vocabulary = outlines_vocabulary(tok)

    def make(kind, source, ids):
        pattern = source if kind == "regex" else \
            outlines_core.json_schema.build_regex_from_schema(json.dumps(source))
        index = outlines_core.Index(pattern, vocabulary)
        return {"states": len(index.get_transitions())}
    return make


def llguidance_masks(tok):
    import llguidance

    lltok = llguidance_tokenizer(tok)

    def make(kind, source, ids):
        if kind == "regex":
            grammar = llguidance.LLMatcher.grammar_from_regex(source)
        else:
            grammar = llguidance.LLMatcher.grammar_from_json_schema(
                source, overrides=LLG_JSON)
        m = llguidance.LLMatcher(lltok, grammar)
        for t in ids:
            m.compute_bitmask()
            m.consume_token(t)
        m.compute_bitmask()
        return {"steps": len(ids) + 1, "error": m.get_error()}
    return make


# -- the mask's share of a decode step --------------------------------------------------------

def mask_share(path: str, tokens: int, rounds: int) -> tuple[list[str], dict]:
    """Lines of the end-to-end measure, and {case: (mask-alone µs per token, share)}."""
    import numpy as np

    import minillm
    from minillm.constrain import regex
    from minillm.constrain.constraint import advance, masked_logits

    model = minillm.load(path)
    tok = model.tokenizer
    prompt = tok.encode("The history of the city begins")
    anything = regex(ANY_TEXT, tok)
    inside = timed(sys.modules["minillm.generate"], ["masked_logits", "advanced"])  # the mask's calls in the loop
    seconds = {"free": [], "constrained": []}
    outputs = {}
    for r in range(rounds + 1):  # the first round builds the rows and is not counted
        for side, c in (("free", None), ("constrained", anything)):
            inside.clear()
            start = time.perf_counter()
            outputs[side] = minillm.generate(model, prompt, max_new_tokens=tokens,
                                             temperature=0, stop_tokens=(), constraint=c)
            if r:
                seconds[side].append(time.perf_counter() - start)
        if r:
            seconds.setdefault("in the loop", []).append(sum(inside))
    step = statistics.median(seconds["free"]) / tokens
    extra = (statistics.median(seconds["constrained"]) - statistics.median(seconds["free"])) \
        / tokens
    loop = statistics.median(seconds["in the loop"]) / tokens
    same = outputs["free"] == outputs["constrained"]
    lines = [f"- a greedy generate of {tokens} tokens (prompt of {len(prompt)}), median of "
             f"{rounds} alternated runs: {1e3 * step:.1f} ms per step unconstrained (runs "
             f"{', '.join(f'{1e3 * s / tokens:.1f}' for s in seconds['free'])}); with "
             f"`{ANY_TEXT}` (any text: the same tokens, {'yes' if same else 'NO'}): "
             f"{1e3 * extra:+.2f} ms per token ({100 * extra / step:+.1f}% of a step, within "
             f"the runs' spread); the mask's own calls in that loop (masked_logits and "
             f"advanced, timed): {1e6 * loop:.0f} µs per token, {100 * loop / step:.1f}% of "
             f"a step"]
    logits = np.zeros((1, model.config.vocab_size), dtype=np.float32)
    alone = {}
    for name, kind, source, text in cases():
        c = constraint(tok, kind, source)
        ids = tok.encode(text)
        for _ in range(2):  # the first pass builds the rows
            start = time.perf_counter()
            state = 0
            for t in ids:
                masked_logits(logits, [c], [state])
                state = advance(c, state, t)
            spent = time.perf_counter() - start
        alone[name] = (1e6 * spent / len(ids), 100 * spent / len(ids) / step)
    return lines, alone


def timed(module, names) -> list:
    """Wrap module's functions `names` so that each call's seconds are appended to the list
    returned."""
    spent = []

    def wrap(f):
        def timed_call(*args, **kwargs):
            start = time.perf_counter()
            try:
                return f(*args, **kwargs)
            finally:
                spent.append(time.perf_counter() - start)
        return timed_call

    for name in names:
        setattr(module, name, wrap(getattr(module, name)))
    return spent


# -- the parent ---------------------------------------------------------------------------------

def run_child(contender, path, rounds) -> dict:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
           "RAYON_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "bench.studies.constrain_index", "--child",
                           contender, "--model_path", path, "--rounds", str(rounds)],
                          capture_output=True, text=True, env=env)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"missing": last}
    return json.loads(done.stdout.strip().splitlines()[-1])


def profile(path: str, n: int) -> list[str]:
    import cProfile
    import io
    import pstats

    import minillm

    make = minillm_full(minillm.load(path).tokenizer)
    profiler = cProfile.Profile()
    profiler.enable()
    for _, kind, source, text in cases():
        make(kind, source, [])
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    total = stats.total_tt
    rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:n]
    lines = [f"\n### Profile: minillm full, all ten cases ({1e3 * total:.0f} ms under cProfile)",
             "", "| function | own ms | share | with callees ms | calls |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for (file, line, fn), (_, calls, own, cum, _) in rows:
        where = f"{os.path.basename(file)}:{line} {fn}" if line else fn
        lines.append(f"| `{where}` | {1e3 * own:.1f} | {100 * own / total:.0f}% | "
                     f"{1e3 * cum:.1f} | {calls} |")
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.studies.constrain_index",
                                description=__doc__.splitlines()[0])
    p.add_argument("--model_path", "--model-path", default="smollm2-135m-instruct")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--contenders", nargs="+", default=CONTENDERS, choices=CONTENDERS)
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--profile", type=int, default=12)
    p.add_argument("--child", choices=CONTENDERS, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.model_path, args.rounds)))
        return 0
    from .serving import model_path

    path = str(model_path(p, args.model_path))
    import minillm

    print(f"model: {path}; load average at start: "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}; command: `python -m "
          f"bench.studies.constrain_index {' '.join(argv if argv is not None else sys.argv[1:])}`")
    results = {c: run_child(c, path, args.rounds) for c in args.contenders}
    print(f"\n### Building the index: ms, median of {args.rounds} (ratio: over minillm full)\n")
    print("| case | " + " | ".join(args.contenders) + " |")
    print("| --- |" + " ---: |" * len(args.contenders))
    base = results.get("minillm full", {})
    for name in ["vocabulary"] + [c[0] for c in cases()]:
        cells = []
        for c in args.contenders:
            r = results[c]
            if "missing" in r:
                cells.append(f"missing ({r['missing'][:60]})")
                continue
            ms = r[name]["ms"]
            ratio = f" ({ms / base[name]['ms']:.2f}x)" if "missing" not in base and \
                c != "minillm full" else ""
            cells.append(f"{ms:.1f}{ratio}")
        label = "the tokenizer's vocabulary, read once" if name == "vocabulary" else name
        print(f"| {label} | " + " | ".join(cells) + " |")
    if "minillm full" in results and "missing" not in base:
        lazy = results.get("minillm lazy", {})
        print("\n### The index's memory: rows of int32 next states, one per vocabulary entry\n")
        print("| case | states | full index, MiB | allowed (state, token) pairs | rows a "
              "generation of the output builds | their MiB |")
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        for name, *_ in cases():
            b, lz = base[name], lazy.get(name, {})
            print(f"| {name} | {b['states']} | {b['bytes'] / 2**20:.1f} | {b['allowed']:,} | "
                  f"{lz.get('rows', '-')} | "
                  + (f"{lz['bytes'] / 2**20:.1f} |" if "bytes" in lz else "- |"))
    with minillm.threads(1):
        lines, alone = mask_share(path, args.tokens, args.rounds)
    print("\n### The mask's cost per decoded token\n")
    print("\n".join(lines))
    print("- the mask alone (masked_logits and advance, rows built), along each case's "
          "output:\n")
    print("| case | µs per token | share of a step |\n| --- | ---: | ---: |")
    for name, (us, share) in alone.items():
        print(f"| {name} | {us:.0f} | {share:.1f}% |")
    if args.profile:
        print("\n".join(profile(path, args.profile)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
