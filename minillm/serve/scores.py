"""What the server asks of the engine beside the knobs, and the scores of an echoed prompt.

The engine reports each token's ln p and, when asked, the top_logprobs most likely tokens of
the same distribution (its Output.top, from the logits of its batched step; with
--logprobs_mode raw_logprobs, the model's own distribution, no knob applied). A request's
logit_bias and min_tokens become its `process`, which the engine applies to the logits before
the knobs: the bias added, and the end tokens removed (-inf) while fewer than min_tokens new
tokens are out.

An echoed prompt's own log-probabilities are the model's, temperature 1, as
`generate(..., prompt_logprobs=True)` gives them: the engine scores them in the batched passes
that read the prompt (add_request's prompt_logprobs), so the logits held are a step's, not the
prompt's (handlers.prompt_scores).
"""
from __future__ import annotations

import numpy as np

from ..constrain.constraint import allowed


def processor(bias: dict, min_tokens: int, end_tokens, constraint=None):
    """process(request, logits) for the engine, or None when it would change nothing.
    With a constraint its end tokens are kept off too, except where the constraint allows
    nothing else (its text is whole and can go no further): min_tokens gives way there, so
    that some token is always left."""
    end_tokens = set(end_tokens) | set(() if constraint is None
                                       else constraint.index.vocabulary.ends)
    if not bias and not (min_tokens and end_tokens):
        return None
    ids, values = np.array(list(bias), dtype=np.int64), np.array(list(bias.values()))
    ends = np.array(sorted(end_tokens), dtype=np.int64)

    def process(request, logits):
        logits = logits.copy()
        logits[ids] += values.astype(logits.dtype)
        if request.new_tokens < min_tokens and not only_the_end(request, ends, len(logits)):
            logits[ends] = -np.inf
        return logits
    return process


def only_the_end(request, ends, vocab_size: int) -> bool:
    """Whether the request's constraint allows nothing but its end tokens now."""
    if request.constraint is None:
        return False
    mask = allowed(request.constraint, request.state, vocab_size)
    mask[ends] = False
    return not mask.any()
