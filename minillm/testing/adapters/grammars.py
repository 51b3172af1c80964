"""A minillm tokenizer as the constrained-decoding peers read it: outlines-core's Vocabulary
and llguidance's LLTokenizer over the same token bytes (each token's bytes, specials left
out, the first end token as the end). The peer test (tests/peers/test_constrain_peers.py) and
the index study (bench/studies/constrain_index.py) build both here, so both compare the same
vocabulary. Each peer is imported only when asked for, with a line saying how to install it.
"""
from __future__ import annotations

from ...plumbing.optional import require


def outlines_vocabulary(tok):
    """outlines_core.Vocabulary: token bytes -> the ids that spell them, specials left out."""
    outlines_core = require("outlines_core", "peers", "outlines_vocabulary")
    special = set(tok.special_tokens.values())
    texts = {}
    for i in range(len(tok)):
        if i not in special:
            texts.setdefault(tok.token_bytes(i), []).append(i)
    return outlines_core.Vocabulary(tok.eos_token_ids[0], texts)


def llguidance_tokenizer(tok):
    """llguidance.LLTokenizer over the token bytes, every end token an end."""
    llguidance = require("llguidance", "peers", "llguidance_tokenizer")

    class Wrapped:  # what llguidance.TokenizerWrapper reads
        eos_token_id, bos_token_id = tok.eos_token_ids[0], None
        tokens = [tok.token_bytes(i) for i in range(len(tok))]
        special_token_ids = sorted(tok.special_tokens.values())

        def __call__(self, data):
            return tok.encode(data.decode("utf-8", "replace"))

    return llguidance.LLTokenizer(llguidance.TokenizerWrapper(Wrapped()),
                                  eos_token=list(tok.eos_token_ids))
