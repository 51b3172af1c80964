"""The byte-level BPE tokenizer: round trips, streaming, special tokens, the file format."""

import json
import pathlib
import unicodedata

import pytest
from hypothesis import given, settings, strategies as st

from minillm.text.bpe import BYTE_TO_CHAR
from minillm.text.pretokenize import (ASCII_PATTERN, GPT2_REGEX, LLAMA3_REGEX, PRE_TOKENIZERS,
                                      gpt2_split_pattern, pre_tokenize, split_pattern,
                                      to_python_regex, unicode_categories,
                                      unicode_letters_and_numbers)
from minillm.text.added_tokens import find_added
from minillm.text.sentencepiece import SentencePiece
from minillm.text.tokenizer import StreamDecoder, Tokenizer, TokenizerConfig, load_tokenizer

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


@pytest.mark.slow
def test_character_classes_are_exact_over_all_of_unicode():
    letters, numbers = unicode_letters_and_numbers()
    categories = [unicodedata.category(chr(code)) for code in range(0x110000)]
    assert letters == "".join(chr(c) for c, cat in enumerate(categories) if cat[0] == "L")
    assert numbers == "".join(chr(c) for c, cat in enumerate(categories) if cat[0] == "N")
    for major, chars in unicode_categories().items():
        assert chars == "".join(chr(c) for c, cat in enumerate(categories) if cat[0] == major)


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


def test_bytes_missing_from_the_vocabulary_are_left_out_before_merging():
    # As the Rust library does without an unknown token (checked against it: same ids).
    vocab = {BYTE_TO_CHAR[b]: b for b in range(256) if b != 4}
    vocab["!!"] = 256
    tok = Tokenizer(vocab, ["! !"], [{"id": 257, "content": "<s>", "special": True}])
    assert tok.encode("!\x04!") == [256]
    assert tok.encode("a\x04b") == [ord("a"), ord("b")]
    assert tok.encode("\x04<s>!!") == [257, 256]


def test_to_json_keeps_added_tokens_in_the_model_vocabulary():
    tok = Tokenizer({BYTE_TO_CHAR[b]: b for b in range(256)}, [],
                    [{"id": 256, "content": "<s>", "special": True}])
    assert json.loads(tok.to_json())["model"]["vocab"]["<s>"] == 256


# ---------------------------------------------------------------------- added tokens' flags

def flagged(*extra, config=None, **flags):
    """A tokenizer of one token per byte (id = the byte) and the added token "<t>" (id 256)
    with ``flags``, and ``extra`` added tokens after it."""
    added = [{"id": 256, "content": "<t>", "special": True, **flags}]
    added += [{"id": 257 + i, **token} for i, token in enumerate(extra)]
    return Tokenizer({BYTE_TO_CHAR[b]: b for b in range(256)}, [], added, config=config)


def utf8(text):
    return list(text.encode("utf-8"))


def test_added_token_strips_whitespace_beside_it():
    assert flagged().encode("a \t<t>\n b") == utf8("a \t") + [256] + utf8("\n b")
    assert flagged(lstrip=True).encode("a \t<t>\n b") == utf8("a") + [256] + utf8("\n b")
    assert flagged(rstrip=True).encode("a \t<t>\n b") == utf8("a \t") + [256] + utf8("b")
    both = flagged(lstrip=True, rstrip=True)
    assert both.encode("a \u3000<t>\xa0\x85b") == utf8("a") + [256] + utf8("b")
    assert both.encode("  <t>  <t>  ") == [256, 256]
    # Unicode's White_Space, not Python's str.isspace (\x1c), nor a zero-width space.
    assert both.encode("\x1c<t>\u200b") == utf8("\x1c") + [256] + utf8("\u200b")
    # llama.cpp strips C's isspace only.
    ascii_only = flagged(lstrip=True, rstrip=True,
                         config=TokenizerConfig(strip_whitespace="ascii"))
    assert ascii_only.encode("\xa0 <t>\t\u3000") == utf8("\xa0") + [256] + utf8("\u3000")


def test_single_word_token_only_between_non_word_characters():
    tok = flagged(single_word=True)
    for text in ["<t>", " <t>.", "(<t>)", "\u00b2<t>", "<t>\U0001f600", "-<t>-"]:
        assert 256 in tok.encode(text), text
    # Letters, marks, digits, letter numbers, connectors, joiners, circled letters touch it.
    for text in ["a<t>", "<t>\u00e9", "\u0301<t>", "1<t>", "<t>\u2167", "_<t>", "<t>\u203f",
                 "\u200d<t>", "\u24b6<t>"]:
        assert tok.encode(text) == utf8(text), text
    assert tok.encode("x<t> <t>") == utf8("x<t> ") + [256]


