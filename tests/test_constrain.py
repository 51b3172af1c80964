"""Constrained decoding changes the distribution only by its mask: the automaton accepts
exactly what re.fullmatch accepts, the index masks a token only when no text of the language
starts with the output it would make, every completed output matches, each step's
distribution is the knobs applied to the masked logits, and whole outputs follow their
enumerated exact distribution (a chi-square test)."""
from __future__ import annotations

import itertools
import json
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minillm
from minillm.constrain import choice, json_schema, regex
from minillm.constrain.constraint import DONE, advance, allowed, masked_logits
from minillm.constrain.dfa import determinize
from minillm.constrain.index import full, row, walk_all
from minillm.constrain.nfa import thompson, utf8_sequences
from minillm.constrain.pattern import normalized, parse
from minillm.generate import decode_steps, generate
from minillm.inputs import check_prompts
from minillm.knobs import generation_config
from minillm.sampling import filtered_probs
from minillm.testing.stats import chi_square, chi_square_critical


class ByteTokenizer:
    """A small byte-level vocabulary: the 256 single bytes, some longer pieces (a whole "é",
    half of one and the other half with a letter), an end token and a special token that
    is never text."""

    def __init__(self, pieces=(b"ab", b"abc", b"ba", b"yes", b"no", "é".encode(), b"\xc3",
                               b"\xa9a", b"12", b"1a", b"{\"", b"\":", b"\", \""),
                 single_bytes=range(256)):
        self.pieces = [bytes([b]) for b in single_bytes] + list(pieces)
        self.eos = len(self.pieces)
        self.special_tokens = {"<eos>": self.eos, "<tool>": self.eos + 1}
        self.eos_token_ids = (self.eos,)

    def __len__(self):
        return len(self.pieces) + 2

    def token_bytes(self, i):
        return self.pieces[i] if i < len(self.pieces) else [b"<eos>", b"<tool>"][i - self.eos]

    def text(self, ids) -> bytes:
        return b"".join(self.pieces[i] for i in ids if i < self.eos)


TOKENIZER = ByteTokenizer()
SPARE = 3  # the model's ids past the tokenizer's: never allowed
MODEL = minillm.random_model(minillm.ModelConfig(
    arch="classic", vocab_size=len(TOKENIZER) + SPARE, context_length=32, d_model=8,
    n_layers=1, n_heads=1), seed=3, dtype="float64", std=1.0)
PROMPT = [1, 2]
ALPHABET = "ab1é"  # the texts the brute-force checks enumerate


# -- patterns, drawn ------------------------------------------------------------------------

ATOMS = st.sampled_from(["a", "b", "1", "é", "[ab]", "[^a]", r"\d", "[a-b1]", ".", r"\w",
                         "(?:ab)", "(?:)"])


def patterns(max_leaves=5):
    """Patterns of the subset over a small alphabet: atoms under |, concatenation, groups
    and the quantifiers."""
    def extend(inner):
        quantifier = st.sampled_from(["?", "*", "+", "{2}", "{0,2}", "{1,}", "{,2}"])
        return st.one_of(
            st.tuples(inner, inner).map(lambda p: p[0] + p[1]),
            st.tuples(inner, inner).map(lambda p: f"(?:{p[0]}|{p[1]})"),
            st.tuples(inner, quantifier).map(lambda p: f"(?:{p[0]}){p[1]}"))
    return st.recursive(ATOMS, extend, max_leaves=max_leaves)


def texts(n):
    """Every text over ALPHABET of at most n characters."""
    return ["".join(t) for k in range(n + 1) for t in itertools.product(ALPHABET, repeat=k)]


def accepts(automaton, text: str) -> bool:
    state = automaton.walk(text.encode())
    return state >= 0 and bool(automaton.accepting[state])


# -- the automaton ---------------------------------------------------------------------------

@given(patterns())
def test_the_automaton_accepts_exactly_what_re_fullmatch_accepts(pattern):
    automaton = determinize(*thompson(parse(pattern)))
    for text in texts(4):
        assert accepts(automaton, text) == bool(re.fullmatch(pattern, text, re.ASCII)), text
    # Trimmed: from every state an accepting one is reachable.
    reach = set(np.flatnonzero(automaton.accepting))
    for _ in range(len(automaton.accepting)):
        reach |= {s for s in range(len(automaton.accepting))
                  if set(automaton.table[s][automaton.table[s] >= 0].tolist()) & reach}
    assert reach == set(range(len(automaton.accepting)))


