"""What the commands share: the parser (both spellings of every flag, negative numbers as
values), the error type, the one loader of a model (by path or by fetched name:
files/registry.py knows the names), the prompt and the knobs as arguments, the writer of the
new text, the progress line of long work, and the thread setting of NumPy's BLAS.

Errors a user can cause become a UsageError (or a ValueError from the library): one line on
stderr and exit code 2.

The thread setting is `minillm.threads` (minillm/fast/blas.py), as in a Python program.
"""
from __future__ import annotations

import argparse
import copy
import math
import os
import re
import sys
from pathlib import Path

from ..fast.blas import threads
from ..files.registry import MODELS, fetched_path
from ..shipped import TARGET
from ..knobs import KNOBS
from ..stopping import find_stop, undecided_length

DEFAULT_MODEL = TARGET  # shipped inside the package (minillm/shipped/)


class UsageError(Exception):
    """A problem with the user's input, reported as one line and exit code 2."""


# -- the parser ----------------------------------------------------------------------------

class NegativeNumber:
    """argparse's test of whether a word of the command line is a negative number, a value
    rather than a flag. argparse's own knows -1 and -.5; this one every number float() reads,
    so that --presence_penalty -inf and --frequency_penalty -1e-3 reach their flag (and a bad
    value its flag's own error)."""

    @staticmethod
    def match(text: str) -> bool:
        if not text.startswith("-"):
            return False
        try:
            float(text)
        except ValueError:
            return False
        return True


def other_spelling(option: str) -> str | None:
    """The other spelling of a long flag: --top_p for --top-p, --no_browser for --no-browser;
    None for a short flag or a word without either."""
    if not option.startswith("--"):
        return None
    name = option[2:]
    other = name.replace("_", "-") if "_" in name else name.replace("-", "_")
    return None if other == name else "--" + other


def add_both_spellings(add_argument):
    """An add_argument that gives every long flag its other spelling as well (--max_new_tokens
    and --max-new-tokens), noted on the action as `other_spellings`, which --help leaves out."""
    def add(*names, **kwargs):
        others = [other for other in map(other_spelling, names)
                  if other is not None and other not in names]
        action = add_argument(*names, *others, **kwargs)
        action.other_spellings = tuple(others)
        return action
    return add


class Parser(argparse.ArgumentParser):
    """The parser of `minillm` and of each command. From argparse's it differs in three ways:

    - every long flag also parses in its other spelling, - for _ or _ for - (--top-p,
      --max-new-tokens, --model-path; --no_browser), added here as each flag is, in a group
      too; --help shows the first spelling;
    - a word that reads as a number (-1, -1e-3, -inf) is a value, never taken for a flag;
    - its own errors (an unknown flag, a value of the wrong type) are one line and exit code
      2, like every other error of the command, instead of the usage text.
    """

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = NegativeNumber  # argparse's: -1 and -.5 only

    def add_argument(self, *names, **kwargs):
        return add_both_spellings(super().add_argument)(*names, **kwargs)

    def add_argument_group(self, *args, **kwargs):
        group = super().add_argument_group(*args, **kwargs)
        group.add_argument = add_both_spellings(group.add_argument)
        return group

    def add_mutually_exclusive_group(self, **kwargs):
        group = super().add_mutually_exclusive_group(**kwargs)
        group.add_argument = add_both_spellings(group.add_argument)
        return group

    def _get_option_tuples(self, option_string):
        # An abbreviation (--max for --max_new_tokens) matches both spellings of one flag:
        # one flag, not an ambiguous choice between two.
        tuples, actions = [], set()
        for option in super()._get_option_tuples(option_string):
            if id(option[0]) not in actions:
                actions.add(id(option[0]))
                tuples.append(option)
        return tuples

    def error(self, message):
        for action in self._actions:  # argparse names a flag by all its strings: one spelling
            hidden = getattr(action, "other_spellings", ())
            if hidden:
                message = message.replace("/".join(action.option_strings), "/".join(
                    o for o in action.option_strings if o not in hidden))
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """--help as written (descriptions keep their lines), each flag under one spelling."""

    def _format_action_invocation(self, action):
        hidden = getattr(action, "other_spellings", ())
        if hidden:
            action = copy.copy(action)
            action.option_strings = [o for o in action.option_strings if o not in hidden]
        return super()._format_action_invocation(action)


