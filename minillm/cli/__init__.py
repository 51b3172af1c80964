"""The `minillm` command: one subcommand per module in this folder.

Every subcommand module has `add_arguments(parser)` and `run(args) -> int`. Errors a user can
cause (a missing file, a malformed model, a knob out of range) become one line on stderr and
exit code 2, never a traceback; the library's warnings (a prompt cut to the context) one line
each, `minillm COMMAND: warning: ...`.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import warnings

from . import chat, convert, evaluate, export, fetch, generate, inspect, next_token, quantize
from . import desk
from . import serve
from .common import SPELLINGS, Parser, UsageError, blas_threads, given_flags

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
    "serve": serve,
}


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="minillm", description="LLM inference in NumPy.", epilog=SPELLINGS)
    common = Parser(add_help=False)
    common.add_argument("--threads", type=int, default=1, metavar="N",
                        help="BLAS threads for NumPy (default 1: small matrices gain nothing "
                             "from more, and threads stall when another process is busy)")
    common.add_argument("--reference", action="store_true",
                        help="load the reference model, without the fast path's devices (as "
                             "MINILLM_FAST=0 does)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module in COMMANDS.items():
        doc = (module.__doc__ or "").strip()
        command = sub.add_parser(name, help=doc.splitlines()[0] if doc else None,
                                 description=doc, parents=[common], epilog=SPELLINGS,
                                 usage=getattr(module, "USAGE", None))
        module.add_arguments(command)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] not in commands:
        args = parser.parse_args(argv)  # --help, a missing or unknown command: argparse's word
        argv = argv[argv.index(args.command):]
    # The command's own parser reads its words: flags anywhere, arguments in order around
    # them (intermixed), so that `export --model_path M OUT --to hf` finds OUT.
    command, words = commands[argv[0]], argv[1:]
    args, unknown = command.parse_known_intermixed_args(words)
    args.command = argv[0]
    if unknown:
        command.error(f"unrecognized arguments: {' '.join(unknown)}")
    args.given = given_flags(command, words)
    try:
        with blas_threads(args.threads), warnings_as_lines(args.command):
            return COMMANDS[args.command].run(args)
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly, as `cat` does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush
        return 0
    # WeightsError is a ValueError; an ImportError names a missing optional dependency
    # (torch, safetensors) and how to install it.
    except (UsageError, ValueError, OSError, ImportError) as e:
        message = str(e) if isinstance(e, UsageError) else as_flag(str(e), command)
        print(f"minillm {args.command}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130


# The library's names of the knobs whose flags are named otherwise.
FLAG_OF = {"stop_strings": "--stop", "stop_tokens": "--stop_ids", "k": "--draft_k"}


def as_flag(message: str, command) -> str:
    """The library names a knob as `top_k: ...`; on the command line it is `--top_k` (and
    `stop_strings: ...` is `--stop`'s: FLAG_OF)."""
    name = message.split(":", 1)[0]
    flags = {flag for action in command._actions for flag in action.option_strings}
    flag = FLAG_OF.get(name, f"--{name}")
    return flag + message[len(name):] if flag in flags else message


@contextlib.contextmanager
def warnings_as_lines(name: str):
    """Show the library's warnings as `minillm NAME: warning: ...` lines on stderr."""
    def show(message, category, filename, lineno, file=None, line=None):
        print(f"minillm {name}: warning: {message}", file=sys.stderr)

    with warnings.catch_warnings():
        warnings.showwarning = show
        yield
