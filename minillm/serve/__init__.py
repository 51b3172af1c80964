"""`minillm serve`: an OpenAI-compatible HTTP server on the serving engine (docs/SERVE.md).

One thread runs the Engine (minillm/serving/) and the web handlers hand it requests, so that
requests arriving together are batched together. The modules, one concern each:

    errors.py    the OpenAI-style error object and its HTTP status
    bodies.py    a body's JSON: its depth, its numbers, no lone surrogate
    fields.py    the request bodies checked, the server's bounds, a Plan of the choices
    messages.py  a chat's messages: OpenAI's roles and fields
    tokens.py    tokenizing bounded and on a pool of its own; /tokenize, /detokenize
    loop.py      the engine's one loop: a thread, an inbox queue, a queue back per request
    scores.py    logit_bias and min_tokens for the engine; an echoed prompt's scores
    metrics.py   /metrics in Prometheus' text format
    text.py      a choice's text as its tokens come: stop strings, what waits
    replies.py   the JSON of replies, stream chunks and server-sent events
    handlers.py  the endpoints' work, apart from the web framework
    app.py       the Starlette application: routes, bodies, errors, disconnects
    server.py    uvicorn: `serve` in the foreground, `start` in a thread

The web stack (Starlette, uvicorn) is the `serve` extra, imported only when a server is made:
`pip install -e ".[serve]"`.
"""
from .server import Running, serve, service_for, start

__all__ = ["Running", "serve", "service_for", "start"]