SPELLINGS = ("Every flag may also be written with - in place of _ (--max-new-tokens for "
             "--max_new_tokens).")


def given_flags(parser, argv) -> dict:
    """{dest: the flag as typed} for the flags of `parser` that `argv` (the command's own
    words) gives, in either spelling, as --flag VALUE or --flag=VALUE, or abbreviated."""
    options = {option: action for action in parser._actions for option in action.option_strings}
    given = {}
    for word in argv:
        if word == "--":  # what follows is text, not flags
            break
        if not word.startswith("--"):
            continue
        typed = word.split("=", 1)[0]
        actions = {id(a): a for option, a in options.items() if option == typed} or {
            id(a): a for option, a in options.items() if option.startswith(typed)}
        if len(actions) == 1:
            given[next(iter(actions.values())).dest] = typed
    return given


def given(args, dest: str) -> str | None:
    """The flag of `dest` as the command line typed it, or None when it was not given."""
    return getattr(args, "given", {}).get(dest)


# -- the model: a path, or the name of a model `minillm fetch` knows (files/registry.py) -----

def model_file(path, flag="--model_path"):
    """The file `path` names: a .npz file (the path as given), or a fetched model's name (such
    as smollm2-135m-instruct), or None for the shipped default; a missing one is a one-line
    error naming `flag`."""
    if path is None:
        if not DEFAULT_MODEL.exists():
            raise UsageError(f"--model_path: the default model {DEFAULT_MODEL} is missing from "
                             "this checkout; give --model_path FILE")
        return DEFAULT_MODEL
    if str(path) in MODELS and not Path(path).exists():
        fetched = fetched_path(str(path))
        if not fetched.is_file():
            raise UsageError(f"{flag}: {path} is not fetched yet; run: minillm fetch {path}")
        return fetched
    if not Path(path).exists():
        raise UsageError(f"{flag}: no such file or fetched model: {path} (known names: "
                         f"{', '.join(sorted(MODELS))})")
    return path


LARGE_MODEL = 64 << 20  # bytes: a file this large shows its loading on a terminal


def load_model(path, flag="--model_path", int8=False, reference=False):
    """The one loader of every command: the model at `path` (see model_file).
    int8: quantize its linear weights on load (an already int8 file stays as it is).
    reference: the reference model (--reference), else the fast one unless MINILLM_FAST=0.
    A large file shows its loading on stderr when stderr is a terminal (ProgressLine).
    A file that is no minillm .npz (damaged, a GGUF file, a folder) is a one-line error naming
    `flag` and saying what the file is."""
    from ..files.npz import WeightsError, load, wants_fast

    file = model_file(path, flag)
    fast = False if reference else None
    with ProgressLine() as line:
        show = None
        if line.live and os.path.isfile(file) and os.path.getsize(file) >= LARGE_MODEL:
            name = Path(file).name
            after = ("laying out the weights for the fast path" if wants_fast(fast)
                     else "checking the weights")

            def show(done, total):
                if done < total:
                    line.count(f"loading {name}", done, total, "arrays")
                else:
                    line.show(f"[loading {name}: {after}]")
        try:  # a folder or a GGUF file: load's error says what it is and what to run
            model = load(file, fast=fast, progress=show)
        except WeightsError as error:
            raise UsageError(f"{flag}: {error}") from None
        if int8:
            from ..quantize import quantize

            line.show("[quantizing the linear weights to int8]")
            model = quantize(model)
    return model


# -- arguments: the prompt and the knobs --------------------------------------------------

def add_prompt_arguments(parser) -> None:
    parser.add_argument("text", nargs="?", default=None,
                        help="the prompt text (- reads it from standard input)")
    add_model_argument(parser, required=False)
    parser.add_argument("--prompt", default=None, help="the prompt text (needs a tokenizer)")
    parser.add_argument("--prompt_file", default=None, metavar="PATH",
                        help="read the prompt text from a UTF-8 file")
    parser.add_argument("--prompt_ids", default=None, metavar="IDS",
                        help="the prompt as comma-separated token ids, e.g. 1,2,3")


def add_model_argument(parser, required: bool, default="weights/target.npz, shipped") -> None:
    default = "" if required else f" (default: {default})"
    parser.add_argument("--model_path", default=None, required=required,
                        metavar="PATH_OR_NAME",
                        help=f"a minillm .npz model, or the name of a fetched one "
                             f"({', '.join(sorted(MODELS))}){default}")


