"""A small HTTP/1.1 server on asyncio for an endpoint that must stay up while a local process attacks it.

Built on the standard library's asyncio rather than aiohttp: the endpoint serves a few GET paths and never
reads a body, so the parsing it needs is a request line and a few headers under a size cap, while the
defences it needs (a deadline on the whole request head from its first byte, connection caps per source
and in all, eviction of connections idle past a minimum age, a cap on response bytes being written, a
bounded queue in front of the worker threads) are not aiohttp's either and would be written here all the
same. Sockets are read and written directly, TLS included (``rollout_telemetry._streams`` says why).

One event-loop thread owns every connection: it accepts, runs the TLS handshake, reads the request head and
writes the response, each under its own deadline, holding no thread per connection. Only a complete request
reaches the handler, which sends slow work (scrypt, rendering the exposition) to ``workers.Workers``: a fixed
set of threads behind a bounded queue; beyond it the answer is 503. Each connection carries one request and is
closed as soon as its response is written (``Connection: close``): no body is read and no second request
parsed, so there is nothing to smuggle.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import logging
import re
import socket
import ssl
import struct
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from rollout_telemetry._serve.streams import RECV_SIZE, PlainStream, TlsStream
from rollout_telemetry._serve.workers import Busy

_log = logging.getLogger("rollout_telemetry.server")

MAX_CONNECTIONS = 512
"""Connections held at once; when full, one idle past ``EVICT_AFTER`` is closed for the newcomer."""
MAX_PER_SOURCE = 128
"""Connections one source (an IPv4 address, an IPv6 /64) may hold; beyond, its own oldest idle one goes."""
EVICT_AFTER = 1.0
"""Seconds a connection is safe from eviction by a newcomer to a full server: a remote client's request
takes a round trip or a TLS handshake to arrive."""
LISTEN_BACKLOG = 4096
"""Connections the kernel queues before they are accepted (Linux caps it at ``net.core.somaxconn``). When
the queue is full the kernel drops a new client's SYN and the client retries after 1 s, then 3 s: with 128,
under a slowloris of 1,000 reopened connections, 2 of 5 authorised reads of ``/targets`` took over 1 s."""
HANDSHAKE_TIMEOUT = 2.0
"""Seconds a TLS handshake may take."""
IDLE_TIMEOUT = 3.0
"""Seconds a connection may stay silent before its first byte; it holds no thread meanwhile."""
HEAD_TIMEOUT = 2.0
"""Seconds from the first byte of a request to the end of its headers."""
MAX_HEAD = 16 * 1024
"""Bytes a request line and headers may take together, the blank line included (431 beyond)."""
WRITE_TIMEOUT = 10.0
"""Seconds to write a response; a client reading slower is disconnected."""
MAX_OUTPUT = 32 * 1024 * 1024
"""Bytes of responses being written at once, counted per response; beyond, the longest-running writes
are cut short (their connections reset) to make room for the newest."""
LINGER = 1.0
"""Seconds to drain what a client still sends after its response, so the close does not reset it."""
_LINGER_BYTES = 1 << 20
_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() resets the connection
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_QUIET = (OSError, TimeoutError, ssl.SSLError)


def source_of(address: str) -> str:
    """The source a client address counts as for caps and fairness: the IPv4 address, or the IPv6 /64.

    One host on IPv6 usually has a whole /64 to pick addresses from; an IPv4-mapped address is its IPv4.
    """
    try:
        ip = ipaddress.ip_address(address.partition("%")[0])
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


@dataclass(frozen=True, slots=True)
class Request:
    """A complete request head: method, path, query string, headers (lower-case names), source address."""

    method: str
    path: str
    query: str
    headers: Mapping[str, str]
    source: str


@dataclass(frozen=True, slots=True)
class Response:
    """A status, extra headers and a body; ``Content-Length`` and ``Connection: close`` are added."""

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
        lines += [f"Content-Length: {len(self.body)}", "Cache-Control: no-store", "Connection: close"]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


Handler = Callable[[Request], Awaitable[Response]]


class ThrottledLog:
    """Log a message at most once per ``interval`` seconds per format, saying how many were held back."""

    def __init__(self, interval: float = 10.0) -> None:
        self._interval = interval
        self._last: dict[str, tuple[float, int]] = {}
        self._lock = threading.Lock()

    def __call__(self, level: int, msg: str, *args: object) -> None:
        with self._lock:
            now = time.monotonic()
            last, held = self._last.get(msg, (-self._interval, 0))
            if now - last < self._interval:
                self._last[msg] = (last, held + 1)
                return
            self._last[msg] = (now, 0)
        suffix = f" ({held} more like this held back)" if held else ""
        _log.log(level, msg + suffix, *args)


def parse_head(head: bytes, source: str) -> Request | Response:
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
    return Request(parts[0], path, query, headers, source)


@dataclass(eq=False, slots=True)
class _Connection:
    """What the loop knows of one connection: whose it is, since when, and what it is doing."""

    sock: socket.socket
    address: str
    source: str
    opened: float
    task: asyncio.Task[None] | None = None
    output: int = 0  # bytes of the response being written, counted against MAX_OUTPUT
    cut: bool = False  # its response was cut short: reset, not closed


class HttpServer:
    """Serve ``handler`` on a bound, listening socket from an event loop in a thread of its own."""

    def __init__(self, listener: socket.socket, handler: Handler, *, tls: ssl.SSLContext | None) -> None:
        listener.setblocking(False)
        self._listener = listener
        self._handler = handler
        self._tls = tls
        self._log = ThrottledLog()
        self._loop = asyncio.new_event_loop()
        self._loop.set_exception_handler(self._loop_error)
        # Each dict keeps its connections oldest first; all are touched only on the loop's thread.
        self._connections: dict[_Connection, None] = {}
        self._waiting: dict[_Connection, None] = {}  # no complete request yet: may be evicted
        self._by_source: dict[str, dict[_Connection, None]] = {}
        self._writing: dict[_Connection, None] = {}
        self._output = 0
        self._tasks: set[asyncio.Task[None]] = set()  # evicted ones too, until they end
        self._stopping = asyncio.Event()
        self._thread = threading.Thread(target=self._run, name="rollout-telemetry-http", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._loop.run_until_complete(self._serve())
        finally:
            self._loop.close()

    def stop(self) -> None:
        """Close the listener and every connection, and end the loop's thread."""
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stopping.set)
            self._thread.join(timeout=10)
        self._listener.close()

    def _loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """Route what asyncio would print with a traceback to our logger, throttled."""
        self._log(logging.WARNING, "event loop: %s %r", context.get("message"), context.get("exception"))

    async def _serve(self) -> None:
        accepting = asyncio.create_task(self._accept())
        await self._stopping.wait()
        accepting.cancel()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(accepting, *tasks, return_exceptions=True)
        self._listener.close()

    async def _accept(self) -> None:
        while True:
            # Let the connections already accepted run before the next accept: an accept that finds a
            # connection waiting does not yield, and a flood refused at once would otherwise hold the loop.
            await asyncio.sleep(0)
            try:
                sock, address = await self._loop.sock_accept(self._listener)
            except OSError as exc:  # out of file descriptors, say: wait for some to come back
                self._log(logging.WARNING, "cannot accept a connection: %s", exc)
                await asyncio.sleep(0.1)
                continue
            connection = _Connection(sock, str(address[0]), source_of(str(address[0])), time.monotonic())
            if not self._make_room(connection.source, connection.opened):
                sock.close()
                continue
            self._connections[connection] = None
            self._waiting[connection] = None
            self._by_source.setdefault(connection.source, {})[connection] = None
            connection.task = asyncio.create_task(self._serve_connection(connection))
            connection.task.add_done_callback(functools.partial(self._forget, connection))
            self._tasks.add(connection.task)

    def _make_room(self, source: str, now: float) -> bool:
        """Whether a newcomer from ``source`` may be held, closing an idle connection for it if need be.

        A source at its cap gives up its own oldest idle connection, whatever its age (it competes only
        with itself). A full server gives up its oldest idle connection only past ``EVICT_AFTER``: a client
        whose request is a round trip or a TLS handshake away is not evicted by a flood of newcomers.
        """
        mine = self._by_source.get(source, {})
        if len(mine) >= MAX_PER_SOURCE:
            victim = next((c for c in mine if c in self._waiting), None)
        elif len(self._connections) >= MAX_CONNECTIONS:
            victim = next(iter(self._waiting), None)
            if victim is not None and now - victim.opened < EVICT_AFTER:
                victim = None
        else:
            return True
        if victim is None:
            return False
        self._drop(victim)
        return True

    def _drop(self, connection: _Connection) -> None:
        """Close a connection now: it leaves every count at once; its task, cancelled, closes the socket
        once its pending reads and writes have let go of it (the descriptor may be reused at once)."""
        connection.cut = connection in self._writing
        self._untrack(connection)
        if connection.task is not None:
            connection.task.cancel()

    def _forget(self, connection: _Connection, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        # A response cut short (for the output cap, or at the write deadline) ends in a reset, so what the
        # kernel still holds of it is dropped at once.
        if connection.cut or connection in self._writing:
            with contextlib.suppress(OSError):
                connection.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
        self._untrack(connection)
        connection.sock.close()

    def _untrack(self, connection: _Connection) -> None:
        self._connections.pop(connection, None)
        self._waiting.pop(connection, None)
        mine = self._by_source.get(connection.source)
        if mine is not None:
            mine.pop(connection, None)
            if not mine:
                del self._by_source[connection.source]
        self._end_output(connection)

    def _start_output(self, connection: _Connection, size: int) -> None:
        """Count ``size`` bytes against ``MAX_OUTPUT``, first cutting short the longest-running writes
        while the newest would not fit (one response larger than the cap is written alone).

        A client that reads its response promptly is done in milliseconds: those still writing when room
        is needed are the ones that read slowest, or not at all (or the kernel's buffers are full).
        """
        while self._output + size > MAX_OUTPUT and self._writing:
            self._drop(next(iter(self._writing)))
        connection.output = size
        self._writing[connection] = None
        self._output += size

    def _end_output(self, connection: _Connection) -> None:
        if connection in self._writing:
            del self._writing[connection]
            self._output -= connection.output
            connection.output = 0

    async def _serve_connection(self, connection: _Connection) -> None:
        try:
            stream: PlainStream = PlainStream(self._loop, connection.sock)
            if self._tls is not None:
                async with asyncio.timeout(HANDSHAKE_TIMEOUT):
                    # No TLS state until the client sends something: OpenSSL's allocations for each of a
                    # flood of idle connections, freed as they go, left glibc's heap fragmented and large.
                    if not (hello := await self._loop.sock_recv(connection.sock, RECV_SIZE)):
                        return
                    stream = TlsStream(self._loop, connection.sock, self._tls, hello)
                    await stream.handshake()
            if await self._exchange(connection, stream):
                # Answered: the response was let go of on return, so a lingering client holds none of it.
                connection.sock.shutdown(socket.SHUT_WR)
                await _discard(stream)
        except _QUIET as exc:
            _log.debug("connection from %s closed: %r", connection.address, exc)
        except Exception as exc:
            self._log(logging.ERROR, "error serving a connection: %r", exc)

    async def _exchange(self, connection: _Connection, stream: PlainStream) -> bool:
        """Read one request and write its response; False if no request came."""
        received = await self._read_request(stream, connection.address)
        self._waiting.pop(connection, None)  # from here on it is not idle: it cannot be evicted
        if received is None:
            return False
        if isinstance(received, Request):
            response = await self._answer(received)
            head_only = received.method == "HEAD"
        else:
            response, head_only = received, False
        await self._write(connection, stream, response, head_only=head_only)
        return True

    async def _read_request(self, stream: PlainStream, address: str) -> Request | Response | None:
        """The request, a response refusing it, or None for a connection that sent none in time."""
        try:
            async with asyncio.timeout(IDLE_TIMEOUT):
                head = bytearray(await stream.recv())
            if not head:
                return None
            searched = 0
            async with asyncio.timeout(HEAD_TIMEOUT):
                while (end := head.find(b"\r\n\r\n", searched)) < 0:
                    if len(head) >= MAX_HEAD:
                        return Response.text(431, "request head too large\n")
                    searched = max(0, len(head) - 3)
                    chunk = await stream.recv(min(RECV_SIZE, MAX_HEAD + 1 - len(head)))
                    if not chunk:
                        return None
                    head += chunk
        except TimeoutError:
            return None
        if end + 4 > MAX_HEAD:
            return Response.text(431, "request head too large\n")
        return parse_head(bytes(head[: end + 4]), address)

    async def _answer(self, request: Request) -> Response:
        try:
            return await self._handler(request)
        except Busy:
            return _BUSY
        except Exception as exc:
            self._log(logging.ERROR, "error answering %s %s: %r", request.method, request.path, exc)
            return Response.text(500, "internal error\n")

    async def _write(
        self, connection: _Connection, stream: PlainStream, response: Response, *, head_only: bool
    ) -> None:
        """Write the response within ``WRITE_TIMEOUT`` (TLS: and close_notify).

        The body is sent from the response's own bytes (often one rendering shared by many scrapes), never
        copied per connection; what it may hold is counted against ``MAX_OUTPUT`` until it is sent.
        """
        body = b"" if head_only else response.body
        self._start_output(connection, len(body))
        async with asyncio.timeout(WRITE_TIMEOUT):
            head = response.head()
            if len(body) <= RECV_SIZE:
                await stream.send(head + body)
            else:
                await stream.send(head)
                await stream.send(body)
            await stream.finish()
        self._end_output(connection)


_BUSY = Response(
    503, (("Content-Type", "text/plain; charset=utf-8"), ("Retry-After", "1")), b"busy: try again\n"
)


async def _discard(stream: PlainStream) -> None:
    """Read and drop up to ``_LINGER_BYTES`` for ``LINGER`` seconds or until the client closes."""
    read = 0
    with contextlib.suppress(TimeoutError, *_QUIET):
        async with asyncio.timeout(LINGER):
            while read < _LINGER_BYTES and (chunk := await stream.recv(65536)):
                read += len(chunk)
