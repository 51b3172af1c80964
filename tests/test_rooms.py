"""How many rooms a reader walks through: the files and functions one decode step, and one short
generation, run in the reference library, counted with `sys.setprofile`.

A function is a code object of minillm's own source that is entered (a method, a property, a
lambda, a generator expression, a comprehension each count once, however often called; NumPy's
and the standard library's do not count). The bounds are the README's, each on a small
Llama-shaped model (modern_model): one decode step of the reference (a one-token `forward` with
a cache, then `sample_next_token` with the request's checked knobs, llama.cpp's chain) at most
5 files and 25 functions (22 measured); a 4-token `generate` at most 8 files and 40, with the
default knobs (37 measured) and with the chat's filters (40); the same decode step of the fast model
(`minillm.load`'s, fast.accelerate) 7 files and 31 functions, measured, held without margin.
Options a model does not use cost it no call: a Llama-shaped model never enters Gemma's code.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import minillm
from minillm import fast
from minillm.knobs import CHAT_DEFAULTS, SamplingConfig

PACKAGE = Path(minillm.__file__).resolve().parent
CHAIN = dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05)  # llama.cpp's, the chat's filters


def rooms(run) -> tuple[set[str], set[tuple[str, int, str]]]:
    """(files, functions) of minillm entered while `run()` runs: paths relative to the
    package, functions as (file, first line, name)."""
    functions = set()

    def watch(frame, event, arg):
        if event == "call":
            code = frame.f_code
            path = Path(code.co_filename)
            if path.is_relative_to(PACKAGE):
                functions.add((str(path.relative_to(PACKAGE)), code.co_firstlineno,
                               code.co_name))

    sys.setprofile(watch)
    try:
        run()
    finally:
        sys.setprofile(None)
    return {file for file, _, _ in functions}, functions


def modern_model():
    cfg = minillm.ModelConfig(arch="modern", vocab_size=64, context_length=64, d_model=16,
                              n_layers=2, n_heads=4, n_kv_heads=2, d_ff=24)
    return minillm.random_model(cfg, seed=0, dtype="float64")


def decode_step(model):
    """One ordinary decode step of `model`, to be counted: a one-token forward through a cache
    that already holds 6 tokens, then a draw with the chat's knobs, checked once per request."""
    cache = model.new_cache(1)
    model.forward(np.array([[1, 2, 3, 4, 5]]), cache)  # prefill: room for 5 positions
    model.forward(np.array([[6]]), cache)  # the cache doubles its room (now 10, a step that
    # comes once per doubling of the text), so that the step counted is an ordinary one
    sampling = SamplingConfig(**CHAIN)  # per request
    rng = np.random.default_rng(0)

    def step():
        logits = model.forward(np.array([[7]]), cache)
        minillm.sample_next_token(logits[:, -1], sampling, rng=rng)

    return step


def test_one_decode_step_runs_in_a_few_rooms():
    files, functions = rooms(decode_step(modern_model()))
    assert files == {"model.py", "layers.py", "kv_cache.py", "inputs.py", "sampling.py"}
    assert len(functions) <= 25, sorted(functions)
    assert not any("norm" in name and "post" in name or name == "_qk_norm"
                   for _, _, name in functions)


def test_a_short_generation_runs_in_a_few_rooms():
    model = modern_model()
    files, functions = rooms(lambda: minillm.generate(model, [1, 2, 3], max_new_tokens=4,
                                                      seed=0))
    assert len(files) <= 8, sorted(files)
    assert len(functions) <= 40, sorted(functions)
    assert "config.py" not in files  # the model reads its per-layer options once, when made


def test_a_short_generation_with_the_chat_knobs_runs_in_a_few_rooms():
    """The chat's filters, llama.cpp's chain (temperature 0.8, top-k 40, top-p 0.95, min-p
    0.05), add their functions: 40 in 8 files, measured."""
    model = modern_model()
    assert {name: CHAT_DEFAULTS[name] for name in CHAIN} == CHAIN
    files, functions = rooms(lambda: minillm.generate(model, [1, 2, 3], max_new_tokens=4,
                                                      seed=0, **CHAIN))
    assert len(files) <= 8, sorted(files)
    assert len(functions) <= 40, sorted(functions)
    assert {"top_k_mask", "top_p_mask"} <= {name for _, _, name in functions}


def test_one_decode_step_of_the_fast_model_runs_in_a_few_rooms():
    """The decode step of the reference test above, on the model `minillm.load` returns
    (fast.accelerate: the tiled attention, the prepared weights): 31 functions in 7 files,
    measured; the bound has no margin, so that a new room on this path is seen here."""
    model = fast.accelerate(modern_model())
    files, functions = rooms(decode_step(model))
    assert files == {"model.py", "layers.py", "kv_cache.py", "inputs.py", "sampling.py",
                     "fast/model.py", "fast/attention.py"}, sorted(files)
    assert len(functions) <= 31, sorted(functions)


def test_gemma_options_add_to_the_llama_path_and_never_the_reverse():
    cfg = minillm.ModelConfig(arch="modern", vocab_size=64, context_length=64, d_model=16,
                              n_layers=2, n_heads=4, n_kv_heads=2, d_ff=24, head_dim=8,
                              qk_norm=True, post_norms=True)
    gemma = minillm.random_model(cfg, seed=0, dtype="float64")
    llama = modern_model()
    _, llama_path = rooms(lambda: llama.forward(np.array([[1, 2, 3]])))
    _, gemma_path = rooms(lambda: gemma.forward(np.array([[1, 2, 3]])))
    assert llama_path <= gemma_path


def test_the_counter_sees_what_runs():
    """The counter counts minillm's functions, once each, and nothing else."""
    from minillm import layers

    files, functions = rooms(lambda: [layers.softmax(np.zeros(3)) for _ in range(3)])
    line = layers.softmax.__code__.co_firstlineno
    assert (files, functions) == ({"layers.py"}, {("layers.py", line, "softmax")})
    assert rooms(lambda: np.zeros(3).sum()) == (set(), set())