def add_model_positional(parser, name: str, help: str, then: str | None = None,
                         then_help: str = "") -> None:
    """The model as a command's first argument (inspect, quantize, export) or, as every other
    command names it, --model_path; `then`: the argument that follows it (the output), the
    only argument left when --model_path is given. See model_and_output."""
    parser.add_argument(name, nargs="?", default=None,
                        help=f"{help}; or give it as --model_path")
    if then is not None:
        parser.add_argument(then, nargs="?", default=None, help=then_help)
    parser.add_argument("--model_path", dest="model_flag", default=None, metavar="PATH_OR_NAME",
                        help=f"the model, as every command takes it (in place of {name})")


def model_and_output(args, name: str, then: str | None = None):
    """(the model, the name to give in its errors, the output or None) of a command made by
    add_model_positional: from its arguments, or from --model_path and the one argument."""
    words = [w for w in (getattr(args, name), getattr(args, then) if then else None)
             if w is not None]
    flag = "--model_path"
    if args.model_flag is not None:
        model, label = args.model_flag, flag
        if len(words) > (1 if then else 0):
            raise UsageError(f"{flag}: the model is given twice ({args.model_flag} and "
                             f"{words[0]}); give it either as {name} or as {flag}")
    elif not words:
        raise UsageError(f"{name}: give the model, a .npz file or a fetched model's name (or "
                         "--model_path)")
    else:
        model, label = words.pop(0), name
    if then is None:
        return model, label, None
    if not words:
        raise UsageError(f"{then}: missing (after the model)")
    return model, label, words[0]


def add_knob_arguments(parser, generation=True) -> None:
    """The sampling knobs (and with generation=True, --max_new_tokens and --seed), their
    defaults and help read from minillm.knobs.KNOBS."""
    group = parser.add_argument_group("sampling knobs (applied in this order)")
    for name, kind, metavar in (("repetition_penalty", float, "R"),
                                ("frequency_penalty", float, "F"),
                                ("presence_penalty", float, "P"),
                                ("penalty_window", int, "N"), ("temperature", float, "T"),
                                ("top_k", int, "K"), ("top_p", float, "P"),
                                ("min_p", float, "P")):
        add_knob(group, name, kind, metavar)
    if generation:
        add_knob(parser, "max_new_tokens", int, "N")
        add_knob(parser, "seed", int, "S")


def add_knob(parser, name: str, kind, metavar: str) -> None:
    knob = KNOBS[name]
    shown = "unset" if knob.default is None else knob.default
    # A knob whose help offers None (off, or a fresh seed) takes it as typed: none or None.
    takes_none = name == "seed" or knob.off is not None
    extra = "; none or None: a fresh seed each run" if name == "seed" else ""
    parser.add_argument("--" + name, type=knob_value(name, kind, takes_none),
                        default=knob.default, metavar=metavar,
                        help=f"{knob.help} (default: {shown}{extra})")


def knob_value(name: str, kind, takes_none: bool):
    """The argparse type of a knob's flag: an int or a float (-1, -inf: any number float()
    reads), None for none or None where the knob takes it; the seed an integer >= 0. The
    range is the library's to check (minillm.knobs), finiteness knobs_of's."""
    def value(text: str):
        if takes_none and text.strip().lower() == "none":
            return None
        try:
            number = kind(text)
        except ValueError:
            number = None
        if number is None or (name == "seed" and number < 0):
            raise argparse.ArgumentTypeError(
                ("must be an integer >= 0, or none for a fresh seed each run"
                 if name == "seed" else f"must be {KNOBS[name].allowed}") + f", got {text!r}")
        return number
    value.__name__ = kind.__name__  # argparse names the type in some of its messages
    return value


def knobs_of(args) -> dict:
    """The knobs given on the command line, by name, as minillm.generate takes them; each
    checked here (a number that is not finite, a value out of range, --greedy against a
    --temperature), so that a command refuses a bad one before it loads its model."""
    from ..knobs import generation_config

    names = ("temperature", "top_k", "top_p", "min_p", "repetition_penalty", "frequency_penalty",
             "presence_penalty", "penalty_window", "max_new_tokens", "seed")
    knobs = {name: getattr(args, name) for name in names if hasattr(args, name)}
    for name, value in knobs.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise UsageError(f"{given(args, name) or '--' + name}: must be a finite number, "
                             f"got {value}")
    if getattr(args, "greedy", False):
        if given(args, "temperature") and args.temperature != 0:
            raise UsageError(f"--greedy: not with {given(args, 'temperature')} "
                             f"{args.temperature:g}; --greedy is --temperature 0, give one")
        knobs["temperature"] = 0.0
    generation_config(None, None, **knobs)  # a ValueError names the knob: main adds the --
    return knobs


