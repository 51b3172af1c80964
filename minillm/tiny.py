"""minillm in one file: the whole algorithm of LLM inference for one text, in NumPy. Read it first.

    x_0    = tok_emb[tokens] (+ pos_emb[positions], classic)           (T, D)
    x     += Attention(Norm(x));  x += MLP(Norm(x))                    for each layer
    logits = Norm(x) @ W_out.T                                          (T, V)
    token  ~ filtered softmax(logits[-1]);  append it, go on            generate

Plain functions over the library's params dict (canonical names: docs/FORMAT.md). The library
(minillm/*.py) is this algorithm, the same numbers (tests/test_tiny.py), plus batches and
padding (model.py), one cache for all layers (kv_cache.py), more penalties (sampling.py), stop
strings and streaming (generate.py), texts longer than the context (window.py), other drafters
(drafters.py), groups and fewer bits (quantize.py), Gemma 3 (model.py), and speed.
cfg: a minillm.ModelConfig, or anything with its fields arch ("classic": GPT-2 style, "modern":
Llama style), n_layers, n_heads, n_kv_heads, norm_eps, rope_theta, activation, context_length.
Shapes: T new tokens, S keys (cached and new), D width, H query heads, K key/value heads, d head
size, F MLP width, V vocabulary.
"""
import math

import numpy as np


# -- the pieces, one formula each -----------------------------------------------------------
def softmax(x):
    """softmax(x)_i = exp(x_i - max x) / sum_j exp(x_j - max x), over the last axis (the max
    changes nothing but keeps exp from overflowing; -inf gets probability 0)."""
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def layer_norm(x, w, b, eps):
    """LayerNorm(x) = (x - mean x) / sqrt(var x + eps) * w + b, over the last axis."""
    x = x - x.mean(axis=-1, keepdims=True)
    x = x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * w
    return x if b is None else x + b


def rms_norm(x, w, eps):
    """RMSNorm(x) = x / sqrt(mean(x^2) + eps) * w, over the last axis (no centring)."""
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * w


def erfc(x):
    """erfc(x) = 1 - erf(x) (NumPy has no erf): math.erfc per element in float64; else the
    library's fit (Numerical Recipes' "erfcc", relative error below 1.2e-7): for z = |x|,
    erfc(z) ~ t exp(-z^2 + P(t)), t = 1 / (1 + z/2), P of degree 9; erfc(-z) = 2 - erfc(z)."""
    if x.dtype == np.float64:
        return np.frompyfunc(math.erfc, 1, 1)(x).astype(np.float64)
    c = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806,
         0.27886807, -1.13520398, 1.48851587, -0.82215223, 0.17087277)  # P's coefficients
    z = np.abs(x)
    t = 1.0 / (1.0 + 0.5 * z)
    poly = c[-1] * t
    for c_j in c[-2:0:-1]:  # Horner's rule
        poly = (poly + c_j) * t
    r = t * np.exp(poly + c[0] - z * z)
    return np.where(x >= 0, r, 2.0 - r)


def gelu(x):
    """GELU(x) = 0.5 x (1 + erf(x / sqrt 2)) = 0.5 x erfc(-x / sqrt 2) (no cancellation)."""
    return 0.5 * x * erfc(x * -(1.0 / math.sqrt(2.0)))


def gelu_tanh(x):
    """GELU's tanh approximation (GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


def silu(x):
    """SiLU(x) = x sigmoid(x) = x / (1 + e^-x) (where e^-x overflows to inf: 0, rightly)."""
    with np.errstate(over="ignore"):
        return x / (1.0 + np.exp(-x))


ACTIVATIONS = {"gelu": gelu, "gelu_tanh": gelu_tanh, "silu": silu}


def linear(x, w, b=None):
    """y = x @ W.T + b, W stored (out, in). An int8 weight is a pair (Q, s) of quantize_rows:
    y_r = sum_j s_r Q_rj x_j = s_r (Q_r . x), the row's scale taken out of the sum."""
    if isinstance(w, tuple):  # Q widened to floats (exact: |Q| <= 127), s after the sum
        y = (x @ w[0].astype(x.dtype).T) * w[1]
    else:
        y = x @ w.T
    return y if b is None else y + b


def quantize_rows(w):
    """int8 rows: s_r = max_j |W_rj| / 127, Q_rj = round(W_rj / s_r) clipped to [-127, 127];
    W_rj ~ s_r Q_rj within s_r / 2. s is rounded to float32 (as files store it) before Q is
    computed; a row of zeros gets s_r = 1. (out, in) -> Q int8 (out, in), s float32 (out,)."""
    w = np.asarray(w, dtype=np.float64)
    s = (np.abs(w).max(axis=1) / 127).astype(np.float32)  # (out,)
    s[s == 0] = 1.0
    return np.clip(np.rint(w / s[:, None]), -127, 127).astype(np.int8), s


