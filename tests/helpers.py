"""Hypothesis strategies for tiny model configs and a byte tokenizer, shared by the test modules."""
from hypothesis import strategies as st

import minillm
from minillm.tokenizer import BYTE_TO_CHAR, Tokenizer


@st.composite
def tiny_configs(draw, arch=None, context_length=None):
    """Small configs of either architecture: GQA, odd sizes, tied and untied, with and without
    biases, every activation."""
    arch = arch or draw(st.sampled_from(["classic", "modern"]))
    n_kv_heads = draw(st.integers(1, 3))
    group = draw(st.integers(1, 3)) if arch == "modern" else 1
    n_heads = n_kv_heads * group
    head_dim = draw(st.sampled_from([2, 4, 6] if arch == "modern" else [1, 3, 4, 5]))
    activation = draw(st.sampled_from(
        ["gelu", "gelu_tanh"] if arch == "classic" else ["silu", "silu", "gelu"]))
    return minillm.ModelConfig(
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
    )


def byte_tokenizer():
    """256 byte tokens, one merge ('Ġ' + 't'), and an end-of-text token: 258 ids."""
    vocab = {char: byte for byte, char in BYTE_TO_CHAR.items()}
    vocab["Ġt"] = 256
    return Tokenizer(vocab, [("Ġ", "t")],
                     added_tokens=[{"id": 257, "content": "<|endoftext|>", "special": True}])
