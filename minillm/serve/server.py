"""Running the application with uvicorn: in the foreground (`minillm serve`), or in a thread of
this process (a program, the tests), on 127.0.0.1 unless told otherwise.

    server = start(model, name="target")      # port 0: a free one
    server.url                                # http://127.0.0.1:PORT
    server.service.loop                       # the engine's loop, in this process
    server.stop()

A connection's request headers must arrive within HEADER_TIMEOUT seconds of its opening (or of
its last response, kept alive), else it is closed: a client that sends its headers a byte at a
time (slowloris) holds no connection for long. Its body has --read_timeout (app.py).
"""
from __future__ import annotations

import threading
import time

from ..plumbing.optional import require
from ..serving import Engine
from .app import READ_TIMEOUT, make_app
from .handlers import Service
from .loop import EngineLoop


MAX_WAITING = 128  # engine requests that may wait before a 429 (--max_waiting)
LOGPROBS_MODES = ("processed_logprobs", "raw_logprobs")
HEADER_TIMEOUT = 10  # seconds


def service_for(model, name: str, chat_tokenizer=None, max_waiting: int | None = MAX_WAITING,
                logprobs_mode: str = "processed_logprobs", **engine) -> Service:
    """The model, under `name`, behind a new Engine (its options: `engine`) and its loop, which
    lets at most `max_waiting` engine requests wait (None: no bound); logprobs_mode:
    "processed_logprobs" (the distribution drawn from) or "raw_logprobs" (the model's own)."""
    if model.tokenizer is None:
        raise ValueError("--model_path: the server needs a model with a tokenizer (its text "
                         "in and out)")
    if logprobs_mode not in LOGPROBS_MODES:
        raise ValueError(f"logprobs_mode: one of {', '.join(LOGPROBS_MODES)}, got "
                         f"{logprobs_mode!r}")
    return Service(model, name, EngineLoop(Engine(model, **engine), max_waiting),
                   chat_tokenizer, logprobs_mode)


LOOPBACK = ("127.0.0.1", "localhost", "::1")


def config(service: Service, host: str, port: int, log_level: str,
           read_timeout: float = READ_TIMEOUT, header_timeout: float = HEADER_TIMEOUT):
    uvicorn = require("uvicorn", "serve", "minillm serve")
    app = make_app(service, loopback_only=host in LOOPBACK, read_timeout=read_timeout)
    return uvicorn.Config(app, host=host, port=port, log_level=log_level,
                          timeout_graceful_shutdown=5, http=with_header_deadline(header_timeout))


def with_header_deadline(seconds: float):
    """uvicorn's HTTP/1.1 protocol (h11), closing a connection whose request headers have not
    all come `seconds` after it opened or after its last response."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeaderDeadline(H11Protocol):
        def connection_made(self, transport):
            super().connection_made(transport)
            self.arm()

        def on_response_complete(self):
            super().on_response_complete()
            self.arm()

        def arm(self):
            """Close the connection in `seconds` unless a new request's headers came by then
            (a new cycle began)."""
            cycle = self.cycle
            if cycle is not None and not cycle.response_complete:  # one already pipelined
                return
            self.loop.call_later(seconds, lambda: self.cycle is cycle and self.late())

        def late(self):
            if not self.transport.is_closing():
                self.logger.info("%s: request headers not received within %g s: closed",
                                 "%s:%d" % self.client if self.client else "a client", seconds)
                self.transport.close()

    return HeaderDeadline


def serve(service: Service, host: str = "127.0.0.1", port: int = 8000,
          read_timeout: float = READ_TIMEOUT) -> None:
    """Serve until interrupted (Ctrl-C), which ends as KeyboardInterrupt: uvicorn passes the
    signal on once it has shut down, but asyncio's runner can swallow it when the server's task
    ends before the runner's cancellation reaches it."""
    uvicorn = require("uvicorn", "serve", "minillm serve")
    server = uvicorn.Server(config(service, host, port, "info", read_timeout))
    server.run()
    if server.should_exit:  # set by the signal handler: nothing else stops this server
        raise KeyboardInterrupt


class Running:
    """A server running in a thread of this process."""

    def __init__(self, service: Service, host: str, port: int, log_level: str, **timeouts):
        uvicorn = require("uvicorn", "serve", "minillm serve")
        self.service = service
        self.server = uvicorn.Server(config(service, host, port, log_level, **timeouts))
        self.thread = threading.Thread(target=self.server.run, name="minillm-serve",
                                       daemon=True)

    def wait_started(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
            time.sleep(0.01)
        host, self.port = self.server.servers[0].sockets[0].getsockname()[:2]
        self.url = f"http://{host}:{self.port}"

    def stop(self, timeout: float = 10) -> None:
        self.server.should_exit = True
        self.thread.join(timeout)


def start(model, name: str = "minillm", host: str = "127.0.0.1", port: int = 0,
          chat_tokenizer=None, log_level: str = "warning", timeout: float = 30,
          max_waiting: int | None = MAX_WAITING, read_timeout: float = READ_TIMEOUT,
          header_timeout: float = HEADER_TIMEOUT, logprobs_mode: str = "processed_logprobs",
          **engine) -> Running:
    """Serve `model` from a thread of this process; returns once it listens."""
    running = Running(service_for(model, name, chat_tokenizer, max_waiting, logprobs_mode,
                                  **engine), host,
                      port, log_level, read_timeout=read_timeout, header_timeout=header_timeout)
    running.thread.start()
    running.wait_started(timeout)
    return running
