"""llama.cpp's load-time rules on special tokens, against llama.cpp itself (llama-cpp-python,
vocab_only), token for token, on GGUF vocabularies written here (``vocab_files``):

* Phi-3: Mistral 7B v0.1's SentencePiece vocabulary (the ``mistral-common`` wheel) with
  Phi-3-mini's added tokens and types as llama.cpp's converter writes them; named Phi-3, its
  end-of-turn tokens take the whitespace after them; named otherwise, they do not. The same
  rule on a byte-level vocabulary.
* The retyping by text: ``</s>``, ``<|im_end|>``, FIM and gpt-oss texts that are ordinary tokens
  of a byte-level vocabulary (as ``</s>`` is in Qwen2's), the roles the file names, and the
  Gemma 4 and harmony exceptions.
* ``<mask>`` and ``[MASK]`` taking the whitespace before them (jina-v2, modern-bert).
"""
import pathlib

import pytest
from hypothesis import given, settings, strategies as st

from minillm.text.chat_template import render_chat
from minillm.text.tokenizer import Tokenizer
from tokenizer_corpus import CORPUS
from vocab_files import (CONTROL, NORMAL, USER_DEFINED, bpe_metadata, package_file, spm_metadata,
                         write_vocab_gguf)

llama_cpp = pytest.importorskip("llama_cpp")

WEIGHTS = pathlib.Path(__file__).resolve().parents[2] / "weights"
SETTINGS = settings(derandomize=True, max_examples=200, deadline=None)
SPACES = [" ", "  ", "\n", "\t", "\r\n", "\x0b", "\x0c", "\xa0", "\u3000", "\x85"]
assigned = st.characters(exclude_categories=("Cn", "Cs"))


def texts(tokens):
    """Texts of the tokens with whitespace of every kind and words around them."""
    piece = st.one_of(st.sampled_from(tokens), st.sampled_from(SPACES),
                      st.text(alphabet=assigned, max_size=8),
                      st.sampled_from(["Hi", " there", "x", "</", "s>", "<|"]))
    return st.lists(piece, max_size=10).map("".join)


def load_both(tmp_path, metadata, name="vocab"):
    """(llama.cpp's vocabulary, minillm's tokenizer) of the same GGUF metadata."""
    path = write_vocab_gguf(tmp_path / f"{name}.gguf", metadata)
    return llama_cpp.Llama(str(path), vocab_only=True, verbose=False), Tokenizer.from_gguf(metadata)


def assert_same(llm, ours, text):
    ids = ours.encode(text)
    assert ids == llm.tokenize(text.encode("utf-8"), add_bos=False, special=True), text
    # Each token's text, and the same tokens special (llama.cpp's special=False leaves them
    # out). One token at a time: llama-cpp-python drops a space after BOS.
    special = set(ours.special_tokens.values())
    for i in set(ids):
        assert ours.token_bytes(i) == llm.detokenize([i], special=True)
        assert (b"" if i in special else ours.token_bytes(i)) == llm.detokenize([i])
    return ids


def check_hypothesis(llm, ours, tokens):
    @SETTINGS
    @given(texts(tokens))
    def check(text):
        assert_same(llm, ours, text)
    check()


# ---------------------------------------------------------------------- Phi-3

# Phi-3-mini's added tokens: (text, id, special); llama.cpp's converter types the special ones
# control and the others (</s>) user-defined.
PHI3_ADDED = ([("</s>", 2, False), ("<|endoftext|>", 32000, True), ("<|assistant|>", 32001, True)]
              + [(f"<|placeholder{i}|>", 32001 + i, True) for i in range(1, 5)]
              + [("<|system|>", 32006, True), ("<|end|>", 32007, True)]
              + [(f"<|placeholder{i}|>", 32003 + i, True) for i in (5, 6)]
              + [("<|user|>", 32010, True)])
PHI3_TEMPLATE = ("{% for message in messages %}{{'<|' + message['role'] + '|>\n' + "
                 "message['content'] + '<|end|>\n'}}{% endfor %}{{ '<|assistant|>\n' }}")


@pytest.fixture(scope="module")
def phi3_vocab():
    pytest.importorskip("sentencepiece")
    metadata = spm_metadata(package_file("mistral_common", "data", "tokenizer.model.v1"))
    tokens = metadata["tokenizer.ggml.tokens"] + [None] * 11
    types = metadata["tokenizer.ggml.token_type"] + [None] * 11
    scores = metadata["tokenizer.ggml.scores"] + [None] * 11
    for text, token_id, special in PHI3_ADDED:
        tokens[token_id], scores[token_id] = text, -1000.0
        types[token_id] = CONTROL if special else USER_DEFINED
    metadata.update({"tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": types,
                     "tokenizer.ggml.scores": scores, "tokenizer.ggml.eos_token_id": 32000,
                     "tokenizer.ggml.add_bos_token": False})
    return metadata


@pytest.mark.parametrize("name, strips", [("Phi-3-mini-4k-instruct", True),
                                          ("my PHI3 finetune", True), ("Phi 3 Mini", False),
                                          ("Mistral", False)])
