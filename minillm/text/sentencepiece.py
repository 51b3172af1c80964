"""SentencePiece BPE (Llama 2, Mistral 7B v0.1, TinyLlama, Phi-3, Gemma): pieces of text, not bytes.

The text is written with ``▁`` (U+2581) for every space and, by default, one ``▁`` in front
(``add_space_prefix``: the first word looks like every other word). Its characters are then
merged two by two:

* **by score** (a GGUF file, ``tokenizer.ggml.model = "llama"``; llama.cpp's
  ``llm_tokenizer_spm``): every adjacent pair whose join is a vocabulary token is a candidate;
  the one whose token has the highest score is joined (the leftmost among equals), again and
  again, until no join is a token.
* **by merge rank** (a tokenizer.json, the Rust library's BPE model): the pair earliest in the
  merge list is joined, the leftmost among equals, until no pair is in the list. Hugging Face's
  converter orders the merges by the score of their result, so the two agree on real
  vocabularies.

A character that is not a token (and a piece left unmerged that is not one) is written as its
UTF-8 bytes, each the token ``<0xNN>`` (byte fallback); without byte tokens it is ``<unk>``.
Decoding turns ``▁`` back into spaces, byte tokens into their bytes, and drops the one space the
prefix added.
"""
from dataclasses import dataclass
import heapq
from operator import add

import numpy as np

SPACE = "\u2581"  # ▁


@dataclass(frozen=True)
class SentencePiece:
    """How a SentencePiece vocabulary merges: by ``scores`` (one per id; llama.cpp) or, when
    None, by the merge ranks (the Rust library); ``space_prefix``: "every" piece between added
    tokens gets a leading ``▁``, only the "first" (the text's start), or "none";
    ``prefix_before_space``: a piece that already starts with a space gets one more (llama.cpp,
    the Prepend normalizer) or not (the Metaspace pre-tokenizer); ``split_words``: merge each
    ``▁``-word apart (Metaspace's split); ``byte_fallback``: write unknown characters as
    ``<0xNN>`` tokens; ``strip_space``: decoding drops one leading space."""
    scores: tuple | None = None
    space_prefix: str = "every"
    prefix_before_space: bool = True
    split_words: bool = False
    byte_fallback: bool = True
    strip_space: bool = True


def escape_spaces(text, add_space_prefix):
    """The text as SentencePiece sees it: spaces written ``▁``, one in front if asked."""
    return (SPACE if add_space_prefix else "") + text.replace(" ", SPACE)


def byte_token(byte):
    """The name of the token standing for one byte: ``<0x0A>`` for a newline."""
    return f"<0x{byte:02X}>"


def merge_by_priority(symbols, priority, join=add, keys=None):
    """Join adjacent symbols, best first, until no adjacent pair has a priority: in
    O(n log n) for n symbols.

    ``priority(left, right)`` is a sortable key (smaller is better) or None (never joined);
    among equal keys the leftmost pair goes first; ``join(left, right)`` is the symbol two
    make (strings: their concatenation). ``keys``: the priorities of the first adjacent pairs,
    when the caller finds them at once. A heap holds the candidate pairs; the symbols form a
    linked list, so a join only relinks its neighbours and pushes the two pairs it makes; a
    pair that a join has made stale (its left or right symbol changed) is skipped when it
    comes up.
    """
    symbols = list(symbols)
    following = list(range(1, len(symbols))) + [-1]   # a linked list over the symbols
    preceding = list(range(-1, len(symbols) - 1))
    if keys is None:
        keys = [priority(left, right) for left, right in zip(symbols, symbols[1:])]
    heap = [(key, i, symbols[i], symbols[i + 1]) for i, key in enumerate(keys) if key is not None]
    heapq.heapify(heap)

    def push(left):
        right = following[left] if left >= 0 else -1
        if left >= 0 and right >= 0:
            key = priority(symbols[left], symbols[right])
            if key is not None:
                heapq.heappush(heap, (key, left, symbols[left], symbols[right]))

    while heap:
        _, left, left_text, right_text = heapq.heappop(heap)
        right = following[left]
        if symbols[left] != left_text or right < 0 or symbols[right] != right_text:
            continue  # stale: one side has been joined to something else since
        symbols[left], symbols[right] = join(left_text, right_text), None
        following[left] = following[right]
        if following[right] >= 0:
            preceding[following[right]] = left
        push(preceding[left])
        push(left)
    return [s for s in symbols if s is not None]


def code_points(text):
    """The code points of a text, as a NumPy array (a lone surrogate included)."""
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4").astype(np.int64)


def pair_codes(codes):
    """One number for each two adjacent code points: ``first * 2**21 + second``."""
    return (codes[:-1] << 21) | codes[1:]


