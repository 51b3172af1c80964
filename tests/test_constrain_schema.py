"""JSON Schema as a constraint, proven: every completed output of a constrained generation
validates against its schema (the `jsonschema` package the oracle); integer bounds are exact
against Python's comparisons, exhaustively over a window; a string's `pattern` accepts exactly
the JSON texts of the strings re.search finds; `$ref` unrolls to its stated bound; `oneOf` is
read only where its branches are disjoint; every keyword not read, and every bad input (an
empty language, a language too large, a vocabulary that cannot spell it), is refused in one
line naming why."""
from __future__ import annotations

import itertools
import json
import re
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minillm.constrain import dfa, json_schema, regex, schema as schema_module
from minillm.constrain.dfa import determinize
from minillm.constrain.nfa import thompson
from minillm.constrain.pattern import parse
from minillm.constrain.refs import MAX_RECURSION
from minillm.constrain.numbers import FRACTION_DIGITS, integer_range
from minillm.constrain.schema import schema_regex
from minillm.generate import generate
from tests.test_constrain import MODEL, PROMPT, TOKENIZER, ByteTokenizer, Closing, patterns

jsonschema = pytest.importorskip("jsonschema")  # the test extra installs it


def automaton(schema):
    return determinize(*thompson(parse(schema_regex(schema))))


def accepts(machine, text: str) -> bool:
    state = machine.walk(text.encode())
    return state >= 0 and bool(machine.accepting[state])


# -- integer bounds --------------------------------------------------------------------------

@given(st.one_of(st.none(), st.integers(-1200, 1200)), st.integers(0, 1500))
@settings(max_examples=150)
def test_an_integer_range_is_exact(low, width):
    """integer_range(low, high) matches the decimal text of n exactly when low <= n <= high,
    for every n of a window around both ends; never a leading zero or a plus sign, nor "-0"
    between bounds (JSON's "-0" is read only where there is no bound, as the plain integer)."""
    high = None if low is None and width % 3 == 0 else (low or 0) + width - 700
    if low is not None and high is not None and high < low:
        high = None
    pattern = re.compile(integer_range(low, high))
    window = range(-1600, 1601) if high is None else range(min(-1600, high - 50), high + 51)
    for n in window:
        inside = (low is None or n >= low) and (high is None or n <= high)
        assert bool(pattern.fullmatch(str(n))) == inside, (low, high, n)
    for text in ("00", "01", "+1", "-01", "1.0", "") + (("-0",) if (low, high) != (None, None)
                                                          else ()):
        assert not pattern.fullmatch(text)


@given(st.lists(st.sampled_from(["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"]),
                min_size=1, max_size=3, unique=True),
       st.lists(st.one_of(st.integers(-60, 60), st.floats(-60, 60).map(lambda x: round(x, 1))),
                min_size=3, max_size=3))
@settings(max_examples=100)
def test_integer_bounds_follow_the_keywords_exactly(names, values):
    """Every bound keyword, integer or not, through the automaton: the integers of -80..80
    accepted are exactly those Python's comparisons keep (an empty range refused)."""
    schema = {"type": "integer", **dict(zip(names, values))}
    keep = {"minimum": lambda n, x: n >= x, "maximum": lambda n, x: n <= x,
            "exclusiveMinimum": lambda n, x: n > x, "exclusiveMaximum": lambda n, x: n < x}
    valid = [n for n in range(-80, 81) if all(keep[k](n, x) for k, x in zip(names, values))]
    try:
        machine = automaton(schema)
    except ValueError as e:
        assert "empty language" in str(e) and not valid
        return
    assert [n for n in range(-80, 81) if accepts(machine, str(n))] == valid


DECIMALS = sorted({f"{sign}{i}{f}" for sign in ("", "-") for i in range(0, 13) for f in (
    "", ".0", ".5", ".000001", ".999999", ".00", ".1", ".25", ".0000001", ".9999999")})


@given(st.one_of(st.none(), st.integers(-12, 12)), st.booleans(),
       st.one_of(st.none(), st.integers(-12, 12)), st.booleans())
