"""Pre-tokenizers: cutting a text into words before BPE, by llama.cpp's named rules.

A pre-tokenizer is a list of regular expressions applied one after the other: the first cuts
the text into its matches and the stretches between them, the second cuts each of those pieces
again, and so on (the Rust library's ``Split`` with behavior "Isolated"; llama.cpp's
``unicode_regex_split``). GPT-2's one regex is::

    's|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+

A GGUF file names its rules (``tokenizer.ggml.pre``); ``PRE_TOKENIZERS`` holds every name
llama.cpp writes for byte-level BPE that this module can run, spelled as llama.cpp spells it,
with llama.cpp's regexes (src/llama-vocab.cpp, ``llm_tokenizer_bpe``) and the two flags it sets
by name: ``ignore_merges`` (a word that is a whole token is that token, before any merge) and
``add_bos`` (its default when the file has no ``add_bos_token``). A file without a name gets
llama.cpp's "default" rules, which are not GPT-2's: runs of punctuation first, then GPT-2's
regex, then runs of numbers, then ASCII digits in threes.

Python's ``re`` has no ``\\p{...}`` classes, so each is written out from the Unicode database
(``class_body``): L (letters: exactly ``str.isalpha``), N, P, M, S by general category,
and ``\\s`` the Unicode White_Space property, as in llama.cpp's tables and the Rust library's
regex engine (Python's ``\\s`` would also take U+001C..U+001F). llama.cpp runs the regexes that
are not GPT-2's or Llama 3's on a "collapsed" text, one byte per character standing for its
category; the written-out classes match the same characters. ``$`` is the end of the piece
(ECMAScript and Oniguruma; Python's ``$`` would also match before a final newline). What
remains different: a character assigned in a newer Unicode version than this Python's
``unicodedata`` is classed as "other".

ASCII text runs on the short ASCII classes. Other text runs collapsed, as llama.cpp runs most:
each non-ASCII character is replaced by one private-use character standing for its class
(``STAND_INS``: letter, number, punctuation, mark, symbol, white space, other), the regex runs
with the ASCII classes plus those stand-ins, and the text is cut where the collapsed text was
cut. That holds for a regex whose only view of non-ASCII characters is through the classes
(``collapsible``); any other (one naming non-ASCII characters, or using ``\\w`` or ``\\d``) runs
on the text with the classes written out from the whole Unicode database, built on first use
(a fraction of a second each). The collapsed form costs nothing to set up: a character's
class is looked up the first time it is met.
"""
from dataclasses import dataclass
import functools
import re
import unicodedata

# The Unicode White_Space property (PropList.txt): llama.cpp's whitespace and the Rust library's \s.
WHITE_SPACE = ("\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
               "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")

