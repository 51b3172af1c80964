"""Hugging Face transformers as a contender: GPT2LMHeadModel / LlamaForCausalLM built from a
config, loaded with the minillm model's weights (so all contenders run the same model)."""
from __future__ import annotations

import numpy as np


def load(model):
    """A transformers model in eval mode holding `model`'s float32 weights."""
    import torch
    import transformers

    from minillm.files import config_to_hf, to_hf_state_dict

    fields = config_to_hf(model.config)
    fields.pop("architectures")
    config = transformers.AutoConfig.for_model(fields.pop("model_type"), **fields)
    net = transformers.AutoModelForCausalLM.from_config(config).eval()
    state = {name: torch.from_numpy(w) for name, w in to_hf_state_dict(model).items()}
    missing, unexpected = net.load_state_dict(state, strict=False)
    left = [n for n in missing if n != "lm_head.weight" and not n.endswith(".attn.bias")]
    if left or unexpected:
        raise RuntimeError(f"transformers weights do not match: missing {left}, "
                           f"unexpected {unexpected}")
    net.tie_weights()
    return net


def generate(net, prompts: np.ndarray, new_tokens: int) -> np.ndarray:
    """Greedy, use_cache=True, exactly new_tokens tokens: (B, T) -> (B, new_tokens)."""
    import torch

    ids = torch.from_numpy(prompts)
    with torch.inference_mode():
        out = net.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                           max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                           use_cache=True, pad_token_id=0)
    return out[:, prompts.shape[1]:].numpy()


def prefill(net, prompts: np.ndarray):
    import torch

    with torch.inference_mode():
        return net(torch.from_numpy(prompts), use_cache=True).logits
