"""The serving chapter: many requests through one model at once, each exactly as if alone.

    block_manager.py  who holds which block: the paged KV cache's pool and the prefix cache
    batches.py        a step's requests as Model.forward's cache: a row each, or end to end
    scheduler.py      continuous batching: who computes how many tokens in the next step
    engine.py         Engine: add_request, step, abort, has_unfinished, stats
    speculative.py    speculative decoding inside the engine: a round in the step's pass
"""
from .engine import Engine, Output, Stats

__all__ = ["Engine", "Output", "Stats"]
