"""minillm.testing pointed at Hugging Face transformers: its models with a DynamicCache or a
StaticCache, its left-padded batches, its sampling processors, and its assisted (speculative)
generation.

The adapter is minillm.testing.adapters.transformers (`hf_engine`, docs/TESTING.md):
transformers computes the logits, the kit only compares them. Models are the random-init ones of test_transformers_models.py
(every parameter randomised), in float64 so that tolerances can be tight; what was found is
written down in docs/TESTING.md.
"""
import dataclasses

import numpy as np
import pytest

from minillm.plumbing.optional import install_hint

torch = pytest.importorskip("torch", reason="the transformers peers need torch")
transformers = pytest.importorskip("transformers", reason="the transformers peers need "
                                   f"transformers ({install_hint('peers')})")

from minillm.sampling import SamplingConfig  # noqa: E402
from minillm.testing import (Engine, assert_rollback_matches, check_batch_equivalence,
                             check_cache_equivalence, check_draws, check_sampler,
                             check_speculative_distribution, exact_sequence_distribution)
from minillm.testing.adapters.transformers import (HFCache, hf_engine, hf_filter,  # noqa: E402
                                                   hf_window_loop)
from minillm.testing import calibrate, check_rollback, check_window_slides  # noqa: E402
from minillm.testing.strategies import sampling_knobs  # noqa: E402
from tests.peers.test_transformers_models import _float64_internals, hf_model  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")
NAMES = ["gpt2-h8-tied-gelu", "llama-gqa4:2-h16-tied", "qwen2-bias-gqa6:2-h8-untied"]
ATOL = 1e-10  # float64; cached and uncached differ only in the order of sums


def float64_model(name, vocab_size=97, seed=0):
    model = hf_model(name, seed=seed, vocab_size=vocab_size).to(torch.float64)
    if hasattr(model, "model"):
        _float64_internals(model)
    return model


@pytest.mark.parametrize("name", NAMES)
def test_dynamic_cache_chunks_and_crop_equal_the_uncached_pass(name):
    check_cache_equivalence(hf_engine(float64_model(name)), atol=ATOL, max_examples=15)


@pytest.mark.parametrize("name", NAMES)
def test_left_padded_batches_equal_each_row_alone(name):
    check_batch_equivalence(hf_engine(float64_model(name)), atol=ATOL, max_examples=15)


@pytest.mark.parametrize("name", NAMES)
def test_static_cache_chunks_crop_and_batches_equal_the_uncached_pass(name):
    engine = hf_engine(float64_model(name), cache="static", max_cache_len=32)
    check_cache_equivalence(engine, atol=ATOL, max_examples=10)
    check_batch_equivalence(engine, atol=ATOL, max_examples=10)


def hf_probs(z, knobs: SamplingConfig):
    """softmax after transformers' processors for the knobs, in its own order."""
    processors = [transformers.TemperatureLogitsWarper(knobs.temperature)]
    if knobs.top_k:
        processors.append(transformers.TopKLogitsWarper(knobs.top_k))
    if knobs.top_p:
        processors.append(transformers.TopPLogitsWarper(knobs.top_p))
    if knobs.min_p:
        processors.append(transformers.MinPLogitsWarper(knobs.min_p))
    scores = torch.tensor(z, dtype=torch.float64)
    ids = torch.zeros((len(z), 1), dtype=torch.long)
    for processor in processors:
        scores = processor(ids, scores)
    return torch.softmax(scores, dim=-1)


KNOBS = [SamplingConfig(temperature=0.7), SamplingConfig(temperature=1.0, top_k=6),
         SamplingConfig(temperature=1.3, top_p=0.8), SamplingConfig(temperature=0.9, min_p=0.08)]


def test_transformers_processors_pass_the_sampler_check():
    """Its processors give minillm's distribution on every combination of temperature,
    top-k, top-p and min-p (the grid, greedy included through hf_filter), on logits with ties,
    -inf and huge values."""
    print(f"\nhf_filter, the default check: {check_sampler(hf_filter)}")
    check_sampler(lambda z, knobs: hf_probs(z, knobs).numpy(),
                  sampling_knobs(greedy=False, penalty=False), max_examples=100)


def test_transformers_warpers_reordered_top_p_first_are_caught_by_the_default():
    """Top-p before the temperature: the same warpers in another order."""
    def reordered(z, knobs):
        if knobs.greedy:
            return hf_filter(z, knobs)
        scores, ids = torch.tensor(z, dtype=torch.float64), torch.zeros((len(z), 1)).long()
        if knobs.top_p is not None:
            scores = transformers.TopPLogitsWarper(knobs.top_p)(ids, scores)
        rest = dataclasses.replace(knobs, top_p=None)
        return hf_filter(scores.numpy(), rest)

    with pytest.raises(AssertionError, match="knob combination .* of the grid"):
        check_sampler(reordered)


