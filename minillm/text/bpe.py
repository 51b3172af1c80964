"""Byte-level BPE, as in GPT-2: one word's bytes merged pair by pair into vocabulary tokens.

A word's UTF-8 bytes are written with 256 printable characters, one per byte (GPT-2's
``bytes_to_unicode``), so every string can be encoded and no ``<unk>`` exists. Starting from
single byte-characters, the adjacent pair with the lowest merge rank is joined, again and
again, until no pair is in the merge list; the symbols left are looked up in the vocabulary.
A byte missing from the vocabulary is left out, as in the Rust library and llama.cpp.

With ``ignore_merges`` (Llama 3's rules in llama.cpp, a flag of tokenizer.json) a word that is
itself in the vocabulary is that one token, whatever the merges would have made of it.
"""
from itertools import repeat


def bytes_to_unicode():
    """GPT-2's table from each byte value to a printable character.

    Printable Latin-1 bytes stand for themselves; the other 68 bytes (controls, space,
    0x7F-0xA0, 0xAD) are given the characters U+0100, U+0101, ... in order, so the space
    byte 0x20 is written 'Ġ' (U+0120) and the newline 0x0A 'Ċ' (U+010A).
    """
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1))
                 + list(range(0xAE, 0xFF + 1)))
    table, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            table[byte] = chr(byte)
        else:
            table[byte] = chr(256 + extra)
            extra += 1
    return table


BYTE_TO_CHAR = bytes_to_unicode()
CHAR_TO_BYTE = {char: byte for byte, char in BYTE_TO_CHAR.items()}


def byte_spelled(token):
    """A vocabulary entry in the byte alphabet. Byte-level vocabularies are written in it; a
    token that is not (a few converters store plain text) is respelled from its UTF-8 bytes."""
    if all(ch in CHAR_TO_BYTE for ch in token):
        return token
    return "".join(BYTE_TO_CHAR[b] for b in token.encode("utf-8"))


def merge_ranks(merges):
    """{(left, right): rank} from merges written as "a b" strings or ["a", "b"] lists."""
    ranks = {}
    for rank, merge in enumerate(merges):
        left, right = merge.split(" ", 1) if isinstance(merge, str) else merge
        ranks[(left, right)] = rank
    return ranks


def merge_word(symbols, ranks):
    """The symbols left after joining the lowest-ranked adjacent pair until none is ranked."""
    never = len(ranks)
    while len(symbols) > 1:
        pair_ranks = list(map(ranks.get, zip(symbols, symbols[1:]), repeat(never)))
        best = min(pair_ranks)
        if best == never:
            break
        i = pair_ranks.index(best)
        symbols = _merge_pair(symbols, (symbols[i], symbols[i + 1]))
    return symbols


def _merge_pair(symbols, pair):
    """Replace every non-overlapping occurrence of ``pair``, left to right, by its join."""
    left, right = pair
    merged, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and symbols[i] == left and symbols[i + 1] == right:
            merged.append(left + right)
            i += 2
        else:
            merged.append(symbols[i])
            i += 1
    return merged


def byte_level_bpe(word, vocab, ranks, ignore_merges=False):
    """Ids of one word: its byte-characters, merged pair by pair in rank order."""
    symbols = [BYTE_TO_CHAR[b] for b in word.encode("utf-8")]
    if ignore_merges and "".join(symbols) in vocab:
        return [vocab["".join(symbols)]]
    symbols = merge_word([s for s in symbols if s in vocab], ranks)
    try:
        return [vocab[s] for s in symbols]
    except KeyError as error:
        raise ValueError(f"symbol {error.args[0]!r} is not in the vocabulary") from None