def prompt_ids(args, model, chat: bool = False) -> list[int]:
    """The prompt as token ids, from exactly one of TEXT, --prompt and --prompt_ids.
    chat: the text is a user's message, rendered with the model's chat template (--chat)."""
    given = [name for name, value in (("TEXT", args.text), ("--prompt", args.prompt),
                                      ("--prompt_file", args.prompt_file),
                                      ("--prompt_ids", args.prompt_ids)) if value is not None]
    if len(given) != 1:
        raise UsageError("prompt: give exactly one of TEXT (- for standard input), --prompt "
                         f"TEXT, --prompt_file PATH or --prompt_ids 1,2,3 (got "
                         f"{', '.join(given) or 'none'})")
    if args.prompt_ids is not None:
        if chat:
            raise UsageError("--chat: not with --prompt_ids; give the message as text")
        ids = parse_ids(args.prompt_ids, "--prompt_ids")
    else:
        if model.tokenizer is None:
            raise UsageError(f"{given[0]}: this model has no tokenizer; give token ids with "
                             "--prompt_ids 1,2,3")
        if args.prompt_file is not None:
            text = read_text_file(args.prompt_file, "--prompt_file")
        elif args.text == "-":
            text = utf8(sys.stdin.buffer.read(), "TEXT: standard input")
        else:
            text = args.text if args.prompt is None else args.prompt
        if chat:
            ids = user_turn(model, text, args.model_path)
        else:
            ids = list(model.tokenizer.encode(text, add_special_tokens=True))  # BOS if asked
    if not ids:
        raise UsageError(f"{given[0]}: empty prompt")
    vocab = model.config.vocab_size
    bad = [i for i in ids if not 0 <= i < vocab]
    if bad:
        raise UsageError(f"{given[0]}: token id {bad[0]} is outside the vocabulary [0, {vocab})")
    return ids


def user_turn(model, text: str, name) -> list[int]:
    """The ids of a chat's first turn: `text` as the user's message, rendered with the model's
    chat template (its default system message, if any), the assistant's turn opened."""
    from ..text.chat_template import chat_prompt_ids

    if model.tokenizer.chat_template is None:
        raise UsageError(f"--chat: {name or DEFAULT_MODEL.name} has no chat template; it "
                         "continues text as it is (leave out --chat)")
    return chat_prompt_ids(model.tokenizer, [{"role": "user", "content": text}],
                           template_name=name)


def read_text_file(path, flag: str) -> str:
    """A UTF-8 text file's contents, or a one-line error naming the file."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"{flag}: {path} is a folder, not a text file")
    if not path.is_file():
        raise UsageError(f"{flag}: no such file: {path}")
    return utf8(path.read_bytes(), f"{flag}: {path}")


def check_folder_texts(src, tokenizer: bool = True) -> None:
    """A Hugging Face folder's text files (config.json; tokenizer.json and its config, unless
    tokenizer=False; a shard index) are UTF-8, or a one-line error names the file: the
    converter's own decode error would not. Anything but a folder passes."""
    if not Path(src).is_dir():
        return
    names = ["config.json", "model.safetensors.index.json", "pytorch_model.bin.index.json"]
    if tokenizer:
        names += ["tokenizer.json", "tokenizer_config.json", "chat_template.jinja"]
    for name in names:
        path = Path(src) / name
        if path.is_file():
            utf8(path.read_bytes(), str(path))


def utf8(data: bytes, where: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(f"{where} is not UTF-8 text (byte 0x{data[e.start]:02x} at offset "
                         f"{e.start}); save it as UTF-8") from None


def parse_ids(text: str, flag: str) -> list[int]:
    items = [item for item in text.replace(",", " ").split()]
    try:
        return [int(item) for item in items]
    except ValueError:
        raise UsageError(f"{flag}: expected comma-separated integers, got {text!r}") from None


ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}
ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|.?)", re.DOTALL)  # a backslash and what follows