def test_normalized_tokens_are_looked_for_after_the_others():
    assert flagged({"content": "abc", "normalized": True}).encode("abc") == [257]
    tok = flagged({"content": "<t>x", "normalized": True})
    assert tok.encode("<t>x") == [256] + utf8("x")  # the raw token goes first


def test_normalized_token_under_llama2_normalizers():
    # Llama 2's normalizers write "<n>" as "▁<n>": it matches at the start or after a space.
    vocab = {"<unk>": 0, "\u2581": 1, "a": 2, "<": 3, "n": 4, ">": 5}
    tok = Tokenizer(vocab, [], [{"id": 6, "content": "<n>", "normalized": True}],
                    sentencepiece=SentencePiece(byte_fallback=False),
                    config=TokenizerConfig(unk_token="<unk>"))
    assert tok.encode("<n>") == [6]
    assert tok.encode("a <n>") == [1, 2, 6]
    assert tok.encode("a<n>") == [1, 2, 3, 4, 5]


def test_flags_survive_to_json_and_are_checked():
    tok = flagged({"content": "<w>", "single_word": True, "normalized": True}, lstrip=True)
    again = Tokenizer.from_json(tok.to_json())
    assert again.added == tok.added and again.same_tokens(Tokenizer.from_json(tok.to_json()))
    other = flagged({"content": "<w>", "normalized": True}, lstrip=True)
    assert not again.same_tokens(Tokenizer.from_json(other.to_json()))
    with pytest.raises(ValueError, match="rstrip must be true or false"):
        flagged(rstrip=1)


def test_a_phi3_style_tokenizer_json_is_read():
    # Phi-3's form: Llama 2's normalizers, byte fallback, and its added tokens' flags (the chat
    # tokens and </s> take the whitespace after them; <s> does not).
    added = [(0, "<unk>", "special"), (1, "<s>", "special"), (2, "</s>", "rstrip"),
             (8, "<|endoftext|>", "special"), (9, "<|assistant|>", "special rstrip"),
             (10, "<|end|>", "special rstrip"), (11, "<|user|>", "special rstrip")]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "\u2581": 3, "H": 4, "i": 5, "\u2581H": 6,
             "\u2581Hi": 7}
    vocab.update({content: i for i, content, _ in added})
    data = {"added_tokens": [
        {"id": i, "content": content, "single_word": False, "lstrip": False,
         "rstrip": "rstrip" in flags, "normalized": False, "special": "special" in flags}
        for i, content, flags in added],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "\u2581"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
        "pre_tokenizer": None, "post_processor": None,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "unk_token": "<unk>", "byte_fallback": True, "fuse_unk": True,
                  "vocab": vocab, "merges": ["\u2581 H", "\u2581H i"]}}
    tok = Tokenizer.from_json(json.dumps(data))
    assert tok.encode("<|user|>\nHi<|end|>\n<|assistant|>") == [11, 7, 10, 9]
    assert tok.encode("<s> Hi</s>  Hi<|endoftext|> Hi") == [1, 3, 7, 2, 7, 8, 3, 7]
    assert tok.decode([11, 7, 10], skip_special_tokens=True) == "Hi"


@SETTINGS
@given(st.lists(st.sampled_from(["<t>", "<u>", "x", " ", "\n", "\xa0", "\u0301", "-", "<"]),
                max_size=12).map("".join),
       st.fixed_dictionaries({k: st.booleans() for k in ("lstrip", "rstrip", "single_word")}))
def test_cuts_cover_the_text(text, flags):
    # The pieces follow one another over the whole text; a token's piece is its text and,
    # beside it, only whitespace it strips.
    tok = flagged({"content": "<u>", "rstrip": True}, **flags)
    cuts = find_added(text, tok._added_pattern, tok._added_raw)
    starts, stops = [start for start, _, _ in cuts], [stop for _, stop, _ in cuts]
    assert starts == [0] + stops[:-1] if text else cuts == []
    assert (stops or [0])[-1] == len(text)
    for start, stop, token in cuts:
        if token is not None:
            before, _, after = text[start:stop].partition(token.content)
            assert not before or (token.lstrip and before.isspace())
            assert not after or (token.rstrip and after.isspace())


