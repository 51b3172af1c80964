"""Python functions as tools: the JSON schema a chat template reads, as transformers writes it.

A chat template that offers tools to the model reads each as a JSON schema::

    {"type": "function", "function": {"name": ..., "description": ...,
     "parameters": {"type": "object", "properties": {arg: {"type": ..., "description": ...}},
                    "required": [args without a default]},
     "return": {"type": ..., "description": ...}}}          # only when the return is typed

transformers lets ``tools`` hold Python functions and writes their schemas from the type hints
and the Google-style docstring (``transformers.utils.get_json_schema``); ``tool_schema`` does
the same, key for key. The docstring's first part is the description, its ``Args:`` block
describes every argument (``name: text``, or ``name (type): text``, continued on indented
lines; a description ending in ``(choices: [...])`` becomes an ``enum``), and its ``Returns:``
block the return value. The types:

    int, float, str, bool, None    "integer", "number", "string", "boolean", "null"
    list[T], tuple[A, B], dict     "array" with "items" / "prefixItems"; "object" (its values
                                   as "additionalProperties")
    Literal[...], an Enum          "enum" of the values, "type" the JSON types among them
    Union / X | Y / Optional[X]    a list of plain types, or "anyOf"; with None, "nullable"
    Any                            {} (no constraint)
"""
from __future__ import annotations

import enum
import inspect
import json
import re
import types
import typing

# The docstring's parts, as transformers finds them.
DESCRIPTION = re.compile(r"^(.*?)[\n\s]*(Args:|Returns:|Raises:|\Z)", re.DOTALL)
ARGS = re.compile(r"\n\s*Args:\n(.*?)[\n\s]*(Returns:|Raises:|\Z)", re.DOTALL)
ONE_ARG = re.compile(r"""
(?:^|\n)
([ \t]*)(\w+)(?:[ \t]*\([^()\n]*\))?:\s*   # the indent and the name, a "(type)" skipped
(.*?)\s*                                   # the description, over lines
(?=\n(?!\1[ \t])[ \t]*\w+(?:[ \t]*\([^()\n]*\))?:|\Z)   # up to the next name at that indent
""", re.DOTALL | re.VERBOSE)
RETURNS = re.compile(r"\n\s*Returns:\n\s*(.*?)[\n\s]*(Raises:|\Z)", re.DOTALL)
CHOICES = re.compile(r"\(choices:\s*(.*?)\)\s*$", re.IGNORECASE)

JSON_SCALARS = {int: "integer", float: "number", str: "string", bool: "boolean",
                type(None): "null"}
PLAIN_TYPES = {**{t: {"type": name} for t, name in JSON_SCALARS.items()},
               list: {"type": "array"}, tuple: {"type": "array"}, dict: {"type": "object"}}


def tool_schemas(tools, what="tools"):
    """``tools`` as a chat template receives them: schemas (dicts) as given, functions and
    methods described by ``tool_schema``; None stays None."""
    if tools is None:
        return None
    schemas = []
    for tool in tools:
        if isinstance(tool, dict):
            schemas.append(tool)
        elif inspect.isfunction(tool) or inspect.ismethod(tool):
            schemas.append(tool_schema(tool))
        else:
            raise ValueError(f"{what}: each tool must be a JSON schema (a dict) or a Python "
                             f"function with type hints and a docstring, got {tool!r}")
    return schemas


def tool_schema(function) -> dict:
    """The JSON schema of a Python function, as transformers' ``get_json_schema`` writes it
    (see the module docstring); a ValueError naming the function and what is missing."""
    name = getattr(function, "__name__", "operation")
    doc = inspect.getdoc(function)
    if not doc:
        raise ValueError(f"tool {name}: has no docstring to describe it")
    description, arguments, returns = docstring_parts(doc.strip())
    parameters = hints_schema(function, name)
    returned = parameters["properties"].pop("return", None)
    if returned is not None and returns is not None:
        returned["description"] = returns
    for argument, schema in parameters["properties"].items():
        if argument not in arguments:
            raise ValueError(f"tool {name}: the docstring's Args: has no description of "
                             f"'{argument}'")
        text = arguments[argument]
        choices = CHOICES.search(text)
        if choices:
            schema["enum"] = [c.strip() if isinstance(c, str) else c
                              for c in json.loads(choices.group(1))]
            text = text[:choices.start()].strip()
        schema["description"] = text
    out = {"name": name, "description": description, "parameters": parameters}
    if returned is not None:
        out["return"] = returned
    return {"type": "function", "function": out}


