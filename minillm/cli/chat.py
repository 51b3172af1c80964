"""Chat through the model's chat template or one given (any, with jinja2; ChatML without).

    minillm fetch smollm2-135m-instruct
    minillm chat                                        # the fetched chat model
    minillm chat --model_path smollm2-135m-instruct     # a fetched model, by name or path
    minillm chat --model_path M.npz --system "You are terse." --temperature 0.2
    minillm chat --model_path gemma3-270m --template chat_template.jinja   # a file without one
    minillm chat --json_schema person.json             # every reply JSON valid under a schema

Without --model_path the chat runs the fetched chat model (smollm2-135m-instruct), saying so
on stderr; with none fetched it says how to fetch one. The shipped model does not chat.

Type a message and press Enter; an empty line, end of input (Ctrl-D) or Ctrl-C at the prompt
ends the chat. Ctrl-C during a reply stops it and returns to the prompt: the reply so far is
kept as the model's turn, as llama.cpp's CLI keeps it, and so is the cache that holds it (the
next turn reads only what is new). Each turn renders the whole conversation with the model's
template, keeps the part of the KV cache that the new prompt still begins with, reads only the
rest, and streams the reply until an end token (the tokenizer's eos_token_ids: where the model
file's own runtime stops, or EOS, and every end-of-turn token the template writes:
<|im_end|>, <|eot_id|>, <end_of_turn>, ...), a --stop text (not printed, and not kept in the
conversation) or --max_new_tokens, which the summary on stderr then names: the reply was cut.
The prompt starts with BOS when the tokenizer asks.

The knobs start from minillm.knobs.CHAT_DEFAULTS, not from the model's own distribution that
`minillm generate` samples: llama.cpp's chain, what chat users expect (temperature 0.8, top-k
40, top-p 0.95, min-p 0.05), ollama's repetition penalty 1.1 against replies that loop, and
replies of up to 512 tokens (bench/studies/chat_endings.py measured both); --temperature 0 is
greedy, and --top_k 0, --top_p 1, --min_p 0 or --repetition_penalty 1 turns one off.

With --json_schema FILE, --regex PATTERN or --choice TEXT (repeated) every reply is a whole
text of that language (minillm.constrain), ended by an end token once it is whole.

A model whose file carries no chat template (Gemma 3 270M, a base model, is one) chats only
with --template FILE, a Jinja chat template such as the instruction-tuned model's: it takes the
place of the model's own, and its end-of-turn tokens stop the replies.
"""
from __future__ import annotations

import sys
import time

from ..knobs import CHAT_DEFAULTS, KNOBS
from .common import (UsageError, add_constraint_arguments, add_knob_arguments,
                     add_model_argument, add_stop_argument, constraint_of, constraint_spec,
                     knobs_of, load_model, text_writer)


def add_arguments(parser) -> None:
    add_model_argument(parser, required=False, default="a fetched chat model, "
                                                       "smollm2-135m-instruct")
    parser.add_argument("--system", default=None, metavar="TEXT",
                        help="a system message (default: the template's own, if it has one)")
    parser.add_argument("--template", default=None, metavar="FILE",
                        help="a Jinja chat template (UTF-8 text) to use instead of the model's "
                             "own, e.g. for a model whose file has none")
    add_knob_arguments(parser)  # --max_new_tokens: the longest reply
    use_chat_defaults(parser)
    add_stop_argument(parser)
    add_constraint_arguments(parser)
    parser.add_argument("--int8", action="store_true",
                        help="quantize the linear weights to int8 on load")


def use_chat_defaults(parser) -> None:
    """The knob flags start from CHAT_DEFAULTS (llama.cpp's chain, a repetition penalty, a
    longer reply), each help saying so."""
    parser.set_defaults(**CHAT_DEFAULTS)
    for action in parser._actions:
        if action.dest in CHAT_DEFAULTS:
            knob = KNOBS[action.dest]
            library = "unset" if knob.default is None else knob.default
            action.help = (f"{knob.help} (default: {CHAT_DEFAULTS[action.dest]}, the chat's; "
                           f"minillm generate's: {library})")


