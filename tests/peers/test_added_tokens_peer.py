"""Added tokens with ``lstrip``, ``rstrip``, ``single_word`` and ``normalized``, against the Rust
`tokenizers` library, token for token.

Each tokenizer.json is written here: the repository's byte-level vocabulary, and Mistral 7B
v0.1's SentencePiece vocabulary as transformers converts it (the ``mistral-common`` wheel), in
its three forms (Llama 2's normalizers, Metaspace "first" and "always"), each with added tokens
exercising every flag. A Phi-3 tokenizer.json is that vocabulary with Phi-3-mini's eleven added
tokens and their flags (its SentencePiece vocabulary is Llama 2's, of the same form).
"""
import json
import pathlib

import pytest
from hypothesis import given, settings, strategies as st

from minillm.text.chat_template import render_chat
from minillm.text.tokenizer import Tokenizer, TokenizerConfig
from tokenizer_corpus import CORPUS
from vocab_files import package_file

hf_tokenizers = pytest.importorskip("tokenizers")

WEIGHTS = pathlib.Path(__file__).resolve().parents[2] / "weights"
SETTINGS = settings(derandomize=True, max_examples=250, deadline=None)

# (content, flags): every flag alone and together, a token that is a word, normalized tokens
# and a raw one overlapping them ("<n>x": the raw token is cut first), a token made of
# whitespace and one that starts with it.
FLAGGED = [("<l>", "lstrip"), ("<r>", "rstrip"), ("<lr>", "lstrip rstrip"),
           ("<w>", "single_word"), ("word", "single_word"), ("<wr>", "single_word rstrip"),
           ("<n>", "normalized"), ("<nl>", "normalized lstrip rstrip"),
           ("two words", "normalized single_word"), ("\n\n", "rstrip"), (" <x>", "lstrip"),
           ("n>x", "")]
# Whitespace of every kind (C's isspace, Unicode's White_Space, and \x1c which Python calls
# a space and the Rust library does not), word characters of every kind (letters, marks,
# digits, letter numbers, connectors, joiners, circled letters) and characters that are not.
SPACES = [" ", "  ", "\t", "\n", "\r\n", "\x0b", "\x0c", "\x85", "\xa0", "\u2000", "\u3000",
          "\x1c", "\u200b"]
WORDISH = ["a", "Z", "\u00e9", "\u0301", "7", "\u0663", "\u2167", "\u00b2", "_", "\u203f",
           "\u200d", "\u24b6", "\U0001f130", "\u4e00", "-", ".", "!", "\U0001f600"]
assigned = st.characters(exclude_categories=("Cn", "Cs"))


def texts(tokens):
    """Texts of added tokens, whitespace and word characters side by side, and any text."""
    piece = st.one_of(st.sampled_from(tokens), st.sampled_from(SPACES), st.sampled_from(WORDISH),
                      st.text(alphabet=assigned, max_size=8),
                      st.sampled_from(["word", "words", "two words", "two  words", "<w", "<n>x"]))
    return st.lists(piece, max_size=10).map("".join)


def with_added(data, entries):
    """A tokenizer.json (parsed) with these added tokens besides its own; each new token gets
    the next id, in the model's vocabulary too (the Rust library keeps its id only then)."""
    data = json.loads(json.dumps(data))
    vocab = data["model"]["vocab"]
    for content, flags in entries:
        token_id = vocab.setdefault(content, max(vocab.values()) + 1)
        data["added_tokens"] = [t for t in data["added_tokens"] if t["content"] != content]
        data["added_tokens"].append({
            "id": token_id, "content": content, "special": "special" in flags.split(),
            **{flag: flag in flags.split()
               for flag in ("single_word", "lstrip", "rstrip", "normalized")}})
    return json.dumps(data)


def both(text, config=None):
    return Tokenizer.from_json(text, config), hf_tokenizers.Tokenizer.from_str(text)


def peer_ids(peer, text):
    return peer.encode(text, add_special_tokens=False).ids


# ---------------------------------------------------------------------- byte-level BPE

@pytest.fixture(scope="module")
def byte_level():
    data = json.loads((WEIGHTS / "tokenizer.json").read_text(encoding="utf-8"))
    return both(with_added(data, FLAGGED))


def test_byte_level_examples(byte_level):
    mine, peer = byte_level
    for text in ["a  <l>  b", "a  <r>  b", "x \t<lr>\n y", "a<w>b", "a <w> b", "_<w>", "\u0301<w>",
                 "\u00b2<w>\u00b2", "words word wordy", "<w><w>", "<l><l>  <l>", "<r>  <l>",
                 "a\n\n  \n\nb", "x   <x>  y", "<n>  <nl>  <n>", "two words two  words",
                 "< <r> <", "\xa0<r>\xa0", "<r>\x1c", "<w>\u200d"]:
        assert mine.encode(text) == peer_ids(peer, text), text
    assert mine.encode("a  <l>") == mine.encode("a") + [mine.token_to_id("<l>")]  # no spaces


@SETTINGS
@given(texts([t for t, _ in FLAGGED] + ["<|endoftext|>"]))
def test_byte_level_hypothesis_strings(byte_level, text):
    mine, peer = byte_level
    ids = mine.encode(text)
    assert ids == peer_ids(peer, text)
    assert mine.decode(ids) == peer.decode(ids, skip_special_tokens=False)


def test_written_tokenizer_json_keeps_the_flags(byte_level):
    mine, _ = byte_level
    again = hf_tokenizers.Tokenizer.from_str(mine.to_json())
    for text in CORPUS + ["a  <l>  b <r>  x<w>y <w> word two words \n\n  <nl> "]:
        assert mine.encode(text) == peer_ids(again, text)


