"""minillm.testing pointed at a plain PyTorch decoding loop: the adapter docs/TESTING.md shows
for an engine written by hand (one attention layer, a cache of two tensors, no padding)."""
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the PyTorch loop needs torch")

from minillm.testing import Engine, check_batch_equivalence, check_cache_equivalence  # noqa

VOCAB, CONTEXT, D = 13, 16, 8


def weights(seed=0):
    g = torch.Generator().manual_seed(seed)
    shapes = dict(emb=(VOCAB, D), pos=(CONTEXT, D), q=(D, D), k=(D, D), v=(D, D), o=(D, D),
                  up=(D, 4 * D), down=(4 * D, D))
    return {name: 0.5 * torch.randn(shape, generator=g, dtype=torch.float64)
            for name, shape in shapes.items()}


def torch_forward(w, tokens, past=None):
    """Logits of tokens (B, T) continuing `past` (keys and values (B, S, D), or None), and the
    keys and values of the whole text: one attention layer and an MLP, learned positions."""
    start = 0 if past is None else past[0].shape[1]
    T = tokens.shape[1]
    x = w["emb"][tokens] + w["pos"][start:start + T]
    q, k, v = x @ w["q"], x @ w["k"], x @ w["v"]
    if past is not None:
        k, v = torch.cat([past[0], k], dim=1), torch.cat([past[1], v], dim=1)
    scores = q @ k.transpose(1, 2) / math.sqrt(D)  # (B, T, start + T)
    future = torch.arange(start + T)[None, :] > torch.arange(start, start + T)[:, None]
    scores = scores.masked_fill(future, -math.inf)
    x = x + torch.softmax(scores, dim=-1) @ v @ w["o"]
    x = x + torch.nn.functional.gelu(x @ w["up"]) @ w["down"]
    return x @ w["emb"].T, (k, v)


def torch_loop_engine(w) -> Engine:
    """The adapter: the cache is a dict holding the loop's (k, v); truncate slices them."""
    def forward(tokens, pad=None):
        with torch.no_grad():
            return torch_forward(w, torch.tensor(tokens))[0].numpy()

    def extend(cache, tokens):
        with torch.no_grad():
            logits, cache["past"] = torch_forward(w, torch.tensor(tokens), cache["past"])
        return logits.numpy()

    def truncate(cache, n):
        cache["past"] = tuple(t[:, :n] for t in cache["past"])

    return Engine(VOCAB, CONTEXT, forward=forward, new_cache=lambda batch, pad=None: {"past": None},
                  extend=extend, truncate=truncate, pads=False)


def test_the_torch_loop_passes_the_cache_and_batch_checks():
    engine = torch_loop_engine(weights())
    check_cache_equivalence(engine, atol=1e-12, max_examples=20)
    check_batch_equivalence(engine, atol=1e-12, max_examples=20)


def test_a_torch_loop_that_forgets_the_positions_offset_fails():
    """Planted bug: decoding adds the position embedding of 0 to every new token."""
    w = weights()
    engine = torch_loop_engine(w)

    def extend(cache, tokens):
        shifted = dict(w, pos=torch.roll(w["pos"], cache["past"][0].shape[1] if cache["past"]
                                         is not None else 0, dims=0))
        with torch.no_grad():
            logits, cache["past"] = torch_forward(shifted, torch.tensor(tokens), cache["past"])
        return logits.numpy()

    broken = Engine(VOCAB, CONTEXT, forward=engine.forward, new_cache=engine.new_cache,
                    extend=extend, truncate=engine.truncate, pads=False)
    with pytest.raises(AssertionError, match="logits differ"):
        check_cache_equivalence(broken, atol=1e-12, max_examples=20)
