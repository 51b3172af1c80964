"""Byte-level BPE, as in GPT-2, read from a Hugging Face ``tokenizer.json`` or a GGUF file.

Encoding a text takes four steps:

1. **Special tokens.** The text is cut at every added token (such as ``<|endoftext|>``); each
   one becomes its own id, untouched by the steps below. The longest match wins.
2. **Words.** Each remaining piece is split into words by the pre-tokenizer: one or more
   regular expressions, each splitting the pieces the one before left (``PRE_TOKENIZERS``).
   GPT-2's is::

       's|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+

   SmolLM2 first cuts every digit out on its own (``\\p{N}``) and then applies GPT-2's;
   Llama 3 keeps numbers in groups of up to three digits; Qwen2 splits them into single digits.
   Python's ``re`` has no ``\\p{L}`` (letters) or ``\\p{N}`` (numbers), so the classes are
   built from the Unicode database: a letter is a character with ``str.isalpha()`` (exactly
   the categories Lu, Ll, Lt, Lm, Lo), a number one of category Nd, Nl or No, and white space
   the Unicode ``White_Space`` property (Python's ``\\s`` would also take U+001C..U+001F).
   The one deviation from the Rust library: characters assigned in a newer Unicode version
   than this Python's ``unicodedata`` are classed as "other". The full classes are built on
   the first non-ASCII text; ASCII text uses the short ASCII classes.
3. **Bytes.** A word's UTF-8 bytes are written with 256 printable characters, one per byte
   (GPT-2's ``bytes_to_unicode``), so every string can be encoded and no ``<unk>`` exists.
   (A byte missing from the vocabulary is left out, as in the Rust library.)
4. **Merges.** Starting from single byte-characters, the adjacent pair with the lowest merge
   rank is joined, again and again, until no pair is in the merge list. The symbols left
   are looked up in the vocabulary. Results are cached per word.

Decoding maps ids back to strings, the byte-characters back to bytes, and the bytes to text
as UTF-8 (an invalid sequence becomes U+FFFD, as in the Rust library). ``StreamDecoder``
does the same one token at a time and holds back an incomplete UTF-8 character until its
last byte arrives, so the streamed pieces always add up to ``decode`` of the whole.

Besides the vocabulary, a tokenizer carries what Hugging Face keeps in
``tokenizer_config.json`` (``TokenizerConfig``): the BOS, EOS, padding and unknown tokens,
whether a plain prompt starts with BOS, and the chat template.
"""

import codecs
from dataclasses import asdict, dataclass
import functools
import json
from itertools import repeat
import re
import unicodedata

EOS_CANDIDATES = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|im_end|>")
# The token that ends a turn in the chat templates minillm.chat renders (ChatML).
END_OF_TURN_TOKENS = ("<|im_end|>",)

# The Unicode White_Space property (PropList.txt): what \s means in the Rust library's regex.
WHITE_SPACE = ("\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
               "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")

# ---------------------------------------------------------------------- pre-tokenizers

# The regular expressions as the Rust library (and tokenizer.json) writes them.
GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
DIGIT_REGEX = r"\p{N}"  # every digit a piece of its own

# Pre-tokenizers by the name a GGUF file gives them (`tokenizer.ggml.pre`, llama.cpp's names):
# the regexes applied one after the other, each to the pieces the one before left.
PRE_TOKENIZERS = {
    "default": (GPT2_REGEX,),
    "gpt2": (GPT2_REGEX,),
    "smollm": (DIGIT_REGEX, GPT2_REGEX),
    "llama-bpe": (LLAMA3_REGEX,),
    "llama3": (LLAMA3_REGEX,),
    "qwen2": (QWEN2_REGEX,),
}


def pre_tokenizer_regexes(name):
    """The regexes of a named pre-tokenizer; a name not in ``PRE_TOKENIZERS`` is a ValueError."""
    if name not in PRE_TOKENIZERS:
        raise ValueError(f"pre-tokenizer {name!r} is not supported; minillm knows "
                         f"{', '.join(map(repr, PRE_TOKENIZERS))}")
    return PRE_TOKENIZERS[name]


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


