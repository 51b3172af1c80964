"""Thompson's construction: a pattern's tree to a nondeterministic automaton over bytes.

Over bytes, not characters, because a token is a string of bytes: a byte-level BPE token may
hold half of a character's UTF-8 encoding (the first byte of "é"), and the index must walk a
token's bytes through the automaton on their own. So each set of code points becomes the
alternatives of its UTF-8 encodings, as byte ranges (Cox, "Regular Expression Matching Can
Be Simple And Fast"; the split into byte ranges is RE2's and Rust regex's):

    [a-zé]  ->  [61-7A] | C3 [A9-A9]

The automaton (NFA) is two lists indexed by state: `edges[s]`, the (low, high, target) of
every byte-range edge, and `empty[s]`, the targets of edges that read nothing (epsilon).
Each node of the tree becomes a fragment, a (start, end) pair of fresh states:

    chars     start --byte ranges--> end
    cat       a.end --e--> b.start, one after the other
    alt       start --e--> each branch's start; each branch's end --e--> end
    repeat    m copies in a row, then n - m optional ones (or a loop, n None)
"""
from __future__ import annotations

from dataclasses import dataclass, field

MAX_NFA_STATES = 200_000  # a pattern larger than this is refused before it is built
UTF8_LIMITS = (0x7F, 0x7FF, 0xFFFF)  # the last code points of one, two, three bytes


@dataclass
class NFA:
    """The automaton as it is built: states are indexes into both lists."""

    edges: list = field(default_factory=list)  # edges[s]: [(low, high, target), ...]
    empty: list = field(default_factory=list)  # empty[s]: [target, ...]

    def state(self) -> int:
        if len(self.edges) >= MAX_NFA_STATES:
            raise ValueError(f"the pattern is too large: more than {MAX_NFA_STATES} automaton "
                             "states (long bounded repeats {m,n} multiply it)")
        self.edges.append([])
        self.empty.append([])
        return len(self.edges) - 1


def thompson(tree) -> tuple[NFA, int, int]:
    """(nfa, start, accept): the automaton of the tree, one start state, one accepting state."""
    nfa = NFA()
    start, end = fragment(nfa, tree)
    return nfa, start, end


def fragment(nfa: NFA, node) -> tuple[int, int]:
    """(start, end) of a fresh piece of automaton that reads exactly the texts of `node`."""
    kind = node[0]
    if kind == "chars":
        start, end = nfa.state(), nfa.state()
        for sequence in utf8_sequences(node[1]):
            at = start
            for i, (low, high) in enumerate(sequence):
                to = end if i == len(sequence) - 1 else nfa.state()
                nfa.edges[at].append((low, high, to))
                at = to
        return start, end
    if kind == "cat":
        start = end = nfa.state()
        for part in node[1]:
            first, last = fragment(nfa, part)
            nfa.empty[end].append(first)
            end = last
        return start, end
    if kind == "alt":
        start, end = nfa.state(), nfa.state()
        for branch in node[1]:
            first, last = fragment(nfa, branch)
            nfa.empty[start].append(first)
            nfa.empty[last].append(end)
        return start, end
    _, inner, low, high = node  # repeat
    start = end = nfa.state()
    for _ in range(low):  # the m copies that must be there
        first, last = fragment(nfa, inner)
        nfa.empty[end].append(first)
        end = last
    if high is None:  # then any number more: a loop back from the copy's end
        first, last = fragment(nfa, inner)
        nfa.empty[end].append(first)
        nfa.empty[last].append(first)
        nfa.empty[end].append(last)  # or none
        return start, last
    done = nfa.state()
    for _ in range(high - low):  # up to n - m optional copies, each may end the repeat
        nfa.empty[end].append(done)
        first, last = fragment(nfa, inner)
        nfa.empty[end].append(first)
        end = last
    nfa.empty[end].append(done)
    return start, done


def utf8_sequences(ranges):
    """The UTF-8 encodings of a set of code points as sequences of byte ranges: every code
    point of the set encodes to exactly one sequence's bytes, one byte in each range.

    A range is first cut where the encoding's length changes, then where its lower or upper
    code point leaves continuation bits free below a shared prefix, until the encodings of
    its ends differ byte by byte in ranges that hold exactly the range.
    """
    out, todo = [], list(reversed(ranges))
    while todo:
        low, high = todo.pop()
        cut = next((limit for limit in UTF8_LIMITS if low <= limit < high), None)
        if cut is not None:  # lengths differ: one piece per length
            todo += [(cut + 1, high), (low, cut)]
            continue
        if high <= 0x7F:
            out.append([(low, high)])
            continue
        for bits in (6, 12, 18):  # the last 1, 2, 3 continuation bytes
            mask = (1 << bits) - 1
            if low & ~mask != high & ~mask:  # a prefix differs above these bytes
                if low & mask:  # low does not start a full block: cut it off
                    todo += [((low | mask) + 1, high), (low, low | mask)]
                    break
                if high & mask != mask:  # nor does high end one
                    todo += [(high & ~mask, high), (low, (high & ~mask) - 1)]
                    break
        else:
            out.append(list(zip(chr(low).encode("utf-8"), chr(high).encode("utf-8"))))
    return out