def joinable_pairs(vocab):
    """Every two characters that stand side by side inside some token (``pair_codes``, sorted),
    or None when a token longer than a byte token starts like one (then a byte token might
    join a neighbour)."""
    tokens = list(vocab)
    codes = code_points("".join(tokens))  # every token, one after the other
    lengths = np.fromiter(map(len, tokens), dtype=np.int64, count=len(tokens))
    ends = np.cumsum(lengths)
    first = (ends - lengths)[lengths > 6]  # where each token longer than a byte token starts
    if np.any((codes[first] == ord("<")) & (codes[first + 1] == ord("0"))
              & (codes[first + 2] == ord("x"))):
        return None
    inside = np.ones(max(len(codes) - 1, 0), dtype=bool)  # the pair at i: codes i and i + 1
    ends = ends[(ends > 0) & (ends < len(codes))]
    inside[ends - 1] = False  # the last character of a token and the first of the next
    return np.unique(pair_codes(codes)[inside])


def independent_parts(text, pairs, at_spaces=False):
    """``text`` cut between every two characters that no token holds side by side (and, with
    ``at_spaces``, before every ``▁``: Metaspace's words).

    A join makes a token holding the two characters at its seam, so no join ever crosses such
    a cut: merging each part alone gives the same pieces as merging the whole text (and the
    parts, mostly words, can be cached). ``pairs``: ``joinable_pairs``; None: no such cut.
    The seams are looked up all at once, in NumPy.
    """
    if len(text) < 2:
        return [text]
    codes = code_points(text)
    cut = np.zeros(len(text) - 1, dtype=bool)  # cut[i]: between characters i and i + 1
    if pairs is not None and len(pairs) == 0:
        cut[:] = True
    elif pairs is not None:
        seams = pair_codes(codes)
        found = np.minimum(np.searchsorted(pairs, seams), len(pairs) - 1)
        cut = pairs[found] != seams
    if at_spaces:
        cut |= codes[1:] == ord(SPACE)
    cuts = (np.flatnonzero(cut) + 1).tolist()
    return [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)])]


def by_score(vocab, scores):
    """llama.cpp's priority: the score of the joined token (higher first)."""
    def priority(left, right):
        token_id = vocab.get(left + right)
        return None if token_id is None else -scores[token_id]
    return priority


def by_rank(merges):
    """The Rust library's priority: the rank of the pair in the merge list (lower first), for
    symbols of a ``MergeTable``."""
    return merges.rank


def pieces_to_ids(pieces, vocab, unk_id):
    """Ids of the merged pieces; a piece that is not a token becomes its byte tokens (if the
    vocabulary has them all) or ``<unk>``."""
    ids = []
    for piece in pieces:
        token_id = vocab.get(piece)
        if token_id is not None:
            ids.append(token_id)
            continue
        byte_ids = [vocab.get(byte_token(b)) for b in piece.encode("utf-8")]
        if None not in byte_ids:
            ids.extend(byte_ids)
        elif unk_id is not None:
            ids.append(unk_id)
        else:
            raise ValueError(f"{piece!r} is not in the vocabulary, which has no byte tokens "
                             "and no <unk>")
    return ids


def initial_symbols(text, vocab, byte_fallback, unk):
    """The Rust library's starting symbols: each character, or its byte tokens when it is not
    in the vocabulary (with byte fallback), or ``unk`` (consecutive unknowns fused)."""
    symbols = []
    for ch in text:
        if ch in vocab:
            symbols.append(ch)
            continue
        bytes_ = [byte_token(b) for b in ch.encode("utf-8")]
        if byte_fallback and all(b in vocab for b in bytes_):
            symbols.extend(bytes_)
        elif unk is None:
            raise ValueError(f"{ch!r} is not in the vocabulary, which has no <unk>")
        elif not (symbols and symbols[-1] is unk):
            symbols.append(unk)
    return symbols


def merges_from_scores(vocab, scores, normal):
    """Merges for a tokenizer.json from a scored vocabulary, as Hugging Face's converter makes
    them: every split of a normal token into two tokens, the best-scoring results first."""
    merges = []
    for token, token_id in vocab.items():
        if token_id not in normal:
            continue
        for i in range(1, len(token)):
            left, right = token[:i], token[i:]
            if left in vocab and right in vocab:
                merges.append((-scores[token_id], vocab[left], vocab[right], left, right))
    merges.sort()
    return [[left, right] for *_, left, right in merges]


def piece_bytes(token):
    """The bytes a SentencePiece token stands for: a byte token its byte, ``▁`` a space."""
    if len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
        try:
            return bytes([int(token[3:5], 16)])
        except ValueError:
            pass
    return token.replace(SPACE, " ").encode("utf-8")
