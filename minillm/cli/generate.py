"""Generate text from a prompt, streaming the tokens as they come.

    minillm generate "Once upon a time"                       # the shipped model
    minillm generate --model_path M.npz --prompt "..." --top_k 0 --min_p 0.05
    minillm generate --model_path M.npz --prompt_ids 1,2,3 --greedy --max_new_tokens 50
    minillm generate --model_path M.npz --int8 "Once upon a time"
    minillm generate --model_path M.npz --draft_model D.npz --draft_k 4 "Once upon a time"
    minillm generate --model_path M.npz --draft ngram "Once upon a time"
    minillm generate "In the beginning" --stop "." --stop "\\n\\n"     # end at either text
    minillm generate "In the beginning" --logprobs --max_new_tokens 10
    minillm generate --model_path smollm2-135m-instruct --chat "What is the capital of France?"
    minillm generate "The answer is" --choice yes --choice no        # one of the texts
    minillm generate "In the year" --regex "[0-9]{4}"                # a text the pattern matches
    minillm generate --chat "A person" --json_schema person.json      # JSON valid under a schema

The text goes to stdout; a one-line summary goes to stderr: how long the prompt took to read
(prefill) and the new tokens after the first (decode), each with its tokens/s. Generation
ends at an end token of the tokenizer (or the --stop_ids given), or when the new text contains
a --stop text, which is not printed. Special tokens (<bos>, <|im_end|>, ...) are not printed
either, unless --show_special. With --json_schema, --regex or --choice the new text is a whole
text of that language (minillm.constrain: each token masked to those that keep it one), and it
ends with an end token once it is whole, or at --max_new_tokens (the summary then says it was
cut: the text is not whole). On a terminal, a long read (a prompt of more than
window.READ_CHUNK tokens, the window's kept half after a slide) shows its progress on stderr.

The prompt is text to continue, as it stands. A chat model (a file with a chat template) reads
it so too, and often ends its turn at once: a note on stderr then says so. --chat reads the
prompt as a user's message instead, through the model's chat template (the first turn of
`minillm chat`), and prints the reply alone, drawn from the chat's knobs (knobs.CHAT_DEFAULTS:
temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, repetition penalty 1.1, up to 512 tokens)
for those not given.

--logprobs prints a table instead of the text, one token a line, tab-separated:
    kind       prompt or new
    token      the token id
    logprob    ln p(token) under the distribution it was drawn from, every knob applied
               (- for a prompt token, which was not drawn)
    raw        ln p(token) under the model's own softmax at temperature 1 (- for the
               first token of the prompt: nothing precedes it)
    text       the token's text as a JSON string (- without a tokenizer)
"""
from __future__ import annotations

import json
import sys
import time

from ..knobs import CHAT_DEFAULTS, KNOBS
from .common import (ProgressLine, UsageError, add_constraint_arguments, add_knob_arguments,
                     add_prompt_arguments, add_stop_argument, constraint_of, constraint_spec,
                     given, knobs_of, load_model, prompt_ids, stop_tokens, text_writer)


