"""Tokenizers: text to ids and back, for byte-level BPE (GPT-2, Llama 3, Qwen2, SmolLM2, ...) and
SentencePiece BPE (Llama 2, Mistral, Gemma, Phi-3), read from a Hugging Face ``tokenizer.json``
or a GGUF file (``minillm.text.tokenizer_files``).

Encoding a text takes three steps:

1. **Added tokens.** The text is cut at every added token (``<|endoftext|>``, ``<s>``, ...);
   each becomes its own id, untouched by the steps below. The longest match wins; a token may
   take the whitespace beside it (``lstrip``/``rstrip``), count only as a whole word
   (``single_word``), or be looked for in the normalized text (``minillm.text.added_tokens``).
2. **Words.** Byte-level BPE cuts each remaining piece into words by its pre-tokenizer
   (``minillm.text.pretokenize``: llama.cpp's named rules, or a tokenizer.json's regexes).
   SentencePiece writes spaces as ``▁`` instead, and merges a whole piece at once.
3. **Merges.** Each word becomes tokens by byte-level BPE (``minillm.text.bpe``), or the piece by
   SentencePiece's merges with byte fallback (``minillm.text.sentencepiece``). Results are cached
   per word.

``encode(text, add_special_tokens=True)`` also writes BOS first and EOS last when the file asks
for it (``add_bos_token``, ``add_eos_token``; llama.cpp's defaults when a GGUF file says
nothing: BOS for SentencePiece and Llama 3's rules, never EOS).

Decoding maps ids back to bytes and the bytes to text as UTF-8 (an invalid sequence becomes
U+FFFD). ``StreamDecoder`` does the same one token at a time and holds back an incomplete UTF-8
character until its last byte arrives (a character split over byte tokens included), so the
streamed pieces always add up to ``decode`` of the whole.

Besides the vocabulary, a tokenizer carries what Hugging Face keeps in
``tokenizer_config.json`` (``TokenizerConfig``): the BOS, EOS, padding and unknown tokens,
whether a plain prompt starts with BOS and ends with EOS, and the chat template; and the ids a
generation ends at when the model's file names them (``eos_token_ids``).
"""

import codecs
import copy
from dataclasses import replace
import re

from .added_tokens import (ASCII_SPACE, AddedToken, added_token,  # noqa: F401 (re-exported)
                           find_added, longest_match_pattern)
from .bpe import BYTE_TO_CHAR, CHAR_TO_BYTE, MergeTable, byte_level_bpe  # noqa: F401 (re-exported)
from .pretokenize import WHITE_SPACE, Rules, check_rules, pre_tokenize, rules_named
from .sentencepiece import (SPACE, by_rank, by_score, escape_spaces, independent_parts,
                            initial_symbols, joinable_pairs, merge_by_priority, piece_bytes,
                            pieces_to_ids)
from .tokenizer_config import TokenizerConfig
from .tokenizer_files import from_gguf_metadata, from_tokenizer_json, to_tokenizer_json

EOS_CANDIDATES = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|im_end|>")
# Tokens that end a turn (llama.cpp's end-of-generation texts): a reply stops at each one the
# chat template writes, besides EOS.
END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end|>", "<end_of_turn>",
                      "<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<EOT>",
                      "<|return|>", "<|call|>", "<end_of_utterance>",
                      "<\uff5cend\u2581of\u2581sentence\uff5c>")


# ---------------------------------------------------------------------- the tokenizer