@settings(max_examples=100)
def test_number_bounds_are_exact_on_the_texts_they_allow(low, low_open, high, high_open):
    """A number with whole bounds: over a grid of decimal texts, one is accepted exactly when
    its value (a Fraction, and the double jsonschema compares, alike) lies within the bounds
    and it has at most FRACTION_DIGITS digits after the point ("-0" forms, the value 0, may
    be left out where the bounds do not reach below 0)."""
    schema = {"type": "number"}
    if low is not None:
        schema["exclusiveMinimum" if low_open else "minimum"] = low
    if high is not None:
        schema["exclusiveMaximum" if high_open else "maximum"] = high
    def within(v):
        return (low is None or (v > low if low_open else v >= low)) and \
            (high is None or (v < high if high_open else v <= high))
    try:
        machine = automaton(schema)
    except ValueError as e:
        assert "empty language" in str(e) and not any(within(Fraction(t)) for t in DECIMALS)
        return
    for text in DECIMALS:
        ours, value = accepts(machine, text), Fraction(text)
        assert not ours or (within(value) and within(float(text))), (schema, text)
        short = len(text.partition(".")[2]) <= FRACTION_DIGITS
        if within(value) and short and not (text.startswith("-") and value == 0):
            assert ours, (schema, text)


# -- string patterns -------------------------------------------------------------------------

ALPHABET = ['a', 'b', '1', '"', '\\', '\n', 'é', ' ']
PATTERNS = ["a", "^a", "b$", "^a+$", "a|1", '"', r"\\", r"\n", "^.$", "[^a]", r"\d\d", r"^\w*$",
            r"\s", "é", "^(?:ab|b)?$", r"\D", r"^[^\s]$", r"^\S+$", r"[^\w]", "^$", "a{2}",
            '^[^"]*$', r"\$"]


STRINGS = ["".join(t) for k in range(4) for t in itertools.product(ALPHABET, repeat=k)]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_a_pattern_is_a_search_over_the_strings_json_text(pattern):
    search_matches_json_texts(pattern)


@given(patterns(max_leaves=4), st.sampled_from(["", "^"]), st.sampled_from(["", "$"]))
@settings(max_examples=60)
def test_drawn_patterns_are_searches_over_json_texts(pattern, start, end):
    """The same, for patterns drawn as test_constrain.py draws them, anchored or not."""
    search_matches_json_texts(f"{start}(?:{pattern}){end}")


def search_matches_json_texts(pattern):
    """The schema {"type": "string", "pattern": p} accepts the JSON text (json.dumps) of a
    string exactly when re.search finds p in it (ASCII classes; a final $ as ECMA-262 reads
    it, the very end, where Python's also allows a newline after: \\Z); where \\D \\W \\S
    or a [^...] holding a class escape are read within ASCII, a subset of both readings."""
    machine = automaton({"type": "string", "pattern": pattern})
    narrowed = re.search(r"\\[DWS]|\[\^[^]]*\\[dwsDWS]", pattern) is not None
    oracle = pattern[:-1] + r"\Z" if pattern.endswith("$") and pattern[-2:] != r"\$" else \
        pattern
    for s in STRINGS:
        ours = accepts(machine, json.dumps(s, ensure_ascii=False))
        ascii_reading = bool(re.search(oracle, s, re.ASCII))
        unicode_reading = bool(re.search(oracle, s))
        if narrowed:
            assert not ours or (ascii_reading and unicode_reading), (pattern, s)
        else:
            assert ours == ascii_reading, (pattern, s)


# -- $ref ------------------------------------------------------------------------------------

def linked(depth: int) -> str:
    return "null" if depth == 0 else f'{{"v":{depth % 10},"next":{linked(depth - 1)}}}'


