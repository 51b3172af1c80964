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

A language too large is refused as it grows, by counts, not by a clock: MAX_DFA_STATES as
each state is made, MAX_SUBSET_STEPS and MAX_MINIMIZE_STEPS as the work is done.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_DFA_STATES = 20_000  # a language that needs more is refused, not built
# The build's work, bounded: a language whose automaton costs more is refused as it passes.
MAX_SUBSET_STEPS = 10_000_000  # NFA states moved on a byte class, in subset construction
MAX_MINIMIZE_STEPS = 500_000_000  # (state, byte class) pairs compared, over Moore's rounds


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
        raise ValueError("no text at all matches it (an empty language)")
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
    number, sets, rows, steps = {first: 0}, [first], [], 0
    while len(rows) < len(sets):
        current = sets[len(rows)]
        row = []
        for byte in representatives:
            steps += len(current)  # each NFA state of the set is moved on the byte
            if steps > MAX_SUBSET_STEPS:
                raise ValueError(f"the language is too large to build: subset construction "
                                 f"passed {MAX_SUBSET_STEPS} steps")
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
    live = reachable(np.array(rows, dtype=np.int64).reshape(len(rows), -1),
                     {s for s, a in enumerate(accepting) if a}, forward=False)
    if 0 not in live:
        return [], []
    kept = sorted(live)
    renumber = {old: new for new, old in enumerate(kept)}
    return ([[renumber.get(t, -1) for t in rows[s]] for s in kept],
            [accepting[s] for s in kept])


def reachable(moves: np.ndarray, states: set, forward: bool) -> set:
    """The states reached from `states` along moves (states, bytes) -> next state (-1: none),
    or, backward, the states from which one of them is reached: a search that visits each
    state and each move once."""
    sources, byte = np.nonzero(moves >= 0)  # every move sources[i] -> targets[i]
    targets = moves[sources, byte]
    if not forward:
        sources, targets = targets, sources
    order = np.argsort(sources, kind="stable")
    sources, targets = sources[order], targets[order]
    first = np.searchsorted(sources, np.arange(len(moves) + 1))  # state s: first[s]:first[s+1]
    seen, todo = set(states), list(states)
    while todo:
        s = todo.pop()
        for t in targets[first[s]:first[s + 1]].tolist():
            if t not in seen:
                seen.add(t)
                todo.append(t)
    return seen


def minimize(rows, accepting):
    """Moore's refinement: the blocks of states no text tells apart, as the new states (the
    block of the start numbered 0); -1 (no way on) is a block of its own. A round is one
    NumPy pass: a state's signature, its block and its transitions' blocks, is a row of
    ints, read as one string of bytes; a dict numbers the distinct ones as first met."""
    table = np.array(rows, dtype=np.int64)  # (n, classes), -1: no way on
    block = np.array(accepting, dtype=np.int64)  # (n,)
    count, steps = len(set(accepting)), 0
    while True:
        steps += table.size  # every state compared on every class
        if steps > MAX_MINIMIZE_STEPS:
            raise ValueError(f"the language is too large to build: minimization passed "
                             f"{MAX_MINIMIZE_STEPS} steps")
        signature = np.column_stack([block, np.where(table >= 0, block[table], -1)])
        keys = signature.view(np.dtype((np.void, signature.itemsize * signature.shape[1])))
        numbers = {}  # the start's signature first: its block becomes 0
        refined = np.array([numbers.setdefault(key, len(numbers))
                            for key in keys.ravel().tolist()])
        if len(numbers) == count:  # no block split: stable
            break
        block, count = refined, len(numbers)
    new_table = np.full((count, table.shape[1]), -1, dtype=np.int64)
    new_table[refined] = np.where(table >= 0, refined[table], -1)
    new_accepting = np.zeros(count, dtype=bool)
    new_accepting[refined] = accepting
    return new_table.tolist(), new_accepting.tolist()
