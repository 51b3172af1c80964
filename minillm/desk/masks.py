"""Constrained decoding token by token, read from outside: at every step of a constrained
generation, the automaton's state, the tokens its mask allows, and the model's distribution
before and after the mask (docs/CONSTRAINED.md).

The constraint is minillm.constrain's own (regex, choice or json_schema, built from what the
user typed) and the text is generate's own with it. Each step is then read back with the
chapter's public functions:

    mask  = allowed(c, s, V)          the tokens allowed in state s: (V,) booleans
    z'    = z where mask, else -inf   the first filter
    p'    = filtered_probs(z', knobs) what the draw used
    s     = advance(c, s, token)      the state the token leads to (DONE after an end token)

where z are the very logits generate read before each token (the model is Watched: it keeps
the last row of logits of every pass), so nothing is computed twice.
"""
from __future__ import annotations

import json

import numpy as np

from ..constrain import choice, json_schema, regex
from ..constrain.constraint import DONE, advance, allowed, masked_logits
from ..sampling import filtered_probs
from .fields import ENDPOINTS, RequestError

KINDS = ENDPOINTS["/api/mask"]["kind"].choices  # ("json_schema", "regex", "choice")
SCHEMA = {"type": "object",
          "properties": {"name": {"type": "string", "maxLength": 8},
                         "alive": {"type": "boolean"}},
          "required": ["name", "alive"]}
DEFAULTS = {"json_schema": json.dumps(SCHEMA), "regex": "(yes|no)", "choice": "yes\nno"}
CACHED = 4  # constraints kept built: a knob moved does not build the same one again


def constraint_of(desk, kind: str, spec: str):
    """The constraint the user typed: a JSON Schema's text, a regular expression, or the
    choices one a line; a RequestError naming the field, with the library's one-line
    reason, when it cannot be built. The last few are kept (desk.constraints)."""
    key = (kind, spec)
    with desk.constraints_lock:  # its own: the bits widget holds desk.lock as it quantizes
        found = desk.constraints.pop(key, None)
        if found is not None:
            desk.constraints[key] = found  # to the end: the oldest is forgotten first
            return found
    tokenizer = desk.model.tokenizer
    try:
        if kind == "json_schema":
            built = json_schema(spec, tokenizer)
        elif kind == "regex":
            built = regex(spec, tokenizer)
        else:
            options = [line for line in spec.split("\n") if line]
            if not options:
                raise ValueError("choice: type the options, one a line")
            built = choice(options, tokenizer)
    except RecursionError:  # brackets nested past Python's recursion limit
        raise RequestError(f"spec: nested too deeply to be read ({kind})") from None
    except ValueError as e:
        raise RequestError(f"spec: {first_line(str(e))}") from None
    with desk.constraints_lock:
        desk.constraints[key] = built
        while len(desk.constraints) > CACHED:
            del desk.constraints[next(iter(desk.constraints))]
    return built


def first_line(message: str) -> str:
    return message.strip().split("\n", 1)[0]


def read_steps(constraint, rows, tokens, knobs: dict, top: int, piece) -> list[dict]:
    """One dict per new token: the state before it (and whether it accepts), how many tokens
    the mask allows and the model's probability they hold, the model's `top` tokens (each
    with what the mask gives it and where it leads: None when masked, DONE after an end
    token), the `top` most likely after the mask (with their rank in the model's ranking),
    and the token drawn. rows: the (V,) float64 logits before each token; piece(id): its text."""
    state, out = 0, []
    for z, token in zip(rows, tokens):
        V = z.size
        mask = allowed(constraint, state, V)  # (V,)
        model_p = filtered_probs(z)  # the model's own distribution, T = 1, no mask
        kept = filtered_probs(masked_logits(z[None], [constraint], [state])[0], **knobs)
        by_model = np.argsort(-model_p, kind="stable")
        rank = np.empty(V, dtype=np.int64)
        rank[by_model] = np.arange(1, V + 1)
        by_kept = np.argsort(-kept, kind="stable")[:min(top, int((kept > 0).sum()))]

        def entry(t):
            t = int(t)
            return {"id": t, "text": piece(t), "p": float(model_p[t]), "kept": float(kept[t]),
                    "allowed": bool(mask[t]), "rank": int(rank[t]),
                    "next": advance(constraint, state, t) if mask[t] else None}

        after = advance(constraint, state, int(token))
        out.append({"state": state, "accepting": bool(constraint.automaton.accepting[state]),
                    "allowed": int(mask.sum()), "allowed_p": float(model_p[mask].sum()),
                    "top": [entry(t) for t in by_model[:top]],
                    "kept_top": [entry(t) for t in by_kept],
                    "token": entry(token), "after": after})
        state = after
        if state == DONE:
            break
    return out
