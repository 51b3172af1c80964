"""Constrained decoding: the output must be a text of a language, and the mask is the first
filter of sampling (Willard and Louf, 2023).

    from minillm.constrain import regex, json_schema, choice
    c = regex(r"[0-9]+", model.tokenizer)
    ids = minillm.generate(model, prompt_ids, constraint=c, temperature=0.8, seed=1)

At each step of a row in automaton state s:

    z'_t = z_t    if t is allowed in s: its text keeps the output a prefix of the language
                  (index.row), or t ends generation and s accepts
         = -inf   otherwise
    p    = the knobs applied to z' (sampling.filtered_probs), exactly as to any logits
    s    = the state token t leads to (an end token: the row is done)

Every filter then works on what the mask left: a masked token has probability 0, the
temperature rescales the rest, and top-k, top-p and min-p each keep the most likely token
that survived before them (sampling.py), which is allowed; so at least one allowed token is
always left. Special tokens are never allowed but the end-of-generation ones (the
tokenizer's eos_token_ids), and those exactly where the output so far is a whole text of the
language. A row whose constraint ended it stops, whatever its stop tokens.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .dfa import Automaton, determinize
from .index import Index, index, row, vocabulary
from .nfa import thompson
from .pattern import literal, parse
from .schema import schema_regex

DONE = -1  # the state of a row after its end token


@dataclass(frozen=True)
class Constraint:
    """A language and its index over one tokenizer's vocabulary; shared by any number of
    generations (each keeps its own state, an int)."""

    source: str  # what it was made from, for messages
    automaton: Automaton
    index: Index
    size: int  # the tokenizer's number of ids


def regex(pattern: str, tokenizer) -> Constraint:
    """The outputs that re.fullmatch(pattern, output, re.ASCII) accepts (pattern.py says
    which patterns are read)."""
    if not isinstance(pattern, str):
        raise ValueError(f"regex: expected a pattern (a string), got {pattern!r}")
    return compiled(parse(pattern), tokenizer, f"regex {pattern!r}")


def choice(options, tokenizer) -> Constraint:
    """The outputs equal to one of `options` (strings): the smallest constraint."""
    options = [options] if isinstance(options, str) else list(options)
    if not options or not all(isinstance(o, str) for o in options):
        raise ValueError(f"choice: expected a non-empty list of strings, got {options!r}")
    tree = ("alt", [literal(o) for o in options])
    return compiled(tree, tokenizer, f"choice {options!r}")


def json_schema(schema, tokenizer) -> Constraint:
    """The JSON texts valid under `schema` (a dict, or its JSON text), as schema.py reads it."""
    pattern = schema_regex(schema)
    return compiled(parse(pattern), tokenizer, "json_schema")


def compiled(tree, tokenizer, source: str) -> Constraint:
    """The pattern's tree through Thompson, subsets, trimming and minimization, then the
    vocabulary's index. Bad input fails here, in one line and before anything is kept: a
    language too large (nfa.py's, dfa.py's bounds on states and on steps), an empty one, one
    that no token sequence of this vocabulary spells (its start allows no token and does
    not accept)."""
    if not hasattr(tokenizer, "token_bytes"):
        raise ValueError(f"constraint: the tokenizer must give each token's bytes "
                         f"(token_bytes), got {type(tokenizer).__name__}")
    try:
        automaton = determinize(*thompson(tree))
    except ValueError as e:
        raise ValueError(f"{source}: {e}") from None
    return Constraint(source, automaton, index(automaton, vocabulary(tokenizer)),
                      len(tokenizer))


def allowed(constraint: Constraint, state: int, vocab_size: int) -> np.ndarray:
    """(vocab_size,) booleans: the tokens allowed in `state` (ids past the tokenizer's never)."""
    mask = np.zeros(vocab_size, dtype=bool)
    mask[:constraint.size] = row(constraint.index, state) >= 0
    if constraint.automaton.accepting[state]:
        mask[list(constraint.index.vocabulary.ends)] = True
    return mask


def advance(constraint: Constraint, state: int, token: int) -> int:
    """The state after `token`: DONE after an end token, else where the index leads."""
    if constraint.automaton.accepting[state] and token in constraint.index.vocabulary.ends:
        return DONE
    after = int(row(constraint.index, state)[token]) if 0 <= token < constraint.size else -1
    if after < 0:
        raise ValueError(f"token {token} is not allowed by the {constraint.source} here")
    return after


# -- a batch of rows, as the decode loop drives them ---------------------------------------

def row_constraints(constraint, rows: int, vocab_size: int) -> list:
    """One Constraint (or None: free) per row: a Constraint for every row, or a list of
    `rows` of them; each checked to fit the model's vocabulary."""
    if isinstance(constraint, Constraint):
        constraint = [constraint] * rows
    constraint = list(constraint)
    if len(constraint) != rows:
        raise ValueError(f"constraint: expected one for every row ({rows}), got "
                         f"{len(constraint)}")
    for c in constraint:
        if c is not None and not isinstance(c, Constraint):
            raise ValueError(f"constraint: expected minillm.constrain's regex, choice or "
                             f"json_schema, got {c!r}")
        if c is not None and c.size > vocab_size:
            raise ValueError(f"constraint: made for a tokenizer of {c.size} ids, but the "
                             f"model has {vocab_size}")
    return constraint


def masked_logits(logits, constraints, states) -> np.ndarray:
    """(B, V) logits with every token a row's constraint does not allow at -inf (rows
    without a constraint, or done, as they are)."""
    out = np.array(logits)
    for r, (c, state) in enumerate(zip(constraints, states)):
        if c is not None and state != DONE:
            out[r] = np.where(allowed(c, state, out.shape[-1]), out[r], -np.inf)
    return out


def advanced(constraints, states, tokens, rows) -> list:
    """Every running row's state moved by its new token."""
    states = list(states)
    for r in rows:
        if constraints[r] is not None:
            states[r] = advance(constraints[r], states[r], int(tokens[r]))
    return states


# -- a block of guesses, as speculative decoding verifies them -----------------------------

def guess_states(constraint: Constraint, state: int, guesses) -> list:
    """The states the target's rows of a round are masked by: states[i] after guesses[:i],
    for the guesses worth verifying, guesses[:len(states) - 1]. They end after the first guess
    the constraint does not allow (verified all the same: its masked p is 0, so the rule
    rejects it, exact whatever q drew it) and after an end token (nothing may follow); the
    state after either is DONE, a row no token of the output is drawn from, left unmasked."""
    states = [state]
    for token in guesses:
        if states[-1] == DONE:
            break
        try:
            states.append(advance(constraint, states[-1], token))
        except ValueError:  # not allowed here
            states.append(DONE)
    return states
