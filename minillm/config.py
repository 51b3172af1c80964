"""Model configuration: the architecture and its sizes, with validation and a JSON round trip."""
from __future__ import annotations

import dataclasses
import json
import math
import sys
from dataclasses import dataclass

from .parameters import parameter_shapes
from .rope_scaling import check_scaling

ARCHS = ("classic", "modern")
# The longest context a config may declare: 2^20 positions, beyond any model minillm reads
# (docs/FORMAT.md); a larger number is a damaged or hostile file, not a model.
MAX_CONTEXT_LENGTH = 2**20
# The fields of the options Gemma 3 adds to the modern architecture (and the head size), then
# those of the other families (rope_scaling.py; docs/FORMAT.md).
GEMMA_OPTIONS = ("head_dim", "embed_scale", "qk_norm", "post_norms", "query_pre_attn_scalar",
                 "sliding_window", "sliding_window_pattern", "rope_local_theta")
FAMILY_OPTIONS = ("rope_scaling", "no_rope_layers", "pre_norms", "qk_norm_all_heads",
                  "embedding_multiplier", "residual_multiplier", "attention_multiplier",
                  "logit_scale")
OPTIONS = GEMMA_OPTIONS + FAMILY_OPTIONS
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
        head_dim        d_model / n_heads

    Options of the modern architecture that Gemma 3 uses (off by default: the Llama path; the
    formulas are in model.py and docs/FORMAT.md):

        embed_scale            x_0 = sqrt(d_model) * embed(tokens)
        qk_norm                per-head RMSNorm of queries and keys, before RoPE
        post_norms             a norm on each sublayer's output too: x += Norm(F(Norm(x)))
        query_pre_attn_scalar  attention scores scaled by 1/sqrt(this) (None: 1/sqrt(head_dim))
        sliding_window         local layers see only the keys of the last `sliding_window`
                               positions (None: every layer is global)
        sliding_window_pattern layer i is global when (i + 1) is a multiple of it, else local
                               (Gemma 3: 6, five local layers then a global one)
        rope_local_theta       the RoPE base of local layers (None: rope_theta)

    And those of Llama 3, Qwen3, SmolLM3, OLMo 2 and Granite (Qwen3's q/k norms are qk_norm):

        rope_scaling           None, or {"type": "linear" | "llama3" | "yarn" | "freq_factors",
                               ...}: RoPE's frequencies changed (rope_scaling.py)
        no_rope_layers         the layers whose queries and keys are not rotated (SmolLM3)
        pre_norms              False: no norm before the sublayers (OLMo 2, with post_norms)
        qk_norm_all_heads      q and k RMS-normed over all their heads at once (OLMo 2)
        embedding_multiplier   x_0 = m * embed(tokens)                      (Granite)
        residual_multiplier    x += m * F(Norm(x))
        attention_multiplier   scores = m * q . k (instead of 1/sqrt(head_dim))
        logit_scale            logits = Norm(x_L) @ W_out.T / logit_scale
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
    head_dim: int | None = None
    embed_scale: bool = False
    qk_norm: bool = False
    post_norms: bool = False
    query_pre_attn_scalar: float | None = None
    sliding_window: int | None = None
    sliding_window_pattern: int = 1
    rope_local_theta: float | None = None
    rope_scaling: dict | None = None
    no_rope_layers: tuple = ()
    pre_norms: bool = True
    qk_norm_all_heads: bool = False
    embedding_multiplier: float = 1.0
    residual_multiplier: float = 1.0
    attention_multiplier: float | None = None
    logit_scale: float = 1.0

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
        if self.head_dim is None and isinstance(self.d_model, int) and isinstance(
                self.n_heads, int) and self.n_heads > 0:
            self.head_dim = self.d_model // self.n_heads
        if isinstance(self.no_rope_layers, list):  # as JSON gives it
            self.no_rope_layers = tuple(self.no_rope_layers)
        self.validate()

    def rope_base(self, layer: int) -> float | None:
        """The RoPE base of `layer` (None for the classic architecture, which has no RoPE)."""
        if self.arch == "classic" or layer in self.no_rope_layers:
            return None
        if self.is_local(layer) and self.rope_local_theta is not None:
            return self.rope_local_theta
        return self.rope_theta

    def is_local(self, layer: int) -> bool:
        """Whether `layer` attends to a sliding window of keys (else to every key)."""
        return (self.sliding_window is not None
                and (layer + 1) % self.sliding_window_pattern != 0)

    def validate(self) -> None:
        """Raise ValueError naming the first field that is out of range."""
        for name in ("vocab_size", "context_length", "d_model", "n_layers", "n_heads",
                     "n_kv_heads", "d_ff", "head_dim", "sliding_window_pattern"):
            _check_positive_int(name, getattr(self, name))
        if self.sliding_window is not None:
            _check_positive_int("sliding_window", self.sliding_window)
        for name in ("norm_eps", "rope_theta", "query_pre_attn_scalar", "rope_local_theta",
                     "embedding_multiplier", "residual_multiplier", "attention_multiplier",
                     "logit_scale"):
            value = getattr(self, name)
            if value is None and name in ("query_pre_attn_scalar", "rope_local_theta",
                                          "attention_multiplier"):
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"{name}: must be a positive number, got {value!r}")
            if not value <= sys.float_info.max:  # inf, or an int no float can hold
                raise ValueError(f"{name}: must be a finite float, got {value!r}")
        if self.context_length > MAX_CONTEXT_LENGTH:
            raise ValueError(f"context_length: at most {MAX_CONTEXT_LENGTH} (2^20), got "
                             f"{self.context_length}")
        for name in ("tie_embeddings", "bias", "embed_scale", "qk_norm", "post_norms",
                     "pre_norms", "qk_norm_all_heads"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}: must be true or false, got {getattr(self, name)!r}")
        if not (isinstance(self.no_rope_layers, tuple) and all(
                type(i) is int and 0 <= i < self.n_layers for i in self.no_rope_layers)):
            raise ValueError(f"no_rope_layers: expected layer indices below n_layers="
                             f"{self.n_layers}, got {self.no_rope_layers!r}")
        if self.rope_scaling is not None:
            check_scaling(self.rope_scaling, self.head_dim)
        options = [name for name in OPTIONS if name in self.to_dict()]
        if self.arch == "classic" and options:
            raise ValueError(f"{options[0]}: an option of the modern architecture only")
        if self.head_dim == self.d_model // self.n_heads and self.d_model % self.n_heads:
            raise ValueError(f"d_model: {self.d_model} is not divisible by n_heads={self.n_heads}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_kv_heads: n_heads={self.n_heads} is not divisible by "
                             f"n_kv_heads={self.n_kv_heads}")
        if self.arch == "classic" and self.n_kv_heads != self.n_heads:
            raise ValueError("n_kv_heads: the classic architecture has no grouped-query "
                             f"attention, so it must equal n_heads={self.n_heads}")
        if self.arch == "modern" and self.head_dim % 2:
            raise ValueError(f"head_dim: rotary embeddings need an even head size, got "
                             f"{self.head_dim}")
        if self.activation not in ACTIVATIONS[self.arch]:
            raise ValueError(f"activation: {self.activation!r} is not available for the "
                             f"{self.arch} architecture; expected one of {ACTIVATIONS[self.arch]}")

    def to_dict(self) -> dict:
        """Every field, but for Gemma's options at their defaults: a Llama config's JSON is
        the same as before those options existed."""
        data = dataclasses.asdict(self)
        defaults = {f.name: f.default for f in dataclasses.fields(self) if f.name in OPTIONS}
        defaults["head_dim"] = self.d_model // self.n_heads
        return {k: v for k, v in data.items() if k not in defaults or v != defaults[k]}

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
        """Number of parameters (the tied output layer counted once): parameter_shapes' sum."""
        return sum(math.prod(shape) for shape in parameter_shapes(self).values())


def _check_positive_int(name, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name}: must be a positive integer, got {value!r}")