@pytest.mark.parametrize("change, message", [
    (lambda d: d["model"].update(type="WordPiece"), "not BPE"),
    (lambda d: d.update(normalizer={"type": "NFC"}), "normalizers"),
    (lambda d: d.update(pre_tokenizer={"type": "Whitespace"}), "pre-tokenizer"),
    (lambda d: d["model"].update(continuing_subword_prefix="##"), "continuing_subword_prefix"),
    (lambda d: d["added_tokens"][0].update(lstrip="yes"), "lstrip must be true or false"),
])
def test_unsupported_files_are_refused_clearly(change, message):
    data = json.loads(TOKENIZER_JSON.read_text(encoding="utf-8"))
    change(data)
    with pytest.raises(ValueError, match=message):
        Tokenizer.from_json(json.dumps(data))


def test_unknown_id_is_a_clear_error(tok):
    with pytest.raises(ValueError, match="not in the vocabulary"):
        tok.decode([5000])


# ---------------------------------------------------------------------- named pre-tokenizers

# Splits the Rust `tokenizers` library makes of the same strings (its Split with the same
# regex; for "smollm", Digits(individual_digits=True) first).
KNOWN_SPLITS = {
    "gpt-2": {
        "x  42": ["x", " ", " 42"],
        "a   1234567 b": ["a", "  ", " 1234567", " b"],
        "I'VE DON'T we'Ll": ["I", "'", "VE", " DON", "'", "T", " we", "'", "Ll"],
        "line1\n\n  line2\r\n": ["line", "1", "\n\n ", " line", "2", "\r\n"],
    },
    "smollm": {
        "x  42": ["x", "  ", "4", "2"],
        "a   1234567 b": ["a", "   ", "1", "2", "3", "4", "5", "6", "7", " b"],
        "I'VE DON'T we'Ll": ["I", "'", "VE", " DON", "'", "T", " we", "'", "Ll"],
        "\u00e9t\u00e9 \u2167 \u00bd \u4e8c\u5341 x\u00b2 \u0663\u0664": [
            "\u00e9t\u00e9", " ", "\u2167", " ", "\u00bd", " \u4e8c\u5341", " x", "\u00b2", " ",
            "\u0663", "\u0664"],
        "$12,345.678": ["$", "1", "2", ",", "3", "4", "5", ".", "6", "7", "8"],
    },
    "llama-bpe": {
        "x  42": ["x", " ", " ", "42"],
        "a   1234567 b": ["a", "  ", " ", "123", "456", "7", " b"],
        "I'VE DON'T we'Ll it'S": ["I", "'VE", " DON", "'T", " we", "'Ll", " it", "'S"],
        "\u00e9t\u00e9 \u2167 \u00bd \u4e8c\u5341 x\u00b2 \u0663\u0664": [
            "\u00e9t\u00e9", " ", "\u2167", " ", "\u00bd", " \u4e8c\u5341", " x", "\u00b2", " ",
            "\u0663\u0664"],
        "line1\n\n  line2\r\n": ["line", "1", "\n\n", " ", " line", "2", "\r\n"],
        "  ok?!\n\n": [" ", " ok", "?!\n\n"],
    },
    "qwen2": {
        "x  42": ["x", " ", " ", "4", "2"],
        "a   1234567 b": ["a", "  ", " ", "1", "2", "3", "4", "5", "6", "7", " b"],
        "I'VE DON'T we'Ll it'S": ["I", "'VE", " DON", "'T", " we", "'Ll", " it", "'S"],
        "line1\n\n  line2\r\n": ["line", "1", "\n\n", " ", " line", "2", "\r\n"],
    },
}


@pytest.mark.parametrize("name, text, words", [
    (name, text, words) for name, table in KNOWN_SPLITS.items() for text, words in table.items()])
def test_named_pre_tokenizers_known_splits(name, text, words):
    assert pre_tokenize(text, name) == words


def test_pre_tokenizer_aliases_share_their_rules():
    assert PRE_TOKENIZERS["llama3"] == PRE_TOKENIZERS["llama-bpe"]
    assert PRE_TOKENIZERS["llama-bpe"].ignore_merges and PRE_TOKENIZERS["llama-bpe"].add_bos
    assert PRE_TOKENIZERS["starcoder"] == PRE_TOKENIZERS["smollm"]
    # llama.cpp's rules for a file without a name cut punctuation and digits first.
    assert PRE_TOKENIZERS["default"] != PRE_TOKENIZERS["gpt-2"]
    assert pre_tokenize("a+=1234567;", "default") == ["a", "+=", "123", "456", "7", ";"]
    assert pre_tokenize("a+=1234567;", "gpt-2") == ["a", "+=", "1234567", ";"]


