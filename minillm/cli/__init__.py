"""The `minillm` command: one subcommand per module in this folder.

Every subcommand module has `add_arguments(parser)` and `run(args) -> int`. Errors a user can
cause (a missing file, a malformed model, a knob out of range) become one line on stderr and
exit code 2, never a traceback.
"""
from __future__ import annotations

import argparse
import sys

from . import convert, export, generate, inspect, next_token, quantize

COMMANDS = {
    "inspect": inspect,
    "convert": convert,
    "export": export,
    "generate": generate,
    "next": next_token,
    "quantize": quantize,
}


class UsageError(Exception):
    """A problem with the user's input, reported as one line and exit code 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="minillm", description="LLM inference in NumPy.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module in COMMANDS.items():
        doc = (module.__doc__ or "").strip()
        command = sub.add_parser(name, help=doc.splitlines()[0] if doc else None,
                                 description=doc)
        module.add_arguments(command)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command].run(args)
    except (UsageError, ValueError, OSError) as e:  # WeightsError is a ValueError
        print(f"minillm {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
