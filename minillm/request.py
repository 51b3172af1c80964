"""What a generation is asked for, checked once: the prompts and the knobs.

Every entry point (generate, stream, speculative_generate, the chat's respond, the command
line) takes its knobs the same way: a GenerationConfig, or knobs by name, or both (a knob
given by name replaces the config's), and checks them here, so that the same bad value meets
the same message everywhere. The defaults are knobs.py's table.
"""
from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass, field

import numpy as np

from .knobs import default
from .sampling import SamplingConfig


@dataclass(frozen=True)
class GenerationConfig:
    """How many new tokens, the sampling knobs, the seed, the stop tokens (each, once emitted,
    ends its row) and the stop strings (a row ends with the token that completes one of them
    in its generated text; stopping.py)."""

    max_new_tokens: int = default("max_new_tokens")
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    seed: int | None = default("seed")
    stop_tokens: tuple[int, ...] = default("stop_tokens")
    stop_strings: tuple[str, ...] = default("stop_strings")

    def __post_init__(self):
        n = self.max_new_tokens
        if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0:
            raise ValueError(f"max_new_tokens: must be an integer >= 0, got {n!r}")
        object.__setattr__(self, "max_new_tokens", int(n))
        if self.seed is not None and (isinstance(self.seed, bool)
                                      or not isinstance(self.seed, numbers.Integral)):
            raise ValueError(f"seed: must be an integer or None, got {self.seed!r}")
        stops = tuple(self.stop_tokens)
        if any(isinstance(t, bool) or not isinstance(t, numbers.Integral) for t in stops):
            raise ValueError(f"stop_tokens: must be token ids (integers), got {list(stops)!r}")
        object.__setattr__(self, "stop_tokens", tuple(sorted({int(t) for t in stops})))
        if isinstance(self.stop_strings, str):  # a string is a sequence too: of characters
            raise ValueError(f"stop_strings: must be a list of strings, got the string "
                             f"{self.stop_strings!r}; write [{self.stop_strings!r}]")
        texts = tuple(self.stop_strings)
        if not all(isinstance(t, str) and t for t in texts):
            raise ValueError(f"stop_strings: must be non-empty strings, got {list(texts)!r}")
        object.__setattr__(self, "stop_strings", texts)


def generation_config(config: GenerationConfig | None = None, model=None,
                      **knobs) -> GenerationConfig:
    """`config` (default: every knob's default) with the knobs given by name replaced: the
    sampling knobs (temperature, top_k, top_p, min_p, repetition_penalty, penalty_window) and
    the generation's (max_new_tokens, seed, stop_tokens, stop_strings). With a model, the
    stop tokens must be ids of its vocabulary, and stop strings need its tokenizer."""
    if config is None:
        config = GenerationConfig()
    elif not isinstance(config, GenerationConfig):
        raise ValueError(f"config: expected a GenerationConfig, got {config!r}")
    sampling_names = {f.name for f in dataclasses.fields(SamplingConfig)}
    own_names = {f.name for f in dataclasses.fields(GenerationConfig)} - {"sampling"}
    unknown = sorted(set(knobs) - sampling_names - own_names)
    if unknown:
        raise TypeError(f"{unknown[0]}: not a knob; the knobs are "
                        f"{', '.join(sorted(sampling_names | own_names))}")
    sampling = {name: value for name, value in knobs.items() if name in sampling_names}
    if sampling:
        knobs = {name: value for name, value in knobs.items() if name in own_names}
        knobs["sampling"] = dataclasses.replace(config.sampling, **sampling)
    config = dataclasses.replace(config, **knobs) if knobs else config
    if model is not None:
        check_for_model(config, model)
    return config


def check_for_model(config: GenerationConfig, model) -> None:
    """Stop tokens must be ids of the model's vocabulary; stop strings need its tokenizer."""
    vocab = model.config.vocab_size
    if config.stop_tokens and (config.stop_tokens[0] < 0 or config.stop_tokens[-1] >= vocab):
        raise ValueError(f"stop_tokens: ids must be in [0, {vocab}), got "
                         f"{list(config.stop_tokens)}")
    if config.stop_strings and model.tokenizer is None:
        raise ValueError("stop_strings: this model has no tokenizer to turn its tokens into "
                         "text; stop on token ids with stop_tokens instead")


def random_generator(config: GenerationConfig, rng=None) -> np.random.Generator:
    """The caller's generator, or a fresh one seeded with the config's seed."""
    return np.random.default_rng(config.seed) if rng is None else rng


def check_prompts(prompt_ids, vocab: int) -> list[np.ndarray]:
    """The prompts as 1-D int64 arrays, checked: non-empty, integer ids in [0, vocab)."""
    rows = list(prompt_ids) if is_batch(prompt_ids) else [prompt_ids]
    if not rows:
        raise ValueError("prompt_ids: empty batch, give at least one prompt")
    prompts = []
    for r, row in enumerate(rows):
        name = "prompt_ids" + (f"[{r}]" if len(rows) > 1 else "")
        ids = np.asarray(row)
        if ids.ndim != 1 or ids.size == 0:
            raise ValueError(f"{name}: expected a non-empty list of token ids")
        if not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"{name}: token ids must be integers, got {ids.dtype} values")
        if ids.min() < 0 or ids.max() >= vocab:
            raise ValueError(f"{name}: ids must be in [0, {vocab}) (the vocabulary), got min "
                             f"{ids.min()} and max {ids.max()}")
        prompts.append(ids.astype(np.int64))
    return prompts


def is_batch(prompt_ids) -> bool:
    """A batch is a 2-D array or a sequence of sequences; one prompt is a flat sequence."""
    if isinstance(prompt_ids, np.ndarray):
        return prompt_ids.ndim == 2
    return bool(prompt_ids) and isinstance(prompt_ids[0], (list, tuple, np.ndarray))
