"""Measure the shipped models with minillm alone (NumPy) and record the figures the tests check.

For each `.npz` given: its sha256, parameter count, held-out loss over the whole of
``web_valid.txt`` and over a fixed slice (its first ``SLICE_TOKENS`` + 1 tokens), and a seeded
sample. Writes ``weights/checks.json`` and prints a Markdown table for ``weights/README.md``.

    python weights/record.py weights/target.npz weights/draft.npz weights/classic.npz
"""

import argparse
import hashlib
import json
import math
import pathlib
import re
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import minillm  # noqa: E402
from minillm.study.evaluate import bits_per_byte, evaluate  # noqa: E402

SLICE_TOKENS = 2048
SAMPLE = dict(prompt="In the beginning", max_new_tokens=24, temperature=0.8, seed=0)


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def seeded_sample(model, prompt, max_new_tokens, temperature, seed):
    """The ids of a sampled continuation of ``prompt``: what the tests regenerate."""
    ids = model.tokenizer.encode(prompt)
    return minillm.generate(model, ids, max_new_tokens=max_new_tokens,
                            temperature=temperature, seed=seed)


def measure(path, valid_text):
    model = minillm.load(path)
    ids = model.tokenizer.encode(valid_text)
    window = model.config.context_length
    full = evaluate(model, ids, window)
    sample = seeded_sample(model, **SAMPLE)
    return {
        "sha256": sha256(path),
        "parameters": sum(int(p.size) for p in model.params.values()),
        "held_out_loss": round(full, 6),
        "held_out_bits_per_byte": round(
            bits_per_byte(full, len(ids) - 1, len(valid_text.encode("utf-8"))), 6),
        "held_out_perplexity": round(math.exp(full), 3),
        "slice_tokens": SLICE_TOKENS,
        "slice_loss": round(evaluate(model, ids[:SLICE_TOKENS + 1], window), 6),
        "sample": {**SAMPLE, "ids": sample, "text": model.tokenizer.decode(sample)},
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--valid", default=HERE / "web_valid.txt")
    parser.add_argument("--out", default=HERE / "checks.json")
    args = parser.parse_args()
    valid_text = pathlib.Path(args.valid).read_text(encoding="utf-8")
    out = pathlib.Path(args.out)
    records = json.loads(out.read_text()) if out.exists() else {}
    for path in args.files:
        records[pathlib.Path(path).name] = measure(path, valid_text)
        print(f"{path}: measured", flush=True)
    text = json.dumps(records, indent=1, sort_keys=True)
    text = re.sub(r"\[\s*([-0-9,\s]+?)\s*\]", lambda m: "[" + " ".join(m.group(1).split()) + "]",
                  text)                                    # id lists on one line
    out.write_text(text + "\n")
    print("| file | parameters | held-out loss (nats/token) | bits/byte | sha256 |")
    print("| --- | ---: | ---: | ---: | --- |")
    for name, r in sorted(records.items()):
        print(f"| `{name}` | {r['parameters']:,} | {r['held_out_loss']:.4f} | "
              f"{r['held_out_bits_per_byte']:.4f} | `{r['sha256']}` |")
    for name, r in sorted(records.items()):
        print(f"{name}: {r['sample']['text']!r}")


if __name__ == "__main__":
    main()
