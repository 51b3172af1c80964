"""A regular expression, read: the pattern's text to a tree of four kinds of node.

    node := ("chars", ranges)           one character from a set of code points
          | ("cat", [node, ...])        one after the other ("cat", []) is the empty text
          | ("alt", [node, ...])        any one of them
          | ("repeat", node, m, n)      node m to n times (n None: no upper bound)

The subset read, and nothing else (anything outside it is an error naming it):
literals; classes [a-z], [^...] with ranges and escapes; `.` (any character but a newline);
`|`; groups (...) and (?:...); the quantifiers ? * + {m} {m,} {,n} {m,n} (a lazy `?` after one
changes which match a search finds, not the language, so it is read and ignored); escapes
\\d \\w \\s and their negations, ASCII as Python's re.ASCII reads them, \\n \\t \\r \\f \\v \\0,
\\xHH, \\uHHHH, and a backslash before any other punctuation for that character. The match is
anchored at both ends, as re.fullmatch: a `^` first and a `$` last say so again and are
dropped. A set of code points is a sorted list of disjoint (low, high) pairs; the surrogates
(U+D800 to U+DFFF), which no UTF-8 text holds, are never in one.
"""
from __future__ import annotations

MAX_CODE_POINT = 0x10FFFF
SURROGATES = (0xD800, 0xDFFF)
MAX_REPEAT = 1000  # the largest bound of {m,n}: the automaton grows with it
DIGITS = [(48, 57)]
WORD = [(48, 57), (65, 90), (95, 95), (97, 122)]
SPACE = [(9, 13), (32, 32)]
NAMED_CLASSES = {"d": DIGITS, "w": WORD, "s": SPACE}
CONTROL_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v", "0": "\0"}


def parse(pattern: str, negations_within: int = MAX_CODE_POINT):
    """The tree of `pattern`; a ValueError saying where it leaves the subset. \\D \\W \\S,
    and a [^...] holding \\d \\w \\s or those, keep only the code points up to
    `negations_within` (JSON Schema's: ASCII, so that Unicode's reading agrees)."""
    reader = Reader(pattern, negations_within)
    if pattern.startswith("^"):
        reader.at = 1
    tree = alternation(reader)
    if ends_in_anchor(reader):
        reader.at += 1
    if reader.at < len(pattern):
        reader.fail("unexpected " + repr(pattern[reader.at]) + (" (anchors are read only at "
                    "the very start and end)" if pattern[reader.at] in "^$" else ""))
    return tree


def literal(text: str):
    """The tree that matches exactly `text`."""
    return ("cat", [("chars", [(ord(c), ord(c))]) for c in text])


class Reader:
    """The pattern and where the parser is in it."""

    def __init__(self, pattern: str, negations_within: int = MAX_CODE_POINT):
        self.pattern, self.at, self.negations_within = pattern, 0, negations_within

    def peek(self) -> str:
        return self.pattern[self.at] if self.at < len(self.pattern) else ""

    def take(self) -> str:
        if self.at >= len(self.pattern):
            self.fail("the pattern ends too soon")
        self.at += 1
        return self.pattern[self.at - 1]

    def fail(self, why: str):
        raise ValueError(f"regex {self.pattern!r}, at {self.at}: {why}")


def alternation(reader: Reader):
    """branch ( '|' branch )*"""
    branches = [concatenation(reader)]
    while reader.peek() == "|":
        reader.take()
        branches.append(concatenation(reader))
    return branches[0] if len(branches) == 1 else ("alt", branches)


def concatenation(reader: Reader):
    """quantified atoms until '|', ')' or the end."""
    items = []
    while reader.peek() not in ("", "|", ")") and not ends_in_anchor(reader):
        items.append(quantified(reader, atom(reader)))
    return items[0] if len(items) == 1 else ("cat", items)


def ends_in_anchor(reader: Reader) -> bool:
    """Whether the reader is at a `$` that is the pattern's last character (the end anchor)."""
    return reader.peek() == "$" and reader.at == len(reader.pattern) - 1


def quantified(reader: Reader, node):
    """node, or node followed by one of ? * + {m} {m,} {m,n} (and a lazy `?`): a second
    quantifier is refused as re refuses it, and re's possessive `*+` (which changes the
    language) is not read."""
    c = reader.peek()
    if c in ("?", "*", "+"):
        reader.take()
        low, high = {"?": (0, 1), "*": (0, None), "+": (1, None)}[c]
    elif c == "{" and bounds_follow(reader, reader.at):
        low, high = bounds(reader)
    else:
        return node
    if reader.peek() == "?":  # lazy: the same language
        reader.take()
    if reader.peek() in ("?", "*", "+") or (reader.peek() == "{"
                                            and bounds_follow(reader, reader.at)):
        reader.fail("multiple repeat (a possessive quantifier is not read; group the "
                    "repeated part to repeat it again)")
    return ("repeat", node, low, high)


