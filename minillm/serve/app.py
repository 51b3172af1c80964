"""The web application: Starlette routes over the handlers, errors as OpenAI's error objects.

    GET  /health                 200 {"status": "ok"} while the engine's loop runs, else 503
    GET  /v1/models              the one model served, under its name
    GET  /v1/models/{name}       that model, or 404
    POST /v1/completions         a prompt (text or token ids), completed
    POST /v1/chat/completions    messages, rendered with the model's chat template, answered
    POST /tokenize               {content, add_special, with_pieces} -> {tokens} (llama-server)
    POST /detokenize             {tokens} -> {content}
    GET  /metrics                Prometheus' text format (metrics.py)
    GET  /debug/stats            the engine's counts and blocks, and the loop's requests

Starlette is imported when the application is made, never by the rest of minillm; without
it the one line of `require` says what to install. A body is read up to MAX_BODY_BYTES (413
past it, before any JSON is parsed) and must be JSON without NaN or Infinity. A client that
goes away cancels its request's task, streamed or not, and so its engine requests
(handlers.py). The engine's loop starts and stops with the application (its lifespan). Served
on this machine's loopback address, a request must name it in its Host header (403 else).
"""
from __future__ import annotations

import contextlib
import logging

from ..plumbing.optional import require
from . import handlers
from .bodies import MAX_BODY_BYTES, parse
from .errors import APIError


LOOPBACK = {"127.0.0.1", "localhost", "[::1]"}
READ_TIMEOUT = 30  # seconds a request's body may take to arrive (--read_timeout)
log = logging.getLogger("uvicorn.error")  # uvicorn's own log: one line where it says its own


class Gone(Exception):
    """The client went away before its body had arrived."""


def make_app(service: handlers.Service, loopback_only: bool = True,
             read_timeout: float = READ_TIMEOUT):
    """The ASGI application serving `service`; its lifespan starts and stops the loop.
    loopback_only: refuse a request whose Host header is not this machine's own name (a page
    elsewhere that renames itself 127.0.0.1 cannot reach a local server: DNS rebinding)."""
    require("starlette", "serve", "minillm serve")
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.responses import (JSONResponse, PlainTextResponse, Response,
                                     StreamingResponse)
    from starlette.routing import Route

    class EventStream(StreamingResponse):
        """Server-sent events whose iterator is always closed, also when the client left."""

        async def __call__(self, scope, receive, send):
            try:
                await super().__call__(scope, receive, send)
            finally:
                await self.body_iterator.aclose()

    def error(e: APIError):
        return JSONResponse(e.body(), status_code=e.status, headers=e.headers)

    async def post(request, handler):
        try:
            body = await read_json(request, read_timeout)
            reply = await until_disconnected(request, handler(service, body))
        except APIError as e:
            return error(e)
        except Gone:
            log.info("%s %s: the client left before its body had arrived", request.method,
                     request.url.path)
            return Response(status_code=499)
        if reply is None:  # the client is gone: nobody reads this
            return Response(status_code=499)
        if isinstance(reply, dict):
            return JSONResponse(reply)
        return EventStream(reply, media_type="text/event-stream",
                           headers={"Cache-Control": "no-cache"})

    async def completions(request):
        return await post(request, handlers.completions)

    async def chat_completions(request):
        return await post(request, handlers.chat_completions)

    async def tokenize(request):
        return await post(request, handlers.tokenize)

    async def detokenize(request):
        return await post(request, handlers.detokenize)

    async def metrics(request):
        try:
            text = await handlers.metrics(service)
        except APIError as e:
            return error(e)
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4; charset=utf-8")

    async def models(request):
        return JSONResponse(handlers.models(service))

    async def stats(request):
        try:
            return JSONResponse(await handlers.stats(service))
        except APIError as e:
            return error(e)

    async def health(request):
        ok = service.loop.alive()
        return JSONResponse({"status": "ok" if ok else "the engine's loop has stopped"},
                            status_code=200 if ok else 503)

    async def model(request):
        name = request.path_params["name"]
        if name != service.name:
            return error(APIError(404, f"model: no model {name!r} here", "model",
                                  "model_not_found"))
        return JSONResponse(handlers.models(service)["data"][0])

    async def http_error(request, exc):
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        return error(APIError(exc.status_code, f"{request.method} {request.url.path}: "
                                               f"{exc.detail}", code=code))

    async def fault(request, exc):
        return error(APIError(500, f"internal error: {type(exc).__name__}: {exc}"))

    @contextlib.asynccontextmanager
    async def lifespan(app):
        service.loop.start()
        try:
            yield
        finally:
            service.loop.stop()

    routes = [
        Route("/health", health),
        Route("/v1/models", models),
        Route("/v1/models/{name:path}", model),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/tokenize", tokenize, methods=["POST"]),
        Route("/detokenize", detokenize, methods=["POST"]),
        Route("/metrics", metrics),
        Route("/debug/stats", stats),
    ]
    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={HTTPException: http_error, Exception: fault})
    if not loopback_only:
        return app

    async def guarded(scope, receive, send):
        host = dict(scope.get("headers", ())).get(b"host", b"").decode("latin-1")
        if scope["type"] == "http" and host.rsplit(":", 1)[0] not in LOOPBACK:
            refusal = APIError(403, f"Host {host!r}: this server answers to 127.0.0.1 and "
                                    "localhost only", code="host_not_allowed")
            return await error(refusal)(scope, receive, send)
        await app(scope, receive, send)
    return guarded


async def read_json(request, timeout: float):
    """The body as JSON, read no further than MAX_BODY_BYTES and for no longer than `timeout`
    seconds (a 408 then, and the connection closed); Gone if the client leaves meanwhile."""
    import anyio
    from starlette.requests import ClientDisconnect

    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > MAX_BODY_BYTES:
        raise too_large()
    data = bytearray()
    try:
        with anyio.fail_after(timeout):
            async for chunk in request.stream():
                data += chunk
                if len(data) > MAX_BODY_BYTES:
                    raise too_large()
    except TimeoutError:
        raise APIError(408, f"the body did not arrive within {timeout:g} s",
                       code="request_timeout", headers={"Connection": "close"}) from None
    except ClientDisconnect:
        raise Gone() from None
    return parse(bytes(data))


def too_large() -> APIError:
    return APIError(413, f"the body is larger than {MAX_BODY_BYTES} bytes",
                    code="request_too_large")


async def until_disconnected(request, work):
    """`await work`, cancelled if the client disconnects first (then None)."""
    import anyio

    result = failure = None

    async def run(scope):
        nonlocal result, failure
        try:
            result = await work
        except Exception as e:  # raised here, not as a task group's ExceptionGroup
            failure = e
        scope.cancel()

    async def watch(scope):
        while (await request.receive())["type"] != "http.disconnect":
            pass
        scope.cancel()

    async with anyio.create_task_group() as group:
        group.start_soon(run, group.cancel_scope)
        group.start_soon(watch, group.cancel_scope)
    if failure is not None:
        raise failure
    return result
