"""The knobs of a generation: one table of their defaults, and the sampling ones checked.

The library's signatures (SamplingConfig, GenerationConfig, speculative_generate), the
command line's --help and the README's table of knobs all read KNOBS, so a default is
written once. The default temperature is 1: the model's own distribution, like every other
knob's default (off), so that a knob changes nothing unless it is asked to.
"""
from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass
from typing import NamedTuple


class Knob(NamedTuple):
    default: object
    help: str


KNOBS = {
    "max_new_tokens": Knob(200, "the most new tokens per prompt"),
    "temperature": Knob(1.0, "divide the logits by T; 0 is greedy, 1 the model's own "
                             "distribution"),
    "top_k": Knob(None, "keep the K most likely tokens (0 or None: off)"),
    "top_p": Knob(None, "keep the smallest head with mass >= P (1 or None: off)"),
    "min_p": Knob(None, "keep tokens at least P times as likely as the top one (0 or None: off)"),
    "repetition_penalty": Knob(None, "CTRL penalty R on the recent tokens; > 1 discourages "
                                     "repeats (1 or None: off)"),
    "penalty_window": Knob(64, "how many of the most recent tokens the repetition penalty "
                               "looks at"),
    "seed": Knob(0, "the random generator's seed: same seed, same text (None: fresh entropy)"),
    "stop_tokens": Knob((), "token ids that end a row once emitted"),
    "stop_strings": Knob((), "texts that end a row once its new text contains one"),
    "k": Knob(4, "speculative decoding: guesses per target pass"),
    "ngram": Knob(3, "prompt lookup: the longest tail of the text it looks up"),
}


def default(name: str):
    """The default value of a knob."""
    return KNOBS[name].default


@dataclass(frozen=True)
class SamplingConfig:
    """The sampling knobs, checked once. "Off" values (top_k 0, top_p 1, min_p 0,
    repetition_penalty 1) are stored as None, so `None` is the one way a knob reads as off.

    penalty_window: how many of the most recent tokens the repetition penalty looks at.
    """

    temperature: float = default("temperature")
    top_k: int | None = default("top_k")
    top_p: float | None = default("top_p")
    min_p: float | None = default("min_p")
    repetition_penalty: float | None = default("repetition_penalty")
    penalty_window: int = default("penalty_window")

    def __post_init__(self):
        knob = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731 (frozen)
        knob("temperature", _number("temperature", self.temperature, lambda t: t >= 0,
                                    "a number >= 0 (0 is greedy)"))
        knob("top_k", _count("top_k", self.top_k, 0, "an integer >= 0 (0 or None disables)"))
        if self.top_p is not None:
            knob("top_p", _number("top_p", self.top_p, lambda p: 0 < p <= 1,
                                  "in (0, 1] (1 or None disables)"))
        if self.min_p is not None:
            knob("min_p", _number("min_p", self.min_p, lambda p: 0 <= p <= 1,
                                  "in [0, 1] (0 or None disables)"))
        if self.repetition_penalty is not None:
            knob("repetition_penalty", _number(
                "repetition_penalty", self.repetition_penalty, lambda r: r > 0,
                "a number > 0 (1 or None disables; > 1 discourages repeats)"))
        knob("penalty_window", _count("penalty_window", self.penalty_window, 1,
                                      "an integer >= 1"))
        for name, off in (("top_k", 0), ("top_p", 1.0), ("min_p", 0.0),
                          ("repetition_penalty", 1.0)):
            if getattr(self, name) == off:
                knob(name, None)

    @property
    def greedy(self) -> bool:
        """Temperature 0: the argmax, no randomness."""
        return self.temperature == 0

    @property
    def penalises(self) -> bool:
        """Whether the repetition penalty is on: only then is each row's history needed."""
        return self.repetition_penalty is not None


def _number(name, value, ok, allowed) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) \
            or not math.isfinite(value) or not ok(value):
        raise ValueError(f"{name}: must be {allowed}, got {value!r}")
    return float(value)


def _count(name, value, least, allowed) -> int | None:
    if value is None and least == 0:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
        raise ValueError(f"{name}: must be {allowed}, got {value!r}")
    return int(value)


def sampling_config(knobs=None, by_name=None) -> SamplingConfig:
    """The SamplingConfig, with the knobs given by name replaced (every one checked)."""
    if isinstance(knobs, SamplingConfig) and not by_name:
        return knobs  # checked when it was made
    if knobs is not None and not isinstance(knobs, SamplingConfig):
        raise ValueError(f"knobs: expected a SamplingConfig, got {knobs!r}; give the knobs by "
                         "name (temperature=..., top_k=...)")
    by_name = by_name or {}
    names = {f.name for f in dataclasses.fields(SamplingConfig)}
    unknown = sorted(set(by_name) - names)
    if unknown:
        raise TypeError(f"{unknown[0]}: not a sampling knob; they are {', '.join(sorted(names))}")
    if knobs is None:
        return SamplingConfig(**by_name)
    return dataclasses.replace(knobs, **by_name)
