"""One set of knobs, checked once: generate, stream, speculative_generate and the chat's
respond take the same arguments (a GenerationConfig, knobs by name, or both) and refuse the
same bad ones with the same message; one table of defaults for the library, the command line
and the guide (docs/GUIDE.md)."""
import dataclasses
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import minillm
from minillm.cli import build_parser
from minillm.conversation import Conversation, respond
from minillm.generate import stream
from minillm.cli.common import knobs_of
from minillm.knobs import CHAT_DEFAULTS, KNOBS, SAMPLING_KNOBS
from minillm.knobs import GenerationConfig, generation_config
from minillm.sampling import SamplingConfig
from minillm.speculative import speculative_stream

CFG = minillm.ModelConfig(arch="modern", vocab_size=20, context_length=16, d_model=8,
                          n_layers=1, n_heads=2)
MODEL = minillm.random_model(CFG, seed=1, dtype="float64")
PROMPT = [1, 2, 3]


def run_plain(**kw):
    return list(stream(MODEL, PROMPT, **kw))


def run_speculative(**kw):
    return list(speculative_stream(MODEL, "ngram", PROMPT, **kw))


def run_generate(**kw):
    return minillm.generate(MODEL, PROMPT, **kw)[len(PROMPT):]


def run_speculative_generate(**kw):
    return minillm.speculative_generate(MODEL, "ngram", PROMPT, **kw)[0][len(PROMPT):]


def run_respond(**kw):
    return list(respond(Conversation(MODEL), PROMPT, **kw))


ENTRY_POINTS = [run_plain, run_speculative, run_generate, run_speculative_generate, run_respond]


@pytest.mark.parametrize("run", ENTRY_POINTS)
def test_numpy_integers_are_integers(run):
    assert len(run(max_new_tokens=np.int64(3), temperature=0)) == 3
    assert len(run(max_new_tokens=3, top_k=np.int32(2), seed=np.int64(5))) == 3


@pytest.mark.parametrize("run", ENTRY_POINTS)
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
    (dict(penalty_window=0), "penalty_window: must be an integer >= 1"),
    (dict(frequency_penalty=float("nan")), "frequency_penalty: must be a finite number"),
    (dict(presence_penalty="0.5"), "presence_penalty: must be a finite number"),
    (dict(config=SamplingConfig()), "config: expected a GenerationConfig"),
    (dict(config=50), r"config: expected a GenerationConfig, got 50 \(knobs go by name: "
                      r"max_new_tokens=50\)"),  # the third positional argument, before config
])
def test_both_loops_refuse_the_same_arguments_the_same_way(run, kwargs, message):
    with pytest.raises(ValueError, match=message):
        run(**kwargs)


def test_off_values_read_as_none_and_the_config_is_frozen():
    sampling = SamplingConfig(temperature=0.7, top_k=0, top_p=1, min_p=0.0,
                              repetition_penalty=1)
    assert (sampling.top_k, sampling.top_p, sampling.min_p,
            sampling.repetition_penalty) == (None,) * 4
    assert not sampling.greedy and not sampling.penalises
    assert SamplingConfig(temperature=0).greedy
    assert SamplingConfig(repetition_penalty=1.3).penalises
    assert SamplingConfig(frequency_penalty=0.5).penalises
    assert SamplingConfig(presence_penalty=-0.2).penalises
    off = SamplingConfig(frequency_penalty=0, presence_penalty=0.0)
    assert (off.frequency_penalty, off.presence_penalty) == (None, None) and not off.penalises
    # greedy and penalises are fields read off the knobs when the config is made, never given
    derived = {f.name for f in dataclasses.fields(SamplingConfig) if not f.init}
    assert derived == {"greedy", "penalises"}
    with pytest.raises(TypeError):
        SamplingConfig(greedy=True)
    assert dataclasses.replace(SamplingConfig(temperature=0), temperature=0.5).greedy is False
    with pytest.raises(dataclasses.FrozenInstanceError):
        sampling.top_k = 3
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


