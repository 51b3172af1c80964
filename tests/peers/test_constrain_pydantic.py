"""Pydantic v2 models' `model_json_schema()` as constraints: nested models through $defs and
$ref, Optional fields (anyOf with null), lists, dicts, enums, Literal, bounds on integers, a
string pattern, whole bounds on a float, titles and descriptions, a discriminated union
(oneOf), a recursive model.
Every completed output validates against the schema (jsonschema) and parses back into the
model (`Model.model_validate_json`). Needs pydantic and jsonschema (the test extra)."""
from __future__ import annotations

import enum
import json
from typing import Literal, Optional, Union

import pytest

from minillm.constrain import json_schema
from minillm.generate import generate
from tests.test_constrain import MODEL, PROMPT, TOKENIZER, Closing

pydantic = pytest.importorskip("pydantic")
jsonschema = pytest.importorskip("jsonschema")
BaseModel, Field = pydantic.BaseModel, pydantic.Field


class Color(str, enum.Enum):
    RED = "red"
    GREEN = "green"


class Size(enum.IntEnum):
    S = 1
    M = 2


class Address(BaseModel):
    """Where one lives."""

    street: str = Field(max_length=6)
    zip_code: str = Field(pattern=r"^[0-9]{3}$")


class Person(BaseModel):
    name: str = Field(title="Full name", max_length=5)
    age: int = Field(ge=0, le=130)
    email: Optional[str] = Field(default=None, max_length=4)
    color: Color
    size: Size = Size.S
    kind: Literal["a", "b"]
    home: Address
    other: Optional[Address] = None
    tags: list[str] = Field(default_factory=list, max_length=2)
    scores: dict[str, int] = {}
    ok: bool


class Cat(BaseModel):
    pet_type: Literal["cat"]
    lives: int = Field(gt=0, lt=10)


class Dog(BaseModel):
    pet_type: Literal["dog"]
    good: bool


class Owner(BaseModel):
    pet: Union[Cat, Dog] = Field(discriminator="pet_type")
    either: Union[int, str]
    nums: list[float] = Field(max_length=2)
    share: float = Field(ge=0, le=1)


class Tree(BaseModel):
    value: int = Field(ge=-9, le=9)
    children: list[Tree] = Field(default=[], max_length=2)


CLOSING = Closing(MODEL, [ord(b) for b in '"}]1'] + [TOKENIZER.eos])
QUOTING = Closing(MODEL, [ord('"'), ord(","), TOKENIZER.eos], by=4.0)


@pytest.mark.parametrize("model", [Person, Owner, Tree], ids=lambda m: m.__name__)
def test_pydantic_models_outputs_validate_and_parse_back(model):
    schema = model.model_json_schema()
    c = json_schema(schema, TOKENIZER)
    done = []
    for seed in range(16):
        biased = CLOSING if seed % 2 else QUOTING
        new = generate(biased, PROMPT, constraint=c, seed=seed, max_new_tokens=300)[2:]
        if new[-1] == TOKENIZER.eos:
            text = TOKENIZER.text(new).decode()
            jsonschema.validate(json.loads(text), schema)
            done.append(model.model_validate_json(text))
        else:
            assert c.automaton.walk(TOKENIZER.text(new)) >= 0
    assert len(done) >= 4, len(done)


def test_what_pydantic_writes_beyond_the_subset_is_refused_by_name():
    """A datetime is a string of a `format`; a set asks `uniqueItems`; a float's bound that
    is not a whole number is not kept exactly: each refused naming the keyword, never
    ignored."""
    import datetime

    class Event(BaseModel):
        when: datetime.datetime

    class Bag(BaseModel):
        items: set[int]

    class Share(BaseModel):
        part: float = Field(gt=0.5)

    for model, keyword in ((Event, "'format'"), (Bag, "'uniqueItems'"), (Share, "exclusiveMinimum 0.5 on a number")):
        with pytest.raises(ValueError, match=keyword):
            json_schema(model.model_json_schema(), TOKENIZER)