@SETTINGS
@given(st.sampled_from(sorted(PRE_TOKENIZERS)), texts)
def test_every_pre_tokenizer_covers_the_text(name, text):
    words = pre_tokenize(text, name)
    assert "".join(words) == text and all(words)


@SETTINGS
@given(st.sampled_from(sorted({r for rules in PRE_TOKENIZERS.values() for r in rules.regexes})),
       st.text(alphabet=st.characters(max_codepoint=127)))
def test_ascii_patterns_equal_full_patterns_on_ascii(regex, text):
    assert (split_pattern(regex, ascii_only=True).findall(text)
            == split_pattern(regex).findall(text))


@SETTINGS
@given(st.text(alphabet="0123456789\u0663\u00bd \n\tab'"))
def test_smollm_gives_every_digit_its_own_word(text):
    for word in pre_tokenize(text, "smollm"):
        assert len(word) == 1 or not any(ch.isnumeric() for ch in word)


def test_unknown_pre_tokenizer_is_refused_by_name():
    # "gpt2" is not a name llama.cpp writes (it writes "gpt-2"); kimi-k2 needs its own code.
    for name in ("gpt2", "kimi-k2"):
        with pytest.raises(ValueError, match=f"'{name}'"):
            pre_tokenize("text", name)
        with pytest.raises(ValueError, match=f"'{name}'"):
            Tokenizer({"a": 0}, [], pre_tokenizer=name)


def test_python_regex_translation():
    classes = {r"\p{L}": "A-Z", r"\p{N}": "0-9", r"\s": " "}.get
    assert to_python_regex(r"[^\r\n\p{L}\p{N}]?\p{L}+|\s+(?!\S)|\s+$", classes) == (
        r"[^\r\nA-Z0-9]?[A-Z]+|[ ]+(?![^ ])|[ ]+\Z")
    with pytest.raises(ValueError, match="Han"):
        to_python_regex(r"\p{Han}+", classes)


@pytest.mark.parametrize("name", sorted(PRE_TOKENIZERS))
def test_tokenizer_json_forms_of_each_pre_tokenizer_round_trip(name):
    tok = tiny_tokenizer(pre_tokenizer=name)
    data = json.loads(tok.to_json())
    again = Tokenizer.from_json(tok.to_json(), tok.config)  # as a .npz file keeps them
    assert again.rules == tok.rules and again.ignore_merges == tok.ignore_merges
    text = "It'S 1234 \u00e9t\u00e9\n\n  x<s>y\u3001\u3000\u3002"
    assert again.encode(text) == tok.encode(text)
    kind = data["pre_tokenizer"]["type"]
    assert kind == ("ByteLevel" if PRE_TOKENIZERS[name] == PRE_TOKENIZERS["gpt-2"]
                    else "Sequence")


def test_hugging_face_pre_tokenizer_forms_are_read():
    data = json.loads(TOKENIZER_JSON.read_text(encoding="utf-8"))
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                  "use_regex": True}
    data["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True}, byte_level]}
    assert Tokenizer.from_json(json.dumps(data)).rules.regexes == (r"\p{N}", GPT2_REGEX)
    split = {"type": "Split", "pattern": {"Regex": LLAMA3_REGEX}, "behavior": "Isolated",
             "invert": False}
    data["pre_tokenizer"] = {"type": "Sequence",
                             "pretokenizers": [split, dict(byte_level, use_regex=False)]}
    rules = Tokenizer.from_json(json.dumps(data)).rules
    assert rules.regexes == (LLAMA3_REGEX,) and rules.engine == "tokenizers"
    for refused in ({"type": "Whitespace"}, dict(split, pattern={"Regex": r"\p{Han}+"}),
                    dict(split, behavior="Removed"), dict(split, invert=True)):
        data["pre_tokenizer"]["pretokenizers"][0] = refused
        with pytest.raises(ValueError, match="pre-tokenizer"):
            Tokenizer.from_json(json.dumps(data))


# ---------------------------------------------------------------------- GGUF metadata

CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
          "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|im_start|>assistant\n' }}{% endif %}")


