"""minillm.testing pointed at a plain PyTorch decoding loop: the adapter docs/TESTING.md shows
for an engine written by hand (one attention layer, a cache of two tensors, no padding)."""
import math

import pytest

torch = pytest.importorskip("torch", reason="the PyTorch loop needs torch")

from minillm.testing import Engine, check_batch_equivalence, check_cache_equivalence  # noqa

pytestmark = pytest.mark.usefixtures("one_torch_thread")
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


class LoopCache:
    """The loop's cache: the (k, v) tensors of the text so far; truncate slices them."""

    def __init__(self):
        self.past = None

    def truncate(self, length):
        self.past = tuple(t[:, :length] for t in self.past)


def torch_loop_engine(w, step=torch_forward) -> Engine:
    """The adapter: forward runs the loop's step with or without the cache's tensors."""
    def forward(tokens, cache=None, pad=None):
        if pad is not None:
            raise NotImplementedError("the loop has no padding: rows of equal length only")
        with torch.no_grad():
            logits, past = step(w, torch.tensor(tokens), None if cache is None else cache.past)
        if cache is not None:
            cache.past = past
        return logits.numpy()

    return Engine(VOCAB, CONTEXT, forward, new_cache=lambda batch_size: LoopCache())


def test_the_torch_loop_passes_the_cache_and_batch_checks():
    engine = torch_loop_engine(weights())
    check_cache_equivalence(engine, atol=1e-12, max_examples=20)
    check_batch_equivalence(engine, atol=1e-12, ragged=False, max_examples=20)


def forgets_the_positions_offset(w, tokens, past=None):
    """Planted bug: decoding adds the position embedding of 0 to every new token."""
    offset = 0 if past is None else past[0].shape[1]
    return torch_forward(dict(w, pos=torch.roll(w["pos"], offset, dims=0)), tokens, past)


def test_a_torch_loop_that_forgets_the_positions_offset_fails():
    broken = torch_loop_engine(weights(), step=forgets_the_positions_offset)
    with pytest.raises(AssertionError, match="logits differ"):
        check_cache_equivalence(broken, atol=1e-12, max_examples=20)