class Tokenizer:
    """A BPE tokenizer: ``encode(text) -> ids`` and ``decode(ids) -> text``."""

    def __init__(self, vocab, merges, added_tokens=(), add_prefix_space=False,
                 ignore_merges=False, source_json=None, pre_tokenizer="gpt-2", config=None,
                 sentencepiece=None, byte_tokens=None):
        """``vocab``: {token: id}; ``merges``: list of pairs in rank order; ``added_tokens``:
        list of dicts with ``id``, ``content``, ``special`` and the flags ``lstrip``,
        ``rstrip``, ``single_word``, ``normalized`` as in tokenizer.json (absent: false), or
        ``AddedToken``s (what ``lstrip``/``rstrip`` take: ``config.strip_whitespace``);
        ``pre_tokenizer``: a llama.cpp name (``PRE_TOKENIZERS``) or ``Rules``, for byte-level
        BPE; ``sentencepiece``: a ``SentencePiece`` for a SentencePiece vocabulary instead;
        ``config``: a ``TokenizerConfig``; ``byte_tokens``: ids of SentencePiece's ``<0xNN>``
        (by default, the tokens so named)."""
        self.vocab = dict(vocab)
        self.sentencepiece = sentencepiece
        if sentencepiece is None:
            self.rules = pre_tokenizer if isinstance(pre_tokenizer, Rules) else rules_named(
                pre_tokenizer)
            self.pre_tokenizer = pre_tokenizer if isinstance(pre_tokenizer, str) else None
            check_rules(self.rules)
        else:
            self.rules, self.pre_tokenizer = None, None
        if add_prefix_space and (self.rules is None or len(self.rules.regexes) != 1):
            # The Rust library would put a space before every piece of the first split.
            raise ValueError(f"add_prefix_space is not supported with the {pre_tokenizer!r} "
                             "pre-tokenizer")
        self.add_prefix_space = add_prefix_space
        self.ignore_merges = ignore_merges or (self.rules is not None and self.rules.ignore_merges)
        self.added = {t.content: t for t in (t if isinstance(t, AddedToken) else added_token(t)
                                             for t in added_tokens)}
        self.added_tokens = {text: t.id for text, t in self.added.items()}
        self.special_tokens = {text: t.id for text, t in self.added.items() if t.special}
        self.vocab.update(self.added_tokens)
        self.id_to_token = tokens_by_id(self.vocab)
        self.vocab_size = len(self.id_to_token)
        self.ranks = MergeTable(merges, self.vocab, self.id_to_token)
        if sentencepiece is None:
            byte_tokens = ()
        elif byte_tokens is None:
            byte_tokens = [i for t, i in self.vocab.items()
                           if len(t) == 6 and re.fullmatch(r"<0x[0-9A-F]{2}>", t)]
        self.byte_tokens = set(byte_tokens)
        self.config = config if config is not None else TokenizerConfig()
        if self.pre_tokenizer is not None and self.config.pre_tokenizer != self.pre_tokenizer:
            self.config = replace(self.config, pre_tokenizer=self.pre_tokenizer)
        self.whitespace = ASCII_SPACE if self.config.strip_whitespace == "ascii" else WHITE_SPACE
        self.bos_token_id = self._config_token_id("bos_token")
        self.pad_token_id = self._config_token_id("pad_token")
        self.unk_token_id = self._config_token_id("unk_token")
        self.eos_token_id = self._config_token_id("eos_token")
        if self.config.eos_token is None:  # no config: the first familiar end-of-text token
            self.eos_token_id = next((self.special_tokens[t] for t in EOS_CANDIDATES
                                      if t in self.special_tokens), None)
        if self.add_bos_token and self.bos_token_id is None:
            raise ValueError("tokenizer config: add_bos_token is true, but there is no bos_token")
        if self.add_eos_token and self.eos_token_id is None:
            raise ValueError("tokenizer config: add_eos_token is true, but there is no eos_token")
        outside = [i for i in self.config.end_of_generation_ids or () if i >= self.vocab_size]
        if outside:
            raise ValueError(f"tokenizer config: end_of_generation_ids {outside[0]} is not a "
                             f"token id (the vocabulary has {self.vocab_size})")
        # The added tokens looked for in the text as it is, and those looked for after them in
        # the normalized text, by their normalized spelling (a tokenizer.json's two passes).
        self._added_raw = {text: t for text, t in self.added.items() if not t.normalized}
        self._added_normalized = {self._normalize(text): t
                                  for text, t in self.added.items() if t.normalized}
        self._added_pattern = longest_match_pattern(self._added_raw)
        self._normalized_pattern = longest_match_pattern(self._added_normalized)
        self._plain = not any(t.lstrip or t.rstrip or t.single_word
                              for t in self._added_raw.values())
        # The original file for to_json, kept as UTF-8: a str with one character past U+FFFF
        # (an emoji) takes four bytes for every character.
        self._source_json = (None if source_json is None
                             else source_json.encode("utf-8", "surrogatepass"))
        self._cache = {}
        self._joinable = False

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
        return bool(self.config.add_bos_token)

    @property
    def add_eos_token(self):
        """Whether ``encode(text, add_special_tokens=True)`` ends with the EOS token."""
        return bool(self.config.add_eos_token)

    @property
    def chat_template(self):
        """The chat template (Jinja text), or None."""
        return self.config.chat_template

    def with_chat_template(self, template):
        """This tokenizer with ``template`` as its chat template (a copy; this one keeps its
        own): for a model whose file carries none, or to render with another. A file's stop
        set gains the end-of-turn tokens the template writes."""
        other = copy.copy(self)
        ends = self.config.end_of_generation_ids
        if ends is not None:
            ends = tuple(sorted({*ends, *self.turn_ends(template)}))
        other.config = replace(self.config, chat_template=template, end_of_generation_ids=ends)
        return other

    def turn_ends(self, template):
        """The ids of the end-of-turn tokens (``END_OF_TURN_TOKENS``, special tokens) that
        ``template`` writes, in that list's order."""
        return [self.special_tokens[token] for token in END_OF_TURN_TOKENS
                if token in self.special_tokens and token in (template or "")]

    @property
    def eos_token_ids(self):
        """The ids that end a reply (generation's default stop tokens), EOS first: the set the
        model's own runtime stops at when its file says (``config.end_of_generation_ids``:
        llama.cpp's end-of-generation set of a GGUF file, ``generation_config.json``'s
        ``eos_token_id`` of a folder, with the EOS), then the others ascending. Otherwise the
        EOS token, and every end-of-turn token the chat template writes (for SmolLM2's
        tokenizer.json both are ``<|im_end|>``; Llama 3 adds ``<|eot_id|>``)."""
        ends = self.config.end_of_generation_ids
        if ends is not None:
            first = [self.eos_token_id] if self.eos_token_id in ends else []
            return tuple(first + sorted(set(ends) - set(first)))
        ids = [] if self.eos_token_id is None else [self.eos_token_id]
        return tuple(dict.fromkeys(ids + self.turn_ends(self.chat_template)))

    # ------------------------------------------------------------------ reading and writing

    @classmethod
    def from_json(cls, text, config=None):
        """From the text of a Hugging Face ``tokenizer.json`` and, optionally, a
        ``TokenizerConfig``; see ``minillm.text.tokenizer_files.from_tokenizer_json``."""
        return from_tokenizer_json(cls, text, config)

    @classmethod
    def from_gguf(cls, metadata):
        """From a GGUF file's metadata ({key: value}); see
        ``minillm.text.tokenizer_files.from_gguf_metadata``."""
        return from_gguf_metadata(cls, metadata)

    def to_json(self):
        """The tokenizer.json text: the original text when read with ``from_json``."""
        if self._source_json is not None:
            return self._source_json.decode("utf-8", "surrogatepass")
        return to_tokenizer_json(self)

    def __len__(self):
        """The number of ids: 1 + the largest id (vocabulary and added tokens)."""
        return self.vocab_size

    def token_to_id(self, token):
        """The id of a token string (added tokens included), or None."""
        return self.vocab.get(token)

    # ------------------------------------------------------------------ encoding

    def encode(self, text, add_special_tokens=False):
        """Token ids of ``text``: added tokens whole, the rest by BPE.

        With ``add_special_tokens`` the ids start with BOS and end with EOS as the tokenizer
        asks (how a plain prompt is encoded; a rendered chat template writes its own).
        """
        ids = []
        if add_special_tokens and self.add_bos_token:
            ids.append(self.bos_token_id)
        if self._added_pattern is None:
            self._encode_piece(text, ids, True)
        elif self._plain:  # no token strips whitespace or checks words: cut at each match
            position = 0
            for match in self._added_pattern.finditer(text):
                self._encode_piece(text[position:match.start()], ids, position == 0)
                ids.append(self._added_raw[match.group()].id)
                position = match.end()
            self._encode_piece(text[position:], ids, position == 0)
        else:
            for start, stop, token in find_added(text, self._added_pattern, self._added_raw,
                                                 self.whitespace):
                if token is None:
                    self._encode_piece(text[start:stop], ids, start == 0)
                else:
                    ids.append(token.id)
        if add_special_tokens and self.add_eos_token:
            ids.append(self.eos_token_id)
        return ids

    @property
    def _normalizes(self):
        """Whether the tokenizer.json has a normalizer: Llama 2's (SentencePiece merged by
        rank without Metaspace); the other forms have none."""
        sp = self.sentencepiece
        return (sp is not None and sp.scores is None and sp.prefix_before_space
                and not sp.split_words and sp.space_prefix != "first")

    def _normalize(self, text):
        """The text as the normalizer writes it: spaces as ``▁``, and one ``▁`` in front
        (Llama 2's ``Prepend``) unless the text is empty."""
        if not self._normalizes:
            return text
        return escape_spaces(text, self.sentencepiece.space_prefix == "every" and text != "")

    def _encode_piece(self, text, ids, at_start):
        """Append the ids of a text the raw added tokens left: its normalized added tokens,
        then the rest by BPE."""
        if self._normalized_pattern is None or not text:
            self._encode_ordinary(text, ids, at_start)
            return
        normalized = self._normalize(text)
        for start, stop, token in find_added(normalized, self._normalized_pattern,
                                             self._added_normalized, self.whitespace):
            if token is not None:
                ids.append(token.id)
            elif self._normalizes:  # already written with ▁: merged as it is
                ids.extend(self._sentencepiece(normalized[start:stop], False, escaped=True))
            else:
                self._encode_ordinary(normalized[start:stop], ids, at_start and start == 0)

    def _encode_ordinary(self, text, ids, at_start):
        """Append the ids of a text without added tokens to ``ids``."""
        if not text:
            return
        if self.sentencepiece is not None:
            ids.extend(self._sentencepiece(text, at_start))
            return
        if self.add_prefix_space and not text.startswith(" "):
            text = " " + text
        cache = self._cache
        for word in pre_tokenize(text, self.rules):
            word_ids = cache.get(word)
            if word_ids is None:
                if len(cache) >= 100_000:
                    cache.clear()
                word_ids = cache[word] = byte_level_bpe(word, self.vocab, self.ranks,
                                                        self.ignore_merges)
            ids.extend(word_ids)

    def _sentencepiece(self, text, at_start, escaped=False):
        """Ids of a text without added tokens, by SentencePiece's merges (``escaped``: the
        text is already written with ``▁``)."""
        sp = self.sentencepiece
        if not escaped:
            prefix = ((sp.space_prefix == "every" or (sp.space_prefix == "first" and at_start))
                      and (sp.prefix_before_space or not text.startswith(" ")))
            text = escape_spaces(text, prefix)
        if self._joinable is False:  # computed on first use
            self._joinable = joinable_pairs(self.vocab)
        ids = []
        # The independent parts; with split_words (Metaspace) also cut before every ▁.
        for word in independent_parts(text, self._joinable, at_spaces=sp.split_words):
            word_ids = self._cache.get(word)
            if word_ids is None:
                if sp.scores is not None:  # llama.cpp: characters merged by score
                    pieces = merge_by_priority(word, by_score(self.vocab, sp.scores))
                else:  # the Rust library: byte-fallback symbols merged by rank
                    merges = self.ranks
                    unk = self.token_of(self.unk_token_id)
                    symbols = initial_symbols(word, self.vocab, sp.byte_fallback, unk)
                    symbols = merge_by_priority(list(map(merges.symbol, symbols)),
                                                by_rank(merges), merges.join)
                    pieces = list(map(merges.text, symbols))
                word_ids = pieces_to_ids(pieces, self.vocab, self.unk_token_id)
                if len(word) < 1000:
                    if len(self._cache) >= 100_000:
                        self._cache.clear()
                    self._cache[word] = word_ids
            ids.extend(word_ids)
        return ids

    # ------------------------------------------------------------------ decoding

    def token_of(self, token_id):
        """The token string of an id, or None (None, or an id without a token)."""
        if token_id is None or not 0 <= token_id < len(self.id_to_token):
            return None
        return self.id_to_token[token_id]

    def token_bytes(self, token_id):
        """The bytes one token stands for (an added token: its text in UTF-8; a normalized one
        under Llama 2's normalizers as the Rust library decodes it, "▁</s>" as " </s>")."""
        token = self.token_of(int(token_id))
        if token is None:
            raise ValueError(f"token id {token_id} is not in the vocabulary")
        if token in self.added_tokens:
            if self.added[token].normalized and self._normalizes:
                token = self._normalize(token).replace(SPACE, " ")
            return token.encode("utf-8")
        if self.sentencepiece is not None:
            if int(token_id) in self.byte_tokens:
                return piece_bytes(token)
            return token.replace(SPACE, " ").encode("utf-8")
        return bytes(CHAR_TO_BYTE[ch] for ch in token)

    @property
    def strips_leading_space(self):
        """Whether decoding drops the space SentencePiece's prefix put before the first word."""
        return self.sentencepiece is not None and self.sentencepiece.strip_space

    def same_tokens(self, other) -> bool:
        """Whether `other` turns the same text into the same ids and back (same_tokens)."""
        return same_tokens(self, other)

    def decode(self, ids, skip_special_tokens=False):
        """The text of a sequence of ids (invalid UTF-8 becomes U+FFFD)."""
        skip = set(self.special_tokens.values()) if skip_special_tokens else set()
        data = b"".join(self.token_bytes(i) for i in ids if i not in skip)
        text = data.decode("utf-8", errors="replace")
        if self.strips_leading_space and text.startswith(" "):
            text = text[1:]
        return text

    def stream_decoder(self, skip_special_tokens=False):
        """A ``StreamDecoder`` for printing tokens as they are generated."""
        return StreamDecoder(self, skip_special_tokens)


