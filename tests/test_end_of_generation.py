"""A model's default stop tokens (``Tokenizer.eos_token_ids``) are the set its file's own runtime
stops at: llama.cpp's end-of-generation set for a tokenizer read from GGUF
(``minillm.text.gguf_specials``), generation_config.json's ``eos_token_id`` with the EOS token for
a Hugging Face folder, kept through the .npz; without either, the EOS token and the end-of-turn
tokens the chat template writes. EOS comes first, then the others in ascending order.

tests/peers/test_end_of_generation_peer.py checks the same sets against llama.cpp's
``llama_vocab_is_eog`` and transformers' ``GenerationConfig``.
"""
import json

import numpy as np
import pytest

import minillm
from minillm.text.bpe import BYTE_TO_CHAR
from minillm.text.tokenizer import Tokenizer, TokenizerConfig

NORMAL, CONTROL, USER_DEFINED = 1, 3, 4
CHATML = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
          "{% endfor %}")


def gguf_metadata(extra, **keys):
    """A byte-level GGUF vocabulary: the 256 byte tokens, then ``extra`` ([(text, type)]), and
    the ``tokenizer.ggml.<key>`` values given (an id given as a text is that token's id)."""
    tokens = [BYTE_TO_CHAR[b] for b in range(256)] + [text for text, _ in extra]
    metadata = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": tokens,
                "tokenizer.ggml.token_type": [NORMAL] * 256 + [kind for _, kind in extra],
                "tokenizer.ggml.merges": []}
    for key, value in keys.items():
        metadata[f"tokenizer.ggml.{key}"] = tokens.index(value) if isinstance(value, str) else value
    return metadata


def stop_texts(extra, **keys):
    """The texts of the default stop tokens of ``gguf_metadata(extra, **keys)``, in order."""
    tok = Tokenizer.from_gguf(gguf_metadata(extra, **keys))
    return tuple(tok.token_of(i) for i in tok.eos_token_ids)


# ---------------------------------------------------------------------- GGUF: llama.cpp's set

def test_eos_then_every_end_of_generation_text_in_ascending_order():
    # Ordinary or control, every token with one of llama.cpp's texts ends a generation.
    extra = [("<my_eos>", CONTROL), ("[e~[", NORMAL), ("<end_of_turn>", NORMAL),
             ("<|im_start|>", CONTROL), ("</s>", CONTROL), ("<|im_end|>", CONTROL)]
    assert stop_texts(extra, eos_token_id="<my_eos>") == (
        "<my_eos>", "[e~[", "<end_of_turn>", "</s>", "<|im_end|>")
    # EOS first wherever it is; a control token without such a text ends nothing.
    assert stop_texts(extra, eos_token_id="<|im_end|>") == (
        "<|im_end|>", "[e~[", "<end_of_turn>", "</s>")


def test_the_eot_and_eom_keys_join_the_set():
    extra = [("<my_eos>", CONTROL), ("<my_eot>", CONTROL), ("<my_eom>", CONTROL),
             ("<other>", CONTROL)]
    assert stop_texts(extra, eos_token_id="<my_eos>") == ("<my_eos>",)
    assert stop_texts(extra, eos_token_id="<my_eos>", eot_token_id="<my_eot>") == (
        "<my_eos>", "<my_eot>")
    assert stop_texts(extra, eos_token_id="<my_eos>", eom_token_id="<my_eom>") == (
        "<my_eos>", "<my_eom>")


def test_fill_in_the_middle_pad_repo_and_separator_end_a_generation():
    texts = [("<|fim_prefix|>", CONTROL), ("<|fim_suffix|>", CONTROL),
             ("<|fim_middle|>", CONTROL), ("<|fim_pad|>", CONTROL), ("<|fim_repo|>", CONTROL),
             ("<|file_sep|>", CONTROL), ("<my_eos>", CONTROL)]
    # By their texts: pad, repo and separator; prefix, suffix and middle do not end one.
    assert stop_texts(texts, eos_token_id="<my_eos>") == (
        "<my_eos>", "<|fim_pad|>", "<|fim_repo|>", "<|file_sep|>")
    # By the file's keys, whatever the tokens' texts; a key keeps its role's texts out.
    named = [("<my_eos>", CONTROL), ("<a>", CONTROL), ("<b>", CONTROL), ("<c>", CONTROL),
             ("<PAD>", NORMAL), ("<d>", CONTROL)]
    assert stop_texts(named, eos_token_id="<my_eos>", fim_pad_token_id="<a>",
                      fim_rep_token_id="<b>", fim_sep_token_id="<c>",
                      fim_pre_token_id="<d>") == ("<my_eos>", "<a>", "<b>", "<c>")
    assert stop_texts(named, eos_token_id="<my_eos>") == ("<my_eos>", "<PAD>")


def test_eos_takes_llama_cpps_default_id():
    # No EOS key: byte-level BPE's default id is 11 (a byte here), as llama.cpp takes it.
    assert stop_texts([("<|im_end|>", CONTROL)]) == (BYTE_TO_CHAR[11], "<|im_end|>")


