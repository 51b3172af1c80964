"""What a generation is asked for, checked once: the knobs, their defaults, their ranges.

Every entry point (generate, stream, speculative_generate, the chat's respond, the command
line) takes its knobs the same way: a GenerationConfig, or knobs by name, or both (a knob
given by name replaces the config's). KNOBS is the one table of each knob's default, help
and allowed values: the signatures, the command line's --help and docs/GUIDE.md's table of
knobs read it, and `checked` holds every value to it, so that the same bad value meets the
same message everywhere. The default temperature is 1: the model's own distribution, like
every other knob's default (off), so that a knob changes nothing unless it is asked to.
The default stop tokens are None, "the model's end tokens": its tokenizer's eos_token_ids
(where the model's own runtime stops: llama.cpp's end-of-generation set for a GGUF file,
generation_config.json's for a folder; else end of text and the end of a turn its chat template
writes), read by generation_config once per request, so that a chat's reply ends where the
model ends it; none for a model without a tokenizer, and an explicit () runs on.
CHAT_DEFAULTS: the knobs `minillm chat` starts from instead (llama.cpp's chain, a repetition
penalty, a longer reply).
"""
from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np


class Knob(NamedTuple):
    default: object
    help: str
    # The allowed values: integers or reals in [low, high] (open where the flag says so),
    # `allowed` saying it in words; `off`: the value that disables the knob (stored as None).
    kind: type | None = None
    low: float = -math.inf
    high: float = math.inf
    open_low: bool = False
    allowed: str = ""
    off: object = None


KNOBS = {
    "max_new_tokens": Knob(200, "the most new tokens per prompt", int, 0,
                           allowed="an integer >= 0"),
    "temperature": Knob(1.0, "divide the logits by T; 0 is greedy, 1 the model's own "
                             "distribution", float, 0, allowed="a number >= 0 (0 is greedy)"),
    "top_k": Knob(None, "keep the K most likely tokens (0 or None: off)", int, 0,
                  allowed="an integer >= 0 (0 or None disables)", off=0),
    "top_p": Knob(None, "keep the smallest head with mass >= P (1 or None: off)", float, 0, 1,
                  True, "in (0, 1] (1 or None disables)", 1.0),
    "min_p": Knob(None, "keep tokens at least P times as likely as the top one (0 or None: off)",
                  float, 0, 1, allowed="in [0, 1] (0 or None disables)", off=0.0),
    "repetition_penalty": Knob(None, "CTRL penalty R on the recent tokens; > 1 discourages "
                                     "repeats (1 or None: off)", float, 0, open_low=True,
                               allowed="a number > 0 (1 or None disables; > 1 discourages "
                                       "repeats)", off=1.0),
    "frequency_penalty": Knob(None, "subtract F times each recent token's count from its "
                                    "logit; > 0 discourages repeats (0 or None: off)", float,
                              allowed="a finite number (0 or None disables; > 0 discourages "
                                      "repeats)", off=0.0),
    "presence_penalty": Knob(None, "subtract P from the logit of every recent token; > 0 "
                                   "discourages repeats (0 or None: off)", float,
                             allowed="a finite number (0 or None disables; > 0 discourages "
                                     "repeats)", off=0.0),
    "penalty_window": Knob(64, "how many of the most recent tokens the penalties look at", int,
                           1, allowed="an integer >= 1"),
    "seed": Knob(0, "the random generator's seed: same seed, same text (None: fresh entropy)"),
    "stop_tokens": Knob(None, "token ids that end a row once emitted (None: the model's end "
                              "tokens, its tokenizer's eos_token_ids; (): none)"),
    "stop_strings": Knob((), "texts that end a row once its new text contains one"),
    "k": Knob(4, "speculative decoding: guesses per target pass", int, 1,
              allowed="an integer >= 1"),
    "ngram": Knob(3, "prompt lookup: the longest tail of the text it looks up", int, 1,
                  allowed="an integer >= 1"),
}
# The knobs of speculative decoding alone (speculative_generate, speculative_stream, a serving
# request with a draft); generate, stream and respond refuse them by name.
SPECULATIVE_KNOBS = ["k", "ngram"]

