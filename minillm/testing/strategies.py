"""Hypothesis strategies for testing an inference engine: tiny models, texts, ways to cut a text
into chunks, ragged batches, awkward logits and sampling knobs.

Every strategy draws plain NumPy arrays, lists or minillm objects, so they combine with any
engine's own tests (`@given(chunk_cases(vocab_size=50))`). Sizes are small on purpose: a bug in
a cache or a mask shows on texts of a few tokens, and Hypothesis shrinks a failure to one.
"""
from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

from ..config import ModelConfig
from ..model import random_model
from ..sampling import SamplingConfig


@st.composite
def model_configs(draw, arch=None, context_length=None, gemma=True):
    """Small configs of either architecture ("classic" GPT-2 style, "modern" Llama style):
    grouped-query attention, odd sizes, tied and untied, with and without biases, every
    activation; half of the modern ones with Gemma 3's options (gemma_options) and the other
    families' (family_options) unless `gemma` is False (for formats that cannot hold them)."""
    arch = arch or draw(st.sampled_from(["classic", "modern"]))
    n_kv_heads = draw(st.integers(1, 3))
    group = draw(st.integers(1, 3)) if arch == "modern" else 1
    n_heads = n_kv_heads * group
    head_dim = draw(st.sampled_from([2, 4, 6] if arch == "modern" else [1, 3, 4, 5]))
    activation = draw(st.sampled_from(
        ["gelu", "gelu_tanh"] if arch == "classic" else ["silu", "silu", "gelu", "gelu_tanh"]))
    gemma = ({**draw(gemma_options()), **draw(family_options())}
             if arch == "modern" and gemma else {})
    return ModelConfig(
        arch=arch,
        vocab_size=draw(st.integers(3, 40)),
        context_length=context_length or draw(st.integers(4, 24)),
        d_model=n_heads * head_dim,
        n_layers=draw(st.integers(1, 3)),
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        d_ff=draw(st.integers(1, 20)),
        tie_embeddings=draw(st.booleans()),
        bias=draw(st.booleans()),
        activation=activation,
        rope_theta=draw(st.sampled_from([100.0, 10000.0])),
        **gemma,
    )


@st.composite
def gemma_options(draw):
    """Gemma 3's options of the modern architecture, each on or off: the embedding scale, q/k
    norms, post-sublayer norms, a head size other than d_model / n_heads, another attention
    scale, and sliding windows of 1 to 5 keys (shorter than most drawn prompts: the window's
    edge is crossed) on some layers, with their own RoPE base."""
    if not draw(st.booleans()):
        return {}
    window = draw(st.none() | st.integers(1, 5))
    return dict(
        embed_scale=draw(st.booleans()), qk_norm=draw(st.booleans()),
        post_norms=draw(st.booleans()),
        head_dim=draw(st.sampled_from([None, 2, 8])),
        query_pre_attn_scalar=draw(st.sampled_from([None, 3.0])),
        sliding_window=window,
        sliding_window_pattern=draw(st.integers(1, 3)),
        rope_local_theta=draw(st.sampled_from([None, 10.0])))


@st.composite
def family_options(draw):
    """The other families' options, each on or off: RoPE scaling (linear, llama3, yarn, with an
    original context of 4 positions, shorter than most drawn prompts), a first layer without
    RoPE, no norms before the sublayers, q/k norms over all heads, Granite's multipliers."""
    if not draw(st.booleans()):
        return {}
    scaling = draw(st.sampled_from([
        None, {"type": "linear", "factor": 2.0},
        {"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
         "original_context": 4},
        {"type": "yarn", "factor": 4.0, "original_context": 4}]))
    return dict(
        rope_scaling=scaling, no_rope_layers=draw(st.sampled_from([(), (0,)])),
        pre_norms=draw(st.booleans()), qk_norm_all_heads=draw(st.booleans()),
        embedding_multiplier=draw(st.sampled_from([1.0, 3.0])),
        residual_multiplier=draw(st.sampled_from([1.0, 0.5])),
        attention_multiplier=draw(st.sampled_from([None, 0.25])),
        logit_scale=draw(st.sampled_from([1.0, 4.0])))


