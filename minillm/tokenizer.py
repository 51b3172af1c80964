"""Byte-level BPE, as in GPT-2, read from a Hugging Face ``tokenizer.json``.

Encoding a text takes four steps:

1. **Special tokens.** The text is cut at every added token (such as ``<|endoftext|>``); each
   one becomes its own id, untouched by the steps below. The longest match wins.
2. **Words.** Each remaining piece is split by GPT-2's regular expression::

       's|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+

   Python's ``re`` has no ``\\p{L}`` (letters) or ``\\p{N}`` (numbers), so the classes are
   built from the Unicode database: a letter is a character with ``str.isalpha()`` (exactly
   the categories Lu, Ll, Lt, Lm, Lo), a number one of category Nd, Nl or No, and white space
   the Unicode ``White_Space`` property (Python's ``\\s`` would also take U+001C..U+001F).
   The one deviation from the Rust library: characters assigned in a newer Unicode version
   than this Python's ``unicodedata`` are classed as "other". The full classes are built on
   the first non-ASCII text; ASCII text uses the short ASCII classes.
3. **Bytes.** A word's UTF-8 bytes are written with 256 printable characters, one per byte
   (GPT-2's ``bytes_to_unicode``), so every string can be encoded and no ``<unk>`` exists.
4. **Merges.** Starting from single byte-characters, the adjacent pair with the lowest merge
   rank is joined, again and again, until no pair is in the merge list. The symbols left
   are looked up in the vocabulary. Results are cached per word.

Decoding maps ids back to strings, the byte-characters back to bytes, and the bytes to text
as UTF-8 (an invalid sequence becomes U+FFFD, as in the Rust library). ``StreamDecoder``
does the same one token at a time and holds back an incomplete UTF-8 character until its
last byte arrives, so the streamed pieces always add up to ``decode`` of the whole.
"""

import codecs
import functools
import json
from itertools import repeat
import re
import unicodedata

EOS_CANDIDATES = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|im_end|>")

# The Unicode White_Space property (PropList.txt): what \s means in the Rust library's regex.
WHITE_SPACE = ("\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
               "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")


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


def _class_body(chars):
    """A regex character-class body (without brackets) matching exactly ``chars``."""
    codes = sorted(set(map(ord, chars)))
    parts, i = [], 0
    while i < len(codes):
        j = i
        while j + 1 < len(codes) and codes[j + 1] == codes[j] + 1:
            j += 1
        first, last = re.escape(chr(codes[i])), re.escape(chr(codes[j]))
        parts.append(first if i == j else f"{first}-{last}")
        i = j + 1
    return "".join(parts)


def _gpt2_pattern(letters, numbers, spaces):
    """GPT-2's word pattern with the three character classes given as class bodies."""
    L, N, S = letters, numbers, spaces
    return re.compile(
        rf"'s|'t|'re|'ve|'m|'ll|'d| ?[{L}]+| ?[{N}]+| ?[^{S}{L}{N}]+|[{S}]+(?![^{S}])|[{S}]+")


# For pure-ASCII text (the common case) the classes are short and known.
ASCII_PATTERN = _gpt2_pattern("A-Za-z", "0-9", _class_body(WHITE_SPACE[:6]))


@functools.lru_cache(maxsize=None)
def unicode_letters_and_numbers():
    """All characters of the categories L* (letters) and N* (numbers), as two strings.

    A scan of the Unicode database, done once (a fraction of a second).
    """
    every_char = "".join(map(chr, range(0x110000)))
    letters = "".join(filter(str.isalpha, every_char))      # isalpha is exactly L*
    # Every character of category N has a numeric value, so looking among the
    # str.isnumeric() characters finds them all (a test checks this over all of Unicode).
    numbers = "".join(ch for ch in filter(str.isnumeric, every_char)
                      if unicodedata.category(ch)[0] == "N")
    return letters, numbers


@functools.lru_cache(maxsize=None)
def gpt2_split_pattern():
    """GPT-2's word pattern for any Unicode text, with \\p{L}, \\p{N} and \\s spelled out."""
    letters, numbers = unicode_letters_and_numbers()
    return _gpt2_pattern(_class_body(letters), _class_body(numbers), _class_body(WHITE_SPACE))