# `minillm chat`'s defaults in place of KNOBS' (the model's own distribution, from whose long
# tail a small chat model's reply goes astray): llama.cpp's default chain (llama.cpp applies the
# temperature last, here it comes first: sampling.py, so the same numbers keep a little less of
# the tail); ollama's repetition penalty over the last penalty_window tokens, against replies
# that loop; and room for a longer reply. With the last two, 114 of 120 first replies of
# SmolLM2-135M-Instruct end by themselves, 70 without (bench/studies/chat_endings.py). The
# chat's --help and docs/GUIDE.md's table read this dict.
CHAT_DEFAULTS = {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05,
                 "repetition_penalty": 1.1, "max_new_tokens": 512}


def default(name: str):
    """The default value of a knob."""
    return KNOBS[name].default


def checked(name: str, value):
    """`value` held to KNOBS[name]'s range: a float or an int, or None when it is the knob's
    "off" value (or None where None is allowed); else a ValueError naming knob and value."""
    knob = KNOBS[name]
    if value is None and knob.off is not None:
        return None
    integer = knob.kind is int
    if isinstance(value, bool) or not isinstance(value, numbers.Integral if integer
                                                 else numbers.Real) \
            or not math.isfinite(value) or not knob.low <= value <= knob.high \
            or (knob.open_low and value == knob.low):
        raise ValueError(f"{name}: must be {knob.allowed}, got {value!r}")
    value = int(value) if integer else float(value)
    return None if value == knob.off else value


@dataclass(frozen=True)
class SamplingConfig:
    """The sampling knobs, checked once. "Off" values (top_k 0, top_p 1, min_p 0,
    repetition_penalty 1, frequency_penalty 0, presence_penalty 0) are stored as None, so
    `None` is the one way a knob reads as off.

    penalty_window: how many of the most recent tokens the three penalties look at.
    greedy (temperature 0: the argmax, no randomness) and penalises (a penalty is on, so each
    row's history is needed): two facts read off the knobs, fields computed when the config is
    made (not properties: a decode step reads them without a call).
    """

    temperature: float = default("temperature")
    top_k: int | None = default("top_k")
    top_p: float | None = default("top_p")
    min_p: float | None = default("min_p")
    repetition_penalty: float | None = default("repetition_penalty")
    penalty_window: int = default("penalty_window")
    frequency_penalty: float | None = default("frequency_penalty")
    presence_penalty: float | None = default("presence_penalty")
    greedy: bool = field(init=False)
    penalises: bool = field(init=False)

    def __post_init__(self):
        for name in SAMPLING_KNOBS:  # frozen: set through object.__setattr__, here only
            object.__setattr__(self, name, checked(name, getattr(self, name)))
        object.__setattr__(self, "greedy", self.temperature == 0)
        object.__setattr__(self, "penalises", self.repetition_penalty is not None
                           or self.frequency_penalty is not None
                           or self.presence_penalty is not None)


SAMPLING_KNOBS = [f.name for f in dataclasses.fields(SamplingConfig) if f.init]
DEFAULT_SAMPLING = SamplingConfig()