def to_python_regex(regex, letters, numbers, spaces):
    """A regex of the Rust library rewritten for Python's ``re``, given three class bodies.

    ``\\p{L}``, ``\\p{N}`` and ``\\s`` become the classes ``[letters]``, ``[numbers]`` and
    ``[spaces]`` (inside a ``[...]`` class, just their bodies) and ``\\S`` becomes
    ``[^spaces]``. The rest of the regexes in ``PRE_TOKENIZERS`` (``\\r``, ``(?i:...)``,
    ``(?!...)``, ``{1,3}``) means the same in both dialects.
    """
    classes = {r"\p{L}": letters, r"\p{N}": numbers, r"\s": spaces}
    out, in_class = [], False
    for piece in re.findall(r"\\p\{.\}|\\.|.", regex, flags=re.DOTALL):
        if piece in classes:
            out.append(classes[piece] if in_class else f"[{classes[piece]}]")
            continue
        if piece == r"\S":
            if in_class:
                raise ValueError(f"regex {regex!r}: \\S inside a character class")
            out.append(f"[^{spaces}]")
            continue
        if piece == "[":
            in_class = True
        elif piece == "]":
            in_class = False
        out.append(piece)
    return "".join(out)


# For pure-ASCII text (the common case) the classes are short and known.
ASCII_CLASSES = ("A-Za-z", "0-9", _class_body(WHITE_SPACE[:6]))


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
def unicode_classes():
    """The class bodies of \\p{L}, \\p{N} and \\s for any Unicode text."""
    letters, numbers = unicode_letters_and_numbers()
    return _class_body(letters), _class_body(numbers), _class_body(WHITE_SPACE)


@functools.lru_cache(maxsize=None)
def split_pattern(regex, ascii_only=False):
    """A pre-tokenizer regex compiled for Python, with the ASCII or the full Unicode classes.

    The ASCII pattern gives the same words as the full one on ASCII text, and only there.
    The whole regex is one capturing group, so that ``split`` keeps the matches.
    """
    classes = ASCII_CLASSES if ascii_only else unicode_classes()
    return re.compile("(" + to_python_regex(regex, *classes) + ")")


ASCII_PATTERN = split_pattern(GPT2_REGEX, ascii_only=True)


def gpt2_split_pattern():
    """GPT-2's word pattern for any Unicode text, with \\p{L}, \\p{N} and \\s spelled out."""
    return split_pattern(GPT2_REGEX)


def split_isolated(pattern, text):
    """Every match of ``pattern`` and every stretch of text between two matches, in order.

    (The Rust library's ``Split`` with behavior "Isolated".) The pieces add up to ``text``.
    ``re.split`` gives text, match, text, match, ..., text, some of it empty.
    """
    return [piece for piece in pattern.split(text) if piece]


def pre_tokenize(text, name="gpt2"):
    """The words of ``text`` (a text without added tokens) under the named pre-tokenizer."""
    ascii_only = text.isascii()
    pieces = [text]
    for regex in pre_tokenizer_regexes(name):
        pattern = split_pattern(regex, ascii_only)
        pieces = [word for piece in pieces for word in split_isolated(pattern, piece)]
    return pieces


def _pre_tokenizer_from_json(pre):
    """(name, add_prefix_space) of a tokenizer.json pre-tokenizer; unknown forms are refused.

    Three forms are read: ``ByteLevel`` with its GPT-2 regex; SmolLM2's ``Sequence`` of
    ``Digits(individual_digits=true)`` and ``ByteLevel``; and the ``Sequence`` of
    ``Split(Regex, behavior "Isolated")`` and ``ByteLevel(use_regex=false)`` that Llama 3 and
    Qwen2 use, with a regex of ``PRE_TOKENIZERS``.
    """
    pre = pre or {}
    if pre.get("type") == "ByteLevel" and pre.get("use_regex", True):
        return "gpt2", pre.get("add_prefix_space", False)
    steps = pre.get("pretokenizers") or []
    if (pre.get("type") == "Sequence" and len(steps) == 2 and steps[1].get("type") == "ByteLevel"
            and not steps[1].get("add_prefix_space", False)):
        first, byte_level_regex = steps[0], steps[1].get("use_regex", True)
        if first.get("type") == "Digits" and first.get("individual_digits") and byte_level_regex:
            return "smollm", False
        if (first.get("type") == "Split" and first.get("behavior") == "Isolated"
                and not first.get("invert", False) and not byte_level_regex):
            regex = (first.get("pattern") or {}).get("Regex")
            for name, regexes in PRE_TOKENIZERS.items():
                if regexes == (regex,):
                    return name, False
    raise ValueError(f"pre-tokenizer {json.dumps(pre)[:300]} is not supported; expected "
                     "ByteLevel with the GPT-2 regex, Digits + ByteLevel, or a known Split "
                     "regex + ByteLevel")


