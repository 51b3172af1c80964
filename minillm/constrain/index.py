"""The index over the vocabulary: for a state of the automaton, which tokens may come next
and where each leads (Willard and Louf, "Efficient Guided Generation for Large Language
Models", 2023, algorithm 4):

    row(s)[t] = walk(s, bytes(t))   if that walk stays inside the automaton: t is allowed
              = -1                  otherwise: t is masked

A token's text is what the tokenizer decodes it to, its bytes (`token_bytes`): a byte-level
BPE piece as the bytes it stands for, half a character included; a SentencePiece piece with
its "▁" as a space (the space a word's first piece carries in the middle of a text, where
generated text always is: the decoder read the prompt first), a <0xNN> piece as its byte.
Special tokens are never text: they are left out (the end-of-generation ones come back in
the constraint, allowed exactly in accepting states), and so are tokens whose text is empty
(they would leave the state where it is, a loop the output could take forever).

Rows are built when a state is first reached and kept (lazily), or all at once (`full`):
the same rows either way (tests/test_constrain.py). NumPy walks every token at once, a byte
at a time, through the vocabulary's byte trie: its nodes are the distinct beginnings of the
tokens' texts (fewer than their bytes: tokens share beginnings), each walked once, and only
below the nodes still inside the language. The vocabulary is read once per tokenizer and kept
while the tokenizer lives.

A dead end (a state where the model may emit nothing) cannot happen: every state of the
trimmed automaton has a path of bytes to an accepting state, and when that path can be
spelled with one-byte tokens from every state the tokens can reach (every byte-level BPE
vocabulary has a one-byte token for each byte of UTF-8 text but a few never used, and
SentencePiece's with byte fallback for each byte), the model is never stuck: from every
state some token is allowed, or it accepts and the end tokens are. The states the tokens can
reach are those reached through bytes that some token holds (a byte no token holds, such as
the lead byte of characters no text uses, is never produced). A vocabulary where this fails
is `pruned`: the whole index is built, and tokens leading to states from which no token
sequence reaches acceptance are masked too, until every state left can finish.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import numpy as np

from .dfa import reachable


@dataclass(frozen=True)
class Vocabulary:
    """The tokenizer's tokens as the index reads them: each token's text, and their byte
    trie, whose N nodes are the distinct beginnings of the texts, numbered by length, then
    in byte order (so that the children of a node are consecutive)."""

    lengths: np.ndarray  # (n,) int: each token's byte count; 0 for tokens that are not text
    ends: tuple  # the end-of-generation ids
    pieces: list  # each token's bytes, None for those that are not text
    held: np.ndarray  # (256,) bool: the bytes some token holds
    singles: np.ndarray  # (256,) bool: the bytes that are the whole text of some token
    byte: np.ndarray  # (N,) uint8: each node's last byte
    parent: np.ndarray  # (N,) int: the node one byte shorter; -1 for a first byte
    first_child: np.ndarray  # (N,) int: a node's first child
    children: np.ndarray  # (N,) int: how many children it has
    node: np.ndarray  # (n,) int: the node of each token's whole text; N if not text


READ = weakref.WeakKeyDictionary()  # tokenizer -> (what it was read as, its Vocabulary)


def vocabulary(tokenizer) -> Vocabulary:
    """Read the tokenizer duck-typed: len(tokenizer) ids, `token_bytes(id)`, the ids of
    `special_tokens` (a dict of text to id, if it has one) and `eos_token_ids`; once, while
    its size, specials and end tokens stay the same."""
    special = set(getattr(tokenizer, "special_tokens", {}).values())
    ends = tuple(int(t) for t in getattr(tokenizer, "eos_token_ids", ()) or ())
    if not ends:
        raise ValueError("constraint: the tokenizer names no end-of-generation token "
                         "(eos_token_ids), so a constrained output could never end")
    key = (len(tokenizer), frozenset(special), ends)
    try:
        known = READ.get(tokenizer)
    except TypeError:  # a tokenizer that cannot be weakly referred to is read every time
        known = None
    if known is not None and known[0] == key:
        return known[1]
    pieces = [None if i in special else tokenizer.token_bytes(i) or None
              for i in range(len(tokenizer))]
    lengths = np.array([len(p or b"") for p in pieces], dtype=np.int64)
    held, singles = np.zeros(256, dtype=bool), np.zeros(256, dtype=bool)
    held[np.frombuffer(b"".join(p for p in pieces if p), dtype=np.uint8)] = True
    singles[[pieces[i][0] for i in np.flatnonzero(lengths == 1)]] = True
    vocab = Vocabulary(lengths, ends, pieces, held, singles, *trie(pieces))
    try:
        READ[tokenizer] = (key, vocab)
    except TypeError:
        pass
    return vocab


def trie(pieces):
    """(byte, parent, first_child, children, node) of the byte trie of the texts `pieces`
    (None: not text), as Vocabulary reads them."""
    prefixes = sorted({p[:k] for p in pieces if p for k in range(1, len(p) + 1)})
    prefixes.sort(key=len)  # by length, in byte order within a length (the sort is stable)
    number = {q: i for i, q in enumerate(prefixes)}
    byte = np.array([q[-1] for q in prefixes], dtype=np.uint8)
    parent = np.array([number.get(q[:-1], -1) for q in prefixes], dtype=np.int64)
    first_child = np.searchsorted(parent, np.arange(len(prefixes)))  # parent never decreases
    children = np.bincount(parent[parent >= 0], minlength=len(prefixes))
    node = np.array([number[p] if p else len(prefixes) for p in pieces], dtype=np.int64)
    return byte, parent, first_child, children, node


@dataclass(frozen=True)
class Index:
    """An automaton's index over a vocabulary: rows[state] -> (n,) int32, the state each
    token leads to, -1 where it is masked. Filled as states are reached, unless pruned."""

    automaton: object  # dfa.Automaton
    vocabulary: Vocabulary
    rows: dict = field(default_factory=dict)


def index(automaton, vocab: Vocabulary) -> Index:
    """The index, lazy when one-byte tokens can finish the text from every state the tokens
    reach, else built whole and pruned; refused when no token sequence spells a text of the
    language."""
    idx = Index(automaton, vocab)
    if not never_stuck(automaton, vocab):
        idx.rows.update(pruned(full(automaton, vocab), automaton.accepting))
        if (idx.rows[0] < 0).all() and not automaton.accepting[0]:
            raise ValueError("constraint: no sequence of this vocabulary's tokens spells a "
                             "text of the language")
    return idx


def row(idx: Index, state: int) -> np.ndarray:
    """(n,) int32: where each token leads from `state`, -1 where it is masked; built the
    first time the state is reached."""
    found = idx.rows.get(state)
    if found is None:
        found = idx.rows[state] = walk_all(idx.automaton, idx.vocabulary, state)
    return found


def walk_all(automaton, vocab: Vocabulary, state: int) -> np.ndarray:
    """(n,) int32: the state after each token's bytes from `state`, -1 when a byte has no
    transition (or the token is not text). The trie a level at a time: a node's state is
    its parent's moved by the node's byte, and only the children of nodes still inside the
    language are walked on."""
    reached = np.full(len(vocab.byte) + 1, -1, dtype=np.int32)  # (N + 1,) the last: not text
    nodes = np.flatnonzero(vocab.parent < 0)  # the first bytes
    here = automaton.table[state, vocab.byte[nodes]]  # (nodes,) their states
    while len(nodes):
        reached[nodes] = here
        nodes = children_of(vocab, nodes[here >= 0])
        here = automaton.table[reached[vocab.parent[nodes]], vocab.byte[nodes]]
    return reached[vocab.node]


def children_of(vocab: Vocabulary, nodes: np.ndarray) -> np.ndarray:
    """The children of `nodes`, in order: each node's run first_child + 0, 1, ..."""
    counts = vocab.children[nodes]
    shift = vocab.first_child[nodes] - (np.cumsum(counts) - counts)  # run start - its place
    return np.repeat(shift, counts) + np.arange(counts.sum())