def escaped(text: str) -> str:
    """A text as typed on the command line, its escapes decoded: \\n, \\t, \\r, \\\\ and
    \\uXXXX (a shell passes "\\n" as a backslash and an n). An argparse type: any other
    escape is the argument's error."""
    def decode(match):
        code = match.group(1)
        if code in ESCAPES:
            return ESCAPES[code]
        if len(code) == 5:  # uXXXX
            return chr(int(code[1:], 16))
        raise argparse.ArgumentTypeError(
            f"unknown escape \\{code} in \"{text}\"; known: \\n \\t \\r \\\\ \\uXXXX (a "
            "backslash itself is \\\\)")
    return ESCAPE.sub(decode, text)


def stop_text(text: str) -> str:
    """--stop's type: the text as typed, its escapes decoded; never empty (an empty text
    would stop before the first token)."""
    text = escaped(text)
    if not text:
        raise argparse.ArgumentTypeError("empty text; a stop text needs at least one character")
    return text


def add_stop_argument(parser) -> None:
    parser.add_argument("--stop", action="append", default=[], metavar="TEXT", type=stop_text,
                        help="end when the new text contains TEXT, and print the text before "
                             "it (repeatable; \\n, \\t, \\r, \\\\ and \\uXXXX are decoded; "
                             "needs a tokenizer)")


# -- structured output: the text of a language (minillm.constrain) ---------------------------

def add_constraint_arguments(parser) -> None:
    """--json_schema FILE, --regex PATTERN, --choice TEXT (repeated): one of them."""
    group = parser.add_argument_group(
        "structured output (one of these; the new text is a whole text of the language)")
    one = group.add_mutually_exclusive_group()
    one.add_argument = add_both_spellings(one.add_argument)  # a group's group: argparse's own
    one.add_argument("--json_schema", default=None, metavar="FILE",
                     help="the text is JSON valid under the JSON Schema in FILE "
                          "(docs/CONSTRAINED.md says which keywords are read)")
    one.add_argument("--regex", default=None, metavar="PATTERN",
                     help="the text matches PATTERN, a regular expression, as a whole")
    one.add_argument("--choice", action="append", default=None, metavar="TEXT", type=escaped,
                     help="the text is one of the TEXTs (repeat for each option; \\n, \\t, "
                          "\\r, \\\\ and \\uXXXX are decoded)")


def constraint_spec(args):
    """(flag, what to build) of the structured-output flag given, or None; a file that cannot
    be read, is not JSON or holds a schema with a keyword not read is a one-line error now,
    before the model's load."""
    import json

    from ..constrain.pattern import parse
    from ..constrain.schema import schema_regex

    if getattr(args, "json_schema", None) is not None:
        flag = given(args, "json_schema") or "--json_schema"
        text = read_text_file(args.json_schema, flag)
        try:
            schema = json.loads(text)
        except ValueError as e:
            raise UsageError(f"{flag}: {args.json_schema} is not JSON: {e}") from None
        return flag, checked(lambda: parse(schema_regex(schema)), f"{flag}: "
                                                                   f"{args.json_schema}")
    if getattr(args, "regex", None) is not None:
        flag = given(args, "regex") or "--regex"
        return flag, checked(lambda: parse(args.regex), flag)
    if getattr(args, "choice", None):
        return given(args, "choice") or "--choice", list(args.choice)
    return None


def checked(make, where: str):
    """make(), a ValueError of minillm.constrain as a one-line error starting with `where`."""
    try:
        return make()
    except ValueError as e:
        raise UsageError(f"{where}: {e}") from None
    except RecursionError:
        raise UsageError(f"{where}: nested too deeply") from None


def constraint_of(spec, tokenizer):
    """The Constraint of constraint_spec's (flag, tree or options) over the model's
    tokenizer, or None without one."""
    from ..constrain.constraint import choice, compiled

    if spec is None:
        return None
    flag, what = spec
    if tokenizer is None:
        raise UsageError(f"{flag}: this model has no tokenizer to spell the text with")
    if isinstance(what, list):
        return checked(lambda: choice(what, tokenizer), flag)
    return checked(lambda: compiled(what, tokenizer, flag), flag)


def stop_tokens(text, model) -> list[int]:
    """--stop_ids, or by default every end token the tokenizer names (<|im_end|> for a chat
    model)."""
    if text is None:
        return [] if model.tokenizer is None else list(model.tokenizer.eos_token_ids)
    return parse_ids(text, "--stop_ids")


