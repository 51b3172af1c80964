"""Configs from the `model_args` that nanoGPT and llama2.c keep in their training checkpoints.

nanoGPT saves {"model": state_dict, "model_args": {n_layer, n_head, n_embd, block_size, bias,
vocab_size, dropout}, ...}; llama2.c saves {"model": ..., "model_args": {dim, n_layers, n_heads,
n_kv_heads, vocab_size, hidden_dim, multiple_of, norm_eps, max_seq_len, dropout}}. Both tie the
output layer to the token embedding.
"""
from __future__ import annotations

import numpy as np

from ..config import ModelConfig


def config_from_model_args(args: dict, state_dict: dict) -> ModelConfig:
    """The ModelConfig of a nanoGPT or llama2.c checkpoint, from its model_args (and, for the
    MLP width that llama2.c derives from `multiple_of`, the shape of a weight)."""
    try:
        if "n_embd" in args:  # nanoGPT: GPT-2 blocks, exact GELU (nn.GELU), LayerNorm eps 1e-5
            return ModelConfig(
                arch="classic", vocab_size=args["vocab_size"], context_length=args["block_size"],
                d_model=args["n_embd"], n_layers=args["n_layer"], n_heads=args["n_head"],
                d_ff=4 * args["n_embd"], norm_eps=1e-5, tie_embeddings=True,
                bias=bool(args.get("bias", True)), activation="gelu")
        if "dim" in args:  # llama2.c: Llama blocks, RoPE theta 10000 on interleaved pairs
            w1 = next(v for k, v in state_dict.items() if k.endswith("feed_forward.w1.weight"))
            return ModelConfig(
                arch="modern", vocab_size=args["vocab_size"], context_length=args["max_seq_len"],
                d_model=args["dim"], n_layers=args["n_layers"], n_heads=args["n_heads"],
                n_kv_heads=args.get("n_kv_heads") or args["n_heads"], d_ff=np.shape(w1)[0],
                norm_eps=args.get("norm_eps", 1e-5), rope_theta=10000.0, tie_embeddings=True,
                bias=False, activation="silu")
    except (KeyError, StopIteration) as e:
        raise ValueError(f"model_args: incomplete ({e}); give the config with --config") from None
    raise ValueError("model_args: neither nanoGPT's nor llama2.c's; give the config with --config")
