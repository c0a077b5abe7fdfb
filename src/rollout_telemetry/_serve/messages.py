"""The HTTP/1.1 messages of the endpoint: a request head read under its deadlines and size cap and parsed
strictly, and a response's head on the wire.

Only a request line and headers are read, never a body: what does not parse is a 400, what is too large a
431, and a client that sends nothing in time gets no answer at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from http import HTTPStatus

from rollout_telemetry._serve.limits import Limits
from rollout_telemetry._serve.streams import RECV_SIZE, PlainStream

__all__ = ["Handler", "Request", "Response", "Waiting", "read_request"]

_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


Waiting = Callable[[], AbstractContextManager[None]]
"""A context in which a request's connection waits with nothing in hand, and may be evicted meanwhile."""


@dataclass(frozen=True, slots=True)
class Request:
    """A complete request head: method, path, query string, headers (lower-case names), source address; and
    what its handler enters while it waits with nothing in hand (``evictable``: its connection may go for a
    newcomer meanwhile)."""

    method: str
    path: str
    query: str
    headers: Mapping[str, str]
    source: str
    evictable: Waiting = field(default=contextlib.nullcontext, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Response:
    """A status, extra headers and a body; ``Content-Length``, ``Cache-Control: no-store``,
    ``X-Content-Type-Options: nosniff`` and ``Connection: close`` are added to every response."""

    status: int
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""

    @classmethod
    def text(cls, status: int, text: str, *headers: tuple[str, str]) -> Response:
        """A plain-text response."""
        return cls(status, (("Content-Type", "text/plain; charset=utf-8"), *headers), text.encode())

    def head(self) -> bytes:
        """The status line and headers on the wire (the same for HEAD, which sends no body)."""
        lines = [f"HTTP/1.1 {self.status} {HTTPStatus(self.status).phrase}"]
        lines += [f"{name}: {value}" for name, value in self.headers]
        lines += [f"Content-Length: {len(self.body)}", *_ALWAYS]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


_ALWAYS = (
    "Cache-Control: no-store",
    # A browser takes each body for its Content-Type and nothing else: a JSON listing or an exposition
    # holding a run's names is never sniffed as a page, nor a plain-text error as a script.
    "X-Content-Type-Options: nosniff",
    "Connection: close",
)

Handler = Callable[[Request], Awaitable[Response]]


def parse_head(head: bytes, source: str, evictable: Waiting = contextlib.nullcontext) -> Request | Response:
    """Parse a request line and headers (ending in a blank line); a 400 response if they are malformed."""
    lines = head.decode("latin-1").split("\r\n")[:-2]
    parts = lines[0].split(" ")
    if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]) or parts[2] not in ("HTTP/1.0", "HTTP/1.1"):
        return Response.text(400, "bad request\n")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not _TOKEN.fullmatch(name):  # also refuses obsolete folded lines
            return Response.text(400, "bad request\n")
        name = name.lower()
        if name in headers and name in ("authorization", "host", "content-length", "transfer-encoding"):
            return Response.text(400, "bad request\n")
        value = value.strip(" \t")
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    path, _, query = parts[1].partition("?")
    return Request(parts[0], path, query, headers, source, evictable)


async def read_request(
    stream: PlainStream, address: str, limits: Limits, evictable: Waiting
) -> Request | Response | None:
    """The request, a response refusing it, or None for a connection that sent none in time (``limits``:
    ``idle_timeout``, ``head_timeout``, ``max_head``); ``evictable`` is the request's (``Request``)."""
    try:
        async with asyncio.timeout(limits.idle_timeout):
            head = bytearray(await stream.recv())
        if not head:
            return None
        searched = 0
        async with asyncio.timeout(limits.head_timeout):
            while (end := head.find(b"\r\n\r\n", searched)) < 0:
                if len(head) >= limits.max_head:
                    return Response.text(431, "request head too large\n")
                searched = max(0, len(head) - 3)
                chunk = await stream.recv(min(RECV_SIZE, limits.max_head + 1 - len(head)))
                if not chunk:
                    return None
                head += chunk
    except TimeoutError:
        return None
    if end + 4 > limits.max_head:
        return Response.text(431, "request head too large\n")
    return parse_head(bytes(head[: end + 4]), address, evictable)
