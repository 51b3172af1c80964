"""Bounds on rendering a chat template: time, loop steps, size and depth.

A chat template is a program that arrives inside a model's files, and Jinja runs whatever it
says. Jinja's sandbox already keeps it from files, imports and private attributes, but not
from running forever or filling the memory: two loops over ``range(100000)`` take 10^10
steps, ``{{ 'x' * 4000000000 }}`` asks for gigabytes, and a macro that calls itself ends in a
RecursionError a thousand frames deep. So every render counts, and stops past:

    time     wall clock since the render began                           MAX_SECONDS
    steps    iterations of all its for loops together                   MAX_LOOP_STEPS
    size     the rendered text, and every value an operator, a call, a filter, a ~ join
             or a {{ }} builds: characters of a string, items of a list, tuple or dict
             counted through the containers inside (n references to one list of m
             strings of k characters: n * m * (1 + k))                   MAX_SIZE
             integers, by their bits                                     MAX_INT_BITS
    depth    calls inside calls: macros, recursive loops, functions      MAX_DEPTH

(and Jinja's own: a ``range`` of at most 100,000 numbers). The counting lives in the
sandbox's hooks (``BoundedSandbox``, template_sandbox.py): every call, attribute and item
lookup, the operators that can grow a value (``+ * ** %``, intercepted), every filter, every
loop step, each ``~`` join and each piece of output. A value past the size bound is refused
before it is built wherever its size can be foreseen (``s * n``, ``a ** b``, padding,
replacing, joining and formatting with widths, a filter's input), and checked after it is
built everywhere else, so that memory never holds much more than a bound's worth. Time is
checked by the clock at each hook, never by a thread that interrupts: between two hooks runs
one Python operation on values within the bounds. A render past a bound raises
``LimitExceeded`` naming the limit; chat_template.py turns it into a one-line error.
"""
from __future__ import annotations

import re
import time
import types
from dataclasses import dataclass

# Nine of the ten real templates of tests/peers render a thousand turns twenty times over
# within this, Gemma 4's (quadratic in the turns) about 400 (docs/PERFORMANCE.md). The clock
# is there for what the other bounds cannot foresee, such as slow work in each allowed step.
MAX_SECONDS = 5.0
# Real templates take two to four steps a message (the ten of tests/peers: 2,001 to 4,006 for
# a thousand turns), save one that loops over the messages inside a loop over them (Gemma 4's:
# about 2 n^2, so past 700 turns); a hostile nested loop stops within a second or so.
MAX_LOOP_STEPS = 1_000_000
# Four times the text of a 128k-token context (about 4 characters a token): no real prompt
# is longer, and a string of this many characters, or a list of this many items, still fits
# in memory many times over.
MAX_SIZE = 2_000_000
# Recursive macros walk nested JSON schemas, a few levels deep. A level of a macro costs Python
# six frames (of a recursive loop five), so 64 levels, about 400 frames, stop well inside
# Python's own recursion limit (1,000 frames) even when the render starts deep in a program.
MAX_DEPTH = 64
# Integers: 16,384 bits (about 4,900 digits, past the 4,300 Python agrees to print).
# Multiplying two of them is quick; squaring a number forty times over is not.
MAX_INT_BITS = 16_384


@dataclass(frozen=True)
class Limits:
    """The bounds of one render (see the module docstring); raise one for a template that
    needs more, e.g. ``Limits(loop_steps=10_000_000)``."""
    seconds: float = MAX_SECONDS
    loop_steps: int = MAX_LOOP_STEPS
    size: int = MAX_SIZE
    depth: int = MAX_DEPTH


class LimitExceeded(Exception):
    """A render passed one of its limits; the message names it."""