def tiny_tokenizer(pre_tokenizer="gpt-2"):
    """The 256 bytes, three merges ('ab', 'Ġab', '12') and one special token '<s>'."""
    vocab = {BYTE_TO_CHAR[b]: b for b in range(256)}
    vocab.update({"ab": 256, "\u0120ab": 257, "12": 258})
    return Tokenizer(vocab, ["a b", "\u0120 ab", "1 2"], [{"id": 259, "content": "<s>",
                                                         "special": True}],
                     pre_tokenizer=pre_tokenizer)


def tiny_gguf_metadata(**changes):
    """GGUF tokenizer metadata in the shape of SmolLM2's: control tokens first, then bytes,
    then merged tokens; one user-defined token."""
    tokens = (["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>"]
              + [BYTE_TO_CHAR[b] for b in range(256)] + ["ab", "\u0120ab", "12"])
    metadata = {
        "general.architecture": "llama",
        "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "smollm",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": [3, 3, 3, 4] + [1] * 259,
        "tokenizer.ggml.merges": ["a b", "\u0120 ab", "1 2"],
        "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.padding_token_id": 2, "tokenizer.ggml.unknown_token_id": 0,
        "tokenizer.ggml.add_bos_token": False, "tokenizer.chat_template": CHATML,
    }
    metadata.update({f"tokenizer.ggml.{k}": v for k, v in changes.items()})
    return metadata


def byte_id(char):
    return 4 + ord(char)


def test_from_gguf_reads_tokens_specials_and_config():
    tok = Tokenizer.from_gguf(tiny_gguf_metadata())
    assert len(tok) == 263 and tok.pre_tokenizer == "smollm"
    assert tok.special_tokens == {"<|endoftext|>": 0, "<|im_start|>": 1, "<|im_end|>": 2}
    assert tok.added_tokens["<think>"] == 3
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id, tok.unk_token_id) == (1, 2, 2, 0)
    # llama.cpp's end-of-generation set: EOS, then <|endoftext|> (an end-of-generation text).
    assert tok.eos_token_ids == (2, 0)
    assert tok.config == TokenizerConfig("<|im_start|>", "<|im_end|>", "<|im_end|>",
                                         "<|endoftext|>", False, CHATML, False, "smollm",
                                         end_of_generation_ids=(0, 2))
    assert tok.add_bos_token is False and tok.chat_template == CHATML


def test_from_gguf_matches_control_and_user_defined_tokens_whole():
    tok = Tokenizer.from_gguf(tiny_gguf_metadata())
    text = "<|im_start|>user ab<think>12<|im_end|><|im_end"
    ids = tok.encode(text)
    assert ids == ([1, byte_id("u"), byte_id("s"), byte_id("e"), byte_id("r"), 261, 3,
                    byte_id("1"), byte_id("2"), 2] + [byte_id(c) for c in "<|im_end"])
    assert tok.decode(ids) == text
    assert tok.decode(ids, skip_special_tokens=True) == "user ab<think>12<|im_end"
    # The GPT-2 split keeps "12" in one word, so its merge applies.
    assert Tokenizer.from_gguf(tiny_gguf_metadata(pre="gpt-2")).encode("12") == [262]


def test_from_gguf_add_bos_token():
    tok = Tokenizer.from_gguf(tiny_gguf_metadata(add_bos_token=True))
    assert tok.encode("ab", add_special_tokens=True) == [1, 260]
    assert tok.encode("ab") == [260]
    assert Tokenizer.from_gguf(tiny_gguf_metadata()).encode("ab", add_special_tokens=True) == [260]


@pytest.mark.parametrize("changes, message", [
    ({"pre": "gpt2"}, "'gpt2'"),
    ({"pre": "kimi-k2"}, "'kimi-k2'"),
    ({"model": "t5"}, "'t5'"),
    ({"eos_token_id": 999}, "eos_token_id: found integer 999"),
    ({"token_type": [1, 1]}, "token_type: found 2 values"),
    ({"token_type": "1 1"}, "token_type: found string"),
    ({"add_bos_token": 1}, "add_bos_token: found integer 1, expected bool"),
    ({"merges": [1, 2]}, r"merges\[0\]: found integer 1"),
    ({"merges": ["ab"]}, r"merges\[0\]: found string 'ab'"),
])
def test_from_gguf_refuses_what_it_cannot_read(changes, message):
    with pytest.raises(ValueError, match=message):
        Tokenizer.from_gguf(tiny_gguf_metadata(**changes))


