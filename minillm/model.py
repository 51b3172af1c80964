"""The decoder-only transformer: classic (GPT-2 style) and modern (Llama style) blocks.

    x_0   = embed(tokens) (+ learned positions, classic)
    x_l+1 = x_l + Attention(Norm(x_l));  x_l+1 += MLP(Norm(x_l+1))      for each layer
    logits = Norm(x_L) @ W_out.T

The other families' pieces are options of the modern block (ModelConfig says which family uses
which), applied only where a model is configured with them, so the Llama path never meets them:

    embed_scale, embedding_multiplier m_e   x_0 = sqrt(d_model) * embed(tokens), x_0 = m_e * ...
    pre_norms=False, post_norms             x += Norm_post(F(x)), x += Norm_post(F(Norm(x)))
    residual_multiplier m_r                 x += m_r F(Norm(x))
    qk_norm                                 q_h = RMSNorm(q_h) * g_q, k_h likewise, before RoPE
    qk_norm_all_heads                       q = RMSNorm(q_1 .. q_H) * g_q over all H d values
    activation="gelu_tanh"                  MLP(h) = W_down (gelu_tanh(W_gate h) * W_up h)
    query_pre_attn_scalar s, attention_multiplier m_a    scores = q . k / sqrt(s), = m_a q . k
    sliding_window W                        a local layer: query i sees key j if i - j < W
    rope_scaling, no_rope_layers            RoPE's frequencies changed (rope_scaling.py); no RoPE
    logit_scale                             logits = Norm(x_L) @ W_out.T / logit_scale
(Gemma's RMSNorm multiplies by 1 + w; GGUF files and minillm store that sum as the gain.
Phi-3's fused q/k/v and gate/up projections are minillm's own layout: no option.)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .config import ModelConfig
from .parameters import random_params
from .inputs import check_pad, check_tokens
from .kv_cache import KVCache
from .layers import ACTIVATIONS, apply_rope, attention, layer_norm, linear, rms_norm, rope_tables


@dataclass(eq=False)
class Model:
    """A configuration, its parameters by canonical name (docs/FORMAT.md) and a tokenizer. A
    linear layer's weight is a float array (out, in) or any object whose `matmul(x)` returns
    x @ W.T (an int8 QuantizedWeight): `layers.linear` multiplies by either."""

    config: ModelConfig
    params: dict
    tokenizer: object = None
    dtype: np.dtype = field(init=False, repr=False)
    output_weight: object = field(init=False, repr=False)
    _rope_tables: dict = field(init=False, repr=False)
    _rope_length: int = field(init=False, repr=False)
    _rope_of_layer: list = field(init=False, repr=False)
    _is_local: list = field(init=False, repr=False)

    def __post_init__(self):
        cfg = self.config
        # The activations' dtype: the norms' (the embedding may be int8).
        self.dtype = self.params["final_norm.weight"].dtype
        # The output layer (V, D): the token embedding itself when tied.
        self.output_weight = self.params.get("lm_head.weight", self.params["tok_emb.weight"])
        # Per layer, read once: whether it is local (a sliding window) and the key of its RoPE
        # tables, (base, scaled) or None (no rotation); the tables (cos, sin), (L, 1, d) each
        # for positions < L = _rope_length, grow with the text.
        empty = np.empty((0, 1, cfg.head_dim), self.dtype)
        self._is_local = [cfg.is_local(layer) for layer in range(cfg.n_layers)]
        self._rope_of_layer = [
            None if cfg.rope_base(i) is None else
            (cfg.rope_base(i), cfg.rope_scaling is not None and not self._is_local[i])
            for i in range(cfg.n_layers)]
        self._rope_tables = {key: (empty, empty) for key in set(self._rope_of_layer) - {None}}
        self._rope_length = 0

    @property
    def vocab_size(self) -> int:
        return self.config.vocab_size

    @property
    def context_length(self) -> int:
        return self.config.context_length

    @property
    def nbytes(self) -> int:
        """Bytes of every parameter held (a quantized weight counts its integers and scales)."""
        return sum(w.nbytes for w in self.params.values())

    def new_cache(self, batch_size: int = 1, capacity: int | None = None) -> KVCache:
        """An empty cache for `batch_size` rows of up to `capacity` tokens (the context length);
        it allocates room as it fills."""
        cfg = self.config
        capacity = cfg.context_length if capacity is None else capacity
        if not 0 < capacity <= cfg.context_length:
            raise ValueError(f"capacity: must be in [1, {cfg.context_length}] (the context "
                             f"length), got {capacity}")
        if batch_size < 1:
            raise ValueError(f"batch_size: must be at least 1, got {batch_size}")
        return KVCache.empty(cfg.n_layers, batch_size, cfg.n_kv_heads, capacity, cfg.head_dim,
                             self.dtype, self.attend)

    def zeros(self, shape) -> np.ndarray:
        """An array of zeros in the activations' dtype: what a serving engine holds its keys
        and values in (the fast path makes it in the pages that suit it)."""
        return np.zeros(shape, self.dtype)

    def forward(self, tokens, cache: KVCache | None = None, pad=None,
                last: int | None = None) -> np.ndarray:
        """Logits for every position: (B, T) token ids -> (B, T, vocab_size).

        With a cache the tokens continue the text it holds (without one: a cache made for
        this pass); it says where they sit, which keys each sees and how attention reads them
        (kv_cache.py; the serving engine's batches answer the same), and grows by T.
        pad: (B,) left-padding tokens per row (ragged batches), given once, at prefill.
        last: only the logits of the last `last` positions, or of those listed (an index
        array): a prefill needs one row, and skipping the rest saves most of the output layer.
        """
        cfg, w = self.config, self.params
        tokens = check_tokens(tokens, cfg.vocab_size)
        B, T = tokens.shape
        if cache is None:
            if T > cfg.context_length:
                raise ValueError(f"tokens: {T} tokens exceed the context length "
                                 f"{cfg.context_length}")
            cache = self.new_cache(B, capacity=T)
        else:
            cache.check_fits((cfg.n_layers, B, cfg.n_kv_heads, cfg.head_dim), self.dtype)
        if pad is not None:  # the one place a cache learns its rows' padding (but a slide)
            if np.any(cache.length):
                raise ValueError("pad: padding can only be given at prefill (empty cache)")
            cache.pad = check_pad(pad, B, cache.capacity)  # may outlast this first chunk
        positions, mask = cache.positions_and_mask(T)
        end = int(np.max(cache.length)) + T  # the furthest any row reaches
        if end > self._rope_length:
            self._grow_rope(end)
        # The keys each layer reads, (index of the oldest, mask): all of them, or a local
        # layer's window.
        views = [(0, mask)] * cfg.n_layers
        if cfg.sliding_window is not None:
            window = cache.sliding_window(mask, T, cfg.sliding_window)
            views = [window if local else view for local, view in zip(self._is_local, views)]

        x = w["tok_emb.weight"][tokens].astype(self.dtype, copy=False)  # (B, T, D)
        if cfg.arch == "classic":
            x += w["pos_emb.weight"][positions]
        if cfg.embed_scale:
            x *= math.sqrt(cfg.d_model)
        if cfg.embedding_multiplier != 1.0:
            x *= cfg.embedding_multiplier
        r = cfg.residual_multiplier
        for layer in range(cfg.n_layers):  # x += Attention(Norm(x)); x += MLP(Norm(x))
            name = f"layers.{layer}."
            h = self._norm(x, name + "attn_norm") if cfg.pre_norms else x
            h = self._attention(h, name, layer, positions, views[layer], cache)
            h = self._norm(h, name + "attn_post_norm") if cfg.post_norms else h
            x += h if r == 1.0 else r * h
            h = self._norm(x, name + "mlp_norm") if cfg.pre_norms else x
            h = self._mlp(h, name)
            h = self._norm(h, name + "mlp_post_norm") if cfg.post_norms else h
            x += h if r == 1.0 else r * h
        cache.advance(T)
        if last is not None:  # the output layer only where logits are wanted
            x = x[:, -last:] if np.ndim(last) == 0 else x[:, last]
        logits = linear(self._norm(x, "final_norm"), self.output_weight)  # (B, T, V)
        return logits if cfg.logit_scale == 1.0 else logits / cfg.logit_scale

    # -- the pieces of forward -------------------------------------------------------------

    def _grow_rope(self, end: int) -> None:
        """Extend the RoPE tables to positions < end, doubling up to the context length; never
        shorten one (a copy of the model may share them)."""
        cfg, length = self.config, self.config.context_length
        for (theta, scaled), (cos, _) in list(self._rope_tables.items()):
            if len(cos) < end:
                cos, sin = rope_tables(min(max(end, 2 * len(cos)), cfg.context_length),
                                       cfg.head_dim, theta, self.dtype,
                                       cfg.rope_scaling if scaled else None)
                self._rope_tables[theta, scaled] = (cos[:, None], sin[:, None])
            length = min(length, len(cos))
        self._rope_length = length

    def _attention(self, h, name, layer, positions, view, cache):
        cfg, w = self.config, self.params
        B, T, _ = h.shape
        H, K, d = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        qkv = linear(h, w[name + "attn.qkv.weight"], w.get(name + "attn.qkv.bias"))
        qkv = qkv.reshape(B, T, H + 2 * K, d)
        qk = qkv[:, :, :H + K]
        if cfg.qk_norm:
            qk = self._qk_norm(qk, name)
        if self._rope_of_layer[layer] is not None:  # (not the classic model, nor NoPE layers)
            # Rotate queries and keys together: one call for the H + K heads.
            cos, sin = self._rope_tables[self._rope_of_layer[layer]]
            qk = apply_rope(qk, cos[positions], sin[positions])  # tables (.., T, 1, d)
        q = qk[:, :, :H].transpose(0, 2, 1, 3)  # (B, H, T, d)
        k = qk[:, :, H:].transpose(0, 2, 1, 3)  # (B, K, T, d)
        v = qkv[:, :, H + K:].transpose(0, 2, 1, 3)  # (B, K, T, d)
        k, v = cache.append(layer, k, v)  # (B, K, S, d): the cached tokens and these
        oldest, mask = view  # a local layer reads only the keys of its window
        scale = cfg.attention_multiplier if cfg.query_pre_attn_scalar is None else \
            cfg.query_pre_attn_scalar ** -0.5
        out = cache.attend(q, k[:, :, oldest:], v[:, :, oldest:], mask, scale)  # (B, H, T, d)
        out = out.transpose(0, 2, 1, 3).reshape(B, T, H * d)
        return linear(out, w[name + "attn.out.weight"], w.get(name + "attn.out.bias"))

    def _qk_norm(self, qk, name):
        """Gemma, Qwen3: each query and key head RMS-normed over its d values; OLMo 2
        (qk_norm_all_heads): the queries over all their H d values, the keys over K d."""
        B, T, _, d = qk.shape
        H, K = self.config.n_heads, self.config.n_kv_heads
        if not self.config.qk_norm_all_heads:
            return np.concatenate([self._norm(qk[:, :, :H], name + "attn.q_norm"),
                                   self._norm(qk[:, :, H:], name + "attn.k_norm")], axis=2)
        q = self._norm(qk[:, :, :H].reshape(B, T, H * d), name + "attn.q_norm")
        k = self._norm(qk[:, :, H:].reshape(B, T, K * d), name + "attn.k_norm")
        return np.concatenate([q, k], axis=2).reshape(B, T, H + K, d)

    # Attention(Q, K, V) = softmax(s Q K^T + M) V, s = 1 / sqrt(d) unless given, which the
    # model's caches run: a subclass may compute the same another way (the fast path's tiled
    # attention).
    attend = staticmethod(attention)

    def _mlp(self, h, name):
        cfg, w = self.config, self.params
        act = ACTIVATIONS[cfg.activation]
        if cfg.arch == "classic":
            # MLP(h) = W_down act(W_up h + b_up) + b_down
            u = linear(h, w[name + "mlp.up.weight"], w.get(name + "mlp.up.bias"))
            return linear(act(u), w[name + "mlp.down.weight"], w.get(name + "mlp.down.bias"))
        # SwiGLU(h) = W_down (silu(W_gate h) * (W_up h)), gate and up fused in one matmul;
        # GeGLU (Gemma) with gelu_tanh for silu
        gate_up = linear(h, w[name + "mlp.gate_up.weight"])  # (B, T, 2F)
        gate, up = gate_up[..., :cfg.d_ff], gate_up[..., cfg.d_ff:]
        return linear(act(gate) * up, w[name + "mlp.down.weight"])

    def _norm(self, x, name):
        p, eps = self.params, self.config.norm_eps
        if self.config.arch == "classic":
            return layer_norm(x, p[name + ".weight"], p.get(name + ".bias"), eps)
        return rms_norm(x, p[name + ".weight"], eps)


def random_model(config: ModelConfig, seed: int = 0, dtype="float32",
                 std: float = 0.02) -> Model:
    """A model with seeded random weights (parameters.random_params). The reference model:
    minillm.fast.accelerate(model) gives the fast one."""
    return Model(config, random_params(config, seed, dtype, std))