def test_minimization_gives_the_smallest_automaton():
    """(a|b)*abb needs four states (Hopcroft and Ullman's example); [ab]+ one more than
    the empty text's start."""
    assert len(determinize(*thompson(parse("(a|b)*abb"))).accepting) == 4
    assert len(determinize(*thompson(parse("(?:a|b)(?:a|b)*"))).accepting) == 2
    assert len(determinize(*thompson(parse("a|a|a"))).accepting) == 2


@given(st.lists(st.tuples(st.integers(0, 0x10FFFF), st.integers(0, 300)), min_size=1,
                max_size=4), st.lists(st.integers(0, 0x10FFFF), max_size=30))
def test_utf8_sequences_encode_exactly_the_set(spans, probes):
    ranges = normalized([(low, min(low + n, 0x10FFFF)) for low, n in spans])
    sequences = utf8_sequences(ranges)
    inside = lambda cp: any(low <= cp <= high for low, high in ranges)  # noqa: E731
    edges = [cp for low, high in ranges for cp in (low, high, low + 1, high - 1)]
    for cp in probes + edges:
        if 0xD800 <= cp <= 0xDFFF or not 0 <= cp <= 0x10FFFF:
            continue
        data = chr(cp).encode()
        hits = sum(len(s) == len(data) and all(lo <= b <= hi for (lo, hi), b in zip(s, data))
                   for s in sequences)
        assert hits == (1 if inside(cp) else 0), hex(cp)


@pytest.mark.parametrize("pattern, message", [
    ("a(b", "not closed"), ("*a", "nothing to repeat"), (r"\p{L}", "not read"),
    ("a{3,2}", "bounds"), ("(?=a)", "groups"), ("a^b", "anchors"), ("[b-a]", "range"),
    ("[^\\x00-\\U0010ffff]", "not read"), ("(?:a{1000}){1000}", "too large"),
    ("a**", "multiple repeat"), ("a{2}*", "multiple repeat"), ("a*+a", "possessive")])
def test_a_pattern_outside_the_subset_is_refused_saying_why(pattern, message):
    with pytest.raises(ValueError, match=message):
        regex(pattern, TOKENIZER)


def test_an_empty_language_is_refused():
    for pattern in (r"[^\s\S]", r"a(?:b|[^\d\D])c[^\w\W]*d[^\w\W]"):
        with pytest.raises(ValueError, match="empty language"):
            regex(pattern, TOKENIZER)


# -- the index -------------------------------------------------------------------------------

def language_prefixes(pattern, n=5) -> set[bytes]:
    """Every byte prefix of the UTF-8 encoding of a text over ALPHABET of at most n
    characters that the pattern fully matches."""
    found = set()
    for text in texts(n):
        if re.fullmatch(pattern, text, re.ASCII):
            data = text.encode()
            found.update(data[:k] for k in range(len(data) + 1))
    return found


@given(patterns(max_leaves=4))
def test_no_allowed_continuation_is_ever_masked(pattern):
    """A token is masked only if no text of the language starts with the output it makes;
    a token it allows leads the walk somewhere, and the end token exactly where the output
    is whole. Brute force over the texts of at most five characters."""
    c = regex(pattern, TOKENIZER)
    prefixes = language_prefixes(pattern)
    for before in sorted(p for p in prefixes if len(p) <= 3):
        state = c.automaton.walk(before)
        mask = allowed(c, state, MODEL.config.vocab_size)
        for t in range(TOKENIZER.eos):
            if before + TOKENIZER.pieces[t] in prefixes:
                assert mask[t], (before, TOKENIZER.pieces[t])
            if mask[t]:
                assert c.automaton.walk(before + TOKENIZER.pieces[t]) >= 0
        whole = bool(re.fullmatch(pattern, before.decode("utf-8", "replace"), re.ASCII)) \
            and before.decode("utf-8", "replace").encode() == before
        assert mask[TOKENIZER.eos] == whole == bool(c.automaton.accepting[state])
        assert not mask[TOKENIZER.eos + 1] and not mask[len(TOKENIZER):].any()
        assert mask.any()  # no dead end


