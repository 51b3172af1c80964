"""A transformers causal LM as a kit engine, with a DynamicCache or a StaticCache.

    engine = hf_engine(model)                          # DynamicCache
    engine = hf_engine(model, cache="static")          # StaticCache of the context's length
    check_cache_equivalence(engine, atol=1e-10)        # a float64 model
    check_window_slides(hf_window_loop(model, window=16), engine, atol=1e-10, window=16)
    check_sampler(hf_filter)                           # transformers' logits warpers

Any `AutoModelForCausalLM` (GPT-2, Llama, Qwen2, Gemma, ...): the adapter gives it input ids,
an attention mask (0 over each row's first pad[r] columns, its left padding), position ids
that start after the padding (transformers does not derive them from the mask in a forward
call: without them a padded row reads shifted positions), and the cache. A cache remembers the
padding its rows were given at prefill.

Rollback: both caches are cut with crop(), which takes the number of tokens to *remove* as a
negative count (transformers >= 5.24; crop(n) read as "keep n" silently removes nothing for
n = 0). A StaticCache has slots for `max_cache_len` positions and counts what it holds itself:
crop only moves where the next tokens are written (the stale slots are overwritten before
attention reads them, or masked as later positions), so the position it writes at must be
cropped too; an adapter that only restarts its own `cache_position` fails the rollback check
(tried: "after truncate(0) ... logits differ by up to 1.28" on GPT-2).
"""
from __future__ import annotations

import numpy as np

from ...plumbing.optional import require
from ...sampling import SamplingConfig
from ..engine import Engine
from ..window import rereading_loop

CACHES = ("dynamic", "static")


class HFCache:
    """A transformers cache (`past`), how many positions it holds, the padding its rows were
    given at prefill, and truncate(length)."""

    def __init__(self, past):
        self.past, self.length, self.pad = past, 0, None

    def truncate(self, length):
        self.past.crop(length - self.length)  # minus how many to remove, not how many to keep
        self.length = length


def is_static(past) -> bool:
    return type(past).__name__ == "StaticCache"


def hf_engine(model, cache: str = "dynamic", max_cache_len: int | None = None) -> Engine:
    """A transformers causal LM as a minillm.testing engine; cache: "dynamic" (DynamicCache)
    or "static" (StaticCache of max_cache_len positions, default the model's context)."""
    torch = require("torch", "peers", "minillm.testing.adapters.transformers")
    transformers = require("transformers", "peers", "minillm.testing.adapters.transformers")
    if cache not in CACHES:
        raise ValueError(f"cache: one of {CACHES}, got {cache!r}")
    context = model.config.max_position_embeddings
    max_cache_len = max_cache_len or context

    def new_cache(batch_size):
        if cache == "static":
            return HFCache(transformers.StaticCache(config=model.config,
                                                    max_cache_len=max_cache_len))
        return HFCache(transformers.DynamicCache(config=model.config))

    def forward(tokens, cache=None, pad=None):
        B, T = tokens.shape
        start = 0 if cache is None else cache.length
        if cache is not None:
            cache.pad = pad if pad is not None else cache.pad  # given at prefill, kept
            pad = cache.pad
        pad = np.zeros(B, dtype=np.int64) if pad is None else np.asarray(pad)
        width = max_cache_len if cache is not None and is_static(cache.past) else start + T
        columns = np.arange(width)
        mask = columns[None, :] >= pad[:, None]  # (B, width): False on the padding
        positions = np.maximum(columns[None, start:start + T] - pad[:, None], 0)  # (B, T)
        with torch.no_grad():
            out = model(input_ids=torch.tensor(tokens), attention_mask=torch.tensor(mask).long(),
                        position_ids=torch.tensor(positions),
                        cache_position=torch.arange(start, start + T),
                        cache=None if cache is None else cache.past,
                        use_cache=cache is not None)
        if cache is not None:
            cache.length += T
        return out.logits.float().numpy() if out.logits.dtype == torch.bfloat16 \
            else out.logits.numpy()

    length = max_cache_len if cache == "static" else context
    return Engine(model.config.vocab_size, length, forward, new_cache)


def hf_window_loop(model, window: int, keep: int | None = None, cache: str = "dynamic"):
    """check_window_slides' decode(prompt, n) for a transformers model: greedy decoding with a
    window of `window` tokens that, on a slide, crops the cache to nothing and reads the
    newest `keep` tokens again from position 0 (window.rereading_loop over hf_engine)."""
    return rereading_loop(hf_engine(model, cache), window, keep)


def hf_filter(z, knobs: SamplingConfig) -> np.ndarray:
    """transformers' logits warpers for the knobs, in the order generate() applies them
    (TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper, MinPLogitsWarper), then the
    softmax do_sample draws from, as check_sampler's filter. Temperature 0 is greedy decoding
    (do_sample=False: the argmax, all the mass; the temperature warper itself refuses 0).
    Logits (B, V) in float64; probabilities (B, V)."""
    torch = require("torch", "peers", "minillm.testing.adapters.transformers")
    transformers = require("transformers", "peers", "minillm.testing.adapters.transformers")
    z = np.asarray(z, dtype=np.float64)
    if knobs.greedy:
        probs = np.zeros(z.shape)
        probs[np.arange(len(z)), z.argmax(axis=-1)] = 1.0
        return probs
    warpers = [transformers.TemperatureLogitsWarper(knobs.temperature)]
    if knobs.top_k is not None:
        warpers.append(transformers.TopKLogitsWarper(knobs.top_k))
    if knobs.top_p is not None:
        warpers.append(transformers.TopPLogitsWarper(knobs.top_p))
    if knobs.min_p is not None:
        warpers.append(transformers.MinPLogitsWarper(knobs.min_p))
    scores = torch.tensor(z)
    ids = torch.zeros((len(z), 1), dtype=torch.long)
    for warper in warpers:
        scores = warper(ids, scores)
    return torch.softmax(scores, dim=-1).numpy()
