"""Open the teaching desk: a local web page whose widgets run the model as you move the knobs.

    minillm desk                                         # the shipped model, opens the browser
    minillm desk --model_path smollm2-135m-instruct      # a fetched model, by name
    minillm desk --model_path M.npz --port 8000 --no_browser

The model flag is --model_path, as in every command; --model, its older name here, still works.

The page and its server stay on this machine (127.0.0.1); nothing is fetched from the network.
Stop it with Ctrl-C.
"""
from __future__ import annotations

import sys
from pathlib import Path

from ..shipped import DRAFT
from .common import DEFAULT_MODEL, UsageError, add_model_argument, load_model

DEFAULT_DRAFT = DRAFT


def add_arguments(parser) -> None:
    add_model_argument(parser, required=False)
    parser.add_argument("--model", default=None, metavar="PATH_OR_NAME",
                        help="the same as --model_path (its older name here)")
    parser.add_argument("--draft_model", default=None, metavar="PATH",
                        help="a draft model for the speculative widget (default: the shipped "
                             "draft with the shipped model; prompt lookup always works)")
    parser.add_argument("--port", type=int, default=8000,
                        help="the port on 127.0.0.1 (default 8000; 0: any free port)")
    parser.add_argument("--no_browser", dest="browser", action="store_false",
                        help="print the address only, do not open a browser")


def model_path(args):
    """(the model's path or name, the flag to name in its errors): --model_path, or --model,
    not both."""
    if args.model is None:
        return args.model_path, "--model_path"
    if args.model_path is not None and args.model_path != args.model:
        raise UsageError("--model_path: not with --model, its older name; give the model "
                         "once")
    return args.model, "--model"


def run(args) -> int:
    from ..desk import PASSAGE
    from ..desk.server import make_server
    from ..desk.widgets import make_desk

    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port: must be in [0, 65535], got {args.port}")
    path, flag = model_path(args)
    model = load_model(path, flag, reference=args.reference)
    draft_path = args.draft_model
    if draft_path is None and path is None and DEFAULT_DRAFT.is_file():
        draft_path = DEFAULT_DRAFT
    draft = None if draft_path is None else load_model(draft_path, "--draft_model",
                                                       reference=args.reference)
    name = Path(path or DEFAULT_MODEL).name
    desk = make_desk(model, name, draft, PASSAGE.read_text(encoding="utf-8"))
    if desk.template_refused:
        print(f"minillm desk: {desk.template_refused}; prompts are read as plain text",
              file=sys.stderr, flush=True)
    try:
        server = make_server(desk, args.port, quiet=False)
    except OSError as e:
        raise UsageError(f"--port: cannot listen on 127.0.0.1:{args.port} ({e.strerror}); "
                         "try another, or 0 for any free port") from None
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    print(f"minillm desk: {name} at {url} (Ctrl-C stops it)", file=sys.stderr, flush=True)
    if args.browser:
        import webbrowser

        webbrowser.open(url)
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0