@given(patterns(), st.integers(0, 2**16))
def test_a_lazy_index_equals_the_full_index(pattern, seed):
    c = regex(pattern, TOKENIZER)
    generate(MODEL, PROMPT, constraint=c, max_new_tokens=6, seed=seed)
    whole = full(c.automaton, c.index.vocabulary)
    assert set(c.index.rows) <= set(whole)
    for state, lazy in c.index.rows.items():
        np.testing.assert_array_equal(lazy, whole[state])
    # The vectorised walk is the plain one, token by token.
    for state in whole:
        plain = [c.automaton.walk(piece, state) if piece else -1
                 for piece in c.index.vocabulary.pieces]
        np.testing.assert_array_equal(walk_all(c.automaton, c.index.vocabulary, state), plain)


@given(patterns(max_leaves=4), st.lists(st.binary(max_size=4).map(
    lambda b: bytes(b"ab1\xc3\xa9"[x % 5] for x in b)), max_size=40))
def test_the_trie_walk_equals_a_plain_walk_on_any_vocabulary(pattern, pieces):
    """Vocabularies of random pieces (shared beginnings, the same text twice, empty
    texts, half characters): every state's row from the byte trie is the plain walk of
    each token's bytes."""
    tok = ByteTokenizer(pieces=pieces)
    c = regex(pattern, tok)
    for state in range(len(c.automaton.accepting)):
        plain = [c.automaton.walk(piece, state) if piece else -1
                 for piece in c.index.vocabulary.pieces]
        np.testing.assert_array_equal(walk_all(c.automaton, c.index.vocabulary, state), plain)


def assert_no_dead_end(c, vocab_size: int, note=()) -> None:
    """Every state reached from the start through allowed tokens allows some token."""
    visited, to_visit = set(), [0]
    while to_visit:
        state = to_visit.pop()
        if state in visited or state == DONE:
            continue
        visited.add(state)
        mask = allowed(c, state, vocab_size)
        assert mask.any(), (*note, state)
        to_visit += [advance(c, state, int(t)) for t in np.flatnonzero(mask)]


def test_a_vocabulary_that_cannot_spell_every_byte_is_pruned_and_never_dead_ends():
    """Tokens "a", "ab", "bd", "c" and no "d": "ab" starts "abd" but no token can follow it
    there, so pruning masks it; "a" then "bd" or "c" still spell the language, and every
    state reached through allowed tokens allows something."""
    tok = ByteTokenizer(pieces=(b"ab", b"bd", b"c"), single_bytes=b"a")
    c = regex("abd|ac", tok)
    assert not allowed(c, 0, len(tok))[tok.pieces.index(b"ab")]
    assert_no_dead_end(c, len(tok))
    after_a = c.automaton.walk(b"a")
    assert allowed(c, after_a, len(tok))[[tok.pieces.index(b"bd"), tok.pieces.index(b"c")]].all()
    with pytest.raises(ValueError, match="no sequence of this vocabulary"):
        regex("ad", tok)


@given(patterns(max_leaves=4), st.sets(st.sampled_from(list(b"ab1\xc3\xa9")), max_size=3))
def test_no_state_the_tokens_reach_is_a_dead_end(pattern, missing):
    """Vocabularies lacking some one-byte tokens (the bytes still inside longer pieces):
    whether the index is lazy (one-byte tokens finish the text from every state the tokens
    reach) or pruned, every state reached through allowed tokens allows something."""
    tok = ByteTokenizer(single_bytes=[b for b in range(256) if b not in missing])
    try:
        c = regex(pattern, tok)
    except ValueError as e:
        assert "no sequence of this vocabulary" in str(e)
        return
    assert_no_dead_end(c, len(tok), (pattern, missing))


def test_the_vocabulary_is_read_once_per_tokenizer():
    """A second constraint on the same tokenizer reads nothing again; one whose size has
    changed is read anew."""
    tok = ByteTokenizer()
    first = regex("a", tok).index.vocabulary
    assert regex("b", tok).index.vocabulary is first
    tok.pieces.append(b"zz")
    tok.eos = len(tok.pieces)
    tok.special_tokens = {"<eos>": tok.eos, "<tool>": tok.eos + 1}
    tok.eos_token_ids = (tok.eos,)
    assert regex("a", tok).index.vocabulary is not first