class Budget:
    """What one render has spent: the clock's deadline, loop steps, the depth of calls, and
    the sizes of containers already measured (by id, the container kept alive with its size:
    in the immutable sandbox a list or dict cannot change while the template runs)."""

    def __init__(self, limits: Limits):
        self.limits = limits
        self.deadline = time.monotonic() + limits.seconds
        self.steps = 0
        self.depth = 0
        self.sizes = {}

    def tick(self):
        if time.monotonic() > self.deadline:
            raise LimitExceeded(f"took more than {self.limits.seconds:g} s (the time limit, "
                                f"MAX_SECONDS)")

    def step(self):
        self.steps += 1
        if self.steps > self.limits.loop_steps:
            raise LimitExceeded(f"more than {self.limits.loop_steps:,} loop steps (the step limit, "
                                f"MAX_LOOP_STEPS)")
        self.tick()

    def check(self, size, what):
        """Refuse a value of ``size`` (built or about to be) past the size bound."""
        if size > self.limits.size:
            raise LimitExceeded(f"{what}: more than {self.limits.size:,} characters or items "
                                f"(the size limit, MAX_SIZE)")

    def size(self, value):
        """The size of ``value`` (see the module docstring), counted without recursion and
        only until it passes the bound."""
        if isinstance(value, str):  # the most common value, at once
            return len(value)
        if isinstance(value, (int, float, bool)) or value is None:
            return 0
        if isinstance(value, (list, tuple, dict)) and id(value) in self.sizes:
            return self.sizes[id(value)][1]
        total, _ = measure(value, self.limits.size)
        if isinstance(value, (list, tuple, dict)) and total > 256:  # small ones: cheap again
            if len(self.sizes) >= 1024:
                del self.sizes[next(iter(self.sizes))]  # the oldest, so that memory stays small
            self.sizes[id(value)] = (value, total)
        return total

    def built(self, value, what="a value"):
        """``value``, after checking its size; integers by their bits; a generator (``map``,
        ``select``, ...) counted as it yields: whatever gathers its items (``list``, ``join``)
        holds them all at once."""
        if isinstance(value, str):
            self.check(len(value), what)
        elif isinstance(value, int):
            check_bits(value.bit_length(), what)
        elif isinstance(value, (list, tuple, dict)) or namespace_items(value) is not None:
            self.check(self.size(value), what)
        elif isinstance(value, types.GeneratorType):
            return self.yielded(value, what)
        return value

    def yielded(self, items, what):
        total = 0
        for item in items:
            total += self.size(item)
            self.check(total, f"the items of {what}")
            yield item


def check_bits(bits, what):
    if bits > MAX_INT_BITS:
        raise LimitExceeded(f"{what}: an integer of more than {MAX_INT_BITS:,} bits "
                            f"(MAX_INT_BITS)")


def namespace_items(value):
    """The attributes a Jinja ``namespace`` holds (a dict), or None for any other value."""
    return getattr(value, "_Namespace__attrs", None) if type(value).__name__ == "Namespace" \
        else None


def measure(value, cap):
    """(size, depth) of a value: characters of strings, items of containers, through the
    containers inside (shared ones counted each time they appear, as printing them would; one
    that holds itself counts as past the cap); counting stops once the size passes ``cap``."""
    total, deepest, stack, path = 0, 0, [(iter((value,)), 0, None)], set()
    while stack and total <= cap:
        items, depth, owner = stack[-1]
        x = next(items, stack)
        if x is stack:
            stack.pop()
            path.discard(owner)
            continue
        deepest = max(deepest, depth)
        if isinstance(x, (str, bytes)):
            total += len(x)
            continue
        if namespace_items(x) is not None:
            x = namespace_items(x)
        if not isinstance(x, (list, tuple, set, frozenset, dict)):
            continue
        if id(x) in path:
            return cap + 1, deepest
        total += len(x)
        inner = [*x.keys(), *x.values()] if isinstance(x, dict) else x
        kinds = set(map(type, inner))
        if kinds <= {str}:  # a flat list of strings, the common case, at once
            total += sum(map(len, inner))
        elif not kinds <= {int, float, bool, type(None)}:
            path.add(id(x))
            stack.append((iter(inner), depth + 1, id(x)))
    return total, deepest


# ---------------------------------------------------------------- the sizes that can be foreseen

# The widths and precisions of a format: %-10.3f's 10 and 3, {:>12}'s 12.
PRINTF_SPEC = re.compile(r"%[#0\- +]*(\d*)(?:\.(\d*))?")
FORMAT_SPEC = re.compile(r"\{[^{}:]*:([^{}]*)\}")


def format_size(budget, fmt, args, kwargs):
    """An upper bound on ``fmt % args`` or ``fmt.format(...)``: the format, its widths and
    precisions, and the arguments (their integers too, when a width comes from them: ``%*s``
    or ``{:{w}}``)."""
    runs = [run for spec in PRINTF_SPEC.findall(fmt) for run in spec if run]
    runs += [run for spec in FORMAT_SPEC.findall(fmt) for run in re.findall(r"\d+", spec)]
    widths = sum(int(run) if len(run) < 10 else budget.limits.size + 1 for run in runs)
    width_from_args = "*" in fmt or re.search(r"\{[^{}]*\{", fmt) is not None
    values = list(args) + list(kwargs.values())
    return len(fmt) + widths + sum(
        abs(v) if width_from_args and isinstance(v, int) else budget.size(v) for v in values)


