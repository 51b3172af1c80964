"""The fast path: the same model made quicker on a real machine, proven equal to the reference.

    model.py      accelerate(model) -> FastModel: memory layouts, blocked products, int8 widened
                  a block at a time, greedy decoding's argmax, large products in ordinary
                  pages; reference(model) turns it back
    attention.py  causal_attention: a tile of queries at a time against only the keys it may see
    blas.py       threads(n): how many threads NumPy's BLAS runs

Nothing on the reading path imports this package; tests/test_fast.py and
tests/test_fast_attention.py prove it equal to the reference, docs/PERFORMANCE.md measures it.
"""
from .attention import causal_attention
from .model import FastModel, accelerate, keep_freed_memory, ordinary_pages, reference
from .blas import threads

__all__ = ["accelerate", "reference", "FastModel", "keep_freed_memory", "ordinary_pages",
           "causal_attention", "threads"]