@pytest.mark.parametrize("where", ["$defs", "definitions"])
def test_a_ref_unrolls_to_the_recursion_bound(where):
    """A linked list by $ref: lists of 1..MAX_RECURSION nodes accepted, one more refused
    (the $ref past the bound stands for nothing, and its anyOf keeps null)."""
    node = {"type": "object", "properties": {
        "v": {"type": "integer", "minimum": 0, "maximum": 9},
        "next": {"anyOf": [{"$ref": f"#/{where}/Node"}, {"type": "null"}]}},
        "required": ["v", "next"]}
    machine = automaton({where: {"Node": node}, "$ref": f"#/{where}/Node"})
    for depth in range(1, MAX_RECURSION + 1):
        assert accepts(machine, linked(depth))
    assert not accepts(machine, linked(MAX_RECURSION + 1))
    assert not accepts(machine, "null")


def test_the_root_ref_and_pointers_resolve():
    """"#" is the whole schema (the root plus MAX_RECURSION follows); a JSON pointer with
    ~1 for "/" reaches any part of the document."""
    tree = {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#"},
                                                      "maxItems": 1}}}
    machine = automaton(tree)
    nested = "{}"
    for _ in range(MAX_RECURSION):
        nested = f'{{"kids":[{nested}]}}'
    assert accepts(machine, nested) and not accepts(machine, f'{{"kids":[{nested}]}}')
    pointed = {"$defs": {"a/b": {"const": 1}}, "properties": {"x": {"$ref": "#/$defs/a~1b"}},
               "type": "object", "required": ["x"]}
    assert accepts(automaton(pointed), '{"x":1}')
    assert accepts(automaton({"type": "array", "items": [{"const": 2}][0],
                              "$defs": {}}), "[2]")


# -- oneOf -----------------------------------------------------------------------------------

CAT = {"type": "object", "properties": {"kind": {"const": "cat"}, "lives": {"type": "integer"}},
       "required": ["kind", "lives"]}
DOG = {"type": "object", "properties": {"kind": {"const": "dog"}, "good": {"type": "boolean"}},
       "required": ["kind"]}


@pytest.mark.parametrize("branches", [
    [{"type": "string"}, {"type": "integer"}, {"type": "null"}],
    [{"enum": [1, "a"]}, {"enum": [True, "b"]}],
    [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}],
    [{"anyOf": [{"type": "boolean"}, {"type": "null"}]}, {"type": "array"}]])
def test_one_of_disjoint_branches_reads_as_any_of(branches):
    schema = {"oneOf": branches, "$defs": {"Cat": CAT, "Dog": DOG}}
    any_of = {"anyOf": branches, "$defs": {"Cat": CAT, "Dog": DOG}}
    assert schema_regex(schema) == schema_regex(any_of)


@pytest.mark.parametrize("branches", [
    [{"type": "integer"}, {"type": "number"}], [{"type": "string"}, {"maxLength": 2}],
    [{"const": 1}, {"const": 1.0}], [CAT, {"type": "object"}],
    [{"type": "object", "properties": {"a": {"type": "integer"}}}, {"type": "object"}]])
def test_one_of_overlapping_branches_is_refused(branches):
    with pytest.raises(ValueError, match="oneOf is read only where no value can be valid "
                                         "under two branches"):
        json_schema({"oneOf": branches}, TOKENIZER)


# -- outputs validate ------------------------------------------------------------------------

LEAVES = st.one_of(
    st.tuples(st.integers(-20, 20), st.integers(0, 30)).map(
        lambda t: {"type": "integer", "minimum": t[0], "exclusiveMaximum": t[0] + t[1] + 1}),
    st.sampled_from(PATTERNS).map(lambda p: {"type": "string", "pattern": p}),
    st.tuples(st.integers(-3, 3), st.integers(0, 3), st.booleans()).map(lambda t: {
        "type": "number", "exclusiveMinimum" if t[2] else "minimum": t[0],
        "maximum": t[0] + t[1] + t[2]}),
    st.sampled_from([{"type": "string", "maxLength": 2}, {"enum": ["a", 1, None, True]},
                     {"const": {"k": [1]}}, {"type": "boolean"}, {"type": "number"},
                     {"oneOf": [{"type": "boolean"}, {"type": "string", "maxLength": 1}]},
                     {"$ref": "#/$defs/Cat"}, {"type": "object", "additionalProperties":
                                                {"type": "integer", "maximum": 3}}]))


