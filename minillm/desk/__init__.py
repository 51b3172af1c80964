"""The teaching desk: the sampling knobs, the KV cache, int8, speculative decoding, the
serving engine and the mask of constrained decoding as widgets of a local web page, every
figure computed by minillm (`minillm desk`).

    fields.py    what each endpoint accepts, checked and bounded
    rounds.py    speculative decoding round by round, read from a recording drafter
    steps.py     the serving engine step by step: requests, block tables, the pool
    packing.py   b-bit integers packed end to end: a squeezed model's stored size
    masks.py     constrained decoding token by token: the automaton's state, the mask
    widgets.py   what each widget shows, from the library's public functions; the work bound
    server.py    http.server on 127.0.0.1: the static page and the JSON endpoints
    static/      the page: HTML, CSS and plain JavaScript, no build step, nothing fetched
"""
from pathlib import Path

PASSAGE = Path(__file__).resolve().parent / "passage.txt"  # held out from the shipped model