@st.composite
def random_models(draw, configs=None, dtype="float64", std=0.5):
    """minillm models with seeded random weights (std 0.5: logits of order one, so that a
    wrong cache or mask moves them visibly); configs: a strategy, model_configs() by default."""
    config = draw(configs if configs is not None else model_configs())
    return random_model(config, seed=draw(st.integers(0, 2**16)), dtype=dtype, std=std)


def uniform_ids(vocab_size: int, shape):
    """Ids drawn uniformly over the whole vocabulary by NumPy from a drawn seed: what
    Hypothesis' own draws rarely give (they favour 0, small ids and numbers from the project's
    code), and what finds an engine whose results depend on the token ids (a kernel per call
    size whose rounding shows only on some texts, a table read out of range)."""
    return st.integers(0, 2**32 - 1).map(
        lambda seed: np.random.default_rng(seed).integers(0, vocab_size, shape, dtype=np.int64))


def token_arrays(vocab_size: int, batch: int, length: int):
    """(batch, length) int64 token ids in [0, vocab_size): Hypothesis' structured draws
    (repeats, small ids, edges; these shrink) or, as often, seeded uniform ids over the whole
    vocabulary (uniform_ids)."""
    ids = st.integers(0, vocab_size - 1)
    structured = st.lists(st.lists(ids, min_size=length, max_size=length), min_size=batch,
                          max_size=batch).map(lambda rows: np.array(rows, dtype=np.int64))
    return st.one_of(structured, uniform_ids(vocab_size, (batch, length)))


def token_sequences(vocab_size: int, min_length: int = 1, max_length: int = 16):
    """One text: a list of ids in [0, vocab_size), structured or uniform (token_arrays)."""
    structured = st.lists(st.integers(0, vocab_size - 1), min_size=min_length,
                          max_size=max_length)
    uniform = st.integers(min_length, max_length).flatmap(
        lambda n: uniform_ids(vocab_size, (n,)).map(lambda ids: ids.tolist()))
    return st.one_of(structured, uniform)


def chunkings(length: int):
    """Where to cut a text of `length` tokens into chunks: sorted cuts in (0, length). One call
    (no cut), token by token (every cut), one cut (a prefill, then the rest in one call: a long
    chunk into a filled cache, where call-size-dependent kernels differ) and random chunks are
    all drawn."""
    every = list(range(1, length))
    return st.one_of(st.just([]), st.just(every), st.integers(1, max(1, length - 1)).map(
                         lambda cut: [cut] if cut < length else []),
                     st.sets(st.integers(1, max(1, length - 1)), max_size=length).map(
                         lambda cuts: sorted(c for c in cuts if c < length)))


@st.composite
def chunk_cases(draw, vocab_size: int, max_batch: int = 2, max_length: int = 16):
    """(tokens (B, T), cuts): a batch of texts and where to cut it into chunks."""
    batch = draw(st.integers(1, max_batch))
    length = draw(st.integers(1, max_length))
    return draw(token_arrays(vocab_size, batch, length)), draw(chunkings(length))


@st.composite
def rollback_cases(draw, vocab_size: int, max_batch: int = 2, max_length: int = 16):
    """(tokens (B, T), keep, more (B, M)): cache tokens, truncate to keep, feed more; the text
    tokens[:, :keep] + more fits in max_length."""
    batch = draw(st.integers(1, max_batch))
    length = draw(st.integers(1, max_length - 1))
    keep = draw(st.integers(0, length))
    tokens = draw(token_arrays(vocab_size, batch, length))
    more = draw(token_arrays(vocab_size, batch, draw(st.integers(1, max_length - keep))))
    return tokens, keep, more