def quantize(params):
    """The params with every block's linear weight as int8 rows (Q, s); embeddings, norms,
    biases and the output layer stay float, as minillm.quantize(model) leaves them."""
    linear_weights = (".qkv.weight", ".out.weight", "up.weight", ".down.weight")  # gate_up too
    return {name: quantize_rows(w) if name.endswith(linear_weights) else w
            for name, w in params.items()}


def rope(x, positions, theta):
    """Rotate each pair (x_j, x_{j + d/2}) of every head by the angle m theta^(-2j/d), m the
    position, x = [x1, x2] in halves: RoPE(x, m) = [x1 cos - x2 sin, x2 cos + x1 sin], so
    <RoPE(q, m), RoPE(k, n)> depends on positions only through m - n. x: (heads, T, d)."""
    d = x.shape[-1]
    inv_freq = theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)  # (d/2,)
    angles = np.outer(positions, inv_freq)  # (T, d/2), float64 whatever x's dtype
    cos, sin = np.cos(angles).astype(x.dtype), np.sin(angles).astype(x.dtype)
    x1, x2 = x[..., :d // 2], x[..., d // 2:]  # (heads, T, d/2) each
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def attention(q, k, v):
    """Attention(Q, K, V) = softmax(Q K^T / sqrt(d) + M) V, M = -inf where a key comes after
    the query (causal). q: (H, T, d) the new tokens' queries; k, v: (K, S, d), the last T keys
    theirs; query head h reads key/value head h // (H / K) (grouped-query attention)."""
    (H, T, d), S = q.shape, k.shape[1]
    k, v = np.repeat(k, H // len(k), axis=0), np.repeat(v, H // len(v), axis=0)  # (H, S, d)
    scores = (q * (1.0 / math.sqrt(d))) @ k.transpose(0, 2, 1)  # (H, T, S)
    causal = np.arange(S) <= np.arange(S - T, S)[:, None]  # (T, S): key j <= query's index
    return softmax(np.where(causal, scores, -np.inf)) @ v  # (H, T, d)


# -- the KV cache: a list with a pair (k, v) of (K, S, d) per layer, the keys and values read --
def cache_length(cache):
    """How many tokens the cache holds (an empty list before the first)."""
    return cache[0][0].shape[1] if cache else 0


def cache_append(cache, layer, k, v):
    """Add the new tokens' keys and values (K, T, d) to the layer's; return all, (K, S, d)."""
    if layer == len(cache):
        cache.append((k, v))
    else:
        old_k, old_v = cache[layer]
        cache[layer] = (np.concatenate([old_k, k], axis=1), np.concatenate([old_v, v], axis=1))
    return cache[layer]


def truncate(cache, n):
    """Forget every token from position n on (speculative decoding's rollback)."""
    cache[:] = [(k[:, :n], v[:, :n]) for k, v in cache]


# -- the model ------------------------------------------------------------------------------
def norm(x, params, name, cfg):
    """LayerNorm, with a shift when the model has biases (classic); RMSNorm (modern)."""
    if cfg.arch == "classic":
        return layer_norm(x, params[name + ".weight"], params.get(name + ".bias"),
                          cfg.norm_eps)
    return rms_norm(x, params[name + ".weight"], cfg.norm_eps)


def self_attention(h, params, cfg, layer, start, cache):
    """q, k, v from one fused matmul (H query heads, then K key heads, then K value heads),
    RoPE on q and k (modern), k and v into the cache, attention, the output projection.
    h: (T, D) -> (T, D), the tokens at positions start, ..., start + T - 1."""
    name, H, K, T = f"layers.{layer}.attn.", cfg.n_heads, cfg.n_kv_heads, len(h)
    qkv = linear(h, params[name + "qkv.weight"], params.get(name + "qkv.bias"))  # (T, (H+2K) d)
    qkv = qkv.reshape(T, H + 2 * K, -1).transpose(1, 0, 2)  # (H + 2K, T, d)
    q, k, v = qkv[:H], qkv[H:H + K], qkv[H + K:]
    if cfg.arch == "modern":
        positions = np.arange(start, start + T)
        q, k = rope(q, positions, cfg.rope_theta), rope(k, positions, cfg.rope_theta)
    k, v = cache_append(cache, layer, k, v)  # (K, S, d)
    out = attention(q, k, v).transpose(1, 0, 2).reshape(T, -1)  # (T, H d)
    return linear(out, params[name + "out.weight"], params.get(name + "out.bias"))


def mlp(h, params, cfg, layer):
    """classic: W_down act(W_up h + b_up) + b_down; modern (SwiGLU): W_down (act(W_gate h) *
    W_up h), the F gate rows and the F up rows in one weight. h: (T, D) -> (T, D)."""
    name, act = f"layers.{layer}.mlp.", ACTIVATIONS[cfg.activation]
    if cfg.arch == "classic":
        u = linear(h, params[name + "up.weight"], params.get(name + "up.bias"))  # (T, F)
        return linear(act(u), params[name + "down.weight"], params.get(name + "down.bias"))
    gate, up = np.split(linear(h, params[name + "gate_up.weight"]), 2, axis=-1)  # (T, F) each
    return linear(act(gate) * up, params[name + "down.weight"])


def forward(params, cfg, tokens, cache=None):
    """Logits of every new token, (T,) ids -> (T, V). Without a cache the tokens are the whole
    text; with one (a list, [] at first) they continue the text it holds, and it keeps their
    keys and values. A tied model has no lm_head.weight: its output layer is tok_emb.weight."""
    cache = [] if cache is None else cache
    start, tokens = cache_length(cache), np.asarray(tokens)
    x = params["tok_emb.weight"][tokens]  # (T, D)
    if cfg.arch == "classic":
        x = x + params["pos_emb.weight"][start:start + len(tokens)]
    for i in range(cfg.n_layers):  # pre-norm blocks: x += Attention(Norm(x)); x += MLP(Norm(x))
        x = x + self_attention(norm(x, params, f"layers.{i}.attn_norm", cfg), params, cfg, i,
                               start, cache)
        x = x + mlp(norm(x, params, f"layers.{i}.mlp_norm", cfg), params, cfg, i)
    output = params.get("lm_head.weight", params["tok_emb.weight"])  # (V, D)
    return linear(norm(x, params, "final_norm", cfg), output)


# -- sampling and the decode loop -----------------------------------------------------------
def filtered_probs(logits, history, temperature=1.0, top_k=None, top_p=None, min_p=None,
                   repetition_penalty=None, penalty_window=64):
    """The next token's distribution (V,), float64, the knobs in this order, each on what the
    ones before kept (None is off, and so are top_k 0, top_p 1, min_p 0, repetition_penalty 1):
        z_i = z_i / r if z_i > 0 else z_i * r, once for each token among the last
              penalty_window of history (CTRL's repetition penalty r)
        temperature 0: one-hot on argmax z (the lowest id among ties); else
        e   = exp((z - max z) / temperature)
        top-k: keep the top_k largest z (among equal ones, the lowest ids)
        top-p: sorted by e (ties: lowest id first), keep each token whose mass before it is
               < top_p: the smallest head reaching top_p, the crossing token kept
        min-p: keep e_i >= min_p max e;   p = e / sum e over the tokens kept."""
    z = np.array(logits, dtype=np.float64)
    if repetition_penalty:
        recent = np.zeros(len(z), dtype=bool)
        recent[np.asarray(history[-penalty_window:], dtype=np.int64)] = True
        z = np.where(recent, np.where(z > 0, z / repetition_penalty, z * repetition_penalty), z)
    if temperature == 0:
        return (np.arange(len(z)) == z.argmax()).astype(np.float64)  # one-hot
    e = np.exp((z - z.max()) / temperature)  # the largest is exactly 1: nothing overflows
    keep = e > 0
    if top_k:  # ranked by logit: two logits a hair apart may round to the same e
        keep[np.argsort(-z, kind="stable")[top_k:]] = False
    if top_p is not None and top_p < 1:
        kept = np.where(keep, e, 0.0)
        order = np.argsort(-kept, kind="stable")  # (V,) most likely first
        sorted_e = kept[order]
        mass_before = (np.cumsum(sorted_e) - sorted_e) / sorted_e.sum()
        keep[order[mass_before >= top_p]] = False
    if min_p:
        kept = np.where(keep, e, 0.0)
        keep &= kept >= min_p * kept.max()
    e = np.where(keep, e, 0.0)
    return e / e.sum()


def draw(probs, u):
    """Inverse-CDF draw, u in [0, 1): the first token whose running total exceeds u * total
    (never a token of probability 0, even when u * total rounds up to the total)."""
    cdf = np.cumsum(probs)
    return min(int((cdf <= u * cdf[-1]).sum()), int(np.flatnonzero(probs)[-1]))


def sample(probs, temperature, rng):
    """The next token: the argmax when greedy (no randomness), else a draw with one uniform."""
    return int(probs.argmax()) if temperature == 0 else draw(probs, rng.random())


def generate(params, cfg, prompt, max_new_tokens, seed=0, stop_tokens=(), **knobs):
    """prompt + new tokens: read the prompt in one pass (prefill), then one token at a time
    through the cache (decode), until a stop token (kept) or max_new_tokens. knobs: those of
    filtered_probs; one uniform per token from default_rng(seed) unless greedy, as the library."""
    assert len(prompt) + max_new_tokens <= cfg.context_length, "no sliding window here"
    rng, text, cache = np.random.default_rng(seed), list(prompt), []
    logits = forward(params, cfg, text, cache)[-1]  # prefill: (V,) the last position's logits
    for n in range(max_new_tokens):
        token = sample(filtered_probs(logits, text, **knobs), knobs.get("temperature", 1.0), rng)
        text.append(token)
        if token in stop_tokens or n == max_new_tokens - 1:
            break
        logits = forward(params, cfg, [token], cache)[-1]  # decode: one token, everything cached
    return text


# -- speculative decoding -------------------------------------------------------------------
def residual(p, q):
    """max(0, p - q) renormalised, where the target wants more than the draft gave (or p)."""
    r = np.maximum(p - q, 0.0)
    return r / r.sum() if r.sum() > 0 else p


def accept(p, q, guesses, u, v):
    """Keep guess x_i while u_i < p_i(x_i) / q_i(x_i) (probability min(1, p/q)); replace the
    first rejected one by a draw from residual(p_i, q_i); all k kept, a bonus token from p_k.
    Each token follows p, whatever q: min(p, q) + (1 - sum min(p, q)) residual = p. p: (k + 1,
    V) the target's distributions after the text and each guess; q: (k, V) the draft's."""
    for i, x in enumerate(guesses):
        if u[i] * q[i, x] >= p[i, x]:  # u >= p/q, without dividing by q
            return i, draw(residual(p[i], q[i]), v)
    return len(guesses), draw(p[len(guesses)], v)


def propose(dp, dcfg, cache, cached, text, k, knobs, rng):
    """The draft's k guesses and the q (k, V) they were drawn from. cached: the tokens in the
    draft's cache, which keeps their longest common prefix with the text (forgetting rejected
    guesses), reads the rest, then decodes k tokens as generate does."""
    keep = 0
    while keep < min(len(cached), len(text) - 1) and cached[keep] == text[keep]:
        keep += 1
    truncate(cache, keep)
    logits = forward(dp, dcfg, text[keep:], cache)[-1]  # (V,)
    guesses, q = [], []
    for i in range(k):
        q.append(filtered_probs(logits, text + guesses, **knobs))
        guesses.append(sample(q[-1], knobs.get("temperature", 1.0), rng))
        if i < k - 1:
            logits = forward(dp, dcfg, [guesses[-1]], cache)[-1]
    cached[:] = text + guesses[:-1]  # the last guess is not read
    return guesses, np.array(q)


def speculative_generate(tp, dp, tcfg, dcfg, prompt, k=4, max_new_tokens=200, seed=0,
                         stop_tokens=(), **knobs):
    """prompt + new tokens of the target (params tp), guessed k at a time by the draft (dp).
    A round: the draft proposes, the target reads the guesses in one cached pass, accept keeps
    some and adds a token, the target's cache forgets the rest. The rng is consumed as by
    minillm.speculative_generate: the draft's draws, then k uniforms u and one v."""
    assert len(prompt) + max_new_tokens <= tcfg.context_length, "no sliding window here"
    rng, text, end = np.random.default_rng(seed), list(prompt), len(prompt) + max_new_tokens
    tcache, dcache, dcached = [], [], []
    while len(text) < end:
        room = min(k, end - len(text) - 1)  # the round's last token is the target's
        guesses, q = ([], None) if room == 0 else propose(dp, dcfg, dcache, dcached, text,
                                                          room, knobs, rng)
        fresh = text[cache_length(tcache):] + guesses  # what the target's cache lacks
        logits = forward(tp, tcfg, fresh, tcache)[-len(guesses) - 1:]  # (k + 1, V)
        p = np.array([filtered_probs(z, text + guesses[:i], **knobs)
                      for i, z in enumerate(logits)])
        if knobs.get("temperature", 1.0) == 0:  # no draws: with one-hot p and q, u = v = 0
            u, v = np.zeros(len(guesses)), 0.0  # keeps a guess iff it is p's argmax, as greedy
        else:
            u, v = rng.random(len(guesses)), rng.random()
        kept, token = accept(p, q, guesses, u, v)
        truncate(tcache, len(text) + kept)  # the text and the kept guesses; token is unread
        for t in guesses[:kept] + [token]:
            text.append(t)
            if t in stop_tokens or len(text) == end:
                return text
    return text
