"""A byte tokenizer shared by the test modules (model strategies: minillm.testing.strategies)."""
from minillm.text.tokenizer import BYTE_TO_CHAR, Tokenizer


def byte_tokenizer():
    """256 byte tokens, one merge ('Ġ' + 't'), and an end-of-text token: 258 ids."""
    vocab = {char: byte for byte, char in BYTE_TO_CHAR.items()}
    vocab["Ġt"] = 256
    return Tokenizer(vocab, [("Ġ", "t")],
                     added_tokens=[{"id": 257, "content": "<|endoftext|>", "special": True}])
