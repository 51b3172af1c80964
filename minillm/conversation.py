"""A conversation kept in the KV cache: each turn reads only what is new.

Every turn renders the whole conversation again (text/chat_template.py) and asks the model to
continue it. Most of that text was read in earlier turns, and its keys and values are still in
the cache:

    keep   = the longest common prefix of the cached tokens and the new prompt
    cache.truncate(keep)            forget what the conversation no longer says
    prefill(prompt[keep:])          read only the rest                   (window.sync)
    decode until an end token       stream the reply                     (generate.decode)

The kept prefix usually ends inside the last reply, since the tokens a reply was generated as
need not be the tokens its text encodes to when rendered again. The window slides as in
generate: a text that outgrows the context keeps its newest half and is read again from
position 0, so the logits at every step are those of a fresh `generate` over the same view.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

from .constrain.constraint import row_constraints
from .generate import decode
from .knobs import GenerationConfig, generation_config
from .window import common_prefix_length, first_window, sync

__all__ = ["Conversation", "respond", "common_prefix_length"]


@dataclass
class Conversation:
    """A model, its cache, and the tokens whose keys and values the cache holds.

    Make one per chat, `Conversation(model)`, and at every turn give `respond` the whole
    conversation so far, rendered and encoded (text/chat_template.py): it yields the reply's
    tokens, reading only what the cache lacks.

        import minillm
        from minillm.conversation import Conversation, respond

        cfg = minillm.ModelConfig(arch="modern", vocab_size=64, context_length=64, d_model=16,
                                  n_layers=2, n_heads=2)
        chat = Conversation(minillm.random_model(cfg, seed=0))
        prompt = [1, 2, 3]  # turn 1: the first message
        reply = list(respond(chat, prompt, max_new_tokens=5, seed=0))
        prompt = prompt + reply + [4, 5]  # turn 2: all of it again, and the next message
        reply = list(respond(chat, prompt, max_new_tokens=5, seed=0))
    """

    model: object
    cache: object = None
    cached: list = field(default_factory=list)  # the cache holds these tokens, in order

    def __post_init__(self):
        if self.cache is None:  # room grows turn by turn (respond reserves what a turn needs)
            self.cache = self.model.new_cache(batch_size=1, capacity=1)


def respond(conversation: Conversation, prompt, config: GenerationConfig | None = None,
            rng=None, constraint=None, **knobs):
    """Yield the reply to `prompt` (the whole conversation, rendered and encoded) token by
    token, reusing the cache; a stop token ends the reply and is yielded last (by default the
    model's end tokens, such as <|im_end|>: the reply ends by itself). config and knobs: as in
    minillm.generate; rng: a numpy Generator in place of the seed's (pass one generator to
    every turn for one random stream across the conversation). constraint: the reply's
    language, as in minillm.generate (the reply ends with an end token once it is whole).

    On return the cache holds the view's tokens up to the last one read (the final token
    yielded is never read: it is the reply's end, or the last of max_new_tokens). A reply
    stopped early (the caller closes the iterator, or Ctrl-C interrupts a forward pass) keeps
    what the cache holds: the next turn reads only what is new to it.
    """
    model, cache = conversation.model, conversation.cache
    config = generation_config(config, model, **knobs)
    rng = np.random.default_rng(config.seed) if rng is None else rng  # or the caller's
    if constraint is not None:
        constraint = row_constraints(constraint, 1, model.config.vocab_size)
    W = model.config.context_length
    if len(prompt) > W:  # said as generate says it of a long prompt (inputs.check_prompts)
        warnings.warn(f"conversation: {len(prompt)} tokens, longer than the model's context of "
                      f"{W}: only the last {W} are read", stacklevel=2)
    view = [int(t) for t in prompt][-W:]  # a prompt longer than the window: its newest W
    cache.reserve(min(W, len(view) + config.max_new_tokens))
    window = first_window([np.asarray(view)], W)
    try:
        logits = sync(model, cache, conversation.cached, view)
        for step in decode(model, window, cache, logits, config, rng, constraints=constraint):
            yield int(step.tokens[0])
    finally:
        conversation.cached = cached_text(window.row(0), cache.length)


def cached_text(text: list, length: int) -> list:
    """The tokens a cache of `length` positions holds of `text`, the window's text: all of it
    after a whole step, its first `length` after one interrupted (a forward pass counts its
    tokens only once every layer has them: model.py). None of it when the cache is longer
    than the text: the window slid, but the cache was not yet read again from its start."""
    return text[:length] if length <= len(text) else []