# ---------------------------------------------------------------------- SentencePiece

@pytest.fixture(scope="module")
def sentencepiece_json(tmp_path_factory):
    """Mistral 7B v0.1's vocabulary as transformers converts it: merges, byte fallback, the
    Metaspace pre-tokenizer (parsed tokenizer.json)."""
    pytest.importorskip("sentencepiece")
    transformers = pytest.importorskip("transformers")
    model = package_file("mistral_common", "data", "tokenizer.model.v1")
    folder = tmp_path_factory.mktemp("mistral")
    (folder / "tokenizer.model").write_bytes(model.read_bytes())
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>",
        "unk_token": "<unk>", "add_bos_token": False, "legacy": True}))
    text = transformers.AutoTokenizer.from_pretrained(str(folder)).backend_tokenizer.to_str()
    return json.loads(text)


def sentencepiece_form(data, form):
    """The vocabulary with Llama 2's normalizers (``Prepend("▁")``, ``Replace(" ", "▁")``, no
    pre-tokenizer: Llama 2's and Phi-3's tokenizer.json) or the Metaspace pre-tokenizer with
    the prepend scheme ``form``."""
    data = json.loads(json.dumps(data))
    if form == "normalizers":
        data["normalizer"] = {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "\u2581"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
        data["pre_tokenizer"] = None
    else:
        data["normalizer"] = None
        data["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581",
                                 "prepend_scheme": form, "split": False}
    return data


@pytest.mark.parametrize("form", ["normalizers", "first", "always"])
def test_sentencepiece_forms_hypothesis_strings(sentencepiece_json, form):
    data = sentencepiece_form(sentencepiece_json, form)
    mine, peer = both(with_added(data, FLAGGED))
    tokens = [t for t, _ in FLAGGED] + ["<s>", "</s>"]

    @SETTINGS
    @given(texts(tokens))
    def check(text):
        ids = mine.encode(text)
        assert ids == peer_ids(peer, text)
        assert mine.decode(ids) == peer.decode(ids, skip_special_tokens=False)
    check()
    for text in ["<n>", "a <n>", "a<n>", "two words", "a two words", " <x>", "x <x>", "<r>  x",
                 "  <l>x", "<l>  x"]:
        assert mine.encode(text) == peer_ids(peer, text), text


# Phi-3-mini's added tokens (its tokenizer.json): </s> and the chat tokens take the whitespace
# after them; </s> is not special there.
PHI3_ADDED = ([("<unk>", 0, "special"), ("<s>", 1, "special"), ("</s>", 2, "rstrip"),
               ("<|endoftext|>", 32000, "special"), ("<|assistant|>", 32001, "special rstrip")]
              + [(f"<|placeholder{i}|>", 32001 + i, "special rstrip") for i in range(1, 5)]
              + [("<|system|>", 32006, "special rstrip"), ("<|end|>", 32007, "special rstrip")]
              + [(f"<|placeholder{i}|>", 32003 + i, "special rstrip") for i in (5, 6)]
              + [("<|user|>", 32010, "special rstrip")])
PHI3_TEMPLATE = ("{% for message in messages %}{% if message['role'] == 'system' and "
                 "message['content'] %}{{'<|system|>\n' + message['content'] + '<|end|>\n'}}"
                 "{% elif message['role'] == 'user' %}{{'<|user|>\n' + message['content'] + "
                 "'<|end|>\n'}}{% elif message['role'] == 'assistant' %}{{'<|assistant|>\n' + "
                 "message['content'] + '<|end|>\n'}}{% endif %}{% endfor %}"
                 "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}"
                 "{{ eos_token }}{% endif %}")


def phi3_json(sentencepiece_json):
    """A Phi-3 tokenizer.json: a SentencePiece vocabulary in Llama 2's form with Phi-3's
    added tokens, ids and flags."""
    data = sentencepiece_form(sentencepiece_json, "normalizers")
    data["added_tokens"] = []
    for content, token_id, flags in PHI3_ADDED:
        data["model"]["vocab"][content] = token_id
        data["added_tokens"].append({
            "id": token_id, "content": content, "special": "special" in flags.split(),
            "single_word": False, "lstrip": False, "rstrip": "rstrip" in flags.split(),
            "normalized": False})
    data["post_processor"] = None
    return json.dumps(data)


def test_phi3_tokenizer_json(sentencepiece_json):
    config = TokenizerConfig(bos_token="<s>", eos_token="<|endoftext|>", unk_token="<unk>",
                             pad_token="<|endoftext|>", add_bos_token=False,
                             chat_template=PHI3_TEMPLATE)
    mine, peer = both(phi3_json(sentencepiece_json), config)
    assert len(mine) == 32011 and mine.added["<|end|>"].rstrip
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Hi!\n  Two lines."},
                {"role": "assistant", "content": " Hello. "}, {"role": "user", "content": "Bye"}]
    prompt = render_chat(messages, mine.chat_template, True)
    ids = mine.encode(prompt)
    assert ids == peer_ids(peer, prompt)
    # The newline after each chat token goes with it: "<|user|>\nHi" is <|user|> then "▁Hi".
    assert ids[:2] == [32006, mine.encode("Be")[0]]
    assert mine.eos_token_ids == (32000, 32007)
    tokens = [t for t, _, _ in PHI3_ADDED]

    @SETTINGS
    @given(texts(tokens))
    def check(text):
        got = mine.encode(text)
        assert got == peer_ids(peer, text)
        assert mine.decode(got) == peer.decode(got, skip_special_tokens=False)
        assert mine.decode(got, skip_special_tokens=True) == peer.decode(got)
    check()
