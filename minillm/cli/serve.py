"""Serve a model over HTTP with OpenAI's API (completions, chat completions, streaming).

    pip install -e ".[serve]"                          # Starlette and uvicorn
    minillm serve                                      # the shipped model, http://127.0.0.1:8000
    minillm serve --model_path smollm2-135m-instruct --port 8001
    curl http://127.0.0.1:8000/v1/completions -H "Content-Type: application/json" \\
         -d '{"model": "target", "prompt": "In the beginning", "max_tokens": 20}'

Every request goes through one serving engine (continuous batching over a paged KV cache):
requests that arrive together are computed together, each as if alone. The model is named as
it was given (a fetched model's name, else its file's name without .npz; --name to choose);
OpenAI's clients work with base_url http://127.0.0.1:8000/v1. Replies end at the model's end
tokens; --template gives a chat template to a model whose file has none.

The server listens on 127.0.0.1 only unless --host says otherwise, and asks for no key: on
another address, anyone who reaches it can use it. Stop it with Ctrl-C. Endpoints, fields,
bounds and errors: docs/SERVE.md.
"""
from __future__ import annotations

import socket
import sys
from pathlib import Path

from ..plumbing.optional import require
from .common import UsageError, add_model_argument, load_model

MAX_WAITING, READ_TIMEOUT = 128, 30  # minillm.serve's defaults (not imported: no web stack)

def add_arguments(parser) -> None:
    add_model_argument(parser, required=False)
    parser.add_argument("--host", default="127.0.0.1",
                        help="the address to listen on (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=8000,
                        help="the port (default 8000; 0: any free port)")
    parser.add_argument("--name", default=None,
                        help="the model's name in the API (default: the fetched model's name, "
                             "or the file's name without .npz)")
    parser.add_argument("--template", default=None, metavar="FILE",
                        help="a Jinja chat template (UTF-8 text) for /v1/chat/completions, in "
                             "place of the model's own")
    parser.add_argument("--max_batch_tokens", type=int, default=512, metavar="N",
                        help="the engine's budget of tokens computed in one step (default 512)")
    parser.add_argument("--max_prefill_tokens", type=int, default=None, metavar="N",
                        help="of those, the prompt tokens a step reads beside decoding rows, so "
                             "that no stream waits long for its next token (default 128: "
                             "docs/SERVE.md measures the choice)")
    parser.add_argument("--logprobs_mode", choices=("processed_logprobs", "raw_logprobs"),
                        default="processed_logprobs",
                        help="logprobs of the distribution drawn from (default), or of the "
                             "model's own logits (raw_logprobs: at temperature 0 too)")
    parser.add_argument("--max_waiting", type=int, default=MAX_WAITING, metavar="N",
                        help="engine requests (a request's n choices count n) that may wait "
                             f"to run; past them a 429 with Retry-After (default {MAX_WAITING})")
    parser.add_argument("--read_timeout", type=float, default=READ_TIMEOUT, metavar="S",
                        help="seconds a request's body may take to arrive, else a 408 and the "
                             f"connection closed (default {READ_TIMEOUT})")
    parser.add_argument("--int8", action="store_true",
                        help="quantize the linear weights to int8 on load")


def run(args) -> int:
    from .chat import read_template

    for module in ("starlette", "uvicorn"):  # before the model's load: one line, the install
        require(module, "serve", "minillm serve")
    from ..serve import serve, service_for
    from ..serve.server import LOOPBACK

    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port: must be in [0, 65535], got {args.port}")
    for flag in ("max_batch_tokens", "max_waiting", "max_prefill_tokens"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            raise UsageError(f"--{flag}: must be at least 1, got {getattr(args, flag)}")
    if not 0 < args.read_timeout < float("inf"):
        raise UsageError(f"--read_timeout: must be a number of seconds > 0, got "
                         f"{args.read_timeout}")
    port = free_port(args.host, args.port)
    template = None if args.template is None else read_template(args.template)
    model = load_model(args.model_path, int8=args.int8, reference=args.reference)
    if model.tokenizer is None:
        raise UsageError("--model_path: the server needs a model with a tokenizer")
    chat = None if template is None else model.tokenizer.with_chat_template(template)
    name = args.name or model_name(args.model_path)
    engine = {"max_batch_tokens": args.max_batch_tokens}
    if args.max_prefill_tokens is not None:
        engine["max_prefill_tokens"] = args.max_prefill_tokens
    service = service_for(model, name, chat, args.max_waiting, args.logprobs_mode, **engine)
    if args.host not in LOOPBACK:
        print(f"minillm serve: warning: listening on {args.host}: anyone who can reach this "
              "machine there can use the model (no key is asked)", file=sys.stderr)
    print(f"minillm serve: {name} at http://{args.host}:{port}/v1 (Ctrl-C stops it)",
          file=sys.stderr, flush=True)
    serve(service, args.host, port, args.read_timeout)
    return 0


def model_name(path) -> str:
    """A fetched model's name as given, else the file's name without .npz."""
    from .common import DEFAULT_MODEL

    if path is None:
        return Path(DEFAULT_MODEL).stem
    return str(path) if not Path(path).exists() else Path(path).stem


def free_port(host: str, port: int) -> int:
    """The port to listen on (port 0: one free now), or a one-line error before the model's
    load if the address cannot be listened on."""
    try:
        with socket.create_server((host, port)) as s:
            return s.getsockname()[1]
    except OSError as e:
        raise UsageError(f"--port: cannot listen on {host}:{port} ({e.strerror}); try "
                         "another, or 0 for any free port") from None