# -- generation ------------------------------------------------------------------------------

@given(patterns(), st.integers(0, 2**16), st.sampled_from([
    {}, dict(temperature=0.7, top_k=3), dict(top_p=0.8, min_p=0.1), dict(temperature=0),
    dict(repetition_penalty=1.5)]))
@settings(max_examples=60)
def test_every_completed_output_matches_its_regex(pattern, seed, knobs):
    c = regex(pattern, TOKENIZER)
    out = generate(MODEL, PROMPT, constraint=c, max_new_tokens=12, seed=seed, **knobs)
    new = out[len(PROMPT):]
    text = TOKENIZER.text(new)
    if new and new[-1] == TOKENIZER.eos:
        assert re.fullmatch(pattern, text.decode(), re.ASCII), text
        assert TOKENIZER.eos not in new[:-1]
    else:  # cut by max_new_tokens: still the beginning of a text of the language
        assert len(new) == 12 and c.automaton.walk(text) >= 0


def test_batched_rows_each_follow_their_own_constraint():
    cs = [regex("[ab]{2}", TOKENIZER), None, choice(["yes", "no"], TOKENIZER)]
    rows = generate(MODEL, [PROMPT] * 3, constraint=cs, max_new_tokens=8, seed=5,
                    stop_tokens=())
    assert re.fullmatch("[ab]{2}", TOKENIZER.text(rows[0][2:]).decode())
    assert TOKENIZER.text(rows[2][2:]) in (b"yes", b"no")
    assert len(rows[1]) == len(PROMPT) + 8  # the free row runs on
    assert [t for t in minillm.stream(MODEL, PROMPT, constraint=cs[0], seed=5)] == \
        generate(MODEL, PROMPT, constraint=cs[0], seed=5)[2:]


def raw_logits(tokens):
    """The model's own logits after `tokens`, a fresh uncached pass (as the uncached loop
    makes them: the last position only)."""
    return MODEL.forward(np.array([tokens]), last=1)[0, -1]


@given(patterns(max_leaves=4), st.integers(0, 2**16), st.sampled_from([
    dict(temperature=1.0), dict(temperature=0.7, top_k=2, top_p=0.9, min_p=0.05),
    dict(temperature=1.3, repetition_penalty=1.4, presence_penalty=0.5)]))
def test_each_step_is_the_knobs_on_the_masked_logits(pattern, seed, knobs):
    """At every step: the step's logits are the model's with exactly the disallowed tokens
    at -inf, its distribution is filtered_probs of them with the same knobs, its support
    lies within the allowed set; at temperature 1 without knobs, the model's softmax
    restricted to the allowed tokens and renormalized."""
    c = regex(pattern, TOKENIZER)
    prompts, _ = check_prompts(PROMPT, MODEL.config.vocab_size, MODEL.config.context_length)
    config = generation_config(None, MODEL, max_new_tokens=6, seed=seed, **knobs)
    tokens, state = list(PROMPT), 0
    for step in decode_steps(MODEL, prompts, config, np.random.default_rng(seed),
                             use_cache=False, constraints=[c]):
        z = raw_logits(tokens)
        mask = allowed(c, state, len(z))
        np.testing.assert_array_equal(step.logits[0], np.where(mask, z, -np.inf))
        probs = filtered_probs(np.where(mask, z, -np.inf), config.sampling, [tokens])
        np.testing.assert_array_equal(step.probs[0], probs)
        assert probs[~mask].sum() == 0 and probs[mask].sum() > 0
        if knobs == dict(temperature=1.0):
            e = np.exp(z[mask] - z[mask].max())
            np.testing.assert_allclose(probs[mask], e / e.sum(), rtol=1e-13, atol=0)
        token = int(step.tokens[0])
        tokens.append(token)
        state = advance(c, state, token)


