"""Generation's entry points: `generate` (prompt + new tokens) and `stream` (the new tokens as
they come), for one prompt or a batch, cached or not, with or without log-probabilities.

Both take the knobs the same way (request.py): a GenerationConfig, knobs by name, or both.
They check the request, then run the one decode loop (decode.py); the window is window.py's,
the scores logprobs.py's.
"""
from __future__ import annotations

from .decode import decode_steps
from .logprobs import rollouts, scored_steps
from .request import check_prompts, generation_config, is_batch, random_generator, warn_if_cut


def generate(model, prompt_ids, config=None, *, rng=None, use_cache=True,
             return_logprobs=False, prompt_logprobs=False, **knobs):
    """Prompt + new tokens: a list of ids for one prompt, a list of lists for a batch.

    prompt_ids: one prompt (a list or 1-D array of ids) or a batch (a list of such lists, or
    a 2-D array). config: a GenerationConfig; knobs: any knob by name (max_new_tokens,
    temperature, top_k, top_p, min_p, repetition_penalty, penalty_window, seed, stop_tokens,
    stop_strings), replacing the config's. rng: a numpy Generator in place of the seed's.
    A stop token, once emitted, is the last token of its row; so is the token that completes
    a stop string in the row's new text (this needs the model's tokenizer).
    return_logprobs: a Rollout per row instead (one Rollout for one prompt), with the
    log-probability of every new token; prompt_logprobs: score the prompt's tokens too.
    """
    prompts, config, rng = _request(model, prompt_ids, config, rng, knobs)
    if return_logprobs or prompt_logprobs:
        rows = rollouts(model, prompts, config, rng, use_cache, prompt_logprobs)
    else:
        rows = [p.tolist() for p in prompts]
        for step in decode_steps(model, prompts, config, rng, use_cache):
            for r in step.rows:
                rows[r].append(int(step.tokens[r]))
    return rows if is_batch(prompt_ids) else rows[0]


def stream(model, prompt_ids, config=None, *, rng=None, use_cache=True, return_logprobs=False,
           progress=None, **knobs):
    """An iterator over the new tokens as they are generated (the arguments of generate).

    One prompt: yields each new token (an int). A batch: yields, per step, a dict
    {row: token} of the rows still running. Arguments are checked here, before the first token.
    return_logprobs: a ScoredToken (token, logprob, raw_logprob) in place of each token.
    progress: None, or called as progress(tokens read, of how many) while the cached loop reads
    a long text: the prompt, and the window's kept half after each slide.
    """
    prompts, config, rng = _request(model, prompt_ids, config, rng, knobs)
    if return_logprobs:
        steps = scored_steps(model, prompts, config, rng, use_cache)
    else:
        steps = ({int(r): int(step.tokens[r]) for r in step.rows}
                 for step in decode_steps(model, prompts, config, rng, use_cache, progress))
    if is_batch(prompt_ids):
        return steps
    return (step[0] for step in steps)


def _request(model, prompt_ids, config, rng, knobs):
    """The prompts, the GenerationConfig and the random generator, every argument checked."""
    prompts = check_prompts(prompt_ids, model.config.vocab_size)
    config = generation_config(config, model, **knobs)
    warn_if_cut(prompts, model.config.context_length)
    return prompts, config, random_generator(config, rng)
