"""One set of knobs, checked once: generate, stream and speculative_generate take the same
arguments and refuse the same bad ones with the same message."""
import dataclasses

import numpy as np
import pytest

import minillm
from minillm.generate import stream
from minillm.request import GenerationConfig, generation_config
from minillm.sampling import SamplingConfig
from minillm.speculative import speculative_stream

CFG = minillm.ModelConfig(arch="modern", vocab_size=20, context_length=16, d_model=8,
                          n_layers=1, n_heads=2)
MODEL = minillm.random_model(CFG, seed=1, dtype="float64")


def run_plain(**kw):
    return list(stream(MODEL, [1, 2, 3], **kw))


def run_speculative(**kw):
    return list(speculative_stream(MODEL, "ngram", [1, 2, 3], **kw))


@pytest.mark.parametrize("run", [run_plain, run_speculative])
def test_numpy_integers_are_integers(run):
    assert len(run(max_new_tokens=np.int64(3), temperature=0)) == 3
    assert len(run(max_new_tokens=3, top_k=np.int32(2), seed=np.int64(5))) == 3


@pytest.mark.parametrize("run", [run_plain, run_speculative])
@pytest.mark.parametrize("kwargs, message", [
    (dict(stop_tokens=[20]), r"stop_tokens: ids must be in \[0, 20\)"),
    (dict(stop_tokens=[-1]), r"stop_tokens: ids must be in \[0, 20\)"),
    (dict(stop_tokens=[1.5]), "stop_tokens: must be token ids"),
    (dict(max_new_tokens=-1), "max_new_tokens: must be an integer >= 0"),
    (dict(max_new_tokens=2.0), "max_new_tokens: must be an integer >= 0"),
    (dict(max_new_tokens=True), "max_new_tokens: must be an integer >= 0"),
    (dict(temperature=-0.1), "temperature: must be a number >= 0"),
    (dict(top_k=-1), "top_k: must be an integer >= 0"),
    (dict(top_p=0.0), r"top_p: must be in \(0, 1\]"),
    (dict(min_p=1.5), r"min_p: must be in \[0, 1\]"),
    (dict(repetition_penalty=0), "repetition_penalty: must be a number > 0"),
    (dict(seed=1.5), "seed: must be an integer or None"),
])
def test_both_loops_refuse_the_same_arguments_the_same_way(run, kwargs, message):
    with pytest.raises(ValueError, match=message):
        run(**kwargs)


def test_off_values_read_as_none_and_the_config_is_frozen():
    knobs = SamplingConfig(temperature=0.7, top_k=0, top_p=1, min_p=0.0, repetition_penalty=1)
    assert (knobs.top_k, knobs.top_p, knobs.min_p, knobs.repetition_penalty) == (None,) * 4
    assert not knobs.greedy and not knobs.penalises
    assert SamplingConfig(temperature=0).greedy
    assert SamplingConfig(repetition_penalty=1.3).penalises
    with pytest.raises(dataclasses.FrozenInstanceError):
        knobs.top_k = 3
    config = generation_config(None, MODEL, max_new_tokens=np.int64(4), stop_tokens=[3, 1, 3])
    assert config == GenerationConfig(4, SamplingConfig(temperature=1.0), 0, (1, 3))
    assert type(config.max_new_tokens) is int


def test_token_ids_must_be_integers():
    with pytest.raises(ValueError, match="token ids must be integers"):
        minillm.generate(MODEL, [1.5, 2.0])
    with pytest.raises(ValueError, match="token ids must be integers"):
        minillm.speculative_generate(MODEL, "ngram", [1.5, 2.0])


def test_speculative_decoding_takes_one_prompt():
    with pytest.raises(ValueError, match="one prompt, not a batch"):
        minillm.speculative_generate(MODEL, "ngram", [[1, 2], [3, 4]])
