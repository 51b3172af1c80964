import json

import pytest

from minillm import ModelConfig
from minillm.config import FAMILY_OPTIONS, GEMMA_OPTIONS

BASE = dict(arch="modern", vocab_size=64, context_length=16, d_model=32, n_layers=2, n_heads=4,
            n_kv_heads=2, d_ff=48)


def test_json_round_trip_and_defaults():
    cfg = ModelConfig(**BASE)
    assert ModelConfig.from_json(cfg.to_json()) == cfg
    assert (cfg.tie_embeddings, cfg.bias, cfg.activation) == (True, False, "silu")
    classic = ModelConfig(arch="classic", vocab_size=10, context_length=8, d_model=8, n_layers=1,
                          n_heads=2)
    assert (classic.tie_embeddings, classic.bias, classic.activation, classic.d_ff,
            classic.n_kv_heads) == (False, True, "gelu", 32, 2)
    assert ModelConfig.from_dict(json.loads(classic.to_json())) == classic


@pytest.mark.parametrize("field, value", [
    ("arch", "rnn"), ("vocab_size", 0), ("context_length", -1), ("d_model", 2.5),
    ("n_layers", True), ("n_heads", 5), ("n_kv_heads", 3), ("d_ff", 0), ("norm_eps", 0.0),
    ("rope_theta", -1.0), ("activation", "relu"), ("tie_embeddings", "yes"),
])
def test_bad_field_is_named(field, value):
    with pytest.raises(ValueError, match=field if field != "n_heads" else "d_model"):
        ModelConfig(**{**BASE, field: value})


def test_classic_rejects_grouped_query_and_modern_needs_even_head_size():
    with pytest.raises(ValueError, match="n_kv_heads"):
        ModelConfig(**{**BASE, "arch": "classic", "activation": "gelu"})
    with pytest.raises(ValueError, match="even head size"):
        ModelConfig(**{**BASE, "d_model": 12, "n_heads": 4})


def test_from_dict_rejects_unknown_and_missing_fields():
    with pytest.raises(ValueError, match="unknown field.*colour"):
        ModelConfig.from_dict({**BASE, "colour": "red"})
    with pytest.raises(ValueError, match="missing field.*vocab_size"):
        ModelConfig.from_dict({k: v for k, v in BASE.items() if k != "vocab_size"})
    with pytest.raises(ValueError, match="not valid JSON"):
        ModelConfig.from_json("{")


def test_gemma_options_round_trip_and_stay_out_of_a_llama_config():
    llama = ModelConfig(arch="modern", vocab_size=10, context_length=8, d_model=8, n_layers=2,
                        n_heads=2)
    assert not set(GEMMA_OPTIONS) & set(llama.to_dict())
    gemma = ModelConfig(arch="modern", vocab_size=10, context_length=8, d_model=8, n_layers=6,
                        n_heads=2, n_kv_heads=1, head_dim=6, embed_scale=True, qk_norm=True,
                        post_norms=True, query_pre_attn_scalar=6.0, sliding_window=3,
                        sliding_window_pattern=6, rope_local_theta=100.0,
                        activation="gelu_tanh")
    assert ModelConfig.from_json(gemma.to_json()) == gemma
    assert [gemma.is_local(i) for i in range(6)] == [True] * 5 + [False]
    assert [gemma.rope_base(i) for i in (0, 5)] == [100.0, 10000.0]


@pytest.mark.parametrize("changes, message", [
    (dict(arch="classic", qk_norm=True), "qk_norm: an option of the modern architecture"),
    (dict(arch="classic", sliding_window=2), "sliding_window: an option of the modern"),
    (dict(sliding_window=0), "sliding_window: must be a positive integer"),
    (dict(sliding_window_pattern=0), "sliding_window_pattern: must be a positive integer"),
    (dict(head_dim=3), "head_dim: rotary embeddings need an even head size"),
    (dict(query_pre_attn_scalar=-1.0), "query_pre_attn_scalar: must be a positive number"),
    (dict(rope_local_theta=float("inf")), "rope_local_theta: must be a finite float"),
])
def test_gemma_options_are_checked(changes, message):
    fields = {**dict(arch="modern", vocab_size=10, context_length=8, d_model=8, n_layers=2,
                     n_heads=2), **changes}
    with pytest.raises(ValueError, match=message):
        ModelConfig(**fields)


def test_family_options_round_trip_through_json_and_are_checked_by_name():
    cfg = ModelConfig(arch="modern", vocab_size=11, context_length=16, d_model=16, n_layers=3,
                      n_heads=2, rope_scaling={"type": "yarn", "factor": 4.0,
                                               "original_context": 8},
                      no_rope_layers=(2,), pre_norms=False, post_norms=True, qk_norm=True,
                      qk_norm_all_heads=True, embedding_multiplier=12.0,
                      residual_multiplier=0.25, attention_multiplier=0.125, logit_scale=8.0)
    assert ModelConfig.from_json(cfg.to_json()) == cfg
    llama = ModelConfig(arch="modern", vocab_size=11, context_length=16, d_model=16,
                        n_layers=3, n_heads=2)
    assert set(llama.to_dict()).isdisjoint(FAMILY_OPTIONS)
    for change, message in [
            (dict(rope_scaling={"type": "longrope", "factor": 2.0}), "rope_scaling: expected"),
            (dict(rope_scaling={"type": "linear"}), "rope_scaling.factor: missing"),
            (dict(rope_scaling={"type": "linear", "factor": -1.0}), "rope_scaling.factor"),
            (dict(rope_scaling={"type": "freq_factors", "factors": [1.0]}),
             "rope_scaling.factors"),
            (dict(no_rope_layers=(3,)), "no_rope_layers"),
            (dict(residual_multiplier=0.0), "residual_multiplier"),
            (dict(logit_scale=float("inf")), "logit_scale")]:
        with pytest.raises(ValueError, match=message):
            ModelConfig(**{**llama.to_dict(), **change})