def add_arguments(parser) -> None:
    add_prompt_arguments(parser)
    add_knob_arguments(parser)
    parser.add_argument("--greedy", action="store_true",
                        help="always take the most likely token (same as --temperature 0)")
    parser.add_argument("--int8", action="store_true",
                        help="quantize the linear weights to int8 on load (one scale per row); "
                             "an already int8 file runs as it is")
    speculative = parser.add_argument_group("speculative decoding (same output distribution)")
    speculative.add_argument("--draft_model", default=None, metavar="PATH",
                             help="a smaller model sharing the tokenizer guesses the next tokens")
    speculative.add_argument("--draft", choices=["ngram"], default=None,
                             help="guess by prompt lookup: continue the latest earlier "
                                  "occurrence of the last tokens")
    speculative.add_argument("--draft_k", type=int, default=None, metavar="K",
                             help=f"{KNOBS['k'].help} (default {KNOBS['k'].default})")
    parser.add_argument("--no_cache", action="store_true",
                        help="recompute the whole window every step (slow, same tokens)")
    add_stop_argument(parser)
    parser.add_argument("--stop_ids", default=None, metavar="IDS",
                        help="comma-separated token ids that end the text, e.g. 0,2 "
                             "(default: the tokenizer's end tokens, if any)")
    parser.add_argument("--show_special", action="store_true",
                        help="print every special token, the prompt's (such as <bos>) and the "
                             "new ones, the end token that ends the text (such as <|im_end|>) "
                             "included; by default none is printed")
    parser.add_argument("--chat", action="store_true",
                        help="read the prompt as a user's message through the model's chat "
                             "template (a chat model's first turn), print the reply alone, "
                             "and sample from minillm chat's knobs unless given")
    add_constraint_arguments(parser)
    parser.add_argument("--logprobs", action="store_true",
                        help="print a table of every token's log-probability instead of the "
                             "text (layout above)")
    parser.add_argument("--explain", action="store_true",
                        help="mark every new token by its surprise, its rank among the "
                             "candidates and whether it repeats an earlier 4-token phrase "
                             "(colours on a terminal, [text|surprise|rank|R] when piped)")
    parser.add_argument("--plot", default=None, metavar="FILE.png",
                        help="draw each new token's rank and surprise into FILE.png (needs "
                             "matplotlib; implies --explain)")


# -- the command ----------------------------------------------------------------------------

def check_flags(args) -> None:
    """Refuse, before any work, flags that contradict each other (one line naming both) and a
    --plot that could not be drawn; the knobs are knobs_of's to check."""
    def flag(dest, default):
        return given(args, dest) or default

    drafted = args.draft is not None or args.draft_model is not None
    drafting = flag("draft_model", "--draft_model") if args.draft_model is not None else \
        f"{flag('draft', '--draft')} {args.draft}"
    if args.draft is not None and args.draft_model is not None:
        raise UsageError(f"{flag('draft', '--draft')}: not with "
                         f"{flag('draft_model', '--draft_model')}; give one drafter")
    if args.draft_k is not None and not drafted:
        raise UsageError(f"{flag('draft_k', '--draft_k')}: guesses need a drafter; give "
                         "--draft_model PATH or --draft ngram")
    if args.draft_k is not None and args.draft_k < 1:
        raise UsageError(f"{flag('draft_k', '--draft_k')}: must be at least 1, got "
                         f"{args.draft_k}")
    constrained = next((given(args, dest) or "--" + dest for dest in ("json_schema", "regex",
                                                                      "choice")
                        if getattr(args, dest)), None)
    if constrained and drafted:
        raise UsageError(f"{constrained}: not with {drafting}: speculative decoding here takes "
                         "no constraint")
    if args.no_cache and drafted:
        raise UsageError(f"{flag('no_cache', '--no_cache')}: not with {drafting}: "
                         "speculative decoding always uses the KV cache")
    explained = [flag(dest, "--" + dest) for dest in ("explain", "plot")
                 if getattr(args, dest)]
    if explained and args.logprobs:
        raise UsageError(f"{explained[0]}: not with {flag('logprobs', '--logprobs')}; one "
                         "prints the marked text, the other a table")
    if explained and drafted:
        raise UsageError(f"{explained[0]}: not with {drafting}: it marks plain decoding's "
                         "tokens")
    if args.plot is not None:
        check_plot(args.plot, flag("plot", "--plot"))


def check_plot(path, flag: str) -> None:
    """--plot's picture can be drawn: matplotlib is there, and so is the file's folder."""
    import os

    from ..plumbing.optional import install_hint

    try:
        import matplotlib  # noqa: F401 (study/explain.py draws with it)
    except ImportError:
        raise UsageError(f"{flag} needs matplotlib: pip install matplotlib (or "
                         f"{install_hint('bench')}, which brings it)") from None
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise UsageError(f"{flag}: no folder {os.path.dirname(path)} to write {path} into")