def docstring_parts(doc):
    """(description, {argument: description}, returns) of a Google-style docstring."""
    description, arguments, returns = (DESCRIPTION.search(doc), ARGS.search(doc),
                                       RETURNS.search(doc))
    described = {}
    if arguments is not None:
        block = "\n".join(line for line in arguments.group(1).split("\n") if line.strip())
        described = {m[1]: re.sub(r"\s*\n+\s*", " ", m[2].strip())
                     for m in ONE_ARG.findall(block)}
    return (description.group(1).strip() if description else None, described,
            returns.group(1).strip() if returns else None)


def hints_schema(function, name):
    """{"type": "object", "properties": ..., "required": ...} from the type hints (a method's
    self or cls left out; the return's schema under "return", when its hint converts)."""
    hints = typing.get_type_hints(function)
    signature = inspect.signature(function)
    first = next(iter(signature.parameters), None)
    receiver = first if (first in ("self", "cls") and signature.parameters[first].annotation
                         is inspect.Parameter.empty) else None
    required = []
    for argument, parameter in signature.parameters.items():
        if argument == receiver:
            continue
        if parameter.annotation is inspect.Parameter.empty:
            raise ValueError(f"tool {name}: argument '{argument}' has no type hint")
        if parameter.default is inspect.Parameter.empty:
            required.append(argument)
    properties = {}
    for argument, hint in hints.items():
        if argument == receiver:
            continue
        try:
            properties[argument] = type_schema(hint)
        except ValueError as error:
            if argument != "return":  # the model never writes the return: an unknown one is
                raise ValueError(f"tool {name}: argument '{argument}': {error}") from None
    schema = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


def type_schema(hint) -> dict:
    """The JSON schema of one type hint (the table of the module docstring)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is None and isinstance(hint, type) and issubclass(hint, enum.Enum):
        return enum_schema([member.value for member in hint], hint.__name__)
    if origin is None:
        if hint is typing.Any:
            return {}
        if hint not in PLAIN_TYPES:
            raise ValueError(f"cannot describe the type {hint!r} in JSON (int, float, str, "
                             f"bool, None, Enum, Literal, and list, tuple, dict and Union of "
                             f"those)")
        return dict(PLAIN_TYPES[hint])
    if origin is typing.Union or origin is types.UnionType:
        members = [type_schema(t) for t in args if t is not type(None)]
        if len(members) == 1:
            schema = members[0]
        elif all(m.keys() == {"type"} and isinstance(m["type"], str) for m in members):
            names = sorted({m["type"] for m in members})
            schema = {"type": names[0] if len(names) == 1 else names}
        else:
            schema = {"anyOf": members}
        if type(None) in args:
            schema["nullable"] = True
        return schema
    if origin is typing.Literal and args:
        return enum_schema(list(args), "Literal")
    if origin is list:
        return {"type": "array", **({"items": type_schema(args[0])} if args else {})}
    if origin is tuple:
        if not args:
            return {"type": "array"}
        if len(args) == 1 or ... in args:
            raise ValueError(f"cannot describe {hint!r} in JSON: a tuple of one item or of "
                             f"any length (use list[...])")
        return {"type": "array", "prefixItems": [type_schema(t) for t in args]}
    if origin is dict:
        return {"type": "object",
                **({"additionalProperties": type_schema(args[1])} if len(args) == 2 else {})}
    raise ValueError(f"cannot describe the type {hint!r} in JSON")


def enum_schema(values, what):
    """{"type": the JSON types among the values, in order of appearance, "enum": values}."""
    if not values or any(type(v) not in JSON_SCALARS for v in values):
        raise ValueError(f"the values of {what} must be JSON scalars (int, float, str, bool, "
                         f"None), at least one, got {values}")
    names = list(dict.fromkeys(JSON_SCALARS[type(v)] for v in values))
    return {"type": names[0] if len(names) == 1 else names, "enum": values}
