"""Jinja's immutable sandbox, counting: the hooks where a chat template's render spends its
budget of time, loop steps, size and depth (the bounds and the sizes: template_limits.py).

    every call                 the clock, its arguments, a method's foreseen result, depth + 1
    attribute and item lookup  the clock
    + * ** %                   intercepted: the foreseen result (repetition, powers, formats)
    every filter               its input, its foreseen output (padding, indenting, JSON), result
    a for loop                 iterates Steps(iterable): each item one loop step
    a ~ b                      compiled to join_counted: the joined size first
    {{ value }}                finalize: the value's size before it is printed
    the text                   concat: the rendered text (and each macro's, block's) by pieces

The budget of the render under way is a context variable: each thread renders with its own.
"""
from __future__ import annotations

import contextvars
import functools

from .template_limits import (Budget, LimitExceeded, Limits, binop_size, filter_size, number,
                              str_method_size)

BUDGET = contextvars.ContextVar("chat_template_budget", default=None)


def render(template, limits: Limits, variables: dict) -> str:
    """``template.render(**variables)`` within ``limits`` (LimitExceeded past one)."""
    token = BUDGET.set(Budget(limits))
    try:
        return template.render(**variables)
    finally:
        BUDGET.reset(token)


class Steps:
    """An iterable as a for loop sees it, each item a counted step (its length, when it has
    one, unchanged: ``loop.length`` and ``loop.last`` read it)."""

    def __init__(self, iterable):
        self.iterable = iterable

    def __len__(self):
        return len(self.iterable)

    def __iter__(self):
        budget = BUDGET.get()
        for item in self.iterable:
            if budget is not None:
                budget.step()
            yield item


def counted_loops(tree, jinja2, environment):
    """Make every for loop of a parsed template iterate ``Steps(its iterable)``."""
    nodes = jinja2.nodes
    for loop in tree.find_all(nodes.For):
        steps = nodes.ImportedName(f"{__name__}.Steps", lineno=loop.lineno)
        loop.iter = nodes.Call(steps, [loop.iter], [], None, None, lineno=loop.lineno)
        loop.iter.set_environment(environment)
    return tree


def bounded_filter(name, function, jinja2):
    """A filter that checks the clock, its input and (foreseen) output size, then its
    result. It asks for the context, as Jinja's context filters do, so that Jinja never runs
    it while compiling (a constant's filter would otherwise be computed then, uncounted)."""
    passes = getattr(getattr(function, "jinja_pass_arg", None), "name", None)

    @jinja2.pass_context
    def bounded(context, value, *args, **kwargs):
        budget = BUDGET.get()
        if budget is not None:
            budget.tick()
            budget.check(budget.size(value), f"the input of the {name} filter")
            budget.check(filter_size(budget, name, value, args, kwargs), f"the {name} filter")
        first = {"context": (context,), "eval_context": (context.eval_ctx,),
                 "environment": (context.environment,)}.get(passes, ())
        result = function(*first, value, *args, **kwargs)
        return result if budget is None else budget.built(result, f"the {name} filter")

    return bounded


@functools.lru_cache(maxsize=1)
def bounded_sandbox():
    """The class of Jinja's immutable sandbox with the counting hooks (built on first use:
    jinja2 is optional)."""
    import jinja2
    from jinja2.compiler import CodeGenerator
    from jinja2.runtime import LoopContext
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from jinja2.utils import generate_lorem_ipsum

    class JoinCounted(CodeGenerator):
        """Compiles ``a ~ b`` to ``environment.join_counted((a, b))``."""

        def visit_Concat(self, node, frame):
            self.write("environment.join_counted((")
            for arg in node.nodes:
                self.visit(arg, frame)
                self.write(", ")
            self.write("))")

    class BoundedSandbox(ImmutableSandboxedEnvironment):
        code_generator_class = JoinCounted
        intercepted_binops = frozenset({"+", "*", "**", "%"})

        def __init__(self, **options):
            super().__init__(finalize=self.output, **options)

        def bound_filters(self):
            self.filters = {name: bounded_filter(name, f, jinja2)
                            for name, f in self.filters.items()}

        def call_binop(self, context, operator, left, right):
            budget = BUDGET.get()
            if budget is None:
                return super().call_binop(context, operator, left, right)
            budget.tick()
            foreseen = binop_size(budget, operator, left, right)
            result = super().call_binop(context, operator, left, right)
            return result if foreseen else budget.built(result, f"the {operator} operator")

        def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 (Jinja's names)
            budget = BUDGET.get()
            if budget is None:
                return super().call(__context, __obj, *args, **kwargs)
            budget.tick()
            for key, value in kwargs.items():
                if key not in ("_loop_vars", "_block_vars"):  # Jinja's own, not the template's
                    budget.built(value, f"argument {key}")
            for value in args:
                budget.built(value, "an argument")
            method = getattr(__obj, "__wrapped__", __obj)  # str.format, as the sandbox wraps it
            if isinstance(getattr(method, "__self__", None), str):
                size = str_method_size(budget, method.__self__, method.__name__, args, kwargs)
                if size is not None:
                    budget.check(size, f"str.{method.__name__}")
            if __obj is generate_lorem_ipsum:  # lipsum(n, html, min, max): n paragraphs of
                words = args[3] if len(args) > 3 else kwargs.get("max", 100)  # at most max words
                budget.check(number(args[0] if args else kwargs.get("n", 5)) * number(words)
                             * 16, "lipsum")
            if isinstance(__obj, LoopContext) and args:  # a recursive loop's next level
                args = (Steps(args[0]), *args[1:])
            budget.depth += 1
            try:
                if budget.depth > budget.limits.depth:
                    raise LimitExceeded(f"calls nested more than {budget.limits.depth} deep "
                                        f"(the depth limit, MAX_DEPTH)")
                result = super().call(__context, __obj, *args, **kwargs)
            finally:
                budget.depth -= 1
            return budget.built(result, "a call")

        def getattr(self, obj, attribute):
            if (budget := BUDGET.get()) is not None:
                budget.tick()
            return super().getattr(obj, attribute)

        def getitem(self, obj, argument):
            if (budget := BUDGET.get()) is not None:
                budget.tick()
            return super().getitem(obj, argument)

        def join_counted(self, values):
            """``a ~ b ~ ...``: the text of each value, joined."""
            if (budget := BUDGET.get()) is not None:
                budget.tick()
                budget.check(sum(budget.size(v) for v in values), "a ~ join")
            return "".join(map(str, values))

        def output(self, value):
            """What ``{{ value }}`` prints is checked before it is printed."""
            if (budget := BUDGET.get()) is not None:
                budget.tick()
                budget.check(budget.size(value), "the output of {{ }}")
            return value

        def concat(self, pieces):
            """The rendered text (and each block's, macro's and loop's), pieces counted as
            they come."""
            budget, kept, length = BUDGET.get(), [], 0
            for piece in pieces:
                kept.append(piece)
                if budget is not None:
                    length += len(piece)
                    budget.check(length, "the rendered text")
                    budget.tick()
            return "".join(kept)

    return BoundedSandbox
