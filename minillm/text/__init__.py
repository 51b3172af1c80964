"""Text: token ids from text and back, and chat prompts.

    tokenizer.py         Tokenizer: encode, decode, streaming decode, special tokens
    tokenizer_config.py  TokenizerConfig: what a tokenizer file says (kind, specials, template)
    tokenizer_files.py   reading tokenizer.json and GGUF metadata into a TokenizerConfig
    pretokenize.py       llama.cpp's named pre-tokenizer rules (regexes that split words)
    bpe.py               byte-level BPE merges
    sentencepiece.py     SentencePiece merges with byte fallback
    chat_template.py     chat prompts: a model's Jinja template, or ChatML without Jinja
"""