def _pre_tokenizer_to_json(name, add_prefix_space):
    """The tokenizer.json form of a named pre-tokenizer (read back by the function above)."""
    byte_level = {"type": "ByteLevel", "add_prefix_space": add_prefix_space,
                  "trim_offsets": True, "use_regex": True}
    regexes = pre_tokenizer_regexes(name)
    if regexes == (GPT2_REGEX,):
        return byte_level
    if regexes == (DIGIT_REGEX, GPT2_REGEX):
        return {"type": "Sequence",
                "pretokenizers": [{"type": "Digits", "individual_digits": True}, byte_level]}
    (regex,) = regexes
    split = {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated",
             "invert": False}
    return {"type": "Sequence", "pretokenizers": [split, dict(byte_level, use_regex=False)]}


def _merge_ranks(merges):
    """{(left, right): rank} from merges written as "a b" strings or ["a", "b"] lists."""
    ranks = {}
    for rank, merge in enumerate(merges):
        left, right = merge.split(" ", 1) if isinstance(merge, str) else merge
        ranks[(left, right)] = rank
    return ranks


# ---------------------------------------------------------------------- tokenizer_config.json

@dataclass(frozen=True)
class TokenizerConfig:
    """What Hugging Face keeps in ``tokenizer_config.json`` beside ``tokenizer.json``.

    Tokens are named by their text. ``add_bos_token``: whether a plain prompt starts with the
    BOS token (a chat template writes its own); ``chat_template``: Jinja text, or None.
    """
    bos_token: str | None = None
    eos_token: str | None = None
    pad_token: str | None = None
    unk_token: str | None = None
    add_bos_token: bool = False
    chat_template: str | None = None

    @classmethod
    def from_dict(cls, data):
        """From a tokenizer_config.json object; keys this class has no field for are ignored.

        A token may be its text or ``{"content": text, ...}``; a list of named chat templates
        gives the one named "default".
        """
        values = {}
        for name in ("bos_token", "eos_token", "pad_token", "unk_token"):
            token = data.get(name)
            if isinstance(token, dict):
                token = token.get("content")
            if token is not None and not isinstance(token, str):
                raise ValueError(f"tokenizer config: {name} must be a string, got {token!r}")
            values[name] = token
        add_bos = data.get("add_bos_token", False)
        if not isinstance(add_bos, bool):
            raise ValueError(f"tokenizer config: add_bos_token must be true or false, got "
                             f"{add_bos!r}")
        values["add_bos_token"] = add_bos
        values["chat_template"] = _default_chat_template(data.get("chat_template"))
        return cls(**values)

    @classmethod
    def from_json(cls, text):
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("tokenizer config: expected a JSON object")
        return cls.from_dict(data)

    def to_json(self):
        """A JSON object with this class's fields, as in tokenizer_config.json."""
        return json.dumps(asdict(self), ensure_ascii=False)


def _default_chat_template(template):
    """The chat template text: a string, or the "default" of a list of named templates."""
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        if "default" not in named:
            raise ValueError(f"tokenizer config: no chat template named 'default' among "
                             f"{sorted(map(str, named))}")
        template = named["default"]
    if template is not None and not isinstance(template, str):
        raise ValueError(f"tokenizer config: chat_template must be a string, got "
                         f"{type(template).__name__}")
    return template


# The GGUF token types (`tokenizer.ggml.token_type`, llama.cpp's llama_token_type).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


def _byte_spelled(token):
    """A vocabulary entry in the byte alphabet. Byte-level vocabularies are written in it; a
    token that is not (a few converters store plain text) is respelled from its UTF-8 bytes."""
    if all(ch in CHAR_TO_BYTE for ch in token):
        return token
    return "".join(BYTE_TO_CHAR[b] for b in token.encode("utf-8"))