def tokens_by_id(vocab):
    """[token of id 0, of id 1, ...] from {token: id} (None where an id has no token; of two
    tokens with one id, the later)."""
    if vocab and min(vocab.values()) < 0:
        raise ValueError("token ids must not be negative")
    tokens = [None] * (max(vocab.values()) + 1 if vocab else 0)
    for token, token_id in vocab.items():
        tokens[token_id] = token
    return tokens


def same_tokens(a: Tokenizer, b: Tokenizer) -> bool:
    """Whether two tokenizers turn the same text into the same ids and back: the same
    vocabulary, merges, added tokens and pre-tokenizer (formatting of their files aside)."""
    return a is b or (a.vocab == b.vocab and a.ranks == b.ranks and a.added == b.added
                      and a.whitespace == b.whitespace and a.rules == b.rules
                      and a.sentencepiece == b.sentencepiece)


class StreamDecoder:
    """Decode one token at a time without ever printing half a UTF-8 character.

    ``push(id)`` returns the text completed by that token (possibly ""), ``flush()`` what is
    left at the end; joined, the pieces equal ``tokenizer.decode(all_ids)``.
    """

    def __init__(self, tokenizer, skip_special_tokens=False):
        self.tokenizer = tokenizer
        self.skip = set(tokenizer.special_tokens.values()) if skip_special_tokens else set()
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._strip = tokenizer.strips_leading_space  # until the first character is out

    def _out(self, text):
        if self._strip and text:
            self._strip = False
            if text.startswith(" "):
                text = text[1:]
        return text

    def push(self, token_id):
        if token_id in self.skip:
            return ""
        return self._out(self._utf8.decode(self.tokenizer.token_bytes(token_id)))

    def flush(self):
        return self._out(self._utf8.decode(b"", final=True))


def load_tokenizer(path):
    """Read a ``tokenizer.json`` file."""
    with open(path, encoding="utf-8") as f:
        return Tokenizer.from_json(f.read())