def full(automaton, vocab: Vocabulary) -> dict:
    """The whole index: every state's row."""
    return {s: walk_all(automaton, vocab, s) for s in range(len(automaton.accepting))}


def never_stuck(automaton, vocab: Vocabulary) -> bool:
    """Whether from every state reached through bytes some token holds, a path of bytes
    that are whole one-byte tokens leads to acceptance."""
    reached = reachable(automaton.table[:, vocab.held], {0}, forward=True)
    finishing = reachable(automaton.table[:, vocab.singles],
                        set(np.flatnonzero(automaton.accepting).tolist()), forward=False)
    return reached <= finishing


def pruned(rows: dict, accepting) -> dict:
    """The rows with every token masked that leads where no token sequence can finish: the
    states that can finish are the accepting ones, then every state with a token into one,
    until none is added."""
    finishing = {s for s in rows if accepting[s]}
    grew = True
    while grew:
        new = {s for s, r in rows.items() if s not in finishing
               and np.isin(r[r >= 0], list(finishing)).any()}
        finishing |= new
        grew = bool(new)
    keep = np.zeros(len(rows) + 1, dtype=bool)  # keep[state]; keep[-1], for -1, stays False
    keep[list(finishing)] = True
    return {s: np.where(keep[r], r, -1).astype(np.int32) for s, r in rows.items()}