@st.composite
def ragged_batches(draw, vocab_size: int, max_batch: int = 3, max_length: int = 16,
                   ragged: bool = True):
    """(tokens (B, T), pad (B,), split): B >= 2 left-padded rows (row r is tokens[r, pad[r]:]),
    filler ids drawn like real ones, and a prefill length split > max(pad), so that every row
    has a real token in its prefill. ragged=False: rows of equal length (pad all 0)."""
    batch = draw(st.integers(2, max_batch))
    length = draw(st.integers(1, max_length))
    tokens = draw(token_arrays(vocab_size, batch, length))
    pads = st.integers(0, length - 1) if ragged else st.just(0)
    pad = np.array(draw(st.lists(pads, min_size=batch, max_size=batch)), dtype=np.int64)
    split = draw(st.integers(int(pad.max()) + 1, length))
    return tokens, pad, split


@st.composite
def logits(draw, max_rows=3, max_vocab=12, neg_inf=True, huge=True, dtype="float64"):
    """(B, V) logits with exact ties (a few repeated values), -inf entries (tokens an earlier
    stage removed) and huge values (+-1e300, +-3.4e38: overflow traps; in float32, whose
    largest number is 3.4e38, +-1e30: huge, yet logits / T stays finite for every temperature
    sampling_knobs draws, T >= 1e-6); every row keeps at least one finite logit, as a model's
    always does. dtype: "float64" or "float32", the array's type."""
    B, V = draw(st.integers(1, max_rows)), draw(st.integers(1, max_vocab))
    values = [st.floats(-20, 20), st.sampled_from([-1.0, 0.0, 1.0, 2.5])]
    if neg_inf:
        values.append(st.just(-math.inf))
    if huge:
        values.append(st.sampled_from([1e300, -1e300, 3.4e38, -3.4e38] if dtype == "float64"
                                      else [1e30, -1e30]))
    z = np.array(draw(st.lists(st.one_of(*values), min_size=B * V, max_size=B * V)), dtype=dtype)
    z = z.reshape(B, V)
    for row in z:
        if np.isneginf(row).all():
            row[draw(st.integers(0, V - 1))] = draw(st.floats(-20, 20))
    return z


@st.composite
def smooth_logits(draw, max_rows=3, vocab_size=50):
    """(B, vocab_size) logits scale * N(0, 1) from a drawn seed, scale 0.5, 3 or 10: continuous
    values, no ties, a long tail for the filters to cut."""
    rows, seed = draw(st.integers(1, max_rows)), draw(st.integers(0, 2**32 - 1))
    scale = draw(st.sampled_from([0.5, 3.0, 10.0]))
    return scale * np.random.default_rng(seed).standard_normal((rows, vocab_size))


TEMPERATURES = (0.0, 1e-6, 0.7, 1.0, 30.0)  # greedy, near-greedy, sharpened, plain, flat
TOP_KS = (None, 1, 2, 5)
TOP_PS = (None, 1e-9, 0.5, 0.95)
MIN_PS = (None, 0.1, 1.0)


def knob_grid(greedy: bool = True) -> list[SamplingConfig]:
    """Every combination of the values sampling_knobs draws, penalties off: 240 configs (192
    without greedy), few enough to try each one."""
    temperatures = TEMPERATURES if greedy else TEMPERATURES[1:]
    return [SamplingConfig(temperature=t, top_k=k, top_p=p, min_p=m)
            for t in temperatures for k in TOP_KS for p in TOP_PS for m in MIN_PS]


@st.composite
def sampling_knobs(draw, greedy=True, penalty=True):
    """A minillm.sampling.SamplingConfig: temperature (0, greedy, when `greedy`), top-k, top-p,
    min-p and the repetition, frequency and presence penalties (when `penalty`), each on or
    off, edge values included (knob_grid: every combination without the penalties)."""
    temperatures = TEMPERATURES if greedy else TEMPERATURES[1:]
    return SamplingConfig(
        temperature=draw(st.sampled_from(temperatures)),
        top_k=draw(st.sampled_from(TOP_KS)),
        top_p=draw(st.sampled_from(TOP_PS)),
        min_p=draw(st.sampled_from(MIN_PS)),
        repetition_penalty=draw(st.sampled_from([None, 1.3])) if penalty else None,
        frequency_penalty=draw(st.sampled_from([None, 0.7])) if penalty else None,
        presence_penalty=draw(st.sampled_from([None, -0.5, 1.0])) if penalty else None)
