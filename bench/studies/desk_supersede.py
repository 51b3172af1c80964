"""Four quick "New seed" clicks on the desk's four temperatures, then a slider move: how long
the slider's answer takes, with the desk before and after abandoned requests were aborted.

    python -m bench.studies.desk_supersede [--model_path smollm2-135m-instruct] [--before main]
    python -m bench.studies.desk_supersede --compare 10    # the columns against generate's

Each round starts a desk server (`make_server`, in a process of its own, one BLAS thread) on
the code of one side: "before" is minillm/ of the git revision --before, unpacked in a
temporary folder, "after" this tree's. The client does what the page does: each click closes
the previous click's connection (the page aborts its fetch) and POSTs /api/temperatures with
the next seed and X-Desk-Request (which the code before ignores), GAP seconds apart; GAP
seconds after the last click the slider moves: the sampling desk's temperature (/api/next),
or the repetition widget's penalty r (/api/repetition, a generating widget). Timed: the
slider's answer from its sending, the last click's columns from theirs, and the slider's
answer once everything is done (alone). Rounds alternate before and after; the ratio of the
slider's time, before over after, is reported per round, and the last click's columns are
compared between the sides (the same seed: the same text).

--compare N asks this tree's desk for the four columns of seeds 0 to N - 1 (the engine writes
them together) and compares each with `generate` alone: the engine's rows computed together
round otherwise than one row alone, which a hot draw at a near-tie can notice.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GAP = 0.3  # seconds between two clicks, and from the last click to the slider's move
TEMPERATURES = [0.0, 0.5, 1.0, 1.5]  # the page's four columns


def child(code: str, model_path: str, slider: str) -> dict:
    """One round, in this process, on the minillm of `code`."""
    sys.path.insert(0, code)
    import minillm
    from minillm.cli.common import model_file
    from minillm.desk.server import make_server, serve_in_thread
    from minillm.desk.widgets import BEGINNINGS, CHAT_BEGINNINGS, make_desk

    assert Path(minillm.__file__).is_relative_to(code), minillm.__file__
    model = minillm.load(model_file(model_path))
    desk = make_desk(model, model_path)
    beginnings = CHAT_BEGINNINGS if desk.chat else BEGINNINGS
    server = make_server(desk, 0)
    serve_in_thread(server)
    port = server.server_address[1]

    def send(path, body, name):
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        connection.request("POST", path, json.dumps(body), {
            "Host": f"127.0.0.1:{port}", "Content-Type": "application/json",
            "X-Desk-Request": name})
        return connection

    def answer(connection):
        response = connection.getresponse()
        payload = json.loads(response.read())
        assert response.status == 200, payload
        return payload

    if slider == "next":
        move = ("/api/next", dict(prompt=beginnings[0], drawn=[], temperature=1.05, top_k=0,
                                  top_p=1.0, min_p=0.0, repetition_penalty=1.0,
                                  frequency_penalty=0.0, presence_penalty=0.0), "sampling")
    else:
        move = ("/api/repetition", dict(prompt=beginnings[1], repetition_penalty=1.35,
                                        frequency_penalty=0.0, presence_penalty=0.0,
                                        max_new_tokens=64), "repetition")
    columns = dict(prompt=beginnings[0], temperatures=TEMPERATURES, max_new_tokens=32)
    answer(send("/api/temperatures", dict(columns, max_new_tokens=1), "warm temperatures 0"))
    answer(send("/api/next", move[1] if slider == "next" else dict(prompt="hi"), "warm next 0"))

    idle = threading.active_count()
    clicks = []
    for seed in range(1, 5):
        if clicks:
            clicks[-1][1].close()  # the page aborts the previous fetch
        clicks.append((time.perf_counter(),
                       send("/api/temperatures", dict(columns, seed=seed),
                            f"bench temperatures/api/temperatures {seed}")))
        time.sleep(GAP)
    last_sent, last = clicks[-1]
    result = {}

    def wait_last():
        written = answer(last)
        result["last_s"] = time.perf_counter() - last_sent
        result["columns"] = [c["text"] for c in written["columns"]]

    waiting = threading.Thread(target=wait_last)
    waiting.start()
    started = time.perf_counter()
    answer(send(move[0], move[1], f"bench {move[2]} 1"))
    result["slider_s"] = time.perf_counter() - started
    waiting.join()
    while threading.active_count() > idle:  # the code before may still compute abandoned
        time.sleep(0.2)                      # clicks, each on its request's thread: let them end
    started = time.perf_counter()
    answer(send(move[0], move[1], f"bench {move[2]} 2"))
    result["alone_s"] = time.perf_counter() - started
    return result


def compare(model_path: str, seeds: int) -> None:
    """The desk's columns (one request per seed) against generate alone, column by column."""
    import minillm
    from minillm.cli.common import model_file
    from minillm.desk.fields import checked
    from minillm.desk.widgets import (BEGINNINGS, CHAT_BEGINNINGS, make_desk, prompt_ids,
                                      stops, temperatures)

    model = minillm.load(model_file(model_path))
    desk = make_desk(model, model_path)
    prompt = (CHAT_BEGINNINGS if desk.chat else BEGINNINGS)[0]
    ids = prompt_ids(desk, prompt)
    equal = {T: 0 for T in TEMPERATURES}
    for seed in range(seeds):
        request = checked("/api/temperatures", dict(prompt=prompt, seed=seed, max_new_tokens=32))
        for column in temperatures(desk, request)["columns"]:
            T = column["temperature"]
            alone = minillm.generate(model, ids, max_new_tokens=32, temperature=T, seed=seed,
                                     stop_tokens=stops(desk))[len(ids):]
            got = [t["id"] for t in column["tokens"]]
            equal[T] += got == alone
            if got != alone:
                i = next(i for i in range(len(got) + 1) if got[i:i + 1] != alone[i:i + 1])
                print(f"seed {seed}, T = {T}: token {i + 1} is {got[i:i + 1]}, alone "
                      f"{alone[i:i + 1]}")
    print(f"{model_path}, {prompt!r}, 32 tokens, seeds 0 to {seeds - 1}: columns equal to "
          f"generate alone: " + ", ".join(f"T = {T}: {n} of {seeds}" for T, n in equal.items()))