# GPT-2's regex as the Rust library writes it, and as llama.cpp does (without the final \s+,
# which changes nothing under an isolating split: a lone space run is a piece either way).
GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
# Llama 3's as in its tokenizer.json, and as llama.cpp rewrites the case-blind contractions.
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
LLAMA3 = (CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
         r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
DIGIT_REGEX = r"\p{N}"  # every digit a piece of its own
DIGITS_REGEX = r"\p{N}+"
DEEPSEEK3 = (r"\p{N}{1,3}", "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
             r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^" "\r\n"
             r"\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[" "\r\n" r"]*|\s*[" "\r\n"
             r"]+|\s+(?!\S)|\s+")
# llama.cpp's forms of [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] and [\p{Ll}\p{Lm}\p{Lo}\p{M}]: a letter
# that is not a-z, a letter that is not A-Z (after an optional non-letter, non-number).
BEFORE, UPPER, LOWER = r"[^\r\n\p{L}\p{N}]?", r"((?=[\p{L}])([^a-z]))", r"((?=[\p{L}])([^A-Z]))"
PORO = " ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+"


@dataclass(frozen=True)
class Rules:
    """A pre-tokenizer: its regexes (applied in turn), whether a word that is in the
    vocabulary is taken whole before merging, llama.cpp's default for adding BOS, and whose
    regex engine runs it: "llama.cpp" (named rules of a GGUF file) or "tokenizers" (the Rust
    library, for a tokenizer.json)."""
    regexes: tuple
    ignore_merges: bool = False
    add_bos: bool = False
    engine: str = "llama.cpp"


_RULES_BY_FAMILY = {
    # llama.cpp's LLAMA_VOCAB_PRE_TYPE_DEFAULT
    ("default",): Rules((r"[\p{P}\$\+<=>\^~\|]+", GPT2, DIGITS_REGEX, "[0-9][0-9][0-9]")),
    ("gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0",
     "mellum", "modern-bert", "exaone4", "mpt", "olmo", "jais", "trillion",
     "granite-docling"): Rules((GPT2,)),
    ("starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b",
     "mellum2"): Rules((DIGIT_REGEX, GPT2)),
    ("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
     "jina-v5-nano"): Rules((LLAMA3,), ignore_merges=True, add_bos=True),
    ("dbrx", "smaug-bpe"): Rules((LLAMA3,)),
    ("glm4", "chatglm-bpe"): Rules((LLAMA3,)),
    ("qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2", "hunyuan",
     "solar-open"): Rules((QWEN2,)),
    ("qwen35",): Rules((CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
                        r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",)),
    ("falcon",): Rules((r"[\p{P}\$\+<=>\^~\|`]+", GPT2, "[0-9][0-9][0-9]")),
    ("deepseek-llm",): Rules((
        "[\r\n]",
        "\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293"
        "\u0295-\u02af\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c"
        "\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5"
        "\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77"
        "\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59"
        "\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc"
        "\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107"
        "\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139"
        "\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee"
        "\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e"
        "\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f"
        "\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2"
        "\U000118a0-\U000118df\U0001e900-\U0001e943]+",
        "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+",
        "\\s+$",
        "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+",
        r"\p{N}+")),
    ("deepseek-coder",): Rules((
        "[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+",
        r"\p{N}")),
    ("deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"): Rules(DEEPSEEK3),
    ("poro-chat", "bloom", "gpt3-finnish"): Rules((PORO,)),
    ("viking",): Rules((PORO, r"\p{N}")),
    ("seed-coder",): Rules((CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}"
                            r"| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+",)),
    ("grok-2",): Rules((QWEN2,)),
    ("ufakzeka",): Rules((r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                          r"|\s*[\r\n]+|\s+(?!\S)|\s+",)),
    ("bailingmoe", "bailingmoe2", "llada-moe"): Rules((
        r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
        r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+",)),
    ("minicpm5",): Rules((r"\p{N}{1,3}", CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+"
                          r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
                         ignore_merges=True),
    ("laguna",): Rules(("[^\\n]+|[\\n]+", QWEN2)),
    ("jais-2",): Rules((CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                        r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s{512}(?!\S)|\s{256}(?!\S)"
                        r"|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)"
                        r"|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1}",)),
    ("exaone-moe",): Rules((CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+"
                            r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+",)),
    ("tekken",): Rules((BEFORE + UPPER + "*" + LOWER + "+|" + BEFORE + UPPER + "+" + LOWER
                        + r"*|\p{N}"
                        r"| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",),
                       ignore_merges=True, add_bos=True),
    ("gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"): Rules((
        BEFORE + UPPER + "*" + LOWER + "+" + CONTRACTIONS + "?|" + BEFORE + UPPER + "+" + LOWER
        + "*" + CONTRACTIONS + r"?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)"
        r"|\s+",)),
    ("chameleon",): Rules(("<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
                           "([\\t\\n]|    |  )", r"\p{N}", r"[\p{P}!-/:-@\[-`{-~]", GPT2),
                          add_bos=True),
    ("spark2_5",): Rules((r"\p{N}{1,3}", DEEPSEEK3[1],
                          r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^" "\r\n"
                          r"\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+|[" "\r\n"
                          r"]|\s+(?!\S)|\s+", r"\p{N}")),
}

# Every name, as llama.cpp spells it in `tokenizer.ggml.pre`.
PRE_TOKENIZERS = {name: rules for names, rules in _RULES_BY_FAMILY.items() for name in names}


def rules_named(name):
    """The ``Rules`` of a llama.cpp pre-tokenizer name; an unknown name is a ValueError."""
    if name not in PRE_TOKENIZERS:
        raise ValueError(f"pre-tokenizer {name!r} is not supported; minillm runs llama.cpp's "
                         f"byte-level BPE rules {', '.join(sorted(PRE_TOKENIZERS))}")
    return PRE_TOKENIZERS[name]


# ---------------------------------------------------------------------- Unicode classes

MAJOR_CATEGORIES = "LNPMS"


@functools.lru_cache(maxsize=None)
def unicode_category(major, ascii_only=False):
    """All characters of the general categories ``major``* (L, N, P, M or S), as a string.

    A scan of the Unicode database, done once per category (a fraction of a second).
    """
    chars = "".join(map(chr, range(128 if ascii_only else 0x110000)))
    if major == "L":
        return "".join(filter(str.isalpha, chars))  # isalpha is exactly L*
    if major == "N":  # every character of category N has a numeric value
        chars = "".join(filter(str.isnumeric, chars))
    else:  # P, M and S are printable, neither letters nor numbers (a quick first cut)
        chars = "".join(ch for ch in filter(str.isprintable, chars)
                        if not ch.isalpha() and not ch.isnumeric())
    category = unicodedata.category
    return "".join(ch for ch in chars if category(ch)[0] == major)


def unicode_categories():
    """{major category letter: all characters of it} for L, N, P, M, S."""
    return {major: unicode_category(major) for major in MAJOR_CATEGORIES}


def unicode_letters_and_numbers():
    """All characters of the categories L* (letters) and N* (numbers), as two strings."""
    return unicode_category("L"), unicode_category("N")


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


@functools.lru_cache(maxsize=None)
def class_body(name, ascii_only=False):
    """The body of the class ``\\p{X}`` (X a major category) or ``\\s``, for all of Unicode or
    ASCII only; None for another name."""
    if name == r"\s":
        return _class_body(WHITE_SPACE[:6] if ascii_only else WHITE_SPACE)
    major = name[3:-1] if name.startswith(r"\p{") else None
    if major is None or len(major) != 1 or major not in MAJOR_CATEGORIES:
        return None
    return _class_body(unicode_category(major, ascii_only))


def to_python_regex(regex, classes):
    """A regex of llama.cpp or the Rust library rewritten for Python's ``re``.

    ``\\p{X}`` and ``\\s`` become the classes ``classes(name)`` gives (inside ``[...]``, their
    bodies), ``\\S`` becomes ``[^spaces]``, ``$`` the end of the text ``\\Z``, and a capturing
    group a plain one (``re.split`` would return what groups capture). Anything else these
    regexes use (``(?i:...)``, ``(?!...)``, ``{1,3}``, escapes) means the same in both dialects;
    another ``\\p{...}`` class is refused.
    """
    out, in_class, spaces = [], False, classes(r"\s")
    pieces = re.findall(r"\\p\{\w+\}|\\.|.", regex, flags=re.DOTALL)
    for i, piece in enumerate(pieces):
        if piece.startswith(r"\p{"):
            body = classes(piece)
            if body is None:
                raise ValueError(f"regex {regex!r}: the class {piece} is not supported")
            # An empty class (no ASCII mark) matches nothing: "[]" would not parse.
            out.append(body if in_class else f"[{body}]" if body else "(?!)")
        elif piece == r"\s":
            out.append(spaces if in_class else f"[{spaces}]")
        elif piece == r"\S":
            if in_class:
                raise ValueError(f"regex {regex!r}: \\S inside a character class")
            out.append(f"[^{spaces}]")
        elif piece == "$" and not in_class:
            out.append(r"\Z")
        elif piece == "(" and not in_class and pieces[i + 1:i + 2] != ["?"]:
            out.append("(?:")
        else:
            if piece == "[" and not in_class:
                in_class = True
            elif piece == "]" and in_class:
                in_class = False
            out.append(piece)
    return "".join(out)


@functools.lru_cache(maxsize=None)
def split_pattern(regex, ascii_only=False):
    """A pre-tokenizer regex compiled for Python, with the ASCII or the full Unicode classes.

    The ASCII pattern gives the same words as the full one on ASCII text, and only there.
    The whole regex is one capturing group, so that ``split`` keeps the matches.
    """
    classes = functools.partial(class_body, ascii_only=ascii_only)
    return re.compile("(" + to_python_regex(regex, classes) + ")")


def check_rules(rules):
    """Compile every regex of ``rules`` once, so that a regex Python cannot run is refused
    when the tokenizer is built (a ValueError naming it), not on the first text."""
    for regex in rules.regexes:
        try:
            split_pattern(regex, ascii_only=True)
        except (ValueError, re.error) as error:
            raise ValueError(f"pre-tokenizer regex {regex!r} is not supported: {error}") from None


ASCII_PATTERN = split_pattern(GPT2_REGEX, ascii_only=True)


# ---------------------------------------------------------------------- the collapsed text

# The private-use characters that stand for the classes of non-ASCII characters in the
# collapsed text ("s": white space; "": any other character).
STAND_INS = {"L": "\ue000", "N": "\ue001", "P": "\ue002", "M": "\ue003", "S": "\ue004",
             "s": "\ue005", "": "\ue006"}
# The non-ASCII characters that Python's re, ignoring case, takes for ASCII letters (İ, ı, ſ
# and the Kelvin sign; tests/test_tokenizer_memory.py checks there are no others): they stay as
# they are, so that Llama 3's (?i:'s) still matches "'ſ".
CASE_FOLDS_TO_ASCII = "\u0130\u0131\u017f\u212a"


def character_class(char):
    """The key of ``STAND_INS`` for a character: "s" for white space, else the major general
    category among L, N, P, M, S, else ""."""
    if char in WHITE_SPACE:
        return "s"
    major = unicodedata.category(char)[0]
    return major if major in MAJOR_CATEGORIES else ""


class _StandIns(dict):
    """str.translate's table from a code point to the collapsed text's, filled in as characters
    are met (at most 2**16 of them kept): ASCII characters and ``CASE_FOLDS_TO_ASCII`` stay,
    any other becomes the stand-in of its class."""

    def __missing__(self, code):
        char = chr(code)
        if code < 128 or char in CASE_FOLDS_TO_ASCII:
            collapsed = code
        else:
            collapsed = ord(STAND_INS[character_class(char)])
        if len(self) < 1 << 16:
            self[code] = collapsed
        return collapsed


COLLAPSE = _StandIns()


def collapse(text):
    """The collapsed text: as long as ``text``, each non-ASCII character its class's stand-in."""
    return text.translate(COLLAPSE)


# Escapes that look at a character only through the classes (or not at all), besides \p{..}
# and escaped punctuation.
_CLASS_ESCAPES = {r"\s", r"\S", r"\r", r"\n", r"\t", r"\f", r"\v"}


@functools.lru_cache(maxsize=None)
def collapsible(regex):
    """Whether ``regex`` cuts the collapsed text where it would cut the text itself.

    It does when it has ``\\p{..}`` classes (else the collapsed text gains nothing), all its
    characters are ASCII, its escapes are ``\\p{..}``, ``\\s``, ``\\S``, ``\\r``, ``\\n``,
    ``\\t``, ``\\f``, ``\\v`` or punctuation (not ``\\w``, ``\\d``, ``\\b`` or a back
    reference, which see the characters themselves), and a part that ignores case, ``(?i:...)``,
    holds literal characters only (ignoring case, a class could take a character for its
    other-case partner of another category).
    """
    if r"\p{" not in regex or not regex.isascii():
        return False
    pieces = re.findall(r"\\p\{\w+\}|\\.|.", regex, flags=re.DOTALL)
    depth, ignoring_case, in_class = 0, None, False
    for i, piece in enumerate(pieces):
        if len(piece) == 2 and piece[0] == "\\" and piece[1].isalnum() and (
                piece not in _CLASS_ESCAPES):
            return False
        if ignoring_case is not None and (piece in ("[", ".", r"\s", r"\S")
                                          or piece.startswith(r"\p")):
            return False
        if in_class:
            in_class = piece != "]"
        elif piece == "[":
            in_class = True
        elif piece == "(":
            depth += 1
            flags = ""
            if pieces[i + 1:i + 2] == ["?"]:
                for flag in pieces[i + 2:]:
                    if not (flag.isalpha() or flag == "-"):
                        break
                    flags += flag
            if "i" in flags and ignoring_case is None:
                if pieces[i + 2 + len(flags):i + 3 + len(flags)] != [":"]:
                    return False  # (?i) for the whole regex
                ignoring_case = depth
        elif piece == ")":
            if ignoring_case == depth:
                ignoring_case = None
            depth -= 1
    return True


@functools.lru_cache(maxsize=None)
def collapsed_class_body(name):
    """The body of the class ``name`` (as ``class_body``) for the collapsed text: its ASCII
    characters and its stand-in (and, for letters, ``CASE_FOLDS_TO_ASCII``)."""
    body = class_body(name, ascii_only=True)
    if body is None:
        return None
    key = "s" if name == r"\s" else name[3:-1]
    return body + STAND_INS[key] + (CASE_FOLDS_TO_ASCII if key == "L" else "")


@functools.lru_cache(maxsize=None)
def collapsed_pattern(regex):
    """A collapsible pre-tokenizer regex compiled for the collapsed text (one capturing group,
    as ``split_pattern``)."""
    return re.compile("(" + to_python_regex(regex, collapsed_class_body) + ")")


def split_collapsed(pattern, text):
    """``split_isolated`` of the collapsed text, the pieces cut from ``text`` itself."""
    pieces, start = [], 0
    for piece in pattern.split(collapse(text)):
        if piece:
            pieces.append(text[start:start + len(piece)])
            start += len(piece)
    return pieces


def gpt2_split_pattern():
    """GPT-2's word pattern for any Unicode text, with \\p{L}, \\p{N} and \\s spelled out."""
    return split_pattern(GPT2_REGEX)


def split_isolated(pattern, text):
    """Every match of ``pattern`` and every stretch of text between two matches, in order.

    (The Rust library's ``Split`` with behavior "Isolated".) The pieces add up to ``text``.
    ``re.split`` gives text, match, text, match, ..., text, some of it empty.
    """
    return [piece for piece in pattern.split(text) if piece]


# llama.cpp runs a regex without \p{...} classes on the text with every non-ASCII white space
# character replaced by a vertical tab (C++'s std::wregex knows no Unicode white space).
_WIDE_SPACES = {ord(ch): "\x0b" for ch in WHITE_SPACE if ord(ch) > 127}


def split_isolated_wide(pattern, text):
    """``split_isolated`` as llama.cpp's std::wregex sees ``text``: matched on the text with
    non-ASCII white space made vertical tabs (one character each), cut in the original."""
    seen = text.translate(_WIDE_SPACES)
    if seen == text:
        return split_isolated(pattern, text)
    pieces, start = [], 0
    for match in pattern.finditer(seen):
        pieces += [text[start:match.start()], text[match.start():match.end()]]
        start = match.end()
    pieces.append(text[start:])
    return [piece for piece in pieces if piece]


def pre_tokenize(text, rules):
    """The words of ``text`` (a text without added tokens) under ``rules`` (``Rules``, or a
    name of ``PRE_TOKENIZERS``): the regexes applied in turn, each to the pieces the one
    before left."""
    if isinstance(rules, str):
        rules = rules_named(rules)
    ascii_only = text.isascii()
    pieces = [text]
    for regex in rules.regexes:
        if ascii_only:
            pattern, split = split_pattern(regex, ascii_only=True), split_isolated
        elif collapsible(regex):
            pattern, split = collapsed_pattern(regex), split_collapsed
        else:
            pattern = split_pattern(regex)
            split = (split_isolated_wide if rules.engine == "llama.cpp" and r"\p{" not in regex
                     else split_isolated)
        pieces = [word for piece in pieces for word in split(pattern, piece)]
    return pieces