@pytest.mark.parametrize("ending, dropped", [
    (["<|return|>", "<|call|>"], "<|end|>"),    # gpt-oss (harmony)
    (["<|calls|>", "<|flush|>"], "<|end|>"),    # solar-open
    (["<|return|>"], None),                     # both are needed
    (["<|tool_response>"], "</s>"),             # Gemma 4: </s> is an ordinary token
])
def test_llama_cpps_exceptions_leave_the_set(ending, dropped):
    extra = [("<my_eos>", CONTROL), ("<|end|>", CONTROL), ("</s>", CONTROL)] + [
        (text, CONTROL) for text in ending]
    texts = stop_texts(extra, eos_token_id="<my_eos>")
    assert set(texts) == {"<my_eos>", "<|end|>", "</s>", *ending} - {dropped}


def test_plamos_eos_makes_its_end_of_text_ordinary():
    # <|plamo:eos|> is no end-of-generation text: it counts as the file's EOS.
    extra = [("<|plamo:eos|>", CONTROL), ("</s>", CONTROL)]
    assert stop_texts(extra) == (BYTE_TO_CHAR[11], "</s>")
    assert stop_texts(extra, eos_token_id="<|plamo:eos|>") == ("<|plamo:eos|>",)
    tok = Tokenizer.from_gguf(gguf_metadata(extra, eos_token_id="<|plamo:eos|>"))
    assert "</s>" not in tok.added_tokens  # and llama.cpp splits it as text


def test_an_eos_llama_cpp_takes_out_is_not_a_stop_token():
    # llama.cpp's rule, followed: its <|end|> leaves the set even when it is the file's EOS.
    extra = [("<|end|>", CONTROL), ("<|return|>", CONTROL), ("<|call|>", CONTROL)]
    tok = Tokenizer.from_gguf(gguf_metadata(extra, eos_token_id="<|end|>"))
    assert tok.eos_token_id == 256 and tok.eos_token_ids == (257, 258)


def test_the_set_ignores_the_chat_template():
    extra = [("<|im_start|>", CONTROL), ("<|im_end|>", CONTROL), ("<|endoftext|>", CONTROL)]
    metadata = gguf_metadata(extra, eos_token_id="<|endoftext|>")
    bare = Tokenizer.from_gguf(metadata)
    chat = Tokenizer.from_gguf({**metadata, "tokenizer.chat_template": CHATML})
    assert bare.eos_token_ids == chat.eos_token_ids == (258, 257)
    assert bare.with_chat_template(CHATML).eos_token_ids == (258, 257)


def test_another_template_adds_the_end_of_turn_tokens_it_writes():
    # A folder's set ends at <|endoftext|> only; a ChatML template given to it ends its turns.
    extra = [("<|endoftext|>", CONTROL), ("<|im_start|>", CONTROL), ("<|im_end|>", CONTROL)]
    tok = Tokenizer.from_json(Tokenizer.from_gguf(gguf_metadata(extra)).to_json(),
                              TokenizerConfig(eos_token="<|endoftext|>",
                                              end_of_generation_ids=(256,)))
    assert tok.eos_token_ids == (256,)
    assert tok.with_chat_template(CHATML).eos_token_ids == (256, 258)
    assert tok.eos_token_ids == (256,)  # the copy only changed
    # harmony's <|end|>, which llama.cpp makes ordinary, stays out however a template writes it.
    harmony = [("<|return|>", CONTROL), ("<|call|>", CONTROL), ("<|end|>", CONTROL)]
    gpt_oss = Tokenizer.from_gguf(gguf_metadata(harmony, eos_token_id="<|return|>"))
    assert gpt_oss.with_chat_template("<|end|><|return|>").eos_token_ids == (256, 257)


# ---------------------------------------------------------------------- the config

@pytest.mark.parametrize("value", ["2", -1, True, [1, "x"], {"a": 1}])
def test_the_config_refuses_what_is_not_token_ids(value):
    with pytest.raises(ValueError, match="end_of_generation_ids must be a token id"):
        TokenizerConfig.from_dict({"end_of_generation_ids": value})


def test_a_stop_id_past_the_vocabulary_is_refused():
    tok = Tokenizer.from_gguf(gguf_metadata([("<|im_end|>", CONTROL)]))
    config = TokenizerConfig.from_json(json.dumps({"end_of_generation_ids": [256, 3]}))
    assert config.end_of_generation_ids == (256, 3)
    assert Tokenizer.from_json(tok.to_json(), config).eos_token_ids == (256, 3)  # 256 is EOS
    config = TokenizerConfig(end_of_generation_ids=(3, 257))
    with pytest.raises(ValueError, match=r"end_of_generation_ids 257 is not a token id \(the "
                       r"vocabulary has 257\)"):
        Tokenizer.from_json(tok.to_json(), config)


