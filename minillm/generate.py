"""Generation: `generate` (prompt + new tokens) and `stream` (the new tokens as they come),
for one prompt or a batch, cached or not, and the one decode loop behind them.

    logits = forward(prompt)                      prefill: fills the KV cache
    repeat: token ~ sample(logits[-1])            decode: one token through the model,
            logits = forward(token, cache)                attending to everything cached

One loop for everything that decodes: generate and stream, the chat's conversation (whose
cache keeps the earlier turns) and the draft model of speculative decoding (whose cache keeps
the text it already read). Each prepares a window and the logits of its last read, and
`decode` goes on from there. Rows that emit a stop token, or complete a stop string in their
new text (stopping.py), stop growing; the loop ends when every row has stopped or
max_new_tokens tokens were drawn. The knobs are checked once, before the first token
(knobs.py, inputs.py); the window and its slide are window.py's, the scores logprobs.py's.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .constrain.constraint import DONE, advanced, masked_logits, row_constraints
from .inputs import check_prompts
from .knobs import GenerationConfig, generation_config
from .logprobs import rollouts, scored_steps
from .sampling import SamplingConfig, choose, filtered_probs
from .stopping import reached_stop, start_text
from .window import Window, append, first_window, read, read_slid


def generate(model, prompt_ids, config=None, *, rng=None, use_cache=True,
             return_logprobs=False, prompt_logprobs=False, constraint=None, **knobs):
    """Prompt + new tokens: a list of ids for one prompt, a list of lists for a batch.

    prompt_ids: one prompt (a list or 1-D array of ids) or a batch (a list of such lists, or
    a 2-D array). config: a GenerationConfig; knobs: any knob by name (max_new_tokens,
    temperature, top_k, top_p, min_p, repetition_penalty, penalty_window, seed, stop_tokens,
    stop_strings), replacing the config's. rng: a numpy Generator in place of the seed's.
    A stop token, once emitted, is the last token of its row (by default the model's end
    tokens, its tokenizer's eos_token_ids, so a chat's reply ends at <|im_end|>; pass
    stop_tokens=() to run on); so is the token that completes a stop string in the row's new
    text (this needs the model's tokenizer).
    return_logprobs: a Rollout per row instead (one Rollout for one prompt), with the
    log-probability of every new token; prompt_logprobs: score the prompt's tokens too.
    constraint: minillm.constrain's regex, json_schema or choice (one for every row, or a
    list, None for a free row): the new text stays inside its language, and the row ends
    with an end token once the text is whole (constrain/constraint.py).
    """
    prompts, batch = check_prompts(prompt_ids, model.config.vocab_size,
                                   model.config.context_length)
    config = generation_config(config, model, **knobs)
    rng = np.random.default_rng(config.seed) if rng is None else rng  # or the caller's
    if constraint is not None:
        constraint = row_constraints(constraint, len(prompts), model.config.vocab_size)
    steps = decode_steps(model, prompts, config, rng, use_cache, constraints=constraint)
    if return_logprobs or prompt_logprobs:
        rows = rollouts(model, prompts, steps, prompt_logprobs)
    else:
        rows = list(map(np.ndarray.tolist, prompts))
        for step in steps:
            for r in step.rows:
                rows[r].append(int(step.tokens[r]))
    return rows if batch else rows[0]


def stream(model, prompt_ids, config=None, *, rng=None, use_cache=True, return_logprobs=False,
           progress=None, constraint=None, **knobs):
    """An iterator over the new tokens as they are generated (the arguments of generate).

    One prompt: yields each new token (an int). A batch: yields, per step, a dict
    {row: token} of the rows still running. Arguments are checked here, before the first token.
    return_logprobs: a ScoredToken (token, logprob, raw_logprob) in place of each token.
    progress: None, or called as progress(tokens read, of how many) while the cached loop reads
    a long text: the prompt, and the window's kept half after each slide.
    """
    prompts, batch = check_prompts(prompt_ids, model.config.vocab_size,
                                   model.config.context_length)
    config = generation_config(config, model, **knobs)  # checked here, before the first token
    rng = np.random.default_rng(config.seed) if rng is None else rng  # or the caller's
    if constraint is not None:
        constraint = row_constraints(constraint, len(prompts), model.config.vocab_size)
    steps = decode_steps(model, prompts, config, rng, use_cache, progress, constraint)
    if return_logprobs:
        steps = scored_steps(steps)
    else:
        steps = ({int(r): int(step.tokens[r]) for r in step.rows} for step in steps)
    if batch:
        return steps
    return (step[0] for step in steps)


# -- the decode loop ----------------------------------------------------------------------

@dataclass
class Step:
    """One decoding step as the loop saw it. Valid until the loop goes on: `visible` is a view
    of the window, which the next step changes."""

    rows: np.ndarray  # the rows that emitted a token: those still running before this step
    logits: np.ndarray  # (B, V) the logits the tokens are drawn from
    visible: np.ndarray  # (B, width) each row's visible text, -1 padding: the penalties' history
    sampling: SamplingConfig
    tokens: np.ndarray | None = None  # (B,) the token drawn for every row; only `rows` count

    @cached_property
    def probs(self) -> np.ndarray:
        """(B, V) the distributions the tokens are drawn from, every knob applied; computed
        when first read (plain greedy decoding never reads them)."""
        return filtered_probs(self.logits, self.sampling, self.visible)


def decode_steps(model, prompts, config: GenerationConfig, rng, use_cache=True, progress=None,
                 constraints=None):
    """Yield a Step for every token drawn after the prompts: prefill, then decode.
    progress: None, or called as progress(tokens read, of how many) while a long text is read
    (the prompts, the window after a slide; window.read). constraints: None, or one
    Constraint (or None) per row."""
    window = first_window(prompts, model.config.context_length)
    cache = None
    if use_cache:  # only as long as this generation can fill
        capacity = min(model.config.context_length, window.width + config.max_new_tokens)
        cache = model.new_cache(len(prompts), capacity)
    logits = prefill(model, window, cache, progress)  # on the first next(), not at the call
    yield from decode(model, window, cache, logits, config, rng, progress, constraints)


def prefill(model, window: Window, cache, progress=None):
    """(B, V) logits of the last position of every row, after reading the whole window (in
    chunks through the cache, window.read)."""
    tokens = np.maximum(window.tokens[:, :window.width], 0)  # padding ids: any valid id
    pad = window.pad if window.pad.any() else None  # rows of one length need no padding
    if cache is None:  # the uncached loop reads the window whole at every step anyway
        return model.forward(tokens, pad=pad, last=1)[:, -1]
    return read(model, tokens, cache, pad=pad, progress=progress)


def decode(model, window: Window, cache, logits, config: GenerationConfig, rng, progress=None,
           constraints=None, states=None):
    """Yield a Step per token: sample from `logits`, stop, append, read; the cache (None: the
    uncached loop) holds the window's text but its last token, whose logits are `logits`.
    With constraints, each row's logits are masked first (the Step's logits are the masked
    ones) and the row's automaton state, from `states` (None: the start, 0), follows its
    tokens; the constraint follows the output, not the window: a slide changes nothing of it."""
    texts = None  # each row's new text, decoded, when stop strings are watched for
    if config.stop_strings:
        texts = [start_text(model.tokenizer, window.row(r)) for r in range(len(logits))]
    running = np.ones(len(logits), dtype=bool)
    states = None if constraints is None else list(states or [0] * len(logits))
    for n in range(config.max_new_tokens):
        if states is not None:  # the mask, the first filter
            logits = masked_logits(logits, constraints, states)
        # The repetition penalty looks at the visible text; padding (-1) is ignored.
        step = Step(np.flatnonzero(running), logits, window.tokens[:, :window.width],
                    config.sampling)
        step.tokens = next_tokens(model, step, rng)  # (B,)
        if config.stop_tokens or texts is not None:  # a knob not asked for costs no call
            running &= ~ends_row(step.tokens, step.rows, config, texts)
        if states is not None:  # an end token ends its row, whatever the stop tokens
            states = advanced(constraints, states, step.tokens, step.rows)
            running &= np.array(states) != DONE
        yield step
        if not running.any() or n == config.max_new_tokens - 1:
            return
        # Read the new tokens (B,), the window sliding if full: the next logits (B, V).
        shift, slid = append(window, step.tokens, model.config.context_length)
        if cache is None:  # the textbook loop: the whole visible text, every step
            tokens = np.maximum(window.tokens[:, :window.width], 0)
            logits = model.forward(tokens, pad=window.pad, last=1)[:, -1]
        elif shift == 0:  # one token a row through the cache
            logits = model.forward(step.tokens[:, None], cache)[:, -1]
        else:  # the window slid: the rows that slid read their kept text again
            logits = read_slid(model, window, step.tokens, cache, shift, slid, progress)


def next_tokens(model, step: Step, rng) -> np.ndarray:
    """(B,) the token of every row: `choose` from the step's distributions.

    The one place where a model may choose its own way: a model with a method
    `next_tokens(step, rng)` is asked instead, and must return exactly these tokens (the fast
    model of minillm/fast/ takes the argmax of greedy logits without building the
    distributions; tests/test_fast.py proves it equal).
    """
    chooser = getattr(model, "next_tokens", None)
    return choose(step.probs, step.sampling, rng) if chooser is None else chooser(step, rng)


def ends_row(tokens, rows, config: GenerationConfig, texts) -> np.ndarray:
    """(B,) booleans: whether each row's new token ends it, being a stop token or completing
    a stop string in the row's new text (texts, None when there are no stop strings)."""
    ends = np.zeros(len(tokens), dtype=bool)
    if config.stop_tokens:
        ends |= np.isin(tokens, config.stop_tokens)
    if texts is not None:
        for r in rows:
            ends[r] |= reached_stop(texts[r], int(tokens[r]), config.stop_strings)
    return ends
