"""minillm's tokenizer against the Hugging Face `tokenizers` library, token for token."""

import json
import pathlib

import pytest
from hypothesis import given, settings, strategies as st

from minillm.tokenizer import DIGIT_REGEX, PRE_TOKENIZERS, Tokenizer, pre_tokenize

hf_tokenizers = pytest.importorskip("tokenizers")

WEIGHTS = pathlib.Path(__file__).resolve().parents[2] / "weights"
TOKENIZER_JSON = (WEIGHTS / "tokenizer.json").read_text(encoding="utf-8")
EOS = "<|endoftext|>"

SETTINGS = settings(derandomize=True, max_examples=300, deadline=None)

ours = Tokenizer.from_json(TOKENIZER_JSON)
theirs = hf_tokenizers.Tokenizer.from_str(TOKENIZER_JSON)


def assert_same(text, mine=ours, peer=theirs):
    ids = mine.encode(text)
    assert ids == peer.encode(text).ids
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


def rust_pre_tokenizer(name):
    """The Rust library's pre-tokenizer for a name of PRE_TOKENIZERS, before the byte step."""
    regexes = PRE_TOKENIZERS[name]
    steps = [hf_tokenizers.pre_tokenizers.Digits(individual_digits=True)
             if regex == DIGIT_REGEX else
             hf_tokenizers.pre_tokenizers.Split(hf_tokenizers.Regex(regex), behavior="isolated")
             for regex in regexes]
    return hf_tokenizers.pre_tokenizers.Sequence(steps)


# Characters this Python's Unicode database knows (and no surrogates, which UTF-8 cannot hold):
# a newer character is "other" here, maybe a letter there (the documented deviation).
assigned_text = st.one_of(st.text(alphabet=st.characters(exclude_categories=("Cn", "Cs"))), words)


@SETTINGS
@given(st.sampled_from(sorted(PRE_TOKENIZERS)), assigned_text)
def test_named_pre_tokenizers_split_like_the_rust_library(name, text):
    words = [word for word, _ in rust_pre_tokenizer(name).pre_tokenize_str(text)]
    assert pre_tokenize(text, name) == words
