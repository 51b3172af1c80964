"""Whether a cheap request waits behind expensive ones: `minillm serve` on SmolLM2 given six
64 KiB prompts without a space (adversarial for BPE merging: one word of 64 Ki characters, more
tokens than the context, refused once counted), an `n=16, logprobs=1` request on a prompt of
about 1,000 tokens and the echo of a prompt of about 4,000 tokens with its scores, while a small streaming request (a few tokens, 4 new) is sent again and
again; its time to first token under that load against alone.

    python -m bench.studies.serve_stall [--model_path smollm2-135m-instruct] [--small 8]

One server process on 127.0.0.1 (bench.studies.serve_load's launch, one thread). Reported:
the small request's time to first token alone (median of --small) and under the load (median
and max of --small sent one after the other while the load runs), how long each heavy request
took and what it was answered.
"""
from __future__ import annotations

import argparse
import http.client
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.studies.serve_load import body, launch, prompts, send, stop


def post(server, request: dict, timeout: float = 600) -> tuple[int, float, str]:
    """A request not streamed: (status, seconds, the start of its reply)."""
    start = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout)
    try:
        conn.request("POST", "/v1/completions", json.dumps(request),
                     {"Content-Type": "application/json"})
        reply = conn.getresponse()
        return reply.status, time.perf_counter() - start, reply.read()[:120].decode()
    finally:
        conn.close()


def main(argv=None) -> int:
    from minillm.cli.common import model_file

    argv = sys.argv[1:] if argv is None else list(argv)
    p = argparse.ArgumentParser(prog="python -m bench.studies.serve_stall")
    p.add_argument("--model_path", default="smollm2-135m-instruct")
    p.add_argument("--small", type=int, default=8, help="small requests, alone and under load")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    args.model = Path(model_file(args.model_path)).resolve()
    (long_prompt,), _, _ = prompts(args.model, 1, (1000, 1000), 16, 0)
    (echoed,), _, _ = prompts(args.model, 1, (4000, 4000), 16, 1)
    rng = random.Random(0)
    adversarial = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(65536))
                   for _ in range(6)]
    print(f"command: `{' '.join(['python -m bench.studies.serve_stall'] + argv)}`")
    with tempfile.TemporaryDirectory() as logs:
        server = launch("minillm", args, args.threads, Path(logs))
        try:
            small = body(server, "In the beginning", 4)
            send(server, small, 300)  # warm-up
            alone = []
            for _ in range(args.small):
                r = send(server, small, 300)
                alone.append(r.first - r.sent)
            heavy, results = [], {}
            for i, text in enumerate(adversarial):
                heavy.append((f"64 KiB prompt {i + 1}", {"model": server.model, "prompt": text,
                                                          "max_tokens": 4}))
            heavy.append(("n=16, logprobs=1, ~1,000-token prompt", {
                "model": server.model, "prompt": long_prompt, "n": 16, "logprobs": 1,
                "max_tokens": 16, "temperature": 1.0, "seed": 0}))
            heavy.append(("echo, logprobs=1, max_tokens 0, ~4,000-token prompt", {
                "model": server.model, "prompt": echoed, "echo": True, "logprobs": 1,
                "max_tokens": 0}))

            def run(name, request):
                results[name] = post(server, request)
            threads = [threading.Thread(target=run, args=h) for h in heavy]
            for t in threads:
                t.start()
            time.sleep(0.2)  # the heavy ones are in
            loaded = []
            for _ in range(args.small):
                r = send(server, small, 600)
                loaded.append(r.first - r.sent)
            for t in threads:
                t.join()
        finally:
            stop(server)
    print(f"small request's time to first token, alone: median {statistics.median(alone):.3f} s"
          f"; under the load: median {statistics.median(loaded):.3f} s, max "
          f"{max(loaded):.3f} s ({args.small} each)")
    for name, _ in heavy:
        status, seconds, start = results[name]
        print(f"- {name}: {status} in {seconds:.2f} s: {start[:90]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