def test_an_empty_set_stops_nowhere():
    tok = Tokenizer.from_gguf(gguf_metadata([("<|im_end|>", CONTROL)]))
    config = TokenizerConfig(eos_token="<|im_end|>", end_of_generation_ids=())
    assert Tokenizer.from_json(tok.to_json(), config).eos_token_ids == ()


# ---------------------------------------------------------------------- kept through .npz

def tiny_model(tokenizer):
    cfg = minillm.ModelConfig(arch="modern", vocab_size=len(tokenizer), context_length=8,
                              d_model=8, n_layers=1, n_heads=2)
    model = minillm.random_model(cfg, seed=0)
    model.tokenizer = tokenizer
    return model


def chat_gguf_tokenizer():
    """A GGUF tokenizer with a ChatML template whose set differs from the template's rule."""
    extra = [("<|endoftext|>", CONTROL), ("<|im_start|>", CONTROL), ("<|im_end|>", CONTROL),
             ("<|fim_pad|>", CONTROL)]
    return Tokenizer.from_gguf({**gguf_metadata(extra, eos_token_id="<|im_end|>"),
                                "tokenizer.chat_template": CHATML})


def test_a_saved_model_keeps_its_set(tmp_path):
    model = tiny_model(chat_gguf_tokenizer())
    assert model.tokenizer.eos_token_ids == (258, 256, 259)
    minillm.save(model, tmp_path / "m.npz")
    back = minillm.load(tmp_path / "m.npz").tokenizer
    assert back.config == model.tokenizer.config and back.eos_token_ids == (258, 256, 259)


def test_a_file_written_before_the_set_keeps_the_templates_rule(tmp_path):
    model = tiny_model(chat_gguf_tokenizer())
    minillm.save(model, tmp_path / "m.npz")
    with np.load(tmp_path / "m.npz") as f:
        entries = dict(f)
    config = json.loads(str(entries["minillm.tokenizer_config"]))
    del config["end_of_generation_ids"]  # as a minillm before the key wrote it
    entries["minillm.tokenizer_config"] = np.array(json.dumps(config))
    np.savez(tmp_path / "old.npz", **entries)
    old = minillm.load(tmp_path / "old.npz").tokenizer
    assert old.config.end_of_generation_ids is None
    assert old.eos_token_ids == (258,)  # EOS, and the end-of-turn token ChatML writes: itself


# ---------------------------------------------------------------------- Hugging Face folders

@pytest.fixture
def folder(tmp_path):
    """A Hugging Face folder whose tokenizer's EOS is <|im_end|> (258) and whose ChatML
    template writes it; <|endoftext|> (256) and <|fim_pad|> (259) end nothing by the template."""
    pytest.importorskip("safetensors")
    from minillm.files import export_hf

    gguf = chat_gguf_tokenizer()
    tokenizer = Tokenizer.from_json(gguf.to_json())  # a tokenizer.json: no set of its own
    export_hf(tiny_model(tokenizer), tmp_path)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"eos_token": "<|im_end|>", "chat_template": CHATML}))
    return tmp_path


def folder_stops(folder, generation_config=None):
    from minillm.files import convert

    if generation_config is not None:
        (folder / "generation_config.json").write_text(json.dumps(generation_config))
    return convert(folder).tokenizer.eos_token_ids


@pytest.mark.parametrize("generation_config, stops", [
    (None, (258,)),                           # no file: the template's rule
    ({"bos_token_id": 257}, (258,)),          # no eos_token_id: the same
    ({"eos_token_id": 256}, (258, 256)),      # an id, with the EOS
    ({"eos_token_id": [259, 256]}, (258, 256, 259)),
    ({"eos_token_id": [258]}, (258,)),
])
def test_a_folders_generation_config_sets_the_stop_tokens(folder, generation_config, stops):
    assert folder_stops(folder, generation_config) == stops


def test_a_folders_set_is_kept_through_the_npz(folder, tmp_path_factory):
    from minillm.files import convert

    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [256, 258]}))
    path = tmp_path_factory.mktemp("out") / "m.npz"
    minillm.save(convert(folder), path)
    assert minillm.load(path).tokenizer.eos_token_ids == (258, 256)


@pytest.mark.parametrize("text, message", [
    ('{"eos_token_id": "2"}', "eos_token_id must be a token id"),
    ('{"eos_token_id": [2, -1]}', "eos_token_id must be a token id"),
    ('{"eos_token_id": 900}', "eos_token_id 900 is not a token id of tokenizer.json"),
    ('[2]', "expected a JSON object"),
    ('{"eos_token_id": ', "Expecting value"),
])
def test_a_bad_generation_config_is_one_error_naming_it(folder, text, message):
    from minillm.files import convert

    (folder / "generation_config.json").write_text(text)
    with pytest.raises(ValueError, match=message) as error:
        convert(folder)
    assert "generation_config.json" in str(error.value) and "\n" not in str(error.value)