def exact_outputs(c, knobs, limit=6):
    """{new tokens: probability} of every whole constrained output (up to its end token),
    enumerated through fresh forward passes and the knobs on the masked logits."""
    config = generation_config(None, MODEL, **knobs)
    found = {}

    def walk(tokens, state, p):
        if state == DONE:
            found[tuple(tokens[len(PROMPT):])] = p
            return
        assert len(tokens) - len(PROMPT) < limit, "the language is larger than enumerated"
        z = raw_logits(tokens)
        probs = filtered_probs(np.where(allowed(c, state, len(z)), z, -np.inf),
                               config.sampling, [tokens])
        for t in np.flatnonzero(probs):
            walk(tokens + [int(t)], advance(c, state, int(t)), p * probs[t])

    walk(list(PROMPT), 0, 1.0)
    return found


@pytest.mark.parametrize("pattern, knobs", [
    ("(?:a|b|ab|é){1,2}", dict(temperature=1.0)),
    ("1?(?:yes|no)", dict(temperature=0.8, top_k=6, top_p=0.95))])
def test_whole_outputs_follow_their_exact_distribution(pattern, knobs):
    """A chi-square test at the 0.1% level (a correct sampler fails with probability about
    1e-3; the seeds are fixed, so the result is the same on every run) of 3000 outputs
    against the enumerated distribution of whole outputs."""
    c = regex(pattern, TOKENIZER)
    exact = exact_outputs(c, knobs)
    assert abs(sum(exact.values()) - 1) < 1e-12
    outputs = list(exact)
    counts = np.zeros(len(outputs))
    for seed in range(3000):
        new = tuple(generate(MODEL, PROMPT, constraint=c, seed=1_000_000 + seed, **knobs)[2:])
        counts[outputs.index(new)] += 1
    stat, df = chi_square(counts, [exact[o] for o in outputs])
    assert stat < chi_square_critical(df), (stat, df)


# -- choice and JSON Schema ------------------------------------------------------------------

def test_choice_is_one_of_its_strings():
    c = choice(["yes", "no", "1a"], TOKENIZER)
    for seed in range(20):
        new = generate(MODEL, PROMPT, constraint=c, seed=seed)[2:]
        assert TOKENIZER.text(new) in (b"yes", b"no", b"1a") and new[-1] == TOKENIZER.eos
    with pytest.raises(ValueError, match="non-empty list"):
        choice([], TOKENIZER)


SCHEMAS = [
    {"type": "object", "properties": {"n": {"type": "integer"}, "name": {
        "type": "string", "maxLength": 3}, "ok": {"type": "boolean"}}, "required": ["ok"]},
    {"type": "array", "items": {"enum": ["a", 1, None]}, "minItems": 1, "maxItems": 3},
    {"anyOf": [{"type": "null"}, {"const": {"a": [1, 2]}}, {"type": "number"}]},
    {"type": "object"},
    {"type": ["string", "integer"], "minLength": 2, "title": "ignored"},
]


class Closing:
    """MODEL with its logits raised for the tokens that close a JSON text (quotes, brackets,
    the end token): a random model's strings would otherwise run on for hundreds of tokens."""

    def __init__(self, model, tokens, by=6.0):
        self.model, self.bias = model, np.zeros(model.config.vocab_size)
        self.bias[tokens] = by

    def __getattr__(self, name):
        return getattr(self.model, name)

    def forward(self, *args, **kwargs):
        return self.model.forward(*args, **kwargs) + self.bias


@pytest.mark.parametrize("schema", SCHEMAS, ids=range(len(SCHEMAS)))
def test_json_schema_outputs_validate(schema):
    """Every whole output is JSON valid under its schema (jsonschema the oracle); an output
    cut by max_new_tokens is the beginning of one."""
    jsonschema = pytest.importorskip("jsonschema")  # the test extra installs it
    c = json_schema(schema, TOKENIZER)
    model = Closing(MODEL, [ord(b) for b in '"}]1'] + [TOKENIZER.eos])
    done = 0
    for seed in range(15):
        new = generate(model, PROMPT, constraint=c, seed=seed, max_new_tokens=40)[2:]
        if new[-1] == TOKENIZER.eos:
            jsonschema.validate(json.loads(TOKENIZER.text(new)), schema)
            done += 1
        else:
            assert c.automaton.walk(TOKENIZER.text(new)) >= 0
    assert done >= 5