def str_method_size(budget, s, name, args, kwargs):
    """An upper bound on the string ``s.name(*args, **kwargs)`` returns, for the methods that
    can make a string much longer than their inputs; None for the others."""
    if name in ("ljust", "rjust", "center", "zfill") and args and isinstance(args[0], int):
        return max(len(s), args[0])
    if name == "expandtabs":
        return len(s) * max(1, (args or (kwargs.get("tabsize", 8),))[0])
    if name == "replace" and len(args) >= 2 and all(isinstance(a, str) for a in args[:2]):
        old, new = args[:2]
        count = len(s) // len(old) if old else len(s) + 1
        if len(args) > 2 and isinstance(args[2], int) and args[2] >= 0:
            count = min(count, args[2])
        return len(s) + count * len(new)
    if name == "join" and args and hasattr(args[0], "__len__"):
        return len(s) * len(args[0]) + budget.size(args[0])
    if name == "translate" and args:
        return len(s) * (1 + budget.size(args[0]))
    if name in ("format", "format_map"):
        return format_size(budget, s, args, kwargs)
    return None


def binop_size(budget, operator, left, right):
    """Check ``left operator right`` before computing it: joining and repetition by size,
    products and powers of integers by their bits. True when that foresaw the result's size
    (else it is to be checked once built)."""
    if operator == "+":
        if isinstance(left, str) and isinstance(right, str):  # the common case, at once
            budget.check(len(left) + len(right), "a concatenation")
            return True
        if isinstance(left, (list, tuple)):
            budget.check(budget.size(left) + budget.size(right), "a concatenation")
        return isinstance(left, (int, float)) and isinstance(right, (int, float))
    ints = isinstance(left, int) and isinstance(right, int)
    if operator == "*" and ints:
        check_bits(left.bit_length() + right.bit_length(), "a product")
    elif operator == "**" and ints and right > 0:
        check_bits(max(left.bit_length() - 1, 1) * right, "a power")
    elif operator == "*" and (isinstance(left, int) or isinstance(right, int)):
        times, sequence = (left, right) if isinstance(left, int) else (right, left)
        if isinstance(sequence, (str, list, tuple)):
            budget.check(budget.size(sequence) * max(times, 0), "a repetition")
    elif operator == "%" and isinstance(left, str):
        args = right if isinstance(right, tuple) else (right,)
        kwargs = right if isinstance(right, dict) else {}
        budget.check(format_size(budget, left, () if kwargs else args, kwargs), "a % format")
    return False


def filter_size(budget, name, value, args, kwargs):
    """An upper bound on what filter ``name`` makes of ``value`` for the filters whose output
    can outgrow their input (padding, indenting, wrapping, replacing, joining, formatting,
    JSON with an indent); the input's own size for the others."""
    size = budget.size(value)
    arg = lambda i, key, default: args[i] if len(args) > i else kwargs.get(key, default)  # noqa
    text = value if isinstance(value, str) else ""
    if name == "center":
        return max(size, number(arg(0, "width", 80)))
    if name == "indent":
        width = arg(0, "width", 4)
        width = len(width) if isinstance(width, str) else number(width)
        return size + (text.count("\n") + 1) * width
    if name == "wordwrap":
        return size * (1 + len(arg(3, "wrapstring", None) or "\n"))
    if name == "replace":
        return str_method_size(budget, text, "replace", args, {}) or size
    if name == "join":
        return size + len(str(arg(0, "d", ""))) * size
    if name == "format":
        return format_size(budget, text, args, kwargs)
    if name in ("tojson", "pprint"):
        indent = arg(0, "indent", None) if name == "tojson" else 1
        width = len(indent) if isinstance(indent, str) else number(indent or 0)
        depth = measure(value, budget.limits.size)[1] if width else 0
        return size * (1 + width * depth)  # escapes add at most 6x, checked after
    if name in ("batch", "slice"):
        fill = arg(1, "fill_with", None)
        return size + number(arg(0, "linecount" if name == "batch" else "slices", 0)) * (
            1 + budget.size(fill))
    return size


def number(x):
    return abs(x) if isinstance(x, (int, float)) else 0