class Tokenizer:
    """A byte-level BPE tokenizer: ``encode(text) -> ids`` and ``decode(ids) -> text``."""

    def __init__(self, vocab, merges, added_tokens=(), add_prefix_space=False,
                 ignore_merges=False, source_json=None, pre_tokenizer="gpt2", config=None):
        """``vocab``: {token: id}; ``merges``: list of pairs in rank order; ``added_tokens``:
        list of dicts with ``id``, ``content`` and ``special`` as in tokenizer.json;
        ``pre_tokenizer``: a name of ``PRE_TOKENIZERS``; ``config``: a ``TokenizerConfig``."""
        self.vocab = dict(vocab)
        self.ranks = _merge_ranks(merges)
        self.pre_tokenizer = pre_tokenizer
        self._regexes = pre_tokenizer_regexes(pre_tokenizer)
        if add_prefix_space and self._regexes != (GPT2_REGEX,):
            # The Rust library would put a space before every piece of the first split.
            raise ValueError(f"add_prefix_space is not supported with the {pre_tokenizer!r} "
                             "pre-tokenizer")
        self.add_prefix_space = add_prefix_space
        self.ignore_merges = ignore_merges
        self.added_tokens = {t["content"]: t["id"] for t in added_tokens}
        self.special_tokens = {t["content"]: t["id"] for t in added_tokens
                               if t.get("special", False)}
        self.vocab.update(self.added_tokens)
        self.id_to_token = {i: token for token, i in self.vocab.items()}
        self.vocab_size = max(self.id_to_token) + 1 if self.id_to_token else 0
        self.config = config if config is not None else TokenizerConfig()
        self.bos_token_id = self._config_token_id("bos_token")
        self.pad_token_id = self._config_token_id("pad_token")
        self.unk_token_id = self._config_token_id("unk_token")
        self.eos_token_id = self._config_token_id("eos_token")
        if self.config.eos_token is None:  # no config: the first familiar end-of-text token
            self.eos_token_id = next((self.special_tokens[t] for t in EOS_CANDIDATES
                                      if t in self.special_tokens), None)
        if self.config.add_bos_token and self.bos_token_id is None:
            raise ValueError("tokenizer config: add_bos_token is true, but there is no bos_token")
        # Longest first, so that the regex alternation picks the longest added token.
        by_length = sorted(self.added_tokens, key=len, reverse=True)
        self._added_pattern = (re.compile("|".join(map(re.escape, by_length)))
                               if by_length else None)
        self._source_json = source_json
        self._cache = {}

    def _config_token_id(self, name):
        """The id of the config's token ``name`` (None if the config names none)."""
        token = getattr(self.config, name)
        if token is None:
            return None
        if token not in self.vocab:
            raise ValueError(f"tokenizer config: {name} {token!r} is not in the vocabulary")
        return self.vocab[token]

    @property
    def add_bos_token(self):
        """Whether ``encode(text, add_special_tokens=True)`` starts with the BOS token."""
        return self.config.add_bos_token

    @property
    def chat_template(self):
        """The chat template (Jinja text), or None."""
        return self.config.chat_template

    @property
    def eos_token_ids(self):
        """The ids that end a reply: the EOS token, and the end-of-turn token of the chat
        template when it writes one (for SmolLM2 both are ``<|im_end|>``)."""
        ids = [] if self.eos_token_id is None else [self.eos_token_id]
        for token in END_OF_TURN_TOKENS:
            token_id = self.special_tokens.get(token)
            if (token_id is not None and token_id not in ids
                    and token in (self.chat_template or "")):
                ids.append(token_id)
        return tuple(ids)

    # ------------------------------------------------------------------ reading and writing

    @classmethod
    def from_json(cls, text, config=None):
        """Build a tokenizer from the text of a Hugging Face ``tokenizer.json`` and, optionally,
        a ``TokenizerConfig`` (from its ``tokenizer_config.json``).

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
        pre_tokenizer, add_prefix_space = _pre_tokenizer_from_json(data.get("pre_tokenizer"))
        decoder = data.get("decoder")
        if decoder is not None and decoder.get("type") != "ByteLevel":
            raise ValueError(f"decoder {decoder.get('type')!r} is not supported")
        added = data.get("added_tokens") or []
        for token in added:
            if token.get("single_word") or token.get("lstrip") or token.get("rstrip"):
                raise ValueError(f"added token {token['content']!r}: single_word, lstrip "
                                 "and rstrip are not supported")
        return cls(model["vocab"], model["merges"], added,
                   add_prefix_space=add_prefix_space,
                   ignore_merges=model.get("ignore_merges", False), source_json=text,
                   pre_tokenizer=pre_tokenizer, config=config)

    @classmethod
    def from_gguf(cls, metadata):
        """Build a tokenizer from a GGUF file's metadata ({key: value}, as in the file).

        Reads ``tokenizer.ggml.*`` (model, pre, tokens, token_type, merges, the special token
        ids, add_bos_token) and ``tokenizer.chat_template``. The model must be "gpt2"
        (byte-level BPE) and the pre-tokenizer a name of ``PRE_TOKENIZERS`` ("default" when
        the file names none). Tokens of type control (special) and user-defined are matched
        whole in the text, like the added tokens of tokenizer.json; all others are BPE
        vocabulary. (``add_space_prefix`` is for SentencePiece; llama.cpp ignores it here.)
        Every key is checked by ``gguf_metadata.tokenizer_metadata``; errors are WeightsError.
        """
        from .convert.gguf_metadata import tokenizer_metadata
        from .errors import WeightsError

        metadata = tokenizer_metadata(metadata)
        kind = metadata.get("tokenizer.ggml.model")
        if kind != "gpt2":
            raise WeightsError(f"tokenizer.ggml.model {kind!r} is not supported; minillm reads "
                             "byte-level BPE ('gpt2') only, not SentencePiece ('llama') or "
                             "others")
        if metadata.get("tokenizer.ggml.add_eos_token"):
            raise WeightsError("tokenizer.ggml.add_eos_token=true is not supported")
        if metadata["tokenizer.ggml.merges"] is None:
            raise WeightsError("tokenizer.ggml.merges: missing, expected array of string")
        tokens = metadata["tokenizer.ggml.tokens"]
        types = metadata.get("tokenizer.ggml.token_type")
        types = [NORMAL] * len(tokens) if types is None else types
        vocab, added = {}, []
        for token_id, (token, token_type) in enumerate(zip(tokens, types)):
            if token_type in (CONTROL, USER_DEFINED):
                added.append({"id": token_id, "content": token,
                              "special": token_type == CONTROL})
            else:
                vocab[_byte_spelled(token)] = token_id

        def token_named(key):
            """The text of the token whose id is at ``tokenizer.ggml.<key>``, or None."""
            token_id = metadata.get(f"tokenizer.ggml.{key}")
            return None if token_id is None else tokens[token_id]

        try:
            config = TokenizerConfig(
                bos_token=token_named("bos_token_id"), eos_token=token_named("eos_token_id"),
                pad_token=token_named("padding_token_id"),
                unk_token=token_named("unknown_token_id"),
                add_bos_token=bool(metadata.get("tokenizer.ggml.add_bos_token", False)),
                chat_template=metadata.get("tokenizer.chat_template"))
            return cls(vocab, metadata["tokenizer.ggml.merges"], added,
                       pre_tokenizer=metadata["tokenizer.ggml.pre"] or "default", config=config)
        except ValueError as e:  # what the tokenizer refuses: in the file's terms too
            raise WeightsError(f"tokenizer: {e}") from None

    def to_json(self):
        """The tokenizer.json text: the original text when read with ``from_json``."""
        if self._source_json is not None:
            return self._source_json
        merges = [[a, b] for (a, b), _ in sorted(self.ranks.items(), key=lambda kv: kv[1])]
        added = [{"id": i, "content": t, "single_word": False, "lstrip": False,
                  "rstrip": False, "normalized": False, "special": t in self.special_tokens}
                 for t, i in sorted(self.added_tokens.items(), key=lambda kv: kv[1])]
        pre_tokenizer = _pre_tokenizer_to_json(self.pre_tokenizer, self.add_prefix_space)
        decoder = {"type": "ByteLevel", "add_prefix_space": self.add_prefix_space,
                   "trim_offsets": True, "use_regex": True}
        # Added tokens are in the model's vocabulary too (self.vocab holds them): the Rust
        # library keeps their ids only then.
        return json.dumps({
            "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
            "normalizer": None, "pre_tokenizer": pre_tokenizer, "post_processor": None,
            "decoder": decoder,
            "model": {"type": "BPE", "dropout": None, "unk_token": None,
                      "continuing_subword_prefix": None, "end_of_word_suffix": None,
                      "fuse_unk": False, "byte_fallback": False,
                      "ignore_merges": self.ignore_merges, "vocab": self.vocab, "merges": merges},
        }, ensure_ascii=False)

    def __len__(self):
        """The number of ids: 1 + the largest id (vocabulary and added tokens)."""
        return self.vocab_size

    def token_to_id(self, token):
        """The id of a token string (added tokens included), or None."""
        return self.vocab.get(token)

    # ------------------------------------------------------------------ encoding

    def encode(self, text, add_special_tokens=False):
        """Token ids of ``text``: special tokens whole, the rest by byte-level BPE.

        With ``add_special_tokens`` the ids start with BOS if the config's ``add_bos_token``
        asks for it (how a plain prompt is encoded; a rendered chat template writes its own).
        """
        ids = []
        if add_special_tokens and self.add_bos_token:
            ids.append(self.bos_token_id)
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
        for word in pre_tokenize(text, self.pre_tokenizer):
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
        # A byte the vocabulary lacks is left out, as the Rust library does when the model has
        # no unknown token (SmolLM2 lacks a few control bytes and bytes UTF-8 text rarely uses).
        symbols = [s for s in symbols if s in self.vocab]
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


def same_tokens(a: Tokenizer, b: Tokenizer) -> bool:
    """Whether two tokenizers turn the same text into the same ids and back: the same
    vocabulary, merges, added tokens and pre-tokenizer (formatting of their files aside)."""
    return a is b or (a.vocab == b.vocab and a.ranks == b.ranks
                      and a.added_tokens == b.added_tokens and a.pre_tokenizer == b.pre_tokenizer)


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
