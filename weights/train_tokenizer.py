"""Train the shipped byte-level BPE tokenizer (vocabulary 2048) with Hugging Face `tokenizers`.

The tokenizer is GPT-2's design: text is split into words by the GPT-2 regular expression,
each word's UTF-8 bytes are mapped to printable characters (ByteLevel), and BPE merges are
learned from the training text until the vocabulary holds 2048 entries: the 256 byte symbols,
the special token ``<|endoftext|>`` (id 0, placed between books) and 1791 merges.

Usage (after ``prepare_corpus.py``)::

    python weights/train_tokenizer.py --train /tmp/minillm-build/web_train.txt \\
        --out weights/tokenizer.json
"""

import argparse
import json
import os

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

VOCAB_SIZE = 2048
EOS = "<|endoftext|>"


def train_tokenizer(documents, vocab_size=VOCAB_SIZE):
    """A byte-level BPE tokenizer trained on a list of document strings."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(documents, trainer=trainer)
    return tokenizer


def main():
    here = os.path.dirname(__file__)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", default="/tmp/minillm-build/web_train.txt")
    parser.add_argument("--out", default=os.path.join(here, "tokenizer.json"))
    args = parser.parse_args()

    with open(args.train, encoding="utf-8") as f:
        documents = json.load(f)
    tokenizer = train_tokenizer(documents)
    tokenizer.save(args.out)
    n_bytes = sum(len(d.encode("utf-8")) for d in documents)
    n_tokens = sum(len(e.ids) for e in tokenizer.encode_batch(documents))
    print(f"vocabulary {tokenizer.get_vocab_size()}, {n_tokens:,} training tokens, "
          f"{n_bytes / n_tokens:.2f} bytes per token")


if __name__ == "__main__":
    main()