def composite(inner):
    props = st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, min_size=1, max_size=3)
    return st.one_of(
        st.tuples(props, st.integers(0, 3)).map(lambda t: {
            "type": "object", "properties": t[0], "required": sorted(t[0])[:t[1]]}),
        inner.map(lambda s: {"type": "array", "items": s, "maxItems": 2}),
        st.tuples(inner, inner).map(lambda t: {"anyOf": list(t)}),
        inner.map(lambda s: {"type": ["array", "null"], "items": s, "maxItems": 1}))


SCHEMAS = st.recursive(LEAVES, composite, max_leaves=4).map(
    lambda s: {**s, "$defs": {"Cat": CAT, "Dog": DOG}} if "$ref" not in s else
    {"$defs": {"Cat": CAT, "Dog": DOG, "Top": s}, "$ref": "#/$defs/Top"})
CLOSING = Closing(MODEL, [ord(b) for b in '"}]1'] + [TOKENIZER.eos])
# Strings closed early, brackets left to the model: longer arrays and objects.
QUOTING = Closing(MODEL, [ord('"'), ord(","), TOKENIZER.eos], by=4.0)


@given(SCHEMAS, st.integers(0, 2**16))
@settings(max_examples=25)
def test_every_completed_output_validates_against_its_schema(schema, seed):
    """Drawn schemas (integer ranges, patterns, enums, objects, arrays, anyOf, oneOf, $ref);
    each whole output is JSON that jsonschema validates, each cut one a prefix of one."""
    c = json_schema(schema, TOKENIZER)
    for s, model in enumerate([CLOSING, QUOTING, QUOTING]):
        new = generate(model, PROMPT, constraint=c, seed=seed + s, max_new_tokens=50)[2:]
        text = TOKENIZER.text(new)
        if new[-1] == TOKENIZER.eos:
            jsonschema.validate(json.loads(text), schema)
        else:
            assert c.automaton.walk(text) >= 0


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"n": {"type": "integer", "minimum": -5, "maximum": 12},
                                      "id": {"type": "string", "pattern": "^[a-b]{2}1$"},
                                      "pet": {"oneOf": [{"$ref": "#/$defs/Cat"},
                                                        {"$ref": "#/$defs/Dog"}]}},
     "required": ["n", "id", "pet"], "$defs": {"Cat": CAT, "Dog": DOG}},
    {"type": "array", "items": {"type": "integer", "exclusiveMinimum": 9.5,
                                "exclusiveMaximum": 1000}, "minItems": 1, "maxItems": 3}],
    ids=["object", "array"])
def test_outputs_complete_and_validate(schema):
    c = json_schema(schema, TOKENIZER)
    done = 0
    for seed in range(12):
        new = generate(CLOSING, PROMPT, constraint=c, seed=seed, max_new_tokens=60)[2:]
        if new[-1] == TOKENIZER.eos:
            jsonschema.validate(json.loads(TOKENIZER.text(new)), schema)
            done += 1
    assert done >= 4


# -- refusals and bad input ------------------------------------------------------------------

@pytest.mark.parametrize("schema, named", [
    ({"type": "number", "minimum": 0.5}, "minimum 0.5 on a number is not read"),
    ({"exclusiveMaximum": 1e9}, "only whole bounds below 1000000000"),
    ({"type": "string", "pattern": "a", "maxLength": 3}, "maxLength next to pattern"),
    ({"$ref": "#/$defs/A", "type": "object", "$defs": {"A": {}}}, "'type' next to $ref"),
    ({"anyOf": [{}], "type": "string"}, "'type' next to anyOf"),
    ({"enum": ["abc"], "maxLength": 1}, "'maxLength' next to enum"),
    ({"$ref": "http://example.com/s.json"}, "only references within the schema"),
    ({"$ref": "#/$defs/missing"}, "points at nothing"),
    ({"type": "object", "patternProperties": {}}, "'patternProperties'"),
    ({"type": "array", "prefixItems": []}, "'prefixItems'"),
    ({"type": "array", "uniqueItems": True}, "'uniqueItems'"),
    ({"allOf": [{}]}, "'allOf'"),
    ({"type": "string", "format": "date-time"}, "'format'"),
    ({"type": "string", "pattern": "(?=a)"}, "pattern"),
    ({"type": "integer", "exclusiveMinimum": True}, "exclusiveMinimum must be a finite number"),
    ({"type": "object", "required": ["a"]}, "required property 'a'"),
    ({"type": "object", "properties": {"a": {}}, "additionalProperties": {"type": "integer"}},
     "additionalProperties is read only as false"),
    ("{not json", "not JSON text")])
