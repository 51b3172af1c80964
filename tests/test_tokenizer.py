"""The byte-level BPE tokenizer: round trips, streaming, special tokens, the file format."""

import json
import pathlib
import unicodedata

import pytest
from hypothesis import given, settings, strategies as st

from minillm.tokenizer import (ASCII_PATTERN, BYTE_TO_CHAR, StreamDecoder, Tokenizer,
                               gpt2_split_pattern, load_tokenizer,
                               unicode_letters_and_numbers)

TOKENIZER_JSON = pathlib.Path(__file__).resolve().parents[1] / "weights" / "tokenizer.json"
EOS = "<|endoftext|>"

# Plenty of examples, reproducible from run to run.
settings.register_profile("tokenizer", derandomize=True, max_examples=200, deadline=None)
SETTINGS = settings.get_profile("tokenizer")


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(TOKENIZER_JSON)


texts = st.text()
texts_with_specials = st.lists(st.one_of(st.text(), st.just(EOS), st.just("<|endoftext"),
                                         st.just(" \n")), max_size=8).map("".join)


def test_shipped_tokenizer_basics(tok):
    assert tok.vocab_size == 2048
    assert tok.eos_token_id == tok.token_to_id(EOS) == 0
    assert tok.special_tokens == {EOS: 0}
    assert tok.encode("") == []
    assert tok.decode([]) == ""


def test_byte_table_is_a_bijection_onto_printable_characters():
    chars = list(BYTE_TO_CHAR.values())
    assert len(set(chars)) == 256
    assert all(c.isprintable() and not c.isspace() for c in chars)
    assert BYTE_TO_CHAR[ord(" ")] == "\u0120" and BYTE_TO_CHAR[ord("\n")] == "\u010a"


def test_known_word_splits():
    # The splits the Rust `tokenizers` ByteLevel pre-tokenizer makes of the same strings.
    pattern = gpt2_split_pattern()
    assert pattern.findall("I've  99 \u00b2x \u2167 \u4e00\u4e8c") == [
        "I", "'ve", " ", " 99", " \u00b2", "x", " \u2167", " \u4e00\u4e8c"]
    assert pattern.findall("x  \x1c y") == ["x", " ", " \x1c", " y"]
    assert pattern.findall("a  \n\n c") == ["a", "  \n\n", " c"]
    assert ASCII_PATTERN.findall("Hello, world!  It's 2024.\n") == [
        "Hello", ",", " world", "!", " ", " It", "'s", " 2024", ".", "\n"]


@SETTINGS
@given(st.text(alphabet=st.characters(max_codepoint=127)))
def test_ascii_pattern_equals_full_pattern_on_ascii(text):
    assert ASCII_PATTERN.findall(text) == gpt2_split_pattern().findall(text)


@SETTINGS
@given(texts)
def test_split_covers_the_text(text):
    assert "".join(gpt2_split_pattern().findall(text)) == text


def test_character_classes_are_exact_over_all_of_unicode():
    letters, numbers = unicode_letters_and_numbers()
    categories = [unicodedata.category(chr(code)) for code in range(0x110000)]
    assert letters == "".join(chr(c) for c, cat in enumerate(categories) if cat[0] == "L")
    assert numbers == "".join(chr(c) for c, cat in enumerate(categories) if cat[0] == "N")


@SETTINGS
@given(texts)
def test_round_trip(tok, text):
    assert tok.decode(tok.encode(text)) == text


@SETTINGS
@given(texts_with_specials)
def test_round_trip_with_special_tokens(tok, text):
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert ids.count(tok.eos_token_id) == text.count(EOS)


def test_special_token_is_kept_whole(tok):
    ids = tok.encode("In the beginning" + EOS + "God")
    assert ids.count(0) == 1
    assert tok.decode(ids, skip_special_tokens=True) == "In the beginningGod"
    assert EOS not in [tok.id_to_token[i] for i in tok.encode("<|endoftext|")]


def stream(tok, ids):
    decoder = StreamDecoder(tok)
    pieces = [decoder.push(i) for i in ids]
    pieces.append(decoder.flush())
    return pieces


