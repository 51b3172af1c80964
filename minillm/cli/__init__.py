"""The `minillm` command: one subcommand per module in this folder.

Every subcommand module has `add_arguments(parser)` and `run(args) -> int`. Errors a user can
cause (a missing file, a malformed model, a knob out of range) become one line on stderr and
exit code 2, never a traceback.
"""
from __future__ import annotations

import argparse
import os
import sys

from . import chat, convert, evaluate, export, fetch, generate, inspect, next_token, quantize
from . import desk
from .common import UsageError, blas_threads

COMMANDS = {
    "inspect": inspect,
    "convert": convert,
    "export": export,
    "generate": generate,
    "next": next_token,
    "quantize": quantize,
    "eval": evaluate,
    "fetch": fetch,
    "chat": chat,
    "desk": desk,
}


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose own errors (an unknown flag, a value of the wrong type) are one
    line and exit code 2, like every other error of the command, instead of the usage text."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="minillm", description="LLM inference in NumPy.")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--threads", type=int, default=1, metavar="N",
                        help="BLAS threads for NumPy (default 1: small matrices gain nothing "
                             "from more, and threads stall when another process is busy)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module in COMMANDS.items():
        doc = (module.__doc__ or "").strip()
        command = sub.add_parser(name, help=doc.splitlines()[0] if doc else None,
                                 description=doc, parents=[common],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(command)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        with blas_threads(args.threads):
            return COMMANDS[args.command].run(args)
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly, as `cat` does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush
        return 0
    # WeightsError is a ValueError; an ImportError names a missing optional dependency
    # (torch, safetensors) and how to install it.
    except (UsageError, ValueError, OSError, ImportError) as e:
        print(f"minillm {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