def test_a_schema_not_read_is_refused_in_one_line_naming_why(schema, named):
    with pytest.raises(ValueError, match=re.escape(named)) as refused:
        json_schema(schema, TOKENIZER)
    assert str(refused.value).startswith("json_schema: ") and "\n" not in str(refused.value)


@pytest.mark.parametrize("schema", [
    {"type": "integer", "minimum": 3, "maximum": 2},
    {"type": "integer", "exclusiveMinimum": 2, "exclusiveMaximum": 3},
    {"type": "number", "exclusiveMinimum": 2, "maximum": 2},
    {"const": "a", "type": "integer"},
    {"type": "string", "pattern": r"^[^\s\S]$"},
    {"type": "array", "items": False, "minItems": 1},
    {"$defs": {"A": {"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}},
                     "required": ["a"]}}, "$ref": "#/$defs/A"},
    {"$ref": "#"}])
def test_an_empty_language_is_refused_in_one_line(schema):
    with pytest.raises(ValueError, match="empty language") as refused:
        json_schema(schema, TOKENIZER)
    assert str(refused.value).startswith("json_schema: ") and "\n" not in str(refused.value)


def test_a_language_too_large_is_refused_by_its_bounds(monkeypatch):
    """The bounds: automaton states (checked as each is made in subset construction), the
    steps of subset construction and of minimization, the schema's pattern's length (checked
    as it is written). Counts, not clocks: each fails as its count passes."""
    with pytest.raises(ValueError, match="more than 20000 states"):
        regex("(?:a|b)*a(?:a|b){14}", TOKENIZER)
    with pytest.raises(ValueError, match="more than 200000 automaton states"):
        json_schema({"type": "array", "items": {"type": "string", "maxLength": 1000},
                     "maxItems": 1000}, TOKENIZER)
    wide = {"$defs": {"T": {"type": "object", "properties": {
        k: {"$ref": "#/$defs/T"} for k in "abcdefghij"}}}, "$ref": "#/$defs/T"}
    with pytest.raises(ValueError, match="its pattern passes 1000000 characters"):
        json_schema(wide, TOKENIZER)
    monkeypatch.setattr(dfa, "MAX_SUBSET_STEPS", 5000)
    with pytest.raises(ValueError, match="subset construction passed 5000 steps"):
        json_schema({"type": "object"}, TOKENIZER)
    monkeypatch.undo()
    monkeypatch.setattr(dfa, "MAX_MINIMIZE_STEPS", 5000)
    with pytest.raises(ValueError, match="minimization passed 5000 steps"):
        json_schema({"type": "object"}, TOKENIZER)
    monkeypatch.undo()
    monkeypatch.setattr(schema_module, "MAX_PATTERN_LENGTH", 300)
    with pytest.raises(ValueError, match="its pattern passes 300 characters"):
        json_schema({"type": "object"}, TOKENIZER)


def test_a_schema_this_vocabulary_cannot_spell_is_refused():
    """A vocabulary with no digit: no integer can be written, so the constraint is refused
    when made (its start allows no token and does not accept); a string still can."""
    tok = ByteTokenizer(pieces=(b'"a', b'a"'), single_bytes=b'{}"a')
    with pytest.raises(ValueError, match="no sequence of this vocabulary"):
        json_schema({"type": "integer", "minimum": 3}, tok)
    assert json_schema({"type": "string", "pattern": "^a+$"}, tok)