def bounds_follow(reader: Reader, brace: int) -> bool:
    """Whether the '{' at `brace` opens {m}, {,n}, {m,} or {m,n} (else it is a literal
    brace, as in re)."""
    rest = reader.pattern[brace + 1:]
    close = rest.find("}")
    inside = rest[:close].split(",") if close > 0 else []
    return (len(inside) == 1 and inside[0].isdigit()) or (
        len(inside) == 2 and inside != ["", ""] and all(p.isdigit() or p == "" for p in inside))


def bounds(reader: Reader):
    """(m, n) of {m}, {m,} (n None) or {m,n}."""
    reader.take()
    text = ""
    while reader.peek() != "}":
        text += reader.take()
    reader.take()
    low, _, high = text.partition(",")
    low, high = int(low or 0), (int(low) if "," not in text else int(high) if high else None)
    if max(low, high or 0) > MAX_REPEAT or (high is not None and high < low):
        reader.fail(f"{{{text}}}: bounds must be m <= n <= {MAX_REPEAT}")
    return low, high


def char_class(reader: Reader):
    """The code points of [...], after its '['."""
    negated = reader.peek() == "^"
    if negated:
        reader.take()
    ranges, first, named = [], True, False
    while reader.peek() != "]" or first:
        first = False
        named |= reader.pattern[reader.at:reader.at + 2].lower() in ("\\d", "\\w", "\\s")
        low = class_member(reader)
        if reader.peek() == "-" and reader.pattern[reader.at + 1:reader.at + 2] not in ("]", ""):
            reader.take()
            high = class_member(reader)
            if len(low) != 1 or len(high) != 1 or low[0][0] != low[0][1] \
                    or high[0][0] != high[0][1] or high[0][0] < low[0][0]:
                reader.fail("a bad range in a class")
            low = [(low[0][0], high[0][0])]
        ranges += low
    reader.take()
    ranges = normalized(ranges)
    if negated and named:  # [^\w] within the bound too: the complement of a narrowed set
        return [(low, min(high, reader.negations_within)) for low, high in complement(ranges)
                if low <= reader.negations_within]
    return complement(ranges) if negated else ranges


def class_member(reader: Reader):
    """One character of a class, or an escape's set."""
    c = reader.take()
    if c == "\\":
        return escape(reader)
    if c == "[":
        reader.fail("nested classes and [: :] names are not read")
    return [(ord(c), ord(c))]


def escape(reader: Reader):
    """The code points of the escape after a backslash."""
    c = reader.take()
    if c.lower() in NAMED_CLASSES:
        ranges = NAMED_CLASSES[c.lower()]
        if c.isupper():
            top = reader.negations_within
            return [(low, min(high, top)) for low, high in complement(ranges) if low <= top]
        return ranges
    if c in CONTROL_ESCAPES:
        return [(ord(CONTROL_ESCAPES[c]),) * 2]
    if c in "xu":
        digits = reader.pattern[reader.at:reader.at + (2 if c == "x" else 4)]
        if len(digits) != (2 if c == "x" else 4) or not all(d in "0123456789abcdefABCDEF"
                                                            for d in digits):
            reader.fail(f"\\{c} needs {2 if c == 'x' else 4} hexadecimal digits")
        reader.at += len(digits)
        return normalized([(int(digits, 16),) * 2])
    if c.isalnum():
        reader.fail(f"the escape \\{c} is not read (the subset: \\d \\w \\s \\D \\W \\S, "
                    "\\n \\t \\r \\f \\v \\0, \\xHH, \\uHHHH, and punctuation)")
    return [(ord(c), ord(c))]


def normalized(ranges):
    """Sorted, disjoint, adjacent ranges merged, the surrogates taken out."""
    merged = []
    for low, high in sorted(ranges):
        if merged and low <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], high))
        else:
            merged.append((low, high))
    out = []
    for low, high in merged:  # cut the surrogates out of every range
        if low < SURROGATES[0]:
            out.append((low, min(high, SURROGATES[0] - 1)))
        if high > SURROGATES[1]:
            out.append((max(low, SURROGATES[1] + 1), high))
    return out


def complement(ranges):
    """Every code point (but the surrogates) not in `ranges`."""
    out, start = [], 0
    for low, high in normalized(ranges):
        if low > start:
            out.append((start, low - 1))
        start = high + 1
    if start <= MAX_CODE_POINT:
        out.append((start, MAX_CODE_POINT))
    return normalized(out)


def atom(reader: Reader):
    """(Last, as it closes the loop back to alternation.) A group, a class, '.', an escape or a literal character."""
    c = reader.take()
    if c == "(":
        if reader.pattern.startswith("?:", reader.at):
            reader.at += 2
        elif reader.peek() == "?":
            reader.fail("only (...) and (?:...) groups are read")
        inside = alternation(reader)
        if reader.peek() != ")":
            reader.fail("a group is not closed")
        reader.take()
        return inside
    if c == "[":
        return ("chars", char_class(reader))
    if c == ".":
        return ("chars", complement([(10, 10)]))
    if c == "\\":
        return ("chars", escape(reader))
    if c in "*+?)" or (c == "{" and bounds_follow(reader, reader.at - 1)):
        reader.fail(f"{c!r} has nothing to repeat or close")
    if c in "^$":
        reader.fail("anchors are read only at the very start and end")
    return ("chars", [(ord(c), ord(c))])
