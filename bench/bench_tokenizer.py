"""Encoding speed of minillm's pure-Python BPE and of the Rust `tokenizers` library.

    python bench/bench_tokenizer.py [--text weights/web_valid.txt] [--repeat 5]

Prints MB/s (UTF-8 bytes of text per second) for a cold run (empty word cache), the best of
``--repeat`` warm runs, and the same for `tokenizers` when it is installed. One thread.
"""
import argparse
import os
import pathlib
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")      # `tokenizers`: one thread, like us

from minillm.tokenizer import Tokenizer, gpt2_split_pattern  # noqa: E402

WEIGHTS = pathlib.Path(__file__).resolve().parents[1] / "weights"


def best_time(function, repeat):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--text", default=WEIGHTS / "web_valid.txt")
    parser.add_argument("--tokenizer", default=WEIGHTS / "tokenizer.json")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    text = pathlib.Path(args.text).read_text(encoding="utf-8")
    spec = pathlib.Path(args.tokenizer).read_text(encoding="utf-8")
    megabytes = len(text.encode("utf-8")) / 1e6

    start = time.perf_counter()
    ours = Tokenizer.from_json(spec)
    gpt2_split_pattern()
    setup = time.perf_counter() - start
    cold = best_time(lambda: Tokenizer.from_json(spec).encode(text), 1)
    warm = best_time(lambda: ours.encode(text), args.repeat)
    ids = ours.encode(text)
    print(f"text: {megabytes:.3f} MB, {len(ids):,} tokens, "
          f"{megabytes * 1e6 / len(ids):.2f} bytes/token")
    print(f"{'tokenizer':<22}{'cold MB/s':>10}{'warm MB/s':>10}")
    print(f"{'minillm (Python)':<22}{megabytes / cold:>10.2f}{megabytes / warm:>10.2f}"
          f"   (setup {setup:.2f} s, Unicode classes included)")
    try:
        import tokenizers
    except ImportError:
        print("tokenizers: not installed")
        return
    theirs = tokenizers.Tokenizer.from_str(spec)
    cold = best_time(lambda: tokenizers.Tokenizer.from_str(spec).encode(text), 1)
    warm = best_time(lambda: theirs.encode(text), args.repeat)
    print(f"{'tokenizers ' + tokenizers.__version__:<22}{megabytes / cold:>10.2f}"
          f"{megabytes / warm:>10.2f}")
    assert theirs.encode(text).ids == ids, "the two tokenizers disagree"


if __name__ == "__main__":
    main()