@pytest.mark.parametrize("profile", ["quick", "default"])
def test_the_profiles_on_a_transformers_model(profile):
    """The cost of each profile on one model (--durations): cache and rollback, batches, and
    the window loop hf_window_loop (W = 8)."""
    model = float64_model("llama-gqa4:2-h16-tied")
    engine = hf_engine(model)
    reports = [check_cache_equivalence(engine, atol=ATOL, profile=profile),
               check_batch_equivalence(engine, atol=ATOL, profile=profile),
               check_window_slides(hf_window_loop(model, 8), engine, atol=ATOL, window=8,
                                   profile=profile)]
    print(f"\n{profile}: " + "\n".join(map(str, reports)))


@pytest.mark.parametrize("knobs", KNOBS, ids=str)
def test_transformers_sampling_draws_follow_minillm_distribution(knobs):
    """torch.multinomial draws from the processors' distribution."""
    def sample(z, rng):
        generator = torch.Generator().manual_seed(int(rng.integers(2**63)))
        return torch.multinomial(hf_probs(z, knobs), 1, generator=generator)[:, 0].numpy()

    check_draws(sample, knobs, np.random.default_rng(1).normal(0, 1.5, 20))


def test_assisted_generation_with_sampling_follows_the_target():
    """transformers' generate(assistant_model=..., do_sample=True) is speculative sampling:
    its continuations must follow the target's own distribution. 400 runs (about 10 s), not
    the kit's default 3000: the check then catches a total-variation error of 0.16 with
    probability 0.9 (0.07 at 3000 runs; docs/TESTING.md)."""
    target = float64_model("llama-gqa4:2-h16-tied", vocab_size=4, seed=0)
    draft = float64_model("gpt2-h8-tied-gelu", vocab_size=4, seed=1)
    prompt = [1, 2]

    def sample_fn(seed):
        torch.manual_seed(seed)
        out = target.generate(torch.tensor([prompt]), assistant_model=draft, do_sample=True,
                              temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=3,
                              min_new_tokens=3, attention_mask=torch.ones(1, 2).long(),
                              pad_token_id=0)
        return out[0, len(prompt):].tolist()

    exact = exact_sequence_distribution(hf_engine(target), prompt, 3, temperature=1.0)
    check_speculative_distribution(sample_fn, exact, runs=400)


class NaiveCrop(HFCache):
    """crop(length) read as "keep the first length tokens"."""

    def truncate(self, length):
        self.past.crop(length)
        self.length = length


def test_crop_given_the_length_to_keep_is_caught():
    """The adapter's one trap, found by the kit: DynamicCache.crop(0) read as "keep 0 tokens"
    removes nothing, so the rolled-back tokens stay visible."""
    model = float64_model("llama-gqa4:2-h16-tied")
    engine = hf_engine(model)
    naive = Engine(engine.vocab_size, engine.context_length, engine.forward,
                   new_cache=lambda batch_size: NaiveCrop(transformers.DynamicCache(
                       config=model.config)))
    assert_rollback_matches(engine, [[1, 2]], 0, [[3]], atol=ATOL)
    with pytest.raises(AssertionError, match=r"after truncate\(0\)"):
        assert_rollback_matches(naive, [[1, 2]], 0, [[3]], atol=ATOL)


def test_float32_settings_from_calibrate_hold_every_default_check_and_never_go_below_the_floor():
    """A random Llama in float32 (transformers' own dtype): its paths differ by rounding, a
    few 1e-6 on calibrate's texts; every setting is at least the float32 floor (64 ulps of the
    largest logit), the window check's measured on its own run through hf_window_loop, and
    each default check, crossings of 16, 32 and 64 tokens included, passes at its setting."""
    model = hf_model("llama-gqa4:2-h16-tied", seed=0, vocab_size=97)
    engine, loop = hf_engine(model), hf_window_loop(model, 8)
    found = calibrate(engine, window=8, decode=loop)
    print(f"\nfloat32 transformers: {found}")
    assert found.dtype == "float32" and 0 < 2 * found.one_token < found.floor
    assert all(kwargs["tolerance"].atol >= found.floor for kwargs in found.checks.values())
    check_cache_equivalence(engine, **found.checks["cache"])
    check_rollback(engine, **found.checks["rollback"])
    check_batch_equivalence(engine, **found.checks["batch"])
    check_window_slides(loop, engine, window=8, **found.checks["window"])