@pytest.mark.parametrize("run", ENTRY_POINTS)
def test_every_knob_reaches_every_entry_point_by_name_or_in_a_config(run):
    """The same tokens from knobs by name, from a GenerationConfig, and from a config whose
    knobs are replaced by name; the penalty's window (which changes the text here) included."""
    knobs = dict(max_new_tokens=24, temperature=0.9, top_k=8, top_p=0.95, min_p=0.01,
                 repetition_penalty=5.0, seed=3)
    config = GenerationConfig(24, SamplingConfig(0.9, 8, 0.95, 0.01, 5.0), 3)
    for window in (1, 64):
        by_name = run(**knobs, penalty_window=window)
        assert by_name == run(config=generation_config(config, penalty_window=window))
        assert by_name == run(config=GenerationConfig(), **knobs, penalty_window=window)
    assert run(**knobs, penalty_window=1) != run(**knobs, penalty_window=64)
    counted = dict(knobs, frequency_penalty=1.5, presence_penalty=-0.5)
    config = GenerationConfig(24, SamplingConfig(0.9, 8, 0.95, 0.01, 5.0, 64, 1.5, -0.5), 3)
    assert run(**counted) == run(config=config) != run(**knobs)
    assert run(**counted) != run(**dict(counted, presence_penalty=None))


@pytest.mark.parametrize("run", ENTRY_POINTS)
@pytest.mark.parametrize("knobs", [dict(temperature=0), dict(temperature=1.0, seed=6)])
def test_every_entry_point_stops_at_the_models_end_tokens_unless_told_to_run_on(run, knobs,
                                                                                 monkeypatch):
    """stop_tokens' default, None, is the model's end tokens: its tokenizer's eos_token_ids
    (here <|im_end|>), as transformers stops at the model's eos; stop_tokens=() runs on
    through them, and a model without a tokenizer has none."""
    from tests.test_chat import END, ending_chat_model

    model, prompt = ending_chat_model()
    monkeypatch.setattr(sys.modules[__name__], "MODEL", model)  # what the entry points run
    monkeypatch.setattr(sys.modules[__name__], "PROMPT", prompt)
    free = run(max_new_tokens=12, stop_tokens=(), **knobs)
    assert len(free) == 12 and END in free[:-1]  # seed 6: speculative sampling draws it too
    reply = free[:free.index(END) + 1]
    assert run(max_new_tokens=12, **knobs) == run(max_new_tokens=12, stop_tokens=None,
                                                 **knobs) == reply
    assert generation_config(None, model).stop_tokens == (END,)
    assert generation_config(None, model, stop_tokens=[]).stop_tokens == ()
    assert generation_config().stop_tokens is None  # no model yet: resolved with one
    model.tokenizer = None
    assert run(max_new_tokens=12, **knobs) == free
    assert generation_config(None, model).stop_tokens == ()


@pytest.mark.parametrize("run", ENTRY_POINTS)
def test_an_unknown_knob_is_named(run):
    with pytest.raises(TypeError, match="temprature: not a knob"):
        run(temprature=0.5)


def test_one_table_of_defaults_for_the_library_the_command_line_and_the_readme():
    default = {name: knob.default for name, knob in KNOBS.items()}
    config = GenerationConfig()
    assert {name: getattr(config.sampling, name) for name in SAMPLING_KNOBS} == {
        name: default[name] for name in (
        "temperature", "top_k", "top_p", "min_p", "repetition_penalty", "penalty_window",
        "frequency_penalty", "presence_penalty")}
    assert (config.max_new_tokens, config.seed, config.stop_tokens, config.stop_strings) == (
        default["max_new_tokens"], default["seed"], default["stop_tokens"],
        default["stop_strings"])
    commands = build_parser()._subparsers._group_actions[0].choices
    for command in ("generate", "chat", "next"):
        flags = {a.dest: a for a in commands[command]._actions}
        own = CHAT_DEFAULTS if command == "chat" else {}  # chat's sampling defaults
        for name in ("temperature", "top_k", "top_p", "min_p", "repetition_penalty",
                     "frequency_penalty", "presence_penalty", "penalty_window") + (
                         ("max_new_tokens", "seed") if command != "next" else ()):
            assert flags[name].default == own.get(name, default[name]), (command, name)
            assert KNOBS[name].help in flags[name].help
            if name in own:  # chat's help shows its own default
                assert f"(default: {own[name]}, the chat's; " in flags[name].help
    guide = (Path(__file__).resolve().parents[1] / "docs" / "GUIDE.md").read_text(encoding="utf-8")
    rows = {name: (library, chat) for name, library, chat in
            re.findall(r"^\| `(\w+)`[^|]*\| ([^|]+?) \| *([^|]*?) *\|", guide, re.M)}
    assert {name: rows[name] for name in KNOBS} == {
        name: (str(value), str(CHAT_DEFAULTS.get(name, ""))) for name, value in default.items()}
    assert SamplingConfig().temperature == 1.0  # the default temperature the guide explains
    assert set(CHAT_DEFAULTS) <= set(SAMPLING_KNOBS) | {"max_new_tokens"}
    generation_config(None, None, **CHAT_DEFAULTS)  # raises if a chat default is outside its knob's range