def drafter(args):
    """(draft, k) for speculative decoding (a Model or "ngram"), or (None, None) without
    (the flags checked by check_flags)."""
    draft = args.draft
    if args.draft_model is not None:
        draft = load_model(args.draft_model, "--draft_model", args.int8, args.reference)
    if draft is None:
        return None, None
    return draft, KNOBS["k"].default if args.draft_k is None else args.draft_k


def token_stream(model, prompt, args, stats=None):
    """The iterator of new tokens for these arguments: plain or speculative decoding."""
    from ..generate import stream
    from ..speculative import speculative_stream

    draft, k = drafter(args)
    if draft is not None:
        return speculative_stream(model, draft, prompt, k=k, stats=stats, **knobs_of(args),
                                  stop_tokens=stop_tokens(args.stop_ids, model),
                                  stop_strings=args.stop)
    return stream(model, prompt, use_cache=not args.no_cache, **knobs_of(args),
                  stop_tokens=stop_tokens(args.stop_ids, model), stop_strings=args.stop,
                  progress=reading_progress(), constraint=args.constraint)


def reading_progress(stream=None):
    """progress(done, total) for stream(progress=...): a long read (the prompt, the window's
    kept half after a slide) on one line of stderr, redrawn in place and wiped when it is
    done; a read of one chunk or less shows nothing. None when stderr is not a terminal."""
    from ..window import READ_CHUNK

    line = ProgressLine(stream)
    if not line.live:
        return None

    def show(done: int, total: int) -> None:
        if total > READ_CHUNK:
            line.count("reading", done, total, "tokens")
    return show


def run(args) -> int:
    check_flags(args)
    if args.chat:  # a reply, drawn as minillm chat draws one: from its knobs, unless given
        for name, value in CHAT_DEFAULTS.items():
            if not given(args, name):
                setattr(args, name, value)
    knobs_of(args)  # a bad knob is refused before the model's load
    spec = constraint_spec(args)  # and so is a schema file that cannot be read
    model = load_model(args.model_path, int8=args.int8, reference=args.reference)
    prompt = prompt_ids(args, model, chat=args.chat)
    args.constraint = constraint = constraint_of(spec, model.tokenizer)  # None: free text
    from ..speculative import SpeculativeStats

    if args.logprobs:
        return print_logprobs(model, prompt, args)
    if args.explain or args.plot:
        return print_explained(model, prompt, args)
    stats = SpeculativeStats()
    # The first token comes after the prompt is read (prefill); the others one step each.
    times, new = [time.perf_counter()], []
    tokens = token_stream(model, prompt, args, stats)  # checks every knob before any output
    hidden = () if args.show_special else stop_tokens(args.stop_ids, model)
    write = text_writer(model.tokenizer, sys.stdout, args.stop, hidden, args.show_special)
    if not args.chat:  # a continuation follows its prompt; a reply stands alone
        write(prompt, new=False)
    for token in tokens:
        times.append(time.perf_counter())
        new.append(token)
        write([token])
    write([], end=True)
    print(file=sys.stdout)
    read = min(len(prompt), model.config.context_length)  # a longer prompt: its last window
    line = summary(read, times, "no cache" if args.no_cache else "KV cache")
    if constraint is not None and len(new) == args.max_new_tokens \
            and new[-1] not in constraint.index.vocabulary.ends:
        line = line[:-1] + "; cut at --max_new_tokens: the text is not whole]"
    print(line, file=sys.stderr)
    hint = chat_hint(model, new, args)
    if hint:
        print(hint, file=sys.stderr)
    if stats.target_calls:
        print(f"[speculative: {stats.acceptance_rate:.0%} of {stats.guesses} guesses kept, "
              f"{stats.tokens_per_target_call:.2f} tokens per target pass, "
              f"{stats.target_calls} target passes, {stats.draft_calls} draft passes]",
              file=sys.stderr)
    return 0


EARLY_END = 4  # new tokens: a chat model's turn that ends within these, read as plain text


