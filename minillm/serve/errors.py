"""The one error of the server: an OpenAI-style error object with its HTTP status.

    {"error": {"message": "...", "type": "invalid_request_error", "param": "max_tokens",
               "code": null}}

The statuses, as docs/SERVE.md tabulates them: 400 a value the server cannot take (out of
range, a prompt longer than the context, a feature not supported, JSON that does not parse),
403 a Host header that is not this machine's own (a server on the loopback address), 404 an
unknown model or path, 405 a wrong method, 408 a body that did not arrive in time, 413 a body
over the bound, 422 a body that is not the request (not an object, a field unknown, missing or
of the wrong type), 429 a full waiting queue (with Retry-After), 500 a fault of the server
itself. Every refusal comes before any work, and the server goes on.
"""
from __future__ import annotations

import re

SURROGATE = re.compile("[\ud800-\udfff]")  # no character: text holding one is not UTF-8

TYPES = {400: "invalid_request_error", 403: "permission_error", 404: "not_found_error",
         405: "invalid_request_error", 408: "invalid_request_error", 413: "invalid_request_error",
         422: "invalid_request_error", 429: "rate_limit_error", 500: "server_error"}


class APIError(Exception):
    """A refusal: the HTTP status and the four fields of OpenAI's error object."""

    def __init__(self, status: int, message: str, param: str | None = None,
                 code: str | None = None, headers: dict | None = None):
        message, param = plain(message), param and plain(param)  # a client's text, quoted
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.headers = headers or {}  # Retry-After with a 429, Connection: close with a 408

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": TYPES.get(self.status, "error"),
                          "param": self.param, "code": self.code}}


def plain(text: str) -> str:
    """`text` with every lone surrogate written as its escape, so that it can be sent back."""
    return SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def bad_value(param: str, message: str, code: str | None = None) -> APIError:
    """400: a value the server cannot take; the message starts with the field's name."""
    return APIError(400, f"{param}: {message}", param, code)


def bad_shape(param: str | None, message: str) -> APIError:
    """422: the body is not the request (a field unknown, missing or of the wrong type)."""
    return APIError(422, f"{param}: {message}" if param else message, param)
