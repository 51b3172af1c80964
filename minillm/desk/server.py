"""The desk's web server: the standard library's http.server, on 127.0.0.1 only.

    GET  /                 the page (static/index.html)
    GET  /static/NAME      a file of the package's static folder, by exact name
    GET  /api/info         the model, its ready-made beginnings, the limits
    POST /api/<widget>     a JSON object of fields (fields.py) -> a JSON object (widgets.py)

(HEAD as GET, without the body.) Each request runs on its own thread (ThreadingHTTPServer), so
a slow computation never stops the page's files or the other widgets from being served. The
generating widgets hand their texts to the desk's serving engine (batched.py), which computes
all it is given together; every other widget's computation runs on its request's thread, at
most WORKERS at once, the others waiting their turn.

A request the page no longer wants is given up. The page names each widget request in the
X-Desk-Request header, "SESSION WIDGET N": its own random id, the widget, and a number that
grows with every request it sends. A request is abandoned when a request of the same session
and widget with a larger N arrives (the page replaced it) or when its client closes the
connection (the page's fetch was aborted): a widget waiting on the engine then has its engine
requests aborted, their blocks freed; one waiting for a worker leaves the queue. The answer
is a 409 if anybody still listens; a request that arrives after a newer one of its widget is
refused with a 409 at once. A computation already running on a worker runs to its end. A
request without the header (a script, a test) is given up only when its connection closes.

Every refusal is a 4xx (or http.server's own 5xx for a method it does not know) with
{"error": "..."}: the desk's own, and those http.server sends before the desk sees the
request (a request line over 64 KiB: 414; a header line over 64 KiB or over 100 headers: 431;
a malformed request line: 400), through send_error. A known path asked with the wrong method
is a 405 naming the right one (Allow). The server goes on serving after any error. What
protects a page served on the local machine:
- a Host header other than this server's own address is refused (a web page elsewhere cannot
  reach it by renaming itself to 127.0.0.1: DNS rebinding), and so is a POST from another
  origin;
- the static files are a fixed table made at start from the package's folder: a path is looked
  up in it, never joined to a folder, so `..` reaches nothing;
- bodies are bounded (MAX_BODY_BYTES) and every field is checked before any work.
"""
from __future__ import annotations

import json
import mimetypes
import select
import socket
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from . import widgets
from .batched import POLL, Abandoned
from .fields import ENDPOINTS, MAX_BODY_BYTES, RequestError, checked

STATIC = Path(__file__).resolve().parent / "static"
WORKERS = 2  # the computations running at once: more only share the same cores
WAIT_SECONDS = 120  # how long a request waits for a worker before it is told the desk is busy
REQUEST_ID = "X-Desk-Request"  # "SESSION WIDGET N", sent by the page with each widget request
MAX_WIDGETS = 4096  # (session, widget) pairs remembered, the oldest forgotten first


def static_files() -> dict[str, tuple[bytes, str]]:
    """{url path: (bytes, content type)} for every file of the static folder, read once."""
    files = {}
    for path in sorted(STATIC.iterdir()):
        if path.is_file():
            kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
            if kind.startswith("text/") or kind == "application/javascript":
                kind += "; charset=utf-8"
            files[f"/static/{path.name}"] = (path.read_bytes(), kind)
    files["/"] = files["/static/index.html"]
    return files


def make_server(desk, port: int = 0, quiet: bool = True) -> ThreadingHTTPServer:
    """A server for `desk` on 127.0.0.1:port (0: a free port), not yet serving."""
    files = static_files()
    workers = threading.BoundedSemaphore(WORKERS)

    class Handler(DeskHandler):
        pass

    Handler.desk, Handler.files, Handler.workers, Handler.quiet = desk, files, workers, quiet
    Handler.latest, Handler.latest_lock = {}, threading.Lock()  # (session, widget) -> N
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True  # a request in flight never keeps the program from exiting
    host, port = server.server_address[:2]
    Handler.hosts = {f"127.0.0.1:{port}", f"localhost:{port}"}
    Handler.origins = {f"http://{h}" for h in Handler.hosts}
    return server


def serve_in_thread(server) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return thread


def closed(connection) -> bool:
    """Whether the client closed the connection: it reads as ready, yet holds nothing (the end
    of the stream). The page sends nothing more while it waits for an answer."""
    try:
        ready, _, _ = select.select([connection], [], [], 0)
        return bool(ready) and connection.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):  # reset, or already closed
        return True


