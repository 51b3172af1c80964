"""From the automaton of many choices to one of none: subset construction, trimming,
minimization (Hopcroft and Ullman, "Introduction to Automata Theory", chapters 2 and 4).

    subset:    a state of the DFA is the set of NFA states the bytes read so far can reach,
               closed under empty edges; reading byte b moves every one of them.
    trim:      drop every state from which no accepting state can be reached: a text that
               enters one can never be completed, so no token may lead there (its transitions
               become -1, "no way on"). What is left is live: from each state some bytes
               reach acceptance.
    minimize:  Moore's partition refinement: start from {accepting, not}; split a block while
               two of its states go, on some byte, to different blocks; the blocks are the
               states of the smallest DFA of the language.

The alphabet is cut first into byte classes, the bytes no edge of the NFA tells apart (its
ranges' boundaries): [a-z] is one class, not twenty-six. The result, an Automaton, is a table
(states, 256) of next states, -1 where a byte leads nowhere, with the start state 0.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_DFA_STATES = 20_000  # a language that needs more is refused, not built


@dataclass(frozen=True)
class Automaton:
    """A trimmed, minimal DFA over bytes: next state table[s, byte] (-1: none), start 0."""

    table: np.ndarray  # (n, 256) int32
    accepting: np.ndarray  # (n,) bool

    def walk(self, data: bytes, state: int = 0) -> int:
        """The state after reading `data` from `state`, -1 if it leaves the language's
        prefixes."""
        for byte in data:
            if state < 0:
                break
            state = int(self.table[state, byte])
        return state


def determinize(nfa, start: int, accept: int) -> Automaton:
    """The minimal trimmed DFA of the NFA (thompson's result); an empty language refused."""
    classes = byte_classes(nfa)
    rows, accepting = subsets(nfa, start, accept, classes)
    rows, accepting = trim(rows, accepting)
    if not rows:
        raise ValueError("the pattern matches no text at all (an empty language)")
    rows, accepting = minimize(rows, accepting)
    table = np.array(rows, dtype=np.int32)[:, classes]  # (n, classes) -> (n, 256)
    return Automaton(table, np.array(accepting, dtype=bool))


def byte_classes(nfa) -> np.ndarray:
    """(256,) the class of each byte: two bytes share one when every edge reads both or
    neither."""
    starts = np.zeros(257, dtype=bool)
    for edges in nfa.edges:
        for low, high, _ in edges:
            starts[low] = starts[high + 1] = True
    return np.cumsum(starts[:256]) - starts[0]  # a new class begins at each boundary


def closure(nfa, states) -> frozenset:
    """Every NFA state reachable from `states` through empty edges, they included."""
    seen, todo = set(states), list(states)
    while todo:
        for target in nfa.empty[todo.pop()]:
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return frozenset(seen)


def subsets(nfa, start: int, accept: int, classes: np.ndarray):
    """(rows, accepting): rows[d][c], the DFA state after byte class c from DFA state d (the
    empty set of NFA states, where nothing can go on, is a state too; trim removes it)."""
    representatives = [int(np.argmax(classes == c)) for c in range(int(classes.max()) + 1)]
    first = closure(nfa, [start])
    number, sets, rows = {first: 0}, [first], []
    while len(rows) < len(sets):
        current = sets[len(rows)]
        row = []
        for byte in representatives:
            moved = closure(nfa, [to for s in current for low, high, to in nfa.edges[s]
                                  if low <= byte <= high])
            if moved not in number:
                if len(sets) >= MAX_DFA_STATES:
                    raise ValueError(f"the language is too large: its automaton needs more "
                                     f"than {MAX_DFA_STATES} states")
                number[moved] = len(sets)
                sets.append(moved)
            row.append(number[moved])
        rows.append(row)
    return rows, [accept in s for s in sets]


def trim(rows, accepting):
    """The states from which an accepting state can be reached, renumbered in order (the
    start stays 0 when it is one of them; none at all: the language is empty); transitions
    to the others become -1."""
    live = {s for s, a in enumerate(accepting) if a}
    grew = True
    while grew:  # a state is live when one of its transitions leads to a live state
        new = {s for s, row in enumerate(rows) if s not in live and live.intersection(row)}
        live |= new
        grew = bool(new)
    if 0 not in live:
        return [], []
    kept = sorted(live)
    renumber = {old: new for new, old in enumerate(kept)}
    return ([[renumber.get(t, -1) for t in rows[s]] for s in kept],
            [accepting[s] for s in kept])


def minimize(rows, accepting):
    """Moore's refinement: the blocks of states no text tells apart, as the new states (the
    block of the start numbered 0); -1 (no way on) is a block of its own."""
    block = [int(a) for a in accepting]
    while True:
        signature = [(block[s], tuple(-1 if t < 0 else block[t] for t in row))
                     for s, row in enumerate(rows)]
        numbers = {}
        for sig in [signature[0]] + signature:  # the start's block first: it becomes 0
            numbers.setdefault(sig, len(numbers))
        refined = [numbers[sig] for sig in signature]
        if len(numbers) == len(set(block)):  # no block split: stable
            break
        block = refined
    n = len(numbers)
    new_rows, new_accepting = [None] * n, [False] * n
    for s, row in enumerate(rows):
        new_rows[refined[s]] = [-1 if t < 0 else refined[t] for t in row]
        new_accepting[refined[s]] = accepting[s]
    return new_rows, new_accepting
