"""Running the application with uvicorn: in the foreground (`minillm serve`), or in a thread of
this process (a program, the tests), on 127.0.0.1 unless told otherwise.

    server = start(model, name="target")      # port 0: a free one
    server.url                                # http://127.0.0.1:PORT
    server.service.loop                       # the engine's loop, in this process
    server.stop()
"""
from __future__ import annotations

import threading
import time

from ..plumbing.optional import require
from ..serving import Engine
from .app import make_app
from .handlers import Service
from .loop import EngineLoop


def service_for(model, name: str, chat_tokenizer=None, **engine) -> Service:
    """The model, under `name`, behind a new Engine (its options: `engine`) and its loop."""
    if model.tokenizer is None:
        raise ValueError("--model_path: the server needs a model with a tokenizer (its text "
                         "in and out)")
    return Service(model, name, EngineLoop(Engine(model, **engine)), chat_tokenizer)


LOOPBACK = ("127.0.0.1", "localhost", "::1")


def config(service: Service, host: str, port: int, log_level: str):
    uvicorn = require("uvicorn", "serve", "minillm serve")
    app = make_app(service, loopback_only=host in LOOPBACK)
    return uvicorn.Config(app, host=host, port=port, log_level=log_level,
                          timeout_graceful_shutdown=5)


def serve(service: Service, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve until interrupted (Ctrl-C)."""
    uvicorn = require("uvicorn", "serve", "minillm serve")
    uvicorn.Server(config(service, host, port, "info")).run()


class Running:
    """A server running in a thread of this process."""

    def __init__(self, service: Service, host: str, port: int, log_level: str):
        uvicorn = require("uvicorn", "serve", "minillm serve")
        self.service = service
        self.server = uvicorn.Server(config(service, host, port, log_level))
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
          **engine) -> Running:
    """Serve `model` from a thread of this process; returns once it listens."""
    running = Running(service_for(model, name, chat_tokenizer, **engine), host, port,
                      log_level)
    running.thread.start()
    running.wait_started(timeout)
    return running