class DeskHandler(BaseHTTPRequestHandler):
    server_version = "minillm-desk"
    desk = files = workers = hosts = origins = latest = latest_lock = None
    quiet = True

    def do_GET(self):
        self.answer(self.get)

    def do_HEAD(self):
        self.answer(self.get)

    def do_POST(self):
        self.answer(self.post)

    def do_PUT(self):
        self.answer(self.other)

    do_DELETE = do_PATCH = do_PUT

    def answer(self, handle):
        """Run `handle`; turn whatever it raises into a JSON error, and keep serving."""
        try:
            if self.headers.get("Host") not in self.hosts:
                raise RequestError("Host: this desk answers only requests addressed to "
                                   f"{sorted(self.hosts)[0]}", 403)
            handle()
        except (BrokenPipeError, ConnectionResetError):
            return  # the page gave up on this request (a newer one replaced it): nobody reads
        except Abandoned as e:
            if closed(self.connection):
                self.close_connection = True
                return  # nobody reads
            self.send_json({"error": str(e)}, e.status)
        except RequestError as e:
            self.send_json({"error": str(e)}, e.status, e.headers)
        except ValueError as e:  # the library's one-line errors: a knob or an id out of range
            self.send_json({"error": str(e)}, 400)
        except Exception as e:  # a bug: say so, and stay up
            traceback.print_exc()
            self.send_json({"error": f"internal error: {type(e).__name__}: {e}"}, 500)

    def allowed(self, path: str) -> str | None:
        """The methods `path` answers ("GET, HEAD" for the page's files and the info, "POST"
        for a widget's endpoint), None for an unknown path."""
        if path in self.files or path == "/api/info":
            return "GET, HEAD"
        return "POST" if path in ENDPOINTS else None

    def refuse_method(self, path: str, unknown: str):
        """The error for a method `path` does not answer: 405 with Allow, or 404."""
        allow = self.allowed(path)
        if allow is None:
            raise RequestError(f"{path[:80]}: {unknown}", 404)
        how = ("POST it a JSON object of its fields" if allow == "POST" else "GET it")
        raise RequestError(f"{path[:80]}: {self.command} is not allowed here; {how}", 405,
                           {"Allow": allow})

    def get(self):
        path = self.path.split("?", 1)[0]
        if self.allowed(path) != "GET, HEAD":
            self.refuse_method(path, "no such page")
        if path == "/api/info":
            return self.send_json(widgets.info(self.desk))
        body, kind = self.files[path]
        self.send(200, body, kind)

    def other(self):
        self.close_connection = True  # a body the desk never reads must not be taken for a request
        self.refuse_method(self.path.split("?", 1)[0], "no such page")

    def post(self):
        path = self.path.split("?", 1)[0]
        if path not in ENDPOINTS:
            self.close_connection = True  # its body stays unread
            self.refuse_method(path, "no such endpoint")
        origin = self.headers.get("Origin")
        if origin is not None and origin not in self.origins:
            raise RequestError(f"Origin: requests from {origin[:80]} are refused", 403)
        request = checked(path, self.read_json())
        name = self.claim()

        def abandoned() -> bool:
            return (name is not None and self.latest.get(name[0]) != name[1]) \
                or closed(self.connection)

        if path in widgets.BATCHED:
            return self.send_json(widgets.ROUTES[path](self.desk, request, abandoned))
        self.wait_for_worker(abandoned)
        try:
            result = widgets.ROUTES[path](self.desk, request)
        finally:
            self.workers.release()
        self.send_json(result)

    def claim(self) -> tuple | None:
        """((session, widget), N) of the request's X-Desk-Request header, now its widget's
        latest; None without the header. A 409 if a newer request of the widget came first."""
        value = self.headers.get(REQUEST_ID)
        if value is None:
            return None
        parts = value.split(" ")
        if len(value) > 200 or len(parts) != 3 or not parts[2].isdigit():
            raise RequestError(f"{REQUEST_ID}: expected 'SESSION WIDGET N' (N a count), at "
                               f"most 200 characters, got {value[:80]!r}")
        key, n = (parts[0], parts[1]), int(parts[2])
        with self.latest_lock:
            if n <= self.latest.get(key, -1):
                raise Abandoned()
            self.latest.pop(key, None)  # to the end: the oldest pairs are forgotten first
            self.latest[key] = n
            while len(self.latest) > MAX_WIDGETS:
                del self.latest[next(iter(self.latest))]
        return key, n

    def wait_for_worker(self, abandoned) -> None:
        """Take a worker, leaving the queue if the request is abandoned meanwhile."""
        deadline = time.monotonic() + WAIT_SECONDS
        while not self.workers.acquire(timeout=POLL):
            if abandoned():
                raise Abandoned()
            if time.monotonic() > deadline:
                raise RequestError("the desk is busy with other requests; try again", 503)
        if abandoned():
            self.workers.release()
            raise Abandoned()

    def read_json(self):
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            raise RequestError("Content-Length: required, a number of bytes", 411)
        if int(length) > MAX_BODY_BYTES:
            self.close_connection = True  # the unread body must not be taken for a request
            raise RequestError(f"body: {length} bytes, at most {MAX_BODY_BYTES}", 413)
        raw = self.rfile.read(int(length))
        try:
            return json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise RequestError(f"body: not valid JSON ({e})") from None

    def send_json(self, value, status: int = 200, headers: dict | None = None):
        self.send(status, json.dumps(value).encode("utf-8"), "application/json", headers)

    def send(self, status: int, body: bytes, kind: str, headers: dict | None = None):
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def send_error(self, code, message=None, explain=None):
        """http.server's own refusals, sent before a handler runs (a request line or a header
        too long: 414, 431; too many headers: 431; a malformed request line: 400; an unknown
        method: 501), as the desk's JSON errors rather than its HTML page."""
        short = self.responses.get(code, ("error",))[0]
        text = message or short
        if explain and explain not in text:
            text = f"{text}: {explain}"
        if code == 414:
            text = f"{text}: the request line is over 64 KiB"
        self.log_error("code %d, message %s", code, text)
        self.close_connection = True  # what follows the refused line is not a request
        self.send_json({"error": text}, code, {"Connection": "close"})

    def log_message(self, format, *args):
        if not self.quiet:
            super().log_message(format, *args)
