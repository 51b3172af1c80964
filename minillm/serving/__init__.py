"""The serving chapter: many requests through one model at once, each exactly as if alone.

    blocks.py        the paged KV cache: a pool of fixed-size blocks, a block table per request
    batches.py       a step's requests as Model.forward's cache: a row each, or end to end
    prefix_cache.py  full blocks keyed by the tokens they hold, shared by requests alike
    scheduler.py     continuous batching: who computes how many tokens in the next step
    engine.py        Engine: add_request, step, abort, has_unfinished, stats
"""
from .engine import Engine, Output, Stats

__all__ = ["Engine", "Output", "Stats"]