# -- printing the new text --------------------------------------------------------------

def text_writer(tokenizer, out, stop_strings=(), hidden=(), special=False):
    """write(ids) prints tokens as they come: text through the tokenizer's incremental
    decoder (never half a UTF-8 character), or the ids themselves when there is none.

    The new text (new=True) is printed up to the first stop string, never into it: its end,
    while it may still grow into a stop string, waits for the next token. New tokens in
    `hidden` (the end tokens, such as <|im_end|>) are not printed, and neither is any special
    token (control tokens such as <bos>, <|im_start|>), prompt or new, unless `special`: as
    llama.cpp prints text, and as transformers decodes it with skip_special_tokens.
    """
    decoder = None if tokenizer is None else tokenizer.stream_decoder(
        skip_special_tokens=not special)
    known = 0 if tokenizer is None else len(tokenizer)  # a model may have spare ids beyond
    pending = ""  # new text not printed yet
    stopped = False

    def write(ids, end=False, new=True):
        if new and hidden:
            ids = [i for i in ids if i not in hidden]
        if decoder is None:
            out.write("".join(f"{i} " for i in ids))
        else:
            text = "".join(decoder.push(i) if i < known else f"<{i}>" for i in ids) \
                + (decoder.flush() if end else "")
            if new and stop_strings:
                text = printable(text, end)
            out.write(text)
        out.flush()

    def printable(text, end):
        nonlocal pending, stopped
        if stopped:
            return ""
        pending += text
        cut = find_stop(pending, stop_strings)
        if cut is not None:
            stopped = True
            return pending[:cut]
        ready = len(pending) - (0 if end else undecided_length(pending, stop_strings))
        text, pending = pending[:ready], pending[ready:]
        return text

    return write


# -- the progress of long work -------------------------------------------------------------

def is_terminal(stream) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class ProgressLine:
    """The progress of long work as one line on stderr, redrawn in place and wiped when the
    work ends; nothing at all when stderr is not a terminal (piped, a file, a log), where a
    redrawn line would only be noise. `stream`: stderr unless given (a test's fake terminal).

        with ProgressLine() as line:
            line.count("joining m.gguf", done, total, "bytes")   # [joining m.gguf 3.0 / 9.4 MB]
            line.show("[loading m.npz: checking the weights]")
    """

    def __init__(self, stream=None):
        self.stream = sys.stderr if stream is None else stream
        self.live = is_terminal(self.stream)
        self.width = 0  # of the line on the screen

    def show(self, text: str) -> None:
        if not self.live:
            return
        self.stream.write("\r" + text.ljust(self.width))
        self.stream.flush()
        self.width = max(self.width, len(text))

    def count(self, what: str, done: int, total: int, unit: str) -> None:
        """`[what done / total unit]`, bytes in MB (kB below a MB); wiped once done reaches
        total."""
        if done >= total:
            return self.wipe()
        if unit == "bytes":
            scale, unit = (1e6, "MB") if total >= 1e6 else (1e3, "kB")
            self.show(f"[{what} {done / scale:,.1f} / {total / scale:,.1f} {unit}]")
        else:
            self.show(f"[{what} {done:,} / {total:,} {unit}]")

    def wipe(self) -> None:
        if self.live and self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
            self.width = 0

    def __enter__(self):
        """While open as a context, a line written to sys.stderr otherwise (what is being
        done, a warning) wipes the progress line first, rather than running into it."""
        self.replaced = None
        if self.live and self.stream is sys.stderr:
            self.replaced = sys.stderr
            sys.stderr = WipingFirst(self.stream, self)
        return self

    def __exit__(self, *exc):
        if self.replaced is not None:
            sys.stderr = self.replaced
        self.wipe()


class WipingFirst:
    """A stream whose writes wipe a progress line first (ProgressLine's context)."""

    def __init__(self, stream, line: ProgressLine):
        self.stream, self.line = stream, line

    def write(self, text: str):
        if text:
            self.line.wipe()
        return self.stream.write(text)

    def __getattr__(self, name):  # flush, fileno, isatty, ...: the stream's own
        return getattr(self.stream, name)


# -- the thread setting (minillm/fast/blas.py) ------------------------------------------------

def blas_threads(n: int):
    """A context manager running the command with NumPy's BLAS on n threads (--threads)."""
    if n < 1:
        raise UsageError(f"--threads: must be at least 1, got {n}")
    return threads(n)