def run(args) -> int:
    import numpy as np

    from ..text.chat_template import chat_prompt_ids
    from ..conversation import Conversation, common_prefix_length, respond
    from ..knobs import generation_config
    from ..stopping import cut_at_stop

    # The template file is read first: a bad path is told before the model's slow load.
    template = None if args.template is None else read_template(args.template)
    spec = constraint_spec(args)  # and so is a schema file that cannot be read
    path = args.model_path if args.model_path is not None else fetched_chat_model()
    model = load_model(path, int8=args.int8, reference=args.reference)
    tokenizer = model.tokenizer
    if tokenizer is None:
        raise UsageError("--model_path: this model has no tokenizer, so it cannot chat")
    if template is not None:
        tokenizer = tokenizer.with_chat_template(template)
    elif tokenizer.chat_template is None:
        raise UsageError(f"--model_path: {path} has no chat template in its "
                         "tokenizer; give one with --template FILE (a Jinja chat template)")
    stops = list(tokenizer.eos_token_ids)
    constrained = {} if spec is None else {"constraint": constraint_of(spec, tokenizer)}
    config = generation_config(None, model, **knobs_of(args), stop_tokens=stops,
                               stop_strings=args.stop)
    messages = [] if args.system is None else [{"role": "system", "content": args.system}]
    # The template, the model's own or --template's, is named in any error rendering it.
    name = args.template if template is not None else path
    chat_prompt_ids(tokenizer, messages + [{"role": "user", "content": ""}],
                    template_name=name)  # a template that cannot render is told before a turn
    conversation = Conversation(model)
    rng = np.random.default_rng(config.seed)
    interactive = sys.stdin.isatty()
    if interactive:
        print("[an empty line or Ctrl-D ends the chat; Ctrl-C stops a reply]", file=sys.stderr)
    while True:
        if interactive:
            print("> ", end="", file=sys.stderr, flush=True)
        line = sys.stdin.readline()  # Ctrl-C here leaves (main prints a newline, exit 130)
        if not line.strip():
            return 0
        messages.append({"role": "user", "content": line.rstrip("\n")})
        prompt = chat_prompt_ids(tokenizer, messages, template_name=name)
        reused = common_prefix_length(conversation.cached, prompt)
        started, reply = time.perf_counter(), []
        write = text_writer(tokenizer, sys.stdout, args.stop, hidden=stops)
        tokens = respond(conversation, prompt, config, rng, **constrained)
        try:
            for token in tokens:
                reply.append(token)
                write([token])
            stopped = ""
        except KeyboardInterrupt:  # Ctrl-C stops this reply; another one, at the prompt, leaves
            # The reply so far stays the model's turn, and the cache holding it stays too
            # (respond keeps, of a step cut midway, only what the cache holds).
            tokens.close()
            stopped = "reply stopped; "
        write([], end=True)
        sys.stdout.write("\n")
        sys.stdout.flush()
        seconds = time.perf_counter() - started
        whole = tokenizer.decode([t for t in reply if t not in stops])
        text = cut_at_stop(whole, args.stop)
        messages.append({"role": "assistant", "content": text})
        cut = (not stopped and len(reply) == config.max_new_tokens and reply[-1] not in stops
               and text == whole)  # neither an end token nor a --stop text ended it
        print(f"[{stopped}{len(prompt)} prompt tokens, {reused} reused from the "
              f"cache; {len(reply)} new tokens, "
              f"{'cut at --max_new_tokens, ' if cut else ''}{len(reply) / seconds:.1f} "
              "tokens/s]", file=sys.stderr)


def fetched_chat_model() -> str:
    """The model to chat with when none is given: the fetched chat model (files/registry.py),
    named on stderr; with none fetched, a one-line error saying how to fetch one."""
    from ..files.registry import MODELS, fetched_chat_model as found

    chosen = found()
    if chosen is None:
        name = next(name for name, source in MODELS.items() if source.chats)
        raise UsageError(f"--model_path: no chat model given, and none fetched yet; fetch one "
                         f"with: minillm fetch {name} (a {MODELS[name].size / 1e6:.0f} MB "
                         f"download, converted in seconds to a "
                         f"{MODELS[name].npz_size / 1e6:.0f} MB file), "
                         "or give --model_path (the shipped model does not chat)")
    name, path = chosen
    print(f"minillm chat: {name} ({path}; --model_path chooses another)", file=sys.stderr)
    return str(path)


def read_template(path) -> str:
    """The text of a chat template file; a missing or unreadable file is a one-line error."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as error:
        raise UsageError(f"--template: cannot read {path}: {error.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"--template: {path} is not UTF-8 text") from None