def test_from_gguf_tokenizer_round_trips_through_json():
    tok = Tokenizer.from_gguf(tiny_gguf_metadata())
    again = Tokenizer.from_json(tok.to_json(), TokenizerConfig.from_json(tok.config.to_json()))
    text = "<|im_start|>user\n1234 ab<think><|im_end|>\n"
    assert again.encode(text) == tok.encode(text)
    assert again.config == tok.config and again.rules == PRE_TOKENIZERS["smollm"]
    assert again.eos_token_ids == tok.eos_token_ids


def phi3_like_gguf_metadata(name, types=(2, 3, 4, 3, 3)):
    """The tiny vocabulary with Phi-3's <unk>, <s>, </s>, <|end|>, <|user|> (ids 263-267),
    named ``name``."""
    metadata = tiny_gguf_metadata()
    metadata["tokenizer.ggml.tokens"] += ["<unk>", "<s>", "</s>", "<|end|>", "<|user|>"]
    metadata["tokenizer.ggml.token_type"] += list(types)
    metadata["general.name"] = name
    return metadata


def test_from_gguf_phi3_tokens_take_the_whitespace_after_them():
    phi3 = Tokenizer.from_gguf(phi3_like_gguf_metadata("Phi-3-mini-4k-instruct"))
    other = Tokenizer.from_gguf(phi3_like_gguf_metadata("Phi 3 mini"))  # llama.cpp: no rule
    nl = byte_id("\n")
    assert phi3.encode("<|user|>\n ab<|end|>\n") == [267, 260, 266]
    assert other.encode("<|user|>\n ab<|end|>\n") == [267, nl, 261, 266, nl]
    # Not <s>, <unk>, <|endoftext|>; </s> (user-defined here) does.
    assert phi3.encode("<s> ab<|endoftext|>\n</s>\tab") == [264, 261, 0, nl, 265, 260]
    # C's isspace only: a no-break space stays.
    assert phi3.encode("<|end|>\xa0ab") == [266] + [4 + b for b in "\xa0".encode()] + [260]
    assert phi3.config.strip_whitespace == "ascii" and other.config.strip_whitespace is None
    again = Tokenizer.from_json(phi3.to_json(), TokenizerConfig.from_json(phi3.config.to_json()))
    assert again.same_tokens(phi3) and again.encode("<|end|>\xa0\n ab") == phi3.encode(
        "<|end|>\xa0\n ab")


def test_from_gguf_retypes_tokens_by_their_text():
    # </s> and <|end|> ordinary tokens, <|user|> too: the first two end a generation, so
    # llama.cpp matches them whole; <|user|> stays ordinary.
    tok = Tokenizer.from_gguf(phi3_like_gguf_metadata("x", types=(2, 3, 1, 1, 1)))
    assert tok.special_tokens["</s>"] == 265 and tok.special_tokens["<|end|>"] == 266
    assert "<|user|>" not in tok.added_tokens
    assert tok.encode("a</s>b") == [byte_id("a"), 265, byte_id("b")]
    metadata = tiny_gguf_metadata()
    metadata["tokenizer.ggml.tokens"] += ["<PRE>", "<|start|>", "<|tool_response>", "</s>"]
    metadata["tokenizer.ggml.token_type"] += [1, 1, 1, 3]
    tok = Tokenizer.from_gguf(metadata)
    assert tok.special_tokens["<PRE>"] == 263 and tok.added["<|start|>"].special is False
    assert "</s>" not in tok.added_tokens  # beside Gemma 4's <|tool_response>: ordinary
    named = Tokenizer.from_gguf({**metadata, "tokenizer.ggml.fim_pre_token_id": 1})
    assert "<PRE>" not in named.added_tokens  # the file names the role's id
    with pytest.raises(ValueError, match="general.name: found integer 3, expected string"):
        Tokenizer.from_gguf({**metadata, "general.name": 3})


# ---------------------------------------------------------------------- tokenizer config

def test_tokenizer_config_from_hugging_face_forms():
    config = TokenizerConfig.from_dict({
        "bos_token": {"content": "<s>", "lstrip": False, "__type": "AddedToken"},
        "eos_token": "<s>", "add_bos_token": True, "model_max_length": 2048,
        "chat_template": [{"name": "tool_use", "template": "x"},
                          {"name": "default", "template": CHATML}]})
    assert config == TokenizerConfig(bos_token="<s>", eos_token="<s>", add_bos_token=True,
                                     chat_template=CHATML)
    assert TokenizerConfig.from_json(config.to_json()) == config
    with pytest.raises(ValueError, match="add_bos_token"):
        TokenizerConfig.from_dict({"add_bos_token": "yes"})
    with pytest.raises(ValueError, match="default"):
        TokenizerConfig.from_dict({"chat_template": [{"name": "tool_use", "template": "x"}]})