def chat_hint(model, new: list, args) -> str | None:
    """The note for a chat model given plain text (llama.cpp's CLI would chat with it): its
    text ended at once, within EARLY_END tokens, on an end token; None otherwise."""
    tokenizer = model.tokenizer
    if (args.chat or tokenizer is None or tokenizer.chat_template is None or not new
            or len(new) > EARLY_END or new[-1] not in stop_tokens(args.stop_ids, model)):
        return None
    name = args.model_path or "weights/target.npz"
    count = f"{len(new)} new token{'' if len(new) == 1 else 's'}"
    return (f"minillm generate: note: {name} is a chat model and ended its turn at once "
            f"({tokenizer.decode(new[-1:])} after {count}); --chat reads the prompt as a "
            f"user's message, and minillm chat --model_path {name} converses")


def summary(prompt: int, times: list, cache: str) -> str:
    """One line: the prompt's reading (prefill, until the first new token) and the decoding of
    the others, each with its own tokens/s; `times` holds the start and each token's arrival."""
    n = len(times) - 1
    if n == 0:
        return f"[no new tokens; prompt {prompt} tokens, {cache}]"
    prefill, decode = times[1] - times[0], times[-1] - times[1]
    line = (f"[prompt {prompt} tokens read in {prefill:.2f} s "
            f"({prompt / max(prefill, 1e-9):.1f} tokens/s); {n} new token{'' if n == 1 else 's'}")
    if n > 1:
        line += (f", the last {n - 1} in {decode:.2f} s "
                 f"({(n - 1) / max(decode, 1e-9):.1f} tokens/s)")
    return line + f", {cache}]"


def print_logprobs(model, prompt, args) -> int:
    """--logprobs: generate, then print every token with its log-probabilities (layout in the
    module's docstring)."""
    import numpy as np

    from ..generate import generate
    from ..logprobs import score_prompts
    from ..speculative import speculative_generate

    draft, k = drafter(args)
    knobs = dict(knobs_of(args), stop_tokens=stop_tokens(args.stop_ids, model),
                 stop_strings=args.stop)
    start = time.perf_counter()
    if draft is None:
        rollout = generate(model, prompt, use_cache=not args.no_cache, prompt_logprobs=True,
                           constraint=args.constraint, **knobs)
    else:  # scored under the target's distributions, as plain generation scores them
        rollout, _ = speculative_generate(model, draft, prompt, k=k, return_logprobs=True,
                                          **knobs)
        rollout.prompt_logprobs = score_prompts(model, [np.asarray(prompt)])[0]
    seconds = time.perf_counter() - start
    print("kind\ttoken\tlogprob\traw\ttext")
    for token, raw in zip(prompt, rollout.prompt_logprobs):
        print(f"prompt\t{token}\t-\t{number(raw)}\t{token_text(model.tokenizer, token)}")
    for token, drawn, raw in zip(rollout.new_tokens, rollout.logprobs, rollout.raw_logprobs):
        print(f"new\t{token}\t{number(drawn)}\t{number(raw)}\t"
              f"{token_text(model.tokenizer, token)}")
    n = len(rollout.logprobs)
    print(f"[{n} tokens in {seconds:.2f} s, prompt {len(prompt)} tokens; new tokens: "
          f"{sum(rollout.logprobs):.4f} nats as drawn, {sum(rollout.raw_logprobs):.4f} at "
          "temperature 1]", file=sys.stderr)
    return 0


def print_explained(model, prompt, args) -> int:
    """--explain, --plot: the text with every new token marked (minillm/study/explain.py)."""
    from ..study.explain import legend, write_explained

    colour = sys.stdout.isatty()
    print(legend(colour), file=sys.stderr)
    write_explained(sys.stdout, model, prompt, colour, args.plot,
                    **knobs_of(args), stop_tokens=stop_tokens(args.stop_ids, model), use_cache=not args.no_cache,
                    stop_strings=args.stop, constraint=args.constraint)
    return 0


def number(x) -> str:
    return "-" if x is None else f"{x:.6f}"


def token_text(tokenizer, token: int) -> str:
    """One token's text as a JSON string (escapes keep a table's columns), or "-"."""
    if tokenizer is None:
        return "-"
    text = tokenizer.decode([token]) if token < len(tokenizer) else f"<{token}>"
    return json.dumps(text, ensure_ascii=False)
