"""Model configuration: the architecture and its sizes, with validation and a JSON round trip."""
from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass

ARCHS = ("classic", "modern")
# The longest context a config may declare: 2^20 positions, beyond any model minillm reads
# (docs/FORMAT.md); a larger number is a damaged or hostile file, not a model.
MAX_CONTEXT_LENGTH = 2**20
ACTIVATIONS = {"classic": ("gelu", "gelu_tanh"), "modern": ("silu", "gelu", "gelu_tanh")}


@dataclass
class ModelConfig:
    """Sizes and choices of a decoder-only transformer.

    arch="classic" is GPT-2 style: learned positions, LayerNorm, GELU MLP, biases, untied head.
    arch="modern" is Llama style: RoPE, RMSNorm, grouped-query attention, gated MLP (SwiGLU),
    tied head, no biases. Fields left as None take the architecture's default:

        n_kv_heads      n_heads (plain multi-head attention)
        d_ff            4 * d_model (classic); about 8/3 * d_model rounded up to 32 (modern)
        tie_embeddings  False (classic), True (modern)
        bias            True (classic: every linear and norm), False (modern: q/k/v only)
        activation      "gelu" (classic, exact erf), "silu" (modern, the gate of SwiGLU)
    """

    arch: str
    vocab_size: int
    context_length: int
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int | None = None
    d_ff: int | None = None
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    tie_embeddings: bool | None = None
    bias: bool | None = None
    activation: str | None = None

    def __post_init__(self):
        if self.arch not in ARCHS:
            raise ValueError(f"arch: unknown architecture {self.arch!r}; expected one of {ARCHS}")
        classic = self.arch == "classic"
        if self.n_kv_heads is None:
            self.n_kv_heads = self.n_heads
        if self.d_ff is None and isinstance(self.d_model, int):
            self.d_ff = 4 * self.d_model if classic else -(-8 * self.d_model // 3 // 32) * 32
        if self.tie_embeddings is None:
            self.tie_embeddings = not classic
        if self.bias is None:
            self.bias = classic
        if self.activation is None:
            self.activation = "gelu" if classic else "silu"
        self.validate()

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def validate(self) -> None:
        """Raise ValueError naming the first field that is out of range."""
        for name in ("vocab_size", "context_length", "d_model", "n_layers", "n_heads",
                     "n_kv_heads", "d_ff"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name}: must be a positive integer, got {value!r}")
        for name in ("norm_eps", "rope_theta"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"{name}: must be a positive number, got {value!r}")
            if not value <= sys.float_info.max:  # inf, or an int no float can hold
                raise ValueError(f"{name}: must be a finite float, got {value!r}")
        if self.context_length > MAX_CONTEXT_LENGTH:
            raise ValueError(f"context_length: at most {MAX_CONTEXT_LENGTH} (2^20), got "
                             f"{self.context_length}")
        for name in ("tie_embeddings", "bias"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}: must be true or false, got {getattr(self, name)!r}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model: {self.d_model} is not divisible by n_heads={self.n_heads}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_kv_heads: n_heads={self.n_heads} is not divisible by "
                             f"n_kv_heads={self.n_kv_heads}")
        if self.arch == "classic" and self.n_kv_heads != self.n_heads:
            raise ValueError("n_kv_heads: the classic architecture has no grouped-query "
                             f"attention, so it must equal n_heads={self.n_heads}")
        if self.arch == "modern" and self.head_dim % 2:
            raise ValueError(f"d_model: rotary embeddings need an even head size, got "
                             f"d_model / n_heads = {self.head_dim}")
        if self.activation not in ACTIVATIONS[self.arch]:
            raise ValueError(f"activation: {self.activation!r} is not available for the "
                             f"{self.arch} architecture; expected one of {ACTIVATIONS[self.arch]}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict) -> "ModelConfig":
        if not isinstance(data, dict):
            raise ValueError(f"config: expected a JSON object, got {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"config: unknown field(s) {', '.join(unknown)}")
        missing = sorted(f.name for f in dataclasses.fields(cls)
                         if f.default is dataclasses.MISSING and f.name not in data)
        if missing:
            raise ValueError(f"config: missing field(s) {', '.join(missing)}")
        return cls(**data)

    @classmethod
    def from_json(cls, text: str) -> "ModelConfig":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"config: not valid JSON ({e})") from None
        return cls.from_dict(data)

    def n_params(self) -> int:
        """Number of parameters (the tied output layer counted once)."""
        D, F, V, L = self.d_model, self.d_ff, self.vocab_size, self.n_layers
        qkv = (self.n_heads + 2 * self.n_kv_heads) * self.head_dim
        if self.arch == "classic":
            b = int(self.bias)
            block = 2 * D * (1 + b) + qkv * D + qkv * b + D * D + D * b + 2 * D * F + F * b + D * b
            total = V * D + self.context_length * D + L * block + D * (1 + b)
        else:
            block = 2 * D + qkv * D + qkv * int(self.bias) + D * D + 3 * D * F
            total = V * D + L * block + D
        return total + (0 if self.tie_embeddings else V * D)


def parameter_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor a model of this config has, by canonical name, with its shape."""
    D, F, V, d = cfg.d_model, cfg.d_ff, cfg.vocab_size, cfg.head_dim
    qkv_rows = (cfg.n_heads + 2 * cfg.n_kv_heads) * d
    classic = cfg.arch == "classic"
    norm_bias = classic and cfg.bias  # LayerNorm shifts; RMSNorm has none
    linear_bias = classic and cfg.bias  # every linear layer of the classic model
    shapes = {"tok_emb.weight": (V, D)}
    if classic:
        shapes["pos_emb.weight"] = (cfg.context_length, D)

    def norm(name):
        shapes[name + ".weight"] = (D,)
        if norm_bias:
            shapes[name + ".bias"] = (D,)

    def dense(name, out_features, in_features, bias):
        shapes[name + ".weight"] = (out_features, in_features)
        if bias:
            shapes[name + ".bias"] = (out_features,)

    for i in range(cfg.n_layers):
        p = f"layers.{i}."
        norm(p + "attn_norm")
        dense(p + "attn.qkv", qkv_rows, D, cfg.bias)
        dense(p + "attn.out", D, cfg.n_heads * d, linear_bias)
        norm(p + "mlp_norm")
        if classic:
            dense(p + "mlp.up", F, D, linear_bias)
        else:
            dense(p + "mlp.gate_up", 2 * F, D, False)
        dense(p + "mlp.down", D, F, linear_bias)
    norm("final_norm")
    if not cfg.tie_embeddings:
        shapes["lm_head.weight"] = (V, D)
    return shapes