@pytest.mark.parametrize("schema, keyword", [
    ({"type": "string", "format": "date"}, "format"), ({"$ref": "#/x"}, "$ref"),
    ({"type": "object", "properties": {}, "additionalProperties": True}, "additionalProperties"),
    ({"type": "object", "properties": {"a": {}}, "required": ["b"]}, "'b'"),
    ({"type": "number", "minimum": 1.5}, "minimum"), ({"type": "date"}, "date")])
def test_a_schema_keyword_not_read_is_refused_by_name(schema, keyword):
    with pytest.raises(ValueError, match=re.escape(keyword)):
        json_schema(schema, TOKENIZER)


def test_rows_without_a_constraint_are_left_alone_and_bad_constraints_refused():
    logits = np.arange(2 * len(TOKENIZER), dtype=np.float64).reshape(2, -1)
    c = regex("a", TOKENIZER)
    out = masked_logits(logits, [None, c], [0, 0])
    np.testing.assert_array_equal(out[0], logits[0])
    assert np.isfinite(out[1]).sum() == 1 and np.isfinite(out[1, ord("a")])
    with pytest.raises(ValueError, match="one for every row"):
        generate(MODEL, [PROMPT, PROMPT], constraint=[c])
    with pytest.raises(ValueError, match="regex, choice or json_schema"):
        generate(MODEL, PROMPT, constraint="a")
    with pytest.raises(ValueError, match="not allowed"):
        advance(c, 0, ord("b"))


# -- real tokenizers -------------------------------------------------------------------------

def test_sentencepiece_pieces_read_their_space_and_bytes():
    """A SentencePiece vocabulary: "▁yes" is the text " yes", a <0xNN> piece its byte, and
    the special tokens but the end one are never allowed."""
    from minillm.text.sentencepiece import SentencePiece
    from minillm.text.tokenizer import Tokenizer
    from minillm.text.tokenizer_config import TokenizerConfig

    pieces = ["<unk>", "\u2581yes", "\u2581no", "yes", "no", "\u2581", "y", "e", "s", "n", "o"]
    vocab = {p: i for i, p in enumerate(pieces)}
    vocab.update({f"<0x{b:02X}>": len(pieces) + b for b in range(256)})
    added = [{"id": len(vocab), "content": "<s>", "special": True},
             {"id": len(vocab) + 1, "content": "</s>", "special": True}]
    tok = Tokenizer(vocab, [], added, sentencepiece=SentencePiece(),
                    config=TokenizerConfig(unk_token="<unk>", bos_token="<s>", eos_token="</s>"))
    c = choice([" yes", " no"], tok)
    start = allowed(c, 0, len(tok))
    texts = {tok.token_bytes(i) for i in np.flatnonzero(start) if i < len(pieces)}
    assert texts == {b" yes", b" no", b" "}
    assert start[vocab["<0x20>"]] and not start[vocab["<0x79>"]]
    assert not start[tok.special_tokens["<s>"]] and not start[tok.special_tokens["</s>"]]
    whole = c.automaton.walk(b" yes")
    assert allowed(c, whole, len(tok))[tok.special_tokens["</s>"]]
    assert allowed(choice(["yes"], tok), 0, len(tok))[vocab["yes"]]


def test_the_shipped_tokenizer_masks_exactly_the_prefixes():
    """Byte-level BPE (weights/target.npz): at the start of choice(["yes", "no"]) the allowed
    tokens are exactly those whose bytes begin "yes" or "no"; the outputs are the choices."""
    model = minillm.load("weights/target.npz")
    tok = model.tokenizer
    c = choice(["yes", "no"], tok)
    start = allowed(c, 0, model.config.vocab_size)
    special = set(tok.special_tokens.values())
    expected = [i not in special and len(tok.token_bytes(i)) > 0
                and any(w.startswith(tok.token_bytes(i)) for w in (b"yes", b"no"))
                for i in range(model.config.vocab_size)]
    np.testing.assert_array_equal(start, expected)
    prompt = tok.encode("Is the sky blue? Answer:")
    for seed in range(3):
        new = generate(model, prompt, constraint=c, seed=seed, temperature=0.8)[len(prompt):]
        assert tok.decode(new, skip_special_tokens=True) in ("yes", "no")
        assert new[-1] in tok.eos_token_ids
