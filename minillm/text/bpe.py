"""Byte-level BPE, as in GPT-2: one word's bytes merged pair by pair into vocabulary tokens.

A word's UTF-8 bytes are written with 256 printable characters, one per byte (GPT-2's
``bytes_to_unicode``), so every string can be encoded and no ``<unk>`` exists. Starting from
single byte-characters, the adjacent pair with the lowest merge rank is joined, again and
again, until no pair is in the merge list; the symbols left are looked up in the vocabulary.
A byte missing from the vocabulary is left out, as in the Rust library and llama.cpp.

With ``ignore_merges`` (Llama 3's rules in llama.cpp, a flag of tokenizer.json) a word that is
itself in the vocabulary is that one token, whatever the merges would have made of it.

The merge list is kept as token ids (``MergeTable``): symbols are ids, a merge is a pair of
ids with a rank and the id of the joined token. As a dict of string pairs a merge took about
260 bytes (its two strings, the tuple, the rank, the dict's slot: 130 MiB for Gemma 3's
513,511 merges); as arrays of ids it takes 16, and 4 more for each id (9 MiB).
"""
from array import array
from bisect import bisect_left
from itertools import repeat
from operator import add, itemgetter

import numpy as np

from .sentencepiece import merge_by_priority


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


def merge_pairs(merges):
    """[left, right] of each merge, from merges written as "a b" strings or ["a", "b"] lists
    (the list itself when every merge is a list)."""
    merges = merges if isinstance(merges, list) else list(merges)
    if any(map(isinstance, merges, repeat(str))):
        merges = [merge.split(" ", 1) if isinstance(merge, str) else merge for merge in merges]
    if set(map(len, merges)) - {2}:
        bad = next(merge for merge in merges if len(merge) != 2)
        raise ValueError(f"merge {bad!r}: expected two tokens")
    return merges


def _array(typecode, values):
    """A NumPy array's items in an array.array (one copy)."""
    out = array(typecode)
    out.frombytes(memoryview(np.ascontiguousarray(values)).cast("B"))
    return out


def _sides(pairs):
    """The left sides, the right sides and the joins of [left, right] pairs (iterators)."""
    return (map(itemgetter(0), pairs), map(itemgetter(1), pairs),
            map(add, map(itemgetter(0), pairs), map(itemgetter(1), pairs)))


# MergeTable.find's number for a merge: rank * JOIN + the symbol it makes (symbols < 2**31).
JOIN = 1 << 32
# How many looked-up pairs a MergeTable remembers (about 170 bytes each: 5.5 MiB at most)
# before it forgets them all and starts again.
RECENT_PAIRS = 1 << 15