def _merge_ranks(merges):
    """{(left, right): rank} from merges written as "a b" strings or ["a", "b"] lists."""
    ranks = {}
    for rank, merge in enumerate(merges):
        left, right = merge.split(" ", 1) if isinstance(merge, str) else merge
        ranks[(left, right)] = rank
    return ranks


class Tokenizer:
    """A byte-level BPE tokenizer: ``encode(text) -> ids`` and ``decode(ids) -> text``."""

    def __init__(self, vocab, merges, added_tokens=(), add_prefix_space=False,
                 ignore_merges=False, source_json=None):
        """``vocab``: {token: id}; ``merges``: list of pairs in rank order; ``added_tokens``:
        list of dicts with ``id``, ``content`` and ``special`` as in tokenizer.json."""
        self.vocab = dict(vocab)
        self.ranks = _merge_ranks(merges)
        self.add_prefix_space = add_prefix_space
        self.ignore_merges = ignore_merges
        self.added_tokens = {t["content"]: t["id"] for t in added_tokens}
        self.special_tokens = {t["content"]: t["id"] for t in added_tokens
                               if t.get("special", False)}
        self.vocab.update(self.added_tokens)
        self.id_to_token = {i: token for token, i in self.vocab.items()}
        self.vocab_size = max(self.id_to_token) + 1 if self.id_to_token else 0
        self.eos_token_id = next((self.special_tokens[t] for t in EOS_CANDIDATES
                                  if t in self.special_tokens), None)
        # Longest first, so that the regex alternation picks the longest added token.
        by_length = sorted(self.added_tokens, key=len, reverse=True)
        self._added_pattern = (re.compile("|".join(map(re.escape, by_length)))
                               if by_length else None)
        self._source_json = source_json
        self._cache = {}

    # ------------------------------------------------------------------ reading and writing

    @classmethod
    def from_json(cls, text):
        """Build a tokenizer from the text of a Hugging Face ``tokenizer.json``.

        Raises ``ValueError`` for a file that is not byte-level BPE or uses a feature this
        implementation leaves out (normalizers, word prefixes and suffixes, dropout, ...).
        """
        data = json.loads(text)
        model = data.get("model") or {}
        if model.get("type", "BPE") != "BPE":
            raise ValueError(f"tokenizer model {model.get('type')!r} is not BPE")
        for key in ("dropout", "continuing_subword_prefix", "end_of_word_suffix"):
            if model.get(key):
                raise ValueError(f"BPE option {key}={model[key]!r} is not supported")
        if model.get("byte_fallback"):
            raise ValueError("byte_fallback is not supported (byte-level BPE needs none)")
        if data.get("normalizer") is not None:
            raise ValueError("tokenizer normalizers are not supported")
        pre = data.get("pre_tokenizer") or {}
        if pre.get("type") != "ByteLevel" or not pre.get("use_regex", True):
            raise ValueError(f"pre-tokenizer {pre.get('type')!r} is not supported; "
                             "expected ByteLevel with the GPT-2 regex")
        decoder = data.get("decoder")
        if decoder is not None and decoder.get("type") != "ByteLevel":
            raise ValueError(f"decoder {decoder.get('type')!r} is not supported")
        added = data.get("added_tokens") or []
        for token in added:
            if token.get("single_word") or token.get("lstrip") or token.get("rstrip"):
                raise ValueError(f"added token {token['content']!r}: single_word, lstrip "
                                 "and rstrip are not supported")
        return cls(model["vocab"], model["merges"], added,
                   add_prefix_space=pre.get("add_prefix_space", False),
                   ignore_merges=model.get("ignore_merges", False), source_json=text)

    def to_json(self):
        """The tokenizer.json text: the original text when read with ``from_json``."""
        if self._source_json is not None:
            return self._source_json
        merges = [[a, b] for (a, b), _ in sorted(self.ranks.items(), key=lambda kv: kv[1])]
        added = [{"id": i, "content": t, "single_word": False, "lstrip": False,
                  "rstrip": False, "normalized": False, "special": t in self.special_tokens}
                 for t, i in sorted(self.added_tokens.items(), key=lambda kv: kv[1])]
        byte_level = {"type": "ByteLevel", "add_prefix_space": self.add_prefix_space,
                      "trim_offsets": True, "use_regex": True}
        vocab = {t: i for t, i in self.vocab.items() if t not in self.added_tokens}
        return json.dumps({
            "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
            "normalizer": None, "pre_tokenizer": byte_level, "post_processor": None,
            "decoder": byte_level,
            "model": {"type": "BPE", "dropout": None, "unk_token": None,
                      "continuing_subword_prefix": None, "end_of_word_suffix": None,
                      "fuse_unk": False, "byte_fallback": False,
                      "ignore_merges": self.ignore_merges, "vocab": vocab, "merges": merges},
        }, ensure_ascii=False)

    def __len__(self):
        """The number of ids: 1 + the largest id (vocabulary and added tokens)."""
        return self.vocab_size

    def token_to_id(self, token):
        """The id of a token string (added tokens included), or None."""
        return self.vocab.get(token)

    # ------------------------------------------------------------------ encoding

    def encode(self, text):
        """Token ids of ``text``: special tokens whole, the rest by byte-level BPE."""
        ids = []
        position = 0
        if self._added_pattern is not None:
            for match in self._added_pattern.finditer(text):
                self._encode_ordinary(text[position:match.start()], ids)
                ids.append(self.added_tokens[match.group()])
                position = match.end()
        self._encode_ordinary(text[position:], ids)
        return ids

    def _encode_ordinary(self, text, ids):
        """Append the ids of a text without added tokens to ``ids``."""
        if not text:
            return
        if self.add_prefix_space and not text.startswith(" "):
            text = " " + text
        cache = self._cache
        pattern = ASCII_PATTERN if text.isascii() else gpt2_split_pattern()
        for word in pattern.findall(text):
            word_ids = cache.get(word)
            if word_ids is None:
                if len(cache) >= 100_000:
                    cache.clear()
                word_ids = cache[word] = self._bpe(word)
            ids.extend(word_ids)

    def _bpe(self, word):
        """Ids of one word: its byte-characters, merged pair by pair in rank order."""
        symbols = [BYTE_TO_CHAR[b] for b in word.encode("utf-8")]
        if self.ignore_merges and "".join(symbols) in self.vocab:
            return [self.vocab["".join(symbols)]]
        ranks, never = self.ranks, len(self.ranks)
        while len(symbols) > 1:
            pair_ranks = list(map(ranks.get, zip(symbols, symbols[1:]), repeat(never)))
            best = min(pair_ranks)
            if best == never:
                break
            i = pair_ranks.index(best)
            symbols = _merge_pair(symbols, (symbols[i], symbols[i + 1]))
        try:
            return [self.vocab[s] for s in symbols]
        except KeyError as error:
            raise ValueError(f"symbol {error.args[0]!r} is not in the vocabulary") from None

    # ------------------------------------------------------------------ decoding

    def token_bytes(self, token_id):
        """The bytes one token stands for (an added token: its text in UTF-8)."""
        token = self.id_to_token.get(int(token_id))
        if token is None:
            raise ValueError(f"token id {token_id} is not in the vocabulary")
        if token in self.added_tokens:
            return token.encode("utf-8")
        return bytes(CHAR_TO_BYTE[ch] for ch in token)

    def decode(self, ids, skip_special_tokens=False):
        """The text of a sequence of ids (invalid UTF-8 becomes U+FFFD)."""
        skip = set(self.special_tokens.values()) if skip_special_tokens else set()
        data = b"".join(self.token_bytes(i) for i in ids if i not in skip)
        return data.decode("utf-8", errors="replace")

    def stream_decoder(self, skip_special_tokens=False):
        """A ``StreamDecoder`` for printing tokens as they are generated."""
        return StreamDecoder(self, skip_special_tokens)


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


class StreamDecoder:
    """Decode one token at a time without ever printing half a UTF-8 character.

    ``push(id)`` returns the text completed by that token (possibly ""), ``flush()`` what is
    left at the end; joined, the pieces equal ``tokenizer.decode(all_ids)``.
    """

    def __init__(self, tokenizer, skip_special_tokens=False):
        self.tokenizer = tokenizer
        self.skip = set(tokenizer.special_tokens.values()) if skip_special_tokens else set()
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token_id):
        if token_id in self.skip:
            return ""
        return self._utf8.decode(self.tokenizer.token_bytes(token_id))

    def flush(self):
        return self._utf8.decode(b"", final=True)


def load_tokenizer(path):
    """Read a ``tokenizer.json`` file."""
    with open(path, encoding="utf-8") as f:
        return Tokenizer.from_json(f.read())
