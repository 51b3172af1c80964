"""A plain PyTorch eager decode loop with a preallocated KV cache: what a course writes.

The same two architectures as minillm (classic: learned positions, LayerNorm, GELU MLP;
modern: RoPE, RMSNorm, grouped-query attention, SwiGLU), reading minillm's parameters
through torch.from_numpy, so it is the same model with the same weights. Greedy only.

    cache k, v: (n_layers, B, n_kv_heads, capacity, head_dim), rows [0, length) filled
"""
from __future__ import annotations

import math

import numpy as np


def load(model):
    """{name: torch tensor} with the minillm model's values (row-major, as torch prefers)."""
    import numpy as np
    import torch

    params = {name: torch.from_numpy(np.ascontiguousarray(w)) for name, w in model.params.items()}
    cfg = model.config
    rope = None
    if cfg.arch == "modern":  # cos, sin of m * theta_j: (context, head_dim / 2)
        inv_freq = cfg.rope_theta ** (-torch.arange(0, cfg.head_dim, 2, dtype=torch.float64)
                                      / cfg.head_dim)
        angles = torch.outer(torch.arange(cfg.context_length, dtype=torch.float64), inv_freq)
        rope = angles.cos().float(), angles.sin().float()
    return cfg, params, rope


def new_cache(cfg, batch: int):
    import torch

    shape = (cfg.n_layers, batch, cfg.n_kv_heads, cfg.context_length, cfg.head_dim)
    return torch.zeros(shape), torch.zeros(shape)


def forward(net, tokens, cache, start: int):
    """Logits (B, T, V) of T new tokens at positions start.. start+T-1; writes their K, V."""
    import torch
    import torch.nn.functional as F

    cfg, p, rope = net
    B, T = tokens.shape
    positions = torch.arange(start, start + T)
    x = p["tok_emb.weight"][tokens]  # (B, T, D)
    if cfg.arch == "classic":
        x = x + p["pos_emb.weight"][positions]
    for i in range(cfg.n_layers):
        name = f"layers.{i}."
        h = _norm(cfg, p, x, name + "attn_norm")
        x = x + _attention(cfg, p, rope, h, name, i, positions, cache, start)
        h = _norm(cfg, p, x, name + "mlp_norm")
        if cfg.arch == "classic":
            u = F.linear(h, p[name + "mlp.up.weight"], p.get(name + "mlp.up.bias"))
            u = F.gelu(u, approximate="tanh" if cfg.activation == "gelu_tanh" else "none")
            x = x + F.linear(u, p[name + "mlp.down.weight"], p.get(name + "mlp.down.bias"))
        else:
            gate, up = F.linear(h, p[name + "mlp.gate_up.weight"]).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, p[name + "mlp.down.weight"])
    x = _norm(cfg, p, x, "final_norm")
    head = p["tok_emb.weight"] if cfg.tie_embeddings else p["lm_head.weight"]
    return x @ head.T


def _norm(cfg, p, x, name):
    import torch
    import torch.nn.functional as F

    if cfg.arch == "classic":
        return F.layer_norm(x, (cfg.d_model,), p[name + ".weight"], p.get(name + ".bias"),
                            cfg.norm_eps)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + cfg.norm_eps) * p[name + ".weight"]


def _rotate(x, cos, sin):
    """RoPE, half-split: [x1 cos - x2 sin, x2 cos + x1 sin]; x (B, heads, T, d)."""
    import torch

    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def _attention(cfg, p, rope, h, name, layer, positions, cache, start):
    import torch
    import torch.nn.functional as F

    B, T, _ = h.shape
    H, K, d = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    qkv = F.linear(h, p[name + "attn.qkv.weight"], p.get(name + "attn.qkv.bias"))
    q, k, v = qkv.view(B, T, H + 2 * K, d).transpose(1, 2).split([H, K, K], dim=1)
    if rope is not None:
        cos, sin = rope[0][positions], rope[1][positions]  # (T, d/2)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
    end = start + T
    cache[0][layer, :, :, start:end] = k
    cache[1][layer, :, :, start:end] = v
    k, v = cache[0][layer, :, :, :end], cache[1][layer, :, :, :end]  # (B, K, end, d)
    if K != H:  # grouped-query attention: each key head serves H / K query heads
        k, v = k.repeat_interleave(H // K, dim=1), v.repeat_interleave(H // K, dim=1)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(d)  # (B, H, T, end)
    if T > 1:
        causal = torch.arange(end) <= positions[:, None]  # (T, end)
        scores = scores.masked_fill(~causal, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v  # (B, H, T, d)
    out = out.transpose(1, 2).reshape(B, T, H * d)
    return F.linear(out, p[name + "attn.out.weight"], p.get(name + "attn.out.bias"))


def generate(net, prompts: np.ndarray, new_tokens: int) -> np.ndarray:
    """Greedy: (B, T) prompts of equal length -> (B, new_tokens) new ids. No window slide."""
    return np.stack(list(stream(net, prompts, new_tokens)), axis=1)


def stream(net, prompts: np.ndarray, new_tokens: int):
    """Greedy, one step at a time: yields each step's (B,) new ids, the first after the
    prefill (so a caller can time the prefill and the decode steps apart)."""
    import torch

    cfg = net[0]
    if prompts.shape[1] + new_tokens - 1 > cfg.context_length:
        raise ValueError("new_tokens: the text would not fit the context (no window slide)")
    with torch.inference_mode():
        cache = new_cache(cfg, prompts.shape[0])
        tokens = torch.from_numpy(np.asarray(prompts))
        logits = forward(net, tokens, cache, 0)
        start = tokens.shape[1]
        for step in range(new_tokens):
            token = logits[:, -1].argmax(-1, keepdim=True)  # (B, 1)
            yield token[:, 0].numpy()
            if step < new_tokens - 1:
                logits = forward(net, token, cache, start)
                start += 1


def prefill(net, prompts: np.ndarray):
    """One forward pass over the prompts into a fresh cache (the prefill of a generation)."""
    import torch

    with torch.inference_mode():
        return forward(net, torch.from_numpy(prompts), new_cache(net[0], prompts.shape[0]), 0)