def test_tokenizer_config_tokens_must_be_in_the_vocabulary():
    with pytest.raises(ValueError, match="'<missing>'"):
        Tokenizer.from_json(tiny_tokenizer().to_json(), TokenizerConfig(bos_token="<missing>"))
    with pytest.raises(ValueError, match="no bos_token"):
        Tokenizer.from_json(tiny_tokenizer().to_json(), TokenizerConfig(add_bos_token=True))


def test_without_config_eos_comes_from_the_familiar_names(tok):
    assert tok.config == TokenizerConfig()
    assert tok.eos_token_id == 0 and tok.eos_token_ids == (0,)
    assert tok.bos_token_id is None and tok.add_bos_token is False and tok.chat_template is None


def test_tokenizer_and_config_round_trip_through_the_weights_file(tmp_path):
    import minillm

    cfg = minillm.ModelConfig(arch="modern", vocab_size=263, context_length=8, d_model=8,
                              n_layers=1, n_heads=2)
    model = minillm.random_model(cfg, seed=0)
    model.tokenizer = Tokenizer.from_gguf(tiny_gguf_metadata(add_bos_token=True))
    minillm.save(model, tmp_path / "m.npz")
    back = minillm.load(tmp_path / "m.npz").tokenizer
    assert back.config == model.tokenizer.config
    assert back.rules == PRE_TOKENIZERS["smollm"] and back.eos_token_ids == (2, 0)
    text = "<|im_start|>user\n1234 ab<think><|im_end|>\n"
    assert back.encode(text, add_special_tokens=True) == model.tokenizer.encode(
        text, add_special_tokens=True)


def test_generation_prompt_starts_with_bos_when_the_file_asks():
    from types import SimpleNamespace

    from minillm.cli.generate import prompt_ids

    for add_bos, first in ((True, [1]), (False, [])):
        tok = Tokenizer.from_gguf(tiny_gguf_metadata(add_bos_token=add_bos))
        model = SimpleNamespace(tokenizer=tok, config=SimpleNamespace(vocab_size=len(tok)))
        args = SimpleNamespace(text="ab", prompt=None, prompt_file=None, prompt_ids=None)
        assert prompt_ids(args, model) == first + [260]


def test_llama_cpp_defaults_when_the_gguf_file_is_silent():
    metadata = tiny_gguf_metadata(pre="llama-bpe")
    for key in ("add_bos_token", "bos_token_id", "eos_token_id", "padding_token_id",
                "unknown_token_id"):
        del metadata[f"tokenizer.ggml.{key}"]
    tok = Tokenizer.from_gguf(metadata)
    # Llama 3's rules add BOS; a BPE file's BOS and EOS default to id 11 (llama.cpp's).
    assert tok.add_bos_token and not tok.add_eos_token
    assert tok.bos_token_id == tok.eos_token_id == 11 and tok.unk_token_id is None
    assert tok.encode("ab", add_special_tokens=True) == [11, 260]
    del metadata["tokenizer.ggml.pre"]  # no name: llama.cpp's "default" rules, no BOS
    assert not Tokenizer.from_gguf(metadata).add_bos_token
    eos = Tokenizer.from_gguf(tiny_gguf_metadata(add_eos_token=True))
    assert eos.encode("ab", add_special_tokens=True) == [260, 2]


# ---------------------------------------------------------------------- SentencePiece

def tiny_spm_metadata(**changes):
    """A SentencePiece vocabulary in GGUF form: <unk>, <s>, </s>, the 256 byte tokens, then
    pieces with scores (higher merges first)."""
    pieces = {"\u2581": -1.0, "a": -2.0, "b": -2.5, "c": -3.0, "\u2581a": -1.5, "ab": -0.5,
              "\u2581ab": -0.2, "abc": -0.1, "\u2581\u2581": -4.0}
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + list(pieces)
    metadata = {
        "tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.scores": [0.0] * 259 + list(pieces.values()),
        "tokenizer.ggml.token_type": [2, 3, 3] + [6] * 256 + [1] * len(pieces),
        "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.unknown_token_id": 0}
    metadata.update({f"tokenizer.ggml.{k}": v for k, v in changes.items()})
    return metadata


