"""The decoder-only transformer: classic (GPT-2 style) and modern (Llama style) blocks.

    x_0   = embed(tokens) (+ learned positions, classic)
    x_l+1 = x_l + Attention(Norm(x_l));  x_l+1 += MLP(Norm(x_l+1))      for each layer
    logits = Norm(x_L) @ W_out.T
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .config import ModelConfig, parameter_shapes
from .kv_cache import KVCache
from .layers import ACTIVATIONS, apply_rope, attention, layer_norm, linear, rms_norm, rope_tables


@dataclass(eq=False)
class Model:
    """A configuration, its parameters by canonical name (docs/FORMAT.md) and a tokenizer.

    A linear layer's weight is a float array (out, in) or any object whose `matmul(x)` returns
    x @ W.T (an int8 QuantizedWeight): `layers.linear` multiplies by either.
    """

    config: ModelConfig
    params: dict
    tokenizer: object = None
    _rope: tuple = field(init=False, repr=False)

    def __post_init__(self):
        cfg = self.config
        self._rope = None
        if cfg.arch == "modern":
            cos, sin = rope_tables(cfg.context_length, cfg.head_dim, cfg.rope_theta, self.dtype)
            self._rope = (cos[:, None], sin[:, None])  # (C, 1, d): broadcast over heads

    @property
    def dtype(self) -> np.dtype:
        return self.params["final_norm.weight"].dtype  # the embedding may be int8

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

    @property
    def output_weight(self):
        """The output layer (V, D): the token embedding itself when tied."""
        return self.params.get("lm_head.weight", self.params["tok_emb.weight"])

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
                             self.dtype)

    def forward(self, tokens, cache: KVCache | None = None, pad=None,
                last: int | None = None) -> np.ndarray:
        """Logits for every position: (B, T) token ids -> (B, T, vocab_size).

        Without a cache the tokens are the whole text. With one, they continue the text the
        cache holds: their keys and values are written at rows [length, length + T), they
        attend to everything cached, and `cache.length` grows by T.
        pad: (B,) count of left-padding tokens per row (ragged batches); with a cache it is
        given once, at prefill, and remembered.
        last: return only the logits of the last `last` positions, (B, last, V); a prefill
        needs one row, and skipping the others saves most of the output layer's work.
        """
        cfg = self.config
        tokens = self._check_tokens(tokens)
        B, T = tokens.shape
        start = 0 if cache is None else cache.length
        if cache is None:
            if T > cfg.context_length:
                raise ValueError(f"tokens: {T} tokens exceed the context length "
                                 f"{cfg.context_length}")
        else:
            self._check_cache(cache, B, T)
            if pad is not None and start:
                raise ValueError("pad: padding can only be given at prefill (empty cache)")
            if pad is None:
                pad = cache.pad
            else:
                cache.pad = pad = self._check_pad(pad, B, T)
        if pad is not None and cache is None:
            pad = self._check_pad(pad, B, T)
        positions, mask = _positions_and_mask(B, T, start, pad)

        x = self._embed(tokens, positions)  # (B, T, D)
        for layer in range(cfg.n_layers):
            x = self._block(x, layer, positions, mask, cache)
        if cache is not None:
            cache.advance(T)
        if last is not None:
            x = x[:, -last:]  # the output layer only where logits are wanted
        return linear(self._norm(x, "final_norm"), self.output_weight)  # (B, T, V)

    # -- the pieces of forward -------------------------------------------------------------

    def _embed(self, tokens, positions):
        x = self.params["tok_emb.weight"][tokens].astype(self.dtype, copy=False)  # (B, T, D)
        if self.config.arch == "classic":
            x += self.params["pos_emb.weight"][positions]
        return x

    def _block(self, x, layer, positions, mask, cache):
        """One pre-norm block: x += Attention(Norm(x)); x += MLP(Norm(x))."""
        name = f"layers.{layer}."
        x += self._attention(self._norm(x, name + "attn_norm"), name, layer, positions, mask,
                             cache)
        x += self._mlp(self._norm(x, name + "mlp_norm"), name)
        return x

    def _attention(self, h, name, layer, positions, mask, cache):
        cfg, w = self.config, self.params
        B, T, _ = h.shape
        H, K, d = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        qkv = linear(h, w[name + "attn.qkv.weight"], w.get(name + "attn.qkv.bias"))
        qkv = qkv.reshape(B, T, H + 2 * K, d)
        if cfg.arch == "modern":
            # Rotate queries and keys together: one call for the H + K heads.
            cos, sin = self._rope[0][positions], self._rope[1][positions]  # (.., T, 1, d)
            qk = apply_rope(qkv[:, :, :H + K], cos, sin)
        else:
            qk = qkv[:, :, :H + K]
        q = qk[:, :, :H].transpose(0, 2, 1, 3)  # (B, H, T, d)
        k = qk[:, :, H:].transpose(0, 2, 1, 3)  # (B, K, T, d)
        v = qkv[:, :, H + K:].transpose(0, 2, 1, 3)  # (B, K, T, d)
        if cache is not None:
            k, v = cache.append(layer, k, v)  # (B, K, S, d): the cached tokens and these
        out = self.attend(q, k, v, mask)  # (B, H, T, d)
        out = out.transpose(0, 2, 1, 3).reshape(B, T, H * d)
        return linear(out, w[name + "attn.out.weight"], w.get(name + "attn.out.bias"))

    def attend(self, q, k, v, mask):
        """Attention(Q, K, V) = softmax(Q K^T / sqrt(d) + M) V: `layers.attention`. A subclass
        may compute the same another way."""
        return attention(q, k, v, mask)

    def _mlp(self, h, name):
        cfg, w = self.config, self.params
        act = ACTIVATIONS[cfg.activation]
        if cfg.arch == "classic":
            # MLP(h) = W_down act(W_up h + b_up) + b_down
            u = linear(h, w[name + "mlp.up.weight"], w.get(name + "mlp.up.bias"))
            return linear(act(u), w[name + "mlp.down.weight"], w.get(name + "mlp.down.bias"))
        # SwiGLU(h) = W_down (silu(W_gate h) * (W_up h)), gate and up fused in one matmul
        gate_up = linear(h, w[name + "mlp.gate_up.weight"])  # (B, T, 2F)
        gate, up = gate_up[..., :cfg.d_ff], gate_up[..., cfg.d_ff:]
        return linear(act(gate) * up, w[name + "mlp.down.weight"])

    def _norm(self, x, name):
        p, eps = self.params, self.config.norm_eps
        if self.config.arch == "classic":
            return layer_norm(x, p[name + ".weight"], p.get(name + ".bias"), eps)
        return rms_norm(x, p[name + ".weight"], eps)

    # -- input checks ----------------------------------------------------------------------

    def _check_tokens(self, tokens) -> np.ndarray:
        tokens = np.asarray(tokens)
        if tokens.ndim != 2:
            raise ValueError(f"tokens: expected a (batch, length) array, got shape {tokens.shape}")
        if tokens.shape[1] == 0:
            raise ValueError("tokens: empty sequence")
        if not np.issubdtype(tokens.dtype, np.integer):
            raise ValueError(f"tokens: expected integer ids, got dtype {tokens.dtype}")
        if tokens.min() < 0 or tokens.max() >= self.config.vocab_size:
            raise ValueError(f"tokens: ids must be in [0, {self.config.vocab_size}), got "
                             f"min {tokens.min()} and max {tokens.max()}")
        return tokens

    def _check_cache(self, cache: KVCache, B: int, T: int) -> None:
        cfg = self.config
        expected = (cfg.n_layers, B, cfg.n_kv_heads, cache.capacity, cfg.head_dim)
        if cache.shape != expected or cache.dtype != self.dtype:
            raise ValueError(f"cache: its arrays {cache.shape} / {cache.dtype} do not fit this "
                             f"model and batch (expected {expected} / {self.dtype})")
        if cache.length + T > cache.capacity:
            raise ValueError(f"cache: {T} new tokens do not fit ({cache.length} of "
                             f"{cache.capacity} positions used); reset or slide the window")

    @staticmethod
    def _check_pad(pad, B, T) -> np.ndarray:
        pad = np.asarray(pad, dtype=np.int64)
        if pad.shape != (B,) or pad.min() < 0 or pad.max() >= T:
            raise ValueError(f"pad: expected {B} counts in [0, {T}), got {pad.tolist()}")
        return None if not pad.any() else pad


def _positions_and_mask(B, T, start, pad):
    """Positions of the new tokens and which keys each of them may see.

    Token t of the new chunk sits at index start + t of its row; its position is that index
    minus the row's padding. It sees key j when j <= start + t (causality) and j is not a
    padding token. A padding query sees itself, so that no softmax row is empty.
    Returns positions (a slice of T, or (B, T) indices) and a mask broadcastable to
    (B, 1, 1, T, S), or None when every key is visible.
    """
    if pad is None and T == 1:  # decoding one token: it sees every key
        return slice(start, start + 1), None
    index = np.arange(start, start + T)  # (T,)
    keys = np.arange(start + T)  # (S,)
    causal = keys <= index[:, None]  # (T, S)
    if pad is None:  # positions are the indices: a slice, so lookups are views, not copies
        return slice(start, start + T), causal
    positions = np.maximum(index - pad[:, None], 0)  # (B, T)
    visible = causal & ((keys >= pad[:, None, None]) | (keys == index[:, None]))  # (B, T, S)
    return positions, visible[:, None, None]


def random_model(config: ModelConfig, seed: int = 0, dtype="float32",
                 std: float = 0.02) -> Model:
    """A model with seeded random weights: N(0, std^2) matrices, norm gains near 1, small biases.

    Residual output projections are scaled by 1/sqrt(2 n_layers) as in GPT-2. Norm gains and
    biases are randomised too (not 1 and 0) so that tests exercise every parameter.
    The reference model: minillm.fast.accelerate(model) gives the fast one.
    """
    rng = np.random.default_rng(seed)
    params = {}
    for name, shape in parameter_shapes(config).items():
        if name.endswith("norm.weight"):
            w = 1.0 + 0.1 * rng.standard_normal(shape)
        elif name.endswith("norm.bias"):
            w = 0.1 * rng.standard_normal(shape)
        elif name.endswith(".bias"):
            w = std * rng.standard_normal(shape)
        elif name.endswith(("out.weight", "down.weight")):
            w = std / np.sqrt(2 * config.n_layers) * rng.standard_normal(shape)
        else:
            w = std * rng.standard_normal(shape)
        params[name] = w.astype(dtype)
    return Model(config, params)