def test_the_chat_command_samples_with_the_chat_defaults():
    """`minillm chat` with no knob flag asks for CHAT_DEFAULTS; a flag replaces one."""
    args = build_parser().parse_args(["chat", "--model_path", "m.npz"])
    chat = generation_config(None, MODEL, **CHAT_DEFAULTS)
    assert generation_config(None, MODEL, **knobs_of(args)) == chat
    args = build_parser().parse_args(["chat", "--model_path", "m.npz", "--top_k", "0"])
    assert generation_config(None, MODEL, **knobs_of(args)) == generation_config(
        None, MODEL, **dict(CHAT_DEFAULTS, top_k=None))
    args = build_parser().parse_args(["generate", "x"])  # generate: the model's own
    assert generation_config(None, MODEL, **knobs_of(args)).sampling == SamplingConfig()


def test_every_integer_knob_has_one_rule():
    """k and ngram are integers >= 1 like every integer knob: a NumPy integer is an integer,
    a bool or a float is not, and `checked` says so in one message."""
    from minillm.knobs import checked

    for name in ("k", "ngram", "max_new_tokens", "top_k", "penalty_window"):
        assert KNOBS[name].kind is int, name
        assert checked(name, np.int64(3)) == 3 and type(checked(name, np.int64(3))) is int
        for bad in (True, 2.0, "3"):
            with pytest.raises(ValueError, match=f"^{name}: must be an integer >= "):
                checked(name, bad)
    for name in ("k", "ngram"):
        assert KNOBS[name].allowed == "an integer >= 1"
        for bad in (0, -1, None):
            with pytest.raises(ValueError, match=f"^{name}: must be an integer >= 1, got "):
                checked(name, bad)


@pytest.mark.parametrize("name", ["k", "ngram"])
@pytest.mark.parametrize("bad", [0, True, 2.5, np.float64(2.0), None])
def test_speculative_decoding_refuses_a_bad_k_or_ngram_with_the_knobs_message(name, bad):
    message = f"{name}: must be an integer >= 1, got {bad!r}"
    with pytest.raises(ValueError, match=re.escape(message)):
        run_speculative_generate(max_new_tokens=3, **{name: bad})
    with pytest.raises(ValueError, match=re.escape(message)):
        run_speculative(max_new_tokens=3, **{name: bad})


def test_speculative_decoding_takes_numpy_integers_for_k_and_ngram():
    from minillm.drafters import NgramDrafter

    expected = run_speculative_generate(max_new_tokens=6, k=3, ngram=2, temperature=0)
    assert run_speculative_generate(max_new_tokens=6, k=np.int64(3), ngram=np.int32(2),
                                    temperature=0) == expected
    assert NgramDrafter(20, n=np.int64(2)).n == 2
    with pytest.raises(ValueError, match=r"^ngram: must be an integer >= 1, got 0$"):
        NgramDrafter(20, n=0)
    with pytest.raises(ValueError, match=r"^ngram: must be an integer >= 1, got True$"):
        NgramDrafter(20, n=True)


@pytest.mark.parametrize("run", [run_plain, run_generate, run_respond])
@pytest.mark.parametrize("name", ["k", "ngram"])
def test_a_knob_of_speculative_decoding_is_named_as_one_elsewhere(run, name):
    """KNOBS lists k and ngram, so generate(k=3) says whose knob it is, not "not a knob"."""
    with pytest.raises(TypeError, match=f"^{name}: a knob of speculative_generate "
                                        rf"\({re.escape(KNOBS[name].help)}\), not of generate"):
        run(max_new_tokens=2, **{name: 3})