@dataclass(frozen=True)
class GenerationConfig:
    """How many new tokens, the sampling knobs, the seed, the stop tokens (each, once emitted,
    ends its row; None: the model's end tokens, which generation_config reads off the model)
    and the stop strings (a row ends with the token that completes one of them in its
    generated text; stopping.py)."""

    max_new_tokens: int = default("max_new_tokens")
    sampling: SamplingConfig = DEFAULT_SAMPLING
    seed: int | None = default("seed")
    stop_tokens: tuple[int, ...] | None = default("stop_tokens")
    stop_strings: tuple[str, ...] = default("stop_strings")

    def __post_init__(self):
        object.__setattr__(self, "max_new_tokens", checked("max_new_tokens",
                                                           self.max_new_tokens))
        if self.seed is not None and (isinstance(self.seed, bool)
                                      or not isinstance(self.seed, numbers.Integral)):
            raise ValueError(f"seed: must be an integer or None, got {self.seed!r}")
        if self.stop_tokens is not None:  # None stays: the model's end tokens, read later
            stops = tuple(self.stop_tokens)
            for token in stops:
                if isinstance(token, bool) or not isinstance(token, numbers.Integral):
                    raise ValueError(f"stop_tokens: must be token ids (integers), got "
                                     f"{list(stops)!r}")
            object.__setattr__(self, "stop_tokens", tuple(sorted(set(map(int, stops)))))
        if isinstance(self.stop_strings, str):  # a string is a sequence too: of characters
            raise ValueError(f"stop_strings: must be a list of strings, got the string "
                             f"{self.stop_strings!r}; write [{self.stop_strings!r}]")
        texts = tuple(self.stop_strings)
        for text in texts:
            if not isinstance(text, str) or not text:
                raise ValueError(f"stop_strings: must be non-empty strings, got {list(texts)!r}")
        object.__setattr__(self, "stop_strings", texts)


GENERATION_KNOBS = ["max_new_tokens", "seed", "stop_tokens", "stop_strings"]


def generation_config(config: GenerationConfig | None = None, model=None,
                      **knobs) -> GenerationConfig:
    """`config` (default: every knob's default) with the knobs given by name replaced: the
    sampling knobs (temperature, top_k, top_p, min_p, penalties, penalty_window) and the
    generation's (max_new_tokens, seed, stop_tokens, stop_strings). With a model, stop tokens
    None become its end tokens (its tokenizer's eos_token_ids; none without a tokenizer), the
    stop tokens must be ids of its vocabulary, and stop strings need its tokenizer."""
    if config is None:
        config = GenerationConfig()
    elif not isinstance(config, GenerationConfig):
        hint = f" (knobs go by name: max_new_tokens={config})" if isinstance(config, int) else ""
        raise ValueError(f"config: expected a GenerationConfig, got {config!r}{hint}")
    unknown = sorted(set(knobs) - set(SAMPLING_KNOBS) - set(GENERATION_KNOBS))
    if unknown and unknown[0] in SPECULATIVE_KNOBS:
        raise TypeError(f"{unknown[0]}: a knob of speculative_generate "
                        f"({KNOBS[unknown[0]].help}), not of generate, stream or respond")
    if unknown:
        raise TypeError(f"{unknown[0]}: not a knob; the knobs are "
                        f"{', '.join(sorted(SAMPLING_KNOBS + GENERATION_KNOBS))}")
    replaced = {}
    for name in GENERATION_KNOBS:
        if name in knobs:
            replaced[name] = knobs.pop(name)
    if knobs:  # what is left are sampling knobs
        replaced["sampling"] = dataclasses.replace(config.sampling, **knobs)
    if model is not None and replaced.get("stop_tokens", config.stop_tokens) is None:
        tokenizer = getattr(model, "tokenizer", None)  # the model's end tokens, once a request
        replaced["stop_tokens"] = () if tokenizer is None else tokenizer.eos_token_ids
    config = dataclasses.replace(config, **replaced) if replaced else config
    if model is not None:
        vocab = model.config.vocab_size
        if config.stop_tokens and not 0 <= config.stop_tokens[0] <= config.stop_tokens[-1] \
                < vocab:
            raise ValueError(f"stop_tokens: ids must be in [0, {vocab}), got "
                             f"{list(config.stop_tokens)}")
        if config.stop_strings and model.tokenizer is None:
            raise ValueError("stop_strings: this model has no tokenizer to turn its tokens "
                             "into text; stop on token ids with stop_tokens instead")
    return config


def random_generator(config: GenerationConfig, rng=None) -> np.random.Generator:
    """The caller's generator, or a fresh one seeded with the config's seed."""
    return np.random.default_rng(config.seed) if rng is None else rng
