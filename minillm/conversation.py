"""A conversation kept in the KV cache: each turn reads only what is new.

Every turn renders the whole conversation again (chat.py) and asks the model to continue it.
Most of that text was read in earlier turns, and its keys and values are still in the cache:

    keep   = the longest common prefix of the cached tokens and the new prompt
    cache.truncate(keep)            forget what the conversation no longer says
    prefill(prompt[keep:])          read only the rest
    decode until an end token       stream the reply

The kept prefix usually ends inside the last reply, since the tokens a reply was generated as
need not be the tokens its text encodes to when rendered again. The window slides as in
generate.py: a text that outgrows the context keeps its newest half and is read again from
position 0, so the logits at every step are those of a fresh `generate` over the same view.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .generate import GenerationConfig, kept_on_slide
from .sampling import sample


def common_prefix_length(cached_ids, new_ids) -> int:
    """How many leading ids two sequences share."""
    length = 0
    for cached, new in zip(cached_ids, new_ids):
        if cached != new:
            break
        length += 1
    return length


@dataclass
class Conversation:
    """A model, its cache, and the tokens whose keys and values the cache holds."""

    model: object
    cache: object = None
    cached: list = field(default_factory=list)  # the cache holds these tokens, in order

    def __post_init__(self):
        if self.cache is None:  # room grows turn by turn (respond reserves what a turn needs)
            self.cache = self.model.new_cache(batch_size=1, capacity=1)


def respond(conversation: Conversation, prompt, config: GenerationConfig, rng):
    """Yield the reply to `prompt` (the whole conversation, rendered and encoded) token by
    token, reusing the cache; a stop token ends the reply and is yielded last.

    On return the cache holds the view's tokens up to the last one read (the final token
    yielded is never read: it is the reply's end, or the last of max_new_tokens).
    """
    model, cache = conversation.model, conversation.cache
    W = model.config.context_length
    text = [int(t) for t in prompt]
    start = max(0, len(text) - W)  # the view is text[start:], as in generate
    cache.reserve(min(W, len(text) - start + config.max_new_tokens))
    logits = _read(conversation, text[start:])
    stops = set(config.stop_tokens)
    for step in range(config.max_new_tokens):
        history = [text[start:]] if config.sampling.penalises else None
        token = int(sample(logits, config.sampling, history, rng)[0])
        yield token
        if token in stops or step == config.max_new_tokens - 1:
            return
        text.append(token)
        if len(text) - start > W:  # the window is full: keep the newest half, read it again
            start = len(text) - kept_on_slide(W)
            logits = _read(conversation, text[start:])
        else:
            logits = model.forward(np.array([[token]]), cache)[:, -1]
            conversation.cached.append(token)


def _read(conversation: Conversation, view):
    """Bring the cache to `view` (keeping the common prefix) and return the next logits (1, V)."""
    keep = min(common_prefix_length(conversation.cached, view), len(view) - 1)
    conversation.cache.truncate(keep)  # keep <= len(cached) == cache.length
    del conversation.cached[keep:]
    fresh = view[keep:]  # at least the last token, whose logits come next
    logits = conversation.model.forward(np.array([fresh]), conversation.cache, last=1)[:, -1]
    conversation.cached.extend(fresh)
    return logits
