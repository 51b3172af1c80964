"""The model sizes and workload lengths of the full run, and their tiny --quick versions.

Every size ties its output layer to the token embedding, as GPT-2 and the Sprout models do
(this is what makes the student ~2.6M and GPT-2-small 124M parameters).
"""
from __future__ import annotations

from dataclasses import dataclass

from minillm import ModelConfig

FULL_SIZES = {
    "student": dict(arch="classic", vocab_size=4096, context_length=256, d_model=192,
                    n_layers=4, n_heads=4, tie_embeddings=True),
    "Sprout": dict(arch="modern", vocab_size=8192, context_length=512, d_model=384, n_layers=8,
                   n_heads=6, n_kv_heads=6, d_ff=1024),
    "GPT-2-small": dict(arch="classic", vocab_size=50257, context_length=1024, d_model=768,
                        n_layers=12, n_heads=12, tie_embeddings=True, activation="gelu_tanh"),
}
QUICK_SIZES = {
    "student": dict(arch="classic", vocab_size=256, context_length=64, d_model=32, n_layers=2,
                    n_heads=2, tie_embeddings=True),
    "Sprout": dict(arch="modern", vocab_size=256, context_length=64, d_model=32, n_layers=2,
                   n_heads=4, n_kv_heads=2, d_ff=64),
}


@dataclass
class Settings:
    """What one run measures: sizes, token counts, repeats."""

    quick: bool
    repeats: int
    sizes: dict  # name -> ModelConfig
    prompt: int = 16  # decode prompt length
    decode_tokens: int = 240
    slow_decode_tokens: dict = None  # fewer tokens for the slowest size, by size name
    cache_lengths: tuple = (60, 240, 480)
    batch: tuple = (8, 32, 160)  # prompts, prompt length, new tokens
    prefill: int = 256
    spec_tokens: int = 200
    text_bytes: int | None = None  # tokenizer input size (None: the whole file)
    bandwidth_mib: int = 256  # the roofline's matrix size
    warm: int = 4  # warm-up tokens
    real_prompt: int = 128  # the real model's prompt, tokens
    real_tokens: int = 128  # the real model's new tokens
    real_threads: tuple = (1, 2)  # thread counts of the real model's decode table
    real_layers: tuple = (4, 8, 15)  # the self-speculative drafters' layer counts


def settings(quick: bool, repeats: int | None, real: dict | None = None) -> Settings:
    """real: the real-model options given on the command line (None values: the defaults;
    --quick: 8 new tokens, 1 thread, one drafter)."""
    real = {k: v for k, v in (real or {}).items() if v is not None}
    if quick:
        return Settings(True, repeats or 1, _configs(QUICK_SIZES), prompt=4, decode_tokens=8,
                        cache_lengths=(8, 24, 72), batch=(2, 4, 6), prefill=16, spec_tokens=12,
                        text_bytes=4000, bandwidth_mib=16, warm=1,
                        **{"real_tokens": 8, "real_threads": (1,), "real_layers": (8,), **real})
    return Settings(False, repeats or 3, _configs(FULL_SIZES),
                    slow_decode_tokens={"GPT-2-small": 240}, **real)


def _configs(sizes: dict) -> dict:
    return {name: ModelConfig(**fields) for name, fields in sizes.items()}
