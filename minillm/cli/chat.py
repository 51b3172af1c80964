"""Chat with a model whose tokenizer carries a chat template (any, with jinja2; ChatML without).

    minillm fetch smollm2-135m-instruct
    minillm chat --model_path smollm2-135m-instruct     # a fetched model, by name or path
    minillm chat --model_path M.npz --system "You are terse." --temperature 0.2

Type a message and press Enter; an empty line or end of input (Ctrl-D) ends the chat. Each
turn renders the whole conversation with the model's template, keeps the part of the KV cache
that the new prompt still begins with, reads only the rest, and streams the reply until an end
token (EOS and every end-of-turn token the template writes: <|im_end|>, <|eot_id|>,
<end_of_turn>, ...) or --max_new_tokens. The prompt starts with BOS when the tokenizer asks.
"""
from __future__ import annotations

import sys
import time

from .common import UsageError, add_knob_arguments, add_model_argument, knobs_of, load_model


def add_arguments(parser) -> None:
    add_model_argument(parser, required=True)
    parser.add_argument("--system", default=None, metavar="TEXT",
                        help="a system message (default: the template's own, if it has one)")
    add_knob_arguments(parser)  # --max_new_tokens: the longest reply
    parser.add_argument("--int8", action="store_true",
                        help="quantize the linear weights to int8 on load")


def run(args) -> int:
    import numpy as np

    from ..chat import chat_prompt_ids
    from ..conversation import Conversation, common_prefix_length, respond
    from ..request import generation_config

    model = load_model(args.model_path, int8=args.int8)
    tokenizer = model.tokenizer
    if tokenizer is None:
        raise UsageError("--model_path: this model has no tokenizer, so it cannot chat")
    stops = list(tokenizer.eos_token_ids)
    config = generation_config(None, model, **knobs_of(args), stop_tokens=stops)
    messages = [] if args.system is None else [{"role": "system", "content": args.system}]
    chat_prompt_ids(tokenizer, messages + [{"role": "user", "content": ""}])  # template check
    conversation = Conversation(model)
    rng = np.random.default_rng(config.seed)
    interactive = sys.stdin.isatty()
    while True:
        if interactive:
            print("> ", end="", file=sys.stderr, flush=True)
        line = sys.stdin.readline()
        if not line.strip():
            return 0
        messages.append({"role": "user", "content": line.rstrip("\n")})
        prompt = chat_prompt_ids(tokenizer, messages)
        reused = common_prefix_length(conversation.cached, prompt)
        started, reply = time.perf_counter(), []
        decoder = tokenizer.stream_decoder(skip_special_tokens=True)
        for token in respond(conversation, prompt, config, rng):
            reply.append(token)
            if token not in stops:
                sys.stdout.write(decoder.push(token))
                sys.stdout.flush()
        sys.stdout.write(decoder.flush() + "\n")
        sys.stdout.flush()
        seconds = time.perf_counter() - started
        new = [t for t in reply if t not in stops]
        messages.append({"role": "assistant", "content": tokenizer.decode(new)})
        print(f"[{len(prompt)} prompt tokens, {reused} reused from the "
              f"cache; {len(reply)} new tokens, {len(reply) / seconds:.1f} tokens/s]",
              file=sys.stderr)