def test_phi3_end_of_turn_tokens_take_the_whitespace_after_them(tmp_path, phi3_vocab, name,
                                                                strips):
    llm, ours = load_both(tmp_path, {**phi3_vocab, "general.name": name})
    assert ours.added["<|end|>"].rstrip == ours.added["</s>"].rstrip == strips
    assert not ours.added["<|endoftext|>"].rstrip and not ours.added["<s>"].rstrip
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Hi!\n  Two lines. "}]
    prompt = render_chat(messages, PHI3_TEMPLATE, True)
    ids = assert_same(llm, ours, prompt)
    # "<|system|>\nBe brief.": stripped, the newline goes with the token.
    first = ours.encode("Be brief.")
    assert ids[0] == 32006 and (ids[1:1 + len(first)] == first) == strips
    tokens = [t for t, _, _ in PHI3_ADDED] + ["<s>", "<unk>"]
    check_hypothesis(llm, ours, tokens)


def test_phi3_rule_on_a_byte_level_vocabulary(tmp_path):
    text = (WEIGHTS / "tokenizer.json").read_text(encoding="utf-8")
    metadata = appended(bpe_metadata(text, "qwen2"), [
        ("<unk>", CONTROL), ("<s>", CONTROL), ("</s>", USER_DEFINED), ("<|end|>", CONTROL),
        ("<|user|>", CONTROL), ("<tool>", USER_DEFINED)])
    llm, ours = load_both(tmp_path, {**metadata, "general.name": "phi3-bpe"})
    assert ours.added["<tool>"].rstrip and not ours.added["<|endoftext|>"].rstrip
    check_hypothesis(llm, ours, ["<unk>", "<s>", "</s>", "<|end|>", "<|user|>", "<tool>",
                                 "<|endoftext|>"])


# ---------------------------------------------------------------------- retyping by text

def appended(metadata, entries):
    """GGUF metadata with tokens (text, type) added at the end of the vocabulary."""
    metadata = dict(metadata)
    metadata["tokenizer.ggml.tokens"] = metadata["tokenizer.ggml.tokens"] + [
        text for text, _ in entries]
    metadata["tokenizer.ggml.token_type"] = metadata["tokenizer.ggml.token_type"] + [
        kind for _, kind in entries]
    return metadata


# One text of each FIM role: of two, llama.cpp retypes the one its hash map yields first.
ORDINARY = ["</s>", "<|im_end|>", "<PRE>", "<|fim_suffix|>",
            "<|fim_pad|>", "<|start|>", "<|channel|>", "<|eom_id|>", "<eos>", "<|end_of_text|>",
            "<unused3>"]


@pytest.mark.parametrize("named", [False, True])
def test_ordinary_tokens_with_special_texts_are_matched_whole(tmp_path, named):
    # A byte-level vocabulary whose </s>, <|im_end|>, ... are ordinary tokens (</s> is one in
    # Qwen2's vocabulary); naming a FIM role's id in the file keeps its texts ordinary.
    text = (WEIGHTS / "tokenizer.json").read_text(encoding="utf-8")
    metadata = appended(bpe_metadata(text, "qwen2"), [(t, NORMAL) for t in ORDINARY])
    tokens = metadata["tokenizer.ggml.tokens"]
    if named:
        metadata["tokenizer.ggml.fim_pre_token_id"] = tokens.index("<PRE>")
    llm, ours = load_both(tmp_path, metadata)
    assert ours.special_tokens["</s>"] == tokens.index("</s>")
    assert ("<PRE>" in ours.added_tokens) != named and "<|fim_suffix|>" in ours.added_tokens
    assert ours.added["<|start|>"].special is False  # user-defined: decoding keeps it
    assert "<unused3>" not in ours.added_tokens
    assert len(ours.encode("a</s>b")) == 3
    for sample in CORPUS:
        assert_same(llm, ours, sample)
    check_hypothesis(llm, ours, ORDINARY + ["<|fim_", "<PRE", "<|fim_prefix|>"])


@pytest.mark.parametrize("extra, kept", [
    ([("<|tool_response>", NORMAL)], False),  # Gemma 4: </s> is an ordinary token again
    ([("<|return|>", CONTROL), ("<|call|>", CONTROL), ("<|end|>", CONTROL)], True),
    ([("<|calls|>", CONTROL), ("<|flush|>", CONTROL), ("<|end|>", CONTROL)], True)])
def test_the_exceptions(tmp_path, extra, kept):
    text = (WEIGHTS / "tokenizer.json").read_text(encoding="utf-8")
    metadata = appended(bpe_metadata(text, "qwen2"), [("</s>", CONTROL)] + extra)
    llm, ours = load_both(tmp_path, metadata)
    assert ("</s>" in ours.added_tokens) == kept
    if "<|end|>" in ours.added:  # harmony: <|end|> ends no generation, decoding keeps it
        assert ours.added["<|end|>"].special is False
    check_hypothesis(llm, ours, ["</s>", "<|end|>"] + [t for t, _ in extra])


@pytest.mark.parametrize("pre, name, token", [("jina-v2-de", "jina", "<mask>"),
                                              ("gpt-2", "modern-bert-base", "[MASK]")])
def test_mask_takes_the_whitespace_before_it(tmp_path, pre, name, token):
    text = (WEIGHTS / "tokenizer.json").read_text(encoding="utf-8")
    metadata = appended(bpe_metadata(text, pre), [(token, CONTROL)])
    llm, ours = load_both(tmp_path, {**metadata, "general.name": name})
    assert ours.added[token].lstrip and not ours.added[token].rstrip
    assert ours.encode(f"a \t{token}") == ours.encode("a") + [ours.token_to_id(token)]
    check_hypothesis(llm, ours, [token, "<|endoftext|>"])