@pytest.fixture(scope="module")
def spm():
    return Tokenizer.from_gguf(tiny_spm_metadata())


def piece(tok, text):
    return tok.token_to_id(text)


def test_sentencepiece_merges_by_score_with_space_prefix_and_byte_fallback(spm):
    # "▁abc": ab (-0.5) joins before ▁a (-1.5); then abc (-0.1) beats ▁ab (-0.2).
    assert spm.encode("abc") == [piece(spm, "\u2581"), piece(spm, "abc")]
    assert spm.encode("abb") == [piece(spm, "\u2581ab"), piece(spm, "b")]
    assert spm.encode("ab", add_special_tokens=True) == [1, piece(spm, "\u2581ab")]
    # A character that is no piece becomes its UTF-8 bytes.
    assert spm.encode("\u00e9") == [piece(spm, "\u2581"), 3 + 0xC3, 3 + 0xA9]
    # Every piece after an added token gets its own prefix, as in llama.cpp.
    assert spm.encode("a</s>a") == [piece(spm, "\u2581a"), 2, piece(spm, "\u2581a")]
    assert spm.decode(spm.encode(" a b")) == " a b"  # one space of the prefix dropped
    no_prefix = Tokenizer.from_gguf(tiny_spm_metadata(add_space_prefix=False))
    assert no_prefix.encode("ab") == [piece(spm, "ab")] and no_prefix.decode([3 + 32]) == " "


spm_texts = st.text(alphabet=st.sampled_from(list("abc \u00e9\u4e2d\U0001f600\n")), max_size=20)


@SETTINGS
@given(spm_texts)
def test_sentencepiece_round_trip_and_stream(spm, text):
    ids = spm.encode(text)
    assert spm.decode(ids) == text
    decoder = spm.stream_decoder()
    assert "".join(decoder.push(i) for i in ids) + decoder.flush() == text


@SETTINGS
@given(st.lists(st.integers(0, 267), max_size=12))
def test_sentencepiece_stream_equals_decode_for_any_ids(spm, ids):
    # Byte tokens may cut a character anywhere; the stream holds it back until it is whole.
    decoder = spm.stream_decoder()
    assert "".join(decoder.push(i) for i in ids) + decoder.flush() == spm.decode(ids)


@SETTINGS
@given(spm_texts)
def test_sentencepiece_tokenizer_json_reads_back_the_same(spm, text):
    again = Tokenizer.from_json(spm.to_json(), spm.config)
    assert again.sentencepiece.scores is None  # merged by rank now
    assert again.encode(text, add_special_tokens=True) == spm.encode(text, add_special_tokens=True)


def naive_merge(symbols, priority):
    """The definition: join the best pair (leftmost among equals) until none has a priority."""
    symbols = list(symbols)
    while True:
        keys = [(priority(a, b), i) for i, (a, b) in enumerate(zip(symbols, symbols[1:]))
                if priority(a, b) is not None]
        if not keys:
            return symbols
        _, i = min(keys)
        symbols[i:i + 2] = [symbols[i] + symbols[i + 1]]


@SETTINGS
@given(st.text(alphabet="abc", max_size=16),
       st.dictionaries(st.text(alphabet="abc", min_size=2, max_size=4), st.integers(0, 5)))
def test_merge_by_priority_is_the_definition(text, scores):
    from minillm.text.sentencepiece import merge_by_priority

    def priority(left, right):
        return scores.get(left + right)
    assert merge_by_priority(text, priority) == naive_merge(text, priority)


@SETTINGS
@given(st.text(alphabet="ab\u2581<0x>", max_size=24),
       st.dictionaries(st.text(alphabet="ab\u2581", min_size=1, max_size=4),
                       st.floats(-5, 0, allow_nan=False), min_size=1))
def test_merging_in_independent_parts_is_merging_the_whole(text, scored):
    from minillm.text.sentencepiece import (by_score, independent_parts, joinable_pairs,
                                            merge_by_priority)

    vocab = {token: i for i, token in enumerate(scored)}
    priority = by_score(vocab, list(scored.values()))
    parts = independent_parts(text, joinable_pairs(vocab))
    assert "".join(parts) == text
    assert [p for part in parts for p in merge_by_priority(part, priority)] == (
        merge_by_priority(text, priority))
