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
the same rows either way (tests/test_constrain.py). NumPy walks every token at once, one
byte column at a time: the vocabulary as a (tokens, longest) byte matrix, the states of all
tokens as one vector.

A dead end (a state where the model may emit nothing) cannot happen: every state of the
trimmed automaton has a path of bytes to an accepting state, and when the vocabulary has a
one-byte token for every byte the automaton can read (every byte-level BPE vocabulary, and
SentencePiece's with byte fallback), that path is spelled token by token: from every state
some token is allowed, or it accepts and the end tokens are. A vocabulary without them is
`pruned`: the whole index is built, and tokens leading to states from which no token
sequence reaches acceptance are masked too, until every state left can finish.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Vocabulary:
    """The tokenizer's tokens as the index reads them."""

    data: np.ndarray  # (n, longest) uint8: each token's bytes, zero padded
    lengths: np.ndarray  # (n,) int: each token's byte count; 0 for tokens that are not text
    ends: tuple  # the end-of-generation ids
    pieces: list  # each token's bytes, None for those that are not text


def vocabulary(tokenizer) -> Vocabulary:
    """Read the tokenizer duck-typed: len(tokenizer) ids, `token_bytes(id)`, the ids of
    `special_tokens` (a dict of text to id, if it has one) and `eos_token_ids`."""
    special = set(getattr(tokenizer, "special_tokens", {}).values())
    ends = tuple(int(t) for t in getattr(tokenizer, "eos_token_ids", ()) or ())
    if not ends:
        raise ValueError("constraint: the tokenizer names no end-of-generation token "
                         "(eos_token_ids), so a constrained output could never end")
    pieces = [None if i in special else tokenizer.token_bytes(i) or None
              for i in range(len(tokenizer))]
    lengths = np.array([len(p or b"") for p in pieces], dtype=np.int64)
    data = np.zeros((len(pieces), max(lengths.max(initial=0), 1)), dtype=np.uint8)
    for i, piece in enumerate(pieces):
        if piece:
            data[i, :len(piece)] = np.frombuffer(piece, dtype=np.uint8)
    return Vocabulary(data, lengths, ends, pieces)


@dataclass(frozen=True)
class Index:
    """An automaton's index over a vocabulary: rows[state] -> (n,) int32, the state each
    token leads to, -1 where it is masked. Filled as states are reached, unless pruned."""

    automaton: object  # dfa.Automaton
    vocabulary: Vocabulary
    rows: dict = field(default_factory=dict)


def index(automaton, vocab: Vocabulary) -> Index:
    """The index, lazy when the vocabulary spells every byte the automaton reads, else built
    whole and pruned; refused when no token sequence spells a text of the language."""
    idx = Index(automaton, vocab)
    if not spells_every_byte(automaton, vocab):
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
    transition (or the token is not text); column j moves the tokens with a j-th byte."""
    at = np.where(vocab.lengths > 0, state, -1).astype(np.int32)  # (n,)
    for j in range(vocab.data.shape[1]):
        reading = np.flatnonzero((at >= 0) & (vocab.lengths > j))
        if len(reading) == 0:
            break
        at[reading] = automaton.table[at[reading], vocab.data[reading, j]]
    return at


def full(automaton, vocab: Vocabulary) -> dict:
    """The whole index: every state's row."""
    return {s: walk_all(automaton, vocab, s) for s in range(len(automaton.accepting))}


def spells_every_byte(automaton, vocab: Vocabulary) -> bool:
    """Whether every byte some state can read is the whole text of some token."""
    read = np.flatnonzero((automaton.table >= 0).any(axis=0))  # the bytes with a transition
    singles = {vocab.pieces[i][0] for i in np.flatnonzero(vocab.lengths == 1)}
    return set(read.tolist()) <= singles


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
