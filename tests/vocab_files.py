"""Vocabulary-only GGUF files for the tokenizer peer tests, made from vocabularies at hand.

    metadata = bpe_metadata(tokenizer_json_text, pre="llama-bpe")   # byte-level BPE
    metadata = spm_metadata("tokenizer.model")                      # SentencePiece (needs it)
    write_vocab_gguf(path, metadata)                                # llama.cpp can load it
    path = package_file("mistral_common", "data", "tokenizer.model.v1")  # or a skip

The metadata is {key: value} as ``Tokenizer.from_gguf`` reads it; the file also gets the few
`llama.*` hyperparameters llama.cpp reads before the vocabulary (``vocab_only`` loads no tensor).
"""
import importlib.util
import json
import pathlib

import pytest
from gguf_files import ARRAY, BOOL, FLOAT32, INT32, STRING, UINT32, gguf_bytes

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


def package_file(package, *parts):
    """A data file of an installed package (the package is not imported); a skip when the
    package is not installed."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(f"the {package} package is not installed (pip install it: .ci/peers.sh)")
    path = pathlib.Path(list(spec.submodule_search_locations)[0], *parts)
    if not path.is_file():  # installed, but not the version .ci/constraints.txt pins
        pytest.fail(f"{package} is installed but {path} is missing: install the version "
                    ".ci/constraints.txt pins")
    return path


def bpe_metadata(tokenizer_json, pre=None, **extra):
    """GGUF tokenizer metadata of a byte-level tokenizer.json, as llama.cpp's converter writes
    it: tokens by id, added special tokens as control, other added tokens as user-defined."""
    data = json.loads(tokenizer_json)
    vocab = dict(data["model"]["vocab"])
    types = {}
    for token in data.get("added_tokens") or []:
        vocab[token["content"]] = token["id"]
        types[token["id"]] = CONTROL if token.get("special") else USER_DEFINED
    tokens = [None] * (max(vocab.values()) + 1)
    for token, token_id in vocab.items():
        tokens[token_id] = token
    tokens = [f"[PAD{i}]" if t is None else t for i, t in enumerate(tokens)]
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    metadata = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": tokens,
                "tokenizer.ggml.token_type": [types.get(i, NORMAL) for i in range(len(tokens))],
                "tokenizer.ggml.merges": merges}
    if pre is not None:
        metadata["tokenizer.ggml.pre"] = pre
    metadata.update({f"tokenizer.ggml.{k}": v for k, v in extra.items()})
    return metadata


def spm_metadata(model_path, **extra):
    """GGUF tokenizer metadata of a SentencePiece ``.model`` file, as llama.cpp's converter
    writes it (pieces, scores, types, special ids, add_space_prefix)."""
    import sentencepiece
    from sentencepiece import sentencepiece_model_pb2

    sp = sentencepiece.SentencePieceProcessor(model_file=str(model_path))
    proto = sentencepiece_model_pb2.ModelProto()
    with open(model_path, "rb") as f:
        proto.ParseFromString(f.read())
    types = [piece.type for piece in proto.pieces]  # numbered as llama.cpp's token types
    metadata = {"tokenizer.ggml.model": "llama",
                "tokenizer.ggml.tokens": [sp.id_to_piece(i) for i in range(sp.get_piece_size())],
                "tokenizer.ggml.scores": [sp.get_score(i) for i in range(sp.get_piece_size())],
                "tokenizer.ggml.token_type": types,
                "tokenizer.ggml.bos_token_id": sp.bos_id(),
                "tokenizer.ggml.eos_token_id": sp.eos_id(),
                "tokenizer.ggml.unknown_token_id": sp.unk_id(),
                "tokenizer.ggml.add_space_prefix": proto.normalizer_spec.add_dummy_prefix}
    metadata.update({f"tokenizer.ggml.{k}": v for k, v in extra.items()})
    return metadata


def _typed(key, value):
    """(key, GGUF type, value) for a metadata value as llama.cpp's converter types it."""
    if isinstance(value, bool):
        return key, BOOL, value
    if isinstance(value, int):
        return key, UINT32, value
    if isinstance(value, str):
        return key, STRING, value
    element = (INT32 if key.endswith("token_type") else FLOAT32 if key.endswith("scores")
               else STRING)
    return key, ARRAY, (element, list(value))


def write_vocab_gguf(path, metadata):
    """A GGUF file holding ``metadata`` and the hyperparameters llama.cpp needs to load it."""
    header = [("general.architecture", STRING, "llama"), ("llama.block_count", UINT32, 1),
              ("llama.context_length", UINT32, 64), ("llama.embedding_length", UINT32, 8),
              ("llama.feed_forward_length", UINT32, 8), ("llama.attention.head_count", UINT32, 1),
              ("llama.attention.layer_norm_rms_epsilon", FLOAT32, 1e-5)]
    body = [_typed(key, value) for key, value in metadata.items()]
    with open(path, "wb") as f:
        f.write(gguf_bytes(header + body))
    return path
