"""Added tokens: the tokens a text is cut at before anything else (``<|endoftext|>``, ``<s>``,
``<|im_start|>``), each matched whole, and the whitespace rules a token may carry.

The cut (the Rust library's ``AddedVocabulary.find_matches``): the text is scanned left to
right; at the first place where an added token starts, the longest one starting there is taken,
and the scan goes on after it. The text between two tokens is encoded as ordinary text. A token
may also say

* ``lstrip``: the whitespace just before it goes with it (no token of its own):
  ``"a  <mask>"`` cuts as ``"a"``, ``<mask>``;
* ``rstrip``: the whitespace just after it likewise: Phi-3's ``"<|user|>\\nHi"`` cuts as
  ``<|user|>``, ``"Hi"``;
* ``single_word``: it counts only where no word character touches it on either side; elsewhere
  the match is passed over and its text stays ordinary text. A word character is the Rust
  regex's ``\\w``: a letter, mark, decimal digit, letter number or connector (``_``), the two
  joiners U+200C/U+200D, and the circled and squared Latin letters (alphabetic symbols);
* ``normalized`` (tokenizer.json): it is looked for after the others, in the text they leave,
  once the normalizer has run on that text, spelled as the normalizer spells it (Llama 2's
  normalizers write ``"</s>"`` as ``"▁</s>"``).

Whitespace is Unicode's White_Space in a tokenizer.json (the Rust regex ``\\s``). In a GGUF
file llama.cpp sets these flags itself (``minillm.text.gguf_specials``) and strips only C's
``isspace`` characters (space, ``\\t``, ``\\n``, ``\\v``, ``\\f``, ``\\r``). llama.cpp cuts at the
longest tokens first over the whole text; that differs from the scan above only where two added
tokens overlap in the text ("ab" and "bcd" in "abcd"), which the vocabularies minillm reads do
not make.
"""
from dataclasses import dataclass
import re
import unicodedata

from .pretokenize import WHITE_SPACE

ASCII_SPACE = WHITE_SPACE[:6]  # "\t\n\v\f\r ": C's isspace, llama.cpp's whitespace
# The alphabetic symbols (Other_Alphabetic of category So): circled, squared and negative
# circled/squared Latin letters. With L*, M*, Nd, Nl, Pc and the joiners they make \w.
ALPHABETIC_SYMBOLS = ((0x24B6, 0x24E9), (0x1F130, 0x1F149), (0x1F150, 0x1F169),
                      (0x1F170, 0x1F189))


@dataclass(frozen=True)
class AddedToken:
    """One added token, as a tokenizer.json's ``added_tokens`` entry describes it."""
    id: int
    content: str
    special: bool = False
    lstrip: bool = False
    rstrip: bool = False
    single_word: bool = False
    normalized: bool = False


def added_token(entry):
    """An ``AddedToken`` from a tokenizer.json entry ({id, content, special, lstrip, ...}; a
    flag the entry leaves out is false)."""
    if not isinstance(entry.get("content"), str) or not entry["content"]:
        raise ValueError(f"added token {entry!r}: content must be a non-empty string")
    if not isinstance(entry.get("id"), int) or isinstance(entry["id"], bool):
        raise ValueError(f"added token {entry['content']!r}: id must be an integer")
    flags = {}
    for name in ("special", "lstrip", "rstrip", "single_word", "normalized"):
        value = entry.get(name, False)
        if not isinstance(value, bool):
            raise ValueError(f"added token {entry['content']!r}: {name} must be true or false, "
                             f"got {value!r}")
        flags[name] = value
    return AddedToken(entry["id"], entry["content"], **flags)


def is_word_char(char):
    """Whether a character is a word character of the Rust regex ``\\w``."""
    category = unicodedata.category(char)
    return (category[0] in "LM" or category in ("Nd", "Nl", "Pc") or char in "\u200c\u200d"
            or any(low <= ord(char) <= high for low, high in ALPHABETIC_SYMBOLS))


def find_added(text, pattern, tokens, whitespace=WHITE_SPACE):
    """The text cut at its added tokens: [(start, stop, token or None)], in order, covering
    the text (a token's span includes the whitespace it strips).

    ``pattern``: ``longest_match_pattern`` of the tokens' texts; ``tokens``: {text: AddedToken}.
    As the Rust library does, a match passed over (``single_word``) is not looked into again,
    and ``lstrip`` never reaches back past the previous token.
    """
    cuts, offset = [], 0
    for match in pattern.finditer(text):
        token = tokens[match.group()]
        start, stop = match.span()
        if token.single_word and ((start > 0 and is_word_char(text[start - 1]))
                                  or (stop < len(text) and is_word_char(text[stop]))):
            continue
        if token.lstrip:
            while start > offset and text[start - 1] in whitespace:
                start -= 1
        if token.rstrip:
            while stop < len(text) and text[stop] in whitespace:
                stop += 1
        if offset < start:
            cuts.append((offset, start, None))
        cuts.append((start, stop, token))
        offset = stop
    if offset < len(text):
        cuts.append((offset, len(text), None))
    return cuts


def longest_match_pattern(tokens):
    """A regex matching, at the leftmost place it can, the longest of ``tokens`` (None when
    there are none).

    The tokens are written as a trie, ``a(?:b(?:c)?|x)``: at each place the regex follows the
    text down the tree as far as a token ends, so it tries a few characters where a list of
    alternatives (Gemma 3 has 6,414 added tokens) would try every token.
    """
    if not tokens:
        return None
    trie = {}
    for token in tokens:
        node = trie
        for char in token:
            node = node.setdefault(char, {})
        node[""] = {}  # a token ends here

    def written(node):
        branches = []
        for char, child in node.items():
            if char:
                text = re.escape(char)
                while len(child) == 1 and "" not in child:  # a chain of single characters
                    (char, child), = child.items()
                    text += re.escape(char)
                branches.append(text + written(child))
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        return f"(?:{body})?" if "" in node else body

    try:
        return re.compile(written(trie))
    except RecursionError:  # a trie deeper than Python's recursion: the list, longest first
        return re.compile("|".join(map(re.escape, sorted(tokens, key=len, reverse=True))))