@SETTINGS
@given(texts_with_specials)
def test_streaming_equals_whole_decode_of_encoded_text(tok, text):
    ids = tok.encode(text)
    assert "".join(stream(tok, ids)) == text


@SETTINGS
@given(st.lists(st.integers(0, 2047), max_size=40))
def test_streaming_equals_whole_decode_for_any_ids(tok, ids):
    # Arbitrary ids may cut UTF-8 characters anywhere or form invalid bytes.
    assert "".join(stream(tok, ids)) == tok.decode(ids)


@SETTINGS
@given(st.text(min_size=1), st.data())
def test_streaming_never_prints_half_a_character(tok, text, data):
    ids = tok.encode(text)
    split = data.draw(st.integers(0, len(ids)))
    decoder = tok.stream_decoder()
    head = "".join(decoder.push(i) for i in ids[:split])
    tail = "".join(decoder.push(i) for i in ids[split:]) + decoder.flush()
    assert head + tail == text
    assert text.startswith(head)


def test_stream_decoder_skips_special_tokens(tok):
    decoder = tok.stream_decoder(skip_special_tokens=True)
    text = "".join(decoder.push(i) for i in tok.encode("a" + EOS + "b")) + decoder.flush()
    assert text == "ab"


def test_merges_as_strings_or_lists_give_the_same_tokenizer(tok):
    data = json.loads(TOKENIZER_JSON.read_text(encoding="utf-8"))
    as_lists = [m if isinstance(m, list) else m.split(" ") for m in data["model"]["merges"]]
    data["model"]["merges"] = [" ".join(m) for m in as_lists]
    from_strings = Tokenizer.from_json(json.dumps(data))
    data["model"]["merges"] = as_lists
    from_lists = Tokenizer.from_json(json.dumps(data))
    text = "In the beginning, God created the heavens and the earth. " + EOS + " Amen."
    assert from_strings.encode(text) == from_lists.encode(text) == tok.encode(text)


def test_to_json_round_trip(tok):
    assert tok.to_json() == TOKENIZER_JSON.read_text(encoding="utf-8")
    data = json.loads(tok.to_json())
    rebuilt = Tokenizer(data["model"]["vocab"], data["model"]["merges"], data["added_tokens"])
    again = Tokenizer.from_json(rebuilt.to_json())
    text = "Let there be light! 12 \u00e9t\u00e9 " + EOS
    assert again.encode(text) == rebuilt.encode(text) == tok.encode(text)


def test_a_tiny_hand_made_tokenizer():
    vocab = {BYTE_TO_CHAR[b]: b for b in range(256)}
    vocab.update({"ab": 256, "abc": 257, "\u0120ab": 258, "\u0120a": 259})
    # (a, b) outranks (Ġ, a), so " ab" becomes Ġ + ab, then Ġab; "Ġa" is never reached.
    merges = ["a b", ["ab", "c"], ["\u0120", "ab"], ["\u0120", "a"]]
    tok = Tokenizer(vocab, merges, [{"id": 260, "content": "<s>", "special": True}])
    assert tok.encode("abc ab<s>x") == [257, 258, 260, ord("x")]
    assert tok.encode("aab") == [ord("a"), 256]
    assert tok.decode([257, 258, 260]) == "abc ab<s>"
    assert tok.eos_token_id is None


@pytest.mark.parametrize("change, message", [
    (lambda d: d["model"].update(type="WordPiece"), "not BPE"),
    (lambda d: d.update(normalizer={"type": "NFC"}), "normalizers"),
    (lambda d: d.update(pre_tokenizer={"type": "Whitespace"}), "pre-tokenizer"),
    (lambda d: d["model"].update(continuing_subword_prefix="##"), "continuing_subword_prefix"),
    (lambda d: d["added_tokens"][0].update(lstrip=True), "lstrip"),
])
def test_unsupported_files_are_refused_clearly(change, message):
    data = json.loads(TOKENIZER_JSON.read_text(encoding="utf-8"))
    change(data)
    with pytest.raises(ValueError, match=message):
        Tokenizer.from_json(json.dumps(data))


def test_unknown_id_is_a_clear_error(tok):
    with pytest.raises(ValueError, match="not in the vocabulary"):
        tok.decode([5000])