def unpack(revision: str, folder: str) -> str:
    """minillm/ of `revision` in `folder`; returns the folder."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision, "minillm"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", folder], input=archive, check=True)
    return folder


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.studies.desk_supersede",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--model_path", default="smollm2-135m-instruct",
                        help="a .npz file or a fetched model's name")
    parser.add_argument("--before", default="main", help="the git revision of the code before")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--sliders", default="next,repetition")
    parser.add_argument("--compare", type=int, metavar="N",
                        help="compare the columns of seeds 0 to N - 1 with generate's instead")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(*args.child)))
        return 0
    if args.compare:
        compare(args.model_path, args.compare)
        return 0
    model_path = args.model_path  # a file's path, or a fetched model's name, as it stands
    if Path(model_path).exists():
        model_path = str(Path(model_path).resolve())  # each side runs in its own folder
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    runs = {}
    with tempfile.TemporaryDirectory() as before:
        sides = {"before": unpack(args.before, before), "after": str(ROOT)}
        print(f"before: {args.before}; load average at start: "
              f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}")
        for r in range(args.rounds):
            for slider in args.sliders.split(","):
                for side, code in sides.items():
                    done = subprocess.run([sys.executable, __file__, "--child", code,
                                           model_path, slider], env=env, capture_output=True,
                                          text=True, cwd=code)
                    if done.returncode:
                        sys.exit(f"the {side} round failed:\n{done.stderr}")
                    runs.setdefault((slider, side), []).append(json.loads(done.stdout))
                    print(f"round {r + 1}, slider {slider}, {side}: "
                          f"{json.dumps(runs[slider, side][-1])[:160]}")
    print(f"\n{args.model_path}, four clicks {GAP} s apart, then the slider {GAP} s later; "
          f"{args.rounds} rounds alternated\n")
    print("| slider | before: slider's answer (alone) | after: slider's answer (alone) | "
          "before ÷ after, per round | last click's columns, before / after |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for slider in args.sliders.split(","):
        b, a = runs[slider, "before"], runs[slider, "after"]
        ratios = [x["slider_s"] / y["slider_s"] for x, y in zip(b, a)]
        differ = sorted({T for x, y in zip(b, a) for T, u, v in
                         zip(TEMPERATURES, x["columns"], y["columns"]) if u != v})

        def seconds(rs, key):
            return ", ".join(f"{x[key]:.2f}" for x in rs)

        print(f"| {slider} | {seconds(b, 'slider_s')} s ({seconds(b, 'alone_s')}) | "
              f"{seconds(a, 'slider_s')} s ({seconds(a, 'alone_s')}) | "
              f"{statistics.median(ratios):.1f}x ({', '.join(f'{x:.1f}' for x in ratios)}) | "
              f"{seconds(b, 'last_s')} / {seconds(a, 'last_s')} s, "
              + ("the same text |" if not differ else
                 f"the same text but at T = {', '.join(map(str, differ))} |"))
    print(f"\nload average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
