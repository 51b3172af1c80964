"""Text: token ids from text and back, and chat prompts.

    tokenizer.py         Tokenizer: encode, decode, streaming decode, special tokens
    tokenizer_config.py  TokenizerConfig: what a tokenizer file says (kind, specials, template)
    tokenizer_files.py   reading tokenizer.json and GGUF metadata into a TokenizerConfig
    pretokenize.py       llama.cpp's named pre-tokenizer rules (regexes that split words)
    bpe.py               byte-level BPE merges
    sentencepiece.py     SentencePiece merges with byte fallback
    chat_template.py     chat prompts: a model's Jinja template, or ChatML without Jinja
    template_limits.py   the bounds of a template's render: time, loop steps, size, depth
    template_sandbox.py  Jinja's sandbox, counting what a render spends against those bounds
    tool_schema.py       Python functions as the JSON schemas of tools, as transformers writes
"""
