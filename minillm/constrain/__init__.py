"""Structured output: constrain generation to a regular expression, a JSON Schema or a list
of choices (docs/CONSTRAINED.md).

    from minillm.constrain import regex, json_schema, choice
    c = json_schema({"type": "object"}, model.tokenizer)
    ids = minillm.generate(model, prompt_ids, constraint=c, temperature=0.8, seed=1)
"""
from .constraint import Constraint, choice, json_schema, regex

__all__ = ["Constraint", "choice", "json_schema", "regex"]