class MergeTable:
    """A merge list as token ids: for each merged pair of symbols, its rank (the merge's place
    in the list; a pair listed twice keeps its last) and the symbol the two join into.

    The pairs are kept as keys ``left * size + right`` in one sorted array, found by bisection
    among the pairs of their left symbol (where each symbol's pairs start is an array too);
    the ranks and joins are arrays beside the keys: 16 bytes a merge and 4 an id. The pairs
    looked up lately are remembered in a dict (at most ``RECENT_PAIRS``): merging a word looks
    its pairs up again after every join, and a text's words share their pairs.

    A symbol is a token id. A string of the merge list that is not a token under an id of its
    own (a join missing from the vocabulary, or a token whose id another token also has; real
    files have neither) is given a symbol past the ids, ``len(id_to_token) + k`` for
    ``extra[k]``, so that merging runs as it would on the strings themselves.
    """

    def __init__(self, merges, vocab, id_to_token):
        """``merges``: "a b" strings or [a, b] pairs, in rank order; ``vocab``: {token: id};
        ``id_to_token``: the token of each id (None where an id has none)."""
        self.vocab, self.id_to_token = vocab, id_to_token
        self.first_extra = len(id_to_token)
        self.extra, self._extra_symbols = [], {}
        pairs = merge_pairs(merges)
        # The ids of the left sides, the right sides and the joins (None: not in the vocabulary).
        columns = [list(map(vocab.get, strings)) for strings in _sides(pairs)]
        # Each id the token of one string, each string a token: the symbols are the ids.
        own_ids = len(id_to_token) - id_to_token.count(None) == len(vocab)
        if not own_ids or any(None in column for column in columns):
            for token in vocab:  # tokens sharing an id each get a symbol of their own
                self._add_symbol(token)
            columns = [list(map(self._add_symbol, strings)) for strings in _sides(pairs)]
        left, right, joined = (np.array(column, dtype=np.int64) for column in columns)
        del columns
        self.size = self.first_extra + len(self.extra)
        self.never = len(pairs)  # a rank past every merge's
        del pairs
        # Few temporaries, each dropped early: what the C library's heap keeps of them after
        # the build stays resident.
        keys = left * self.size + right
        del left, right
        order = np.argsort(keys, kind="stable")
        keys = keys[order]
        last = np.ones(len(keys), dtype=bool)  # the last of each run of equal keys
        last[:-1] = keys[1:] != keys[:-1]
        keys = keys[last]
        # Where each left symbol's pairs start among the sorted keys (and end: the next's start).
        starts = np.searchsorted(keys, np.arange(self.size + 1, dtype=np.int64) * self.size)
        # Kept as the standard library's arrays, whose items are Python ints (bisect reads them).
        self._keys, self._starts = _array("q", keys), _array("i", starts.astype(np.int32))
        del keys, starts
        order = order[last]
        self._ranks = _array("i", order.astype(np.int32))
        self._joined = _array("i", joined[order].astype(np.int32))
        del order, last, joined
        self.nothing = self.never * JOIN  # what find gives for a pair not merged
        self._recent = {}  # {(left, right): find's number} of the pairs looked up lately
        self._byte_symbols = None

    def _add_symbol(self, token):
        """The symbol of a string, made now if it needs one past the ids."""
        token_id = self.vocab.get(token)
        if token_id is not None and self.id_to_token[token_id] == token:
            return token_id
        if token not in self._extra_symbols:
            self._extra_symbols[token] = self.first_extra + len(self.extra)
            self.extra.append(token)
        return self._extra_symbols[token]

    def symbol(self, token):
        """The symbol of a vocabulary token: its id, unless another token has that id."""
        symbol = self._extra_symbols.get(token) if self.extra else None
        return self.vocab[token] if symbol is None else symbol

    def text(self, symbol):
        """The string a symbol stands for."""
        if symbol < self.first_extra:
            return self.id_to_token[symbol]
        return self.extra[symbol - self.first_extra]

    def token_id(self, symbol):
        """The token id of a symbol; None for a string the vocabulary does not hold."""
        return symbol if symbol < self.first_extra else self.vocab.get(self.text(symbol))

    def __len__(self):
        """The number of merged pairs (a pair listed twice counts once)."""
        return len(self._ranks)

    def find(self, left, right):
        """The merge of the symbols ``left`` and ``right`` as one number, ``rank * JOIN +
        join`` (``join``: the symbol they make), so that of several merges the lowest number
        is the lowest rank; ``self.nothing``, past every merge, when they are not merged."""
        found = self._recent.get((left, right))
        if found is None:
            if len(self._recent) >= RECENT_PAIRS:
                self._recent.clear()
            key = left * self.size + right
            end = self._starts[left + 1]  # bisect among the pairs of this left symbol
            i = bisect_left(self._keys, key, self._starts[left], end)
            found = (self._ranks[i] * JOIN + self._joined[i] if i < end and self._keys[i] == key
                     else self.nothing)
            self._recent[left, right] = found
        return found

    def find_adjacent(self, symbols):
        """``find`` of every two adjacent symbols (the pairs met lately looked up at once)."""
        found = list(map(self._recent.get, zip(symbols, symbols[1:])))
        if None in found:
            found = [self.find(left, right) if number is None else number
                     for number, left, right in zip(found, symbols, symbols[1:])]
        return found

    def rank(self, left, right):
        """The rank of merging the symbols ``left`` and ``right``, or None."""
        found = self.find(left, right)
        return None if found == self.nothing else found // JOIN

    def join(self, left, right):
        """The symbol that ``left`` and ``right`` merge into (a pair of the table)."""
        return self.find(left, right) % JOIN

    def byte_symbols(self):
        """The symbol of each byte's character (byte-level BPE), None where the vocabulary
        lacks it."""
        if self._byte_symbols is None:
            self._byte_symbols = [self.symbol(BYTE_TO_CHAR[b]) if BYTE_TO_CHAR[b] in self.vocab
                                  else None for b in range(256)]
        return self._byte_symbols

    def pairs(self):
        """((left, right) strings, rank) of every merged pair, in rank order."""
        keys, ranks = np.asarray(self._keys), np.asarray(self._ranks)
        order = np.argsort(ranks, kind="stable")
        lefts, rights = np.divmod(keys[order], self.size)
        text = self.text
        return [((text(a), text(b)), rank) for a, b, rank
                in zip(lefts.tolist(), rights.tolist(), ranks[order].tolist())]

    def merge_list(self):
        """The merges as [left, right] strings in rank order, each pair once."""
        return [[left, right] for (left, right), _ in self.pairs()]

    def __eq__(self, other):
        """The same pairs of strings with the same ranks."""
        if not isinstance(other, MergeTable):
            return NotImplemented
        if len(self) != len(other):
            return False
        if (self.extra == other.extra and self.first_extra == other.first_extra
                and self.id_to_token == other.id_to_token):
            return self._keys == other._keys and self._ranks == other._ranks
        return self.pairs() == other.pairs()

    __hash__ = None


def merge_word(symbols, merges):
    """The symbols left after joining the lowest-ranked adjacent pair (of equal pairs, the
    leftmost first) until no pair is ranked (sentencepiece.merge_by_priority, keyed by find's
    number: rank * JOIN + the symbol the pair makes). Joining the best pair's occurrences one
    at a time, left to right, is joining them all in one pass, as the merge rules are
    written."""
    if len(symbols) < 2:
        return symbols
    nothing = merges.nothing

    def priority(left, right):
        number = merges.find(left, right)
        return None if number == nothing else number

    keys = [None if number == nothing else number for number in merges.find_adjacent(symbols)]
    return merge_by_priority(symbols, priority, lambda left, right:
                             merges.find(left, right) % JOIN, keys)


def byte_level_bpe(word, vocab, merges, ignore_merges=False):
    """Ids of one word: its byte-characters, merged pair by pair in rank order (``merges``: a
    ``MergeTable`` over ``vocab``)."""
    data = word.encode("utf-8")
    if ignore_merges:
        spelled = "".join(BYTE_TO_CHAR[b] for b in data)
        if spelled in vocab:
            return [vocab[spelled]]
    symbols = [s for s in map(merges.byte_symbols().__getitem__, data) if s is not None]
    symbols = merge_word(symbols, merges)
    if not merges.extra:
        return symbols
    ids = [merges.token_id(s) for s in symbols]
    if None in ids:
        missing = merges.text(symbols[ids.index(None)])
        raise ValueError(f"symbol {missing!r} is not in the vocabulary")
    return ids
