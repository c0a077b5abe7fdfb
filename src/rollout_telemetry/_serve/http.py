"""A small HTTP/1.1 server on asyncio for an endpoint that must stay up while a local process attacks it.

Built on the standard library's asyncio rather than aiohttp: the endpoint serves two GET paths and never
reads a body, so the parsing it needs is a request line and a few headers under a size cap, while the
defences it needs (a deadline on the whole request head from its first byte, a connection cap that evicts
the longest-waiting idle connection, a bounded queue in front of the worker threads) are not aiohttp's
either and would be written here all the same. The TLS handshake timeout is asyncio's own.

One event-loop thread owns every connection: it accepts, runs the TLS handshake, reads the request head and
writes the response, each under its own deadline, holding no thread per connection. Only a complete request
reaches the handler, which sends slow work (scrypt, rendering the exposition) to ``Workers``: a fixed set of
threads behind a bounded queue; beyond it the answer is 503. Each connection carries one request and is
closed after the response (``Connection: close``): no body is read and no second request parsed, so there
is nothing to smuggle.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import queue
import re
import socket
import ssl
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, TypeVar

_log = logging.getLogger("rollout_telemetry.server")

T = TypeVar("T")

MAX_CONNECTIONS = 512
"""Connections held at once; when full, the longest-waiting one without a complete request is closed."""
HANDSHAKE_TIMEOUT = 2.0
"""Seconds a TLS handshake may take."""
IDLE_TIMEOUT = 3.0
"""Seconds a connection may stay silent before its first byte; it holds no thread meanwhile."""
HEAD_TIMEOUT = 2.0
"""Seconds from the first byte of a request to the end of its headers."""
MAX_HEAD = 16 * 1024
"""Bytes a request line and headers may take together (431 beyond)."""
MAX_QUEUED = 32
"""Requests that may wait for a worker thread (503 beyond)."""
WRITE_TIMEOUT = 10.0
"""Seconds to write a response; a client reading slower is disconnected."""
LINGER = 1.0
"""Seconds to drain what a client still sends after its response, so the close does not reset it."""
_LINGER_BYTES = 1 << 20
_CHUNK = 256 * 1024
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_QUIET = (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ssl.SSLError)


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


class Busy(Exception):
    """Every worker is busy and the queue in front of them is full."""


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


class Workers:
    """A fixed set of threads behind a bounded queue, to which the event loop hands slow work.

    The threads are started at once and live until ``close()``, so the thread count does not move with
    load. A job whose caller has gone (its future cancelled) is skipped.
    """

    def __init__(self, threads: int, *, max_queued: int = MAX_QUEUED) -> None:
        self._jobs: queue.Queue[tuple[asyncio.Future[Any], Callable[[], Any]] | None] = queue.Queue(
            max_queued
        )
        self._threads = [
            threading.Thread(target=self._work, name=f"rollout-telemetry-worker-{i}", daemon=True)
            for i in range(threads)
        ]
        for thread in self._threads:
            thread.start()

    def run(self, work: Callable[[], T]) -> asyncio.Future[T]:
        """Queue ``work``; the future (of the running loop) gets its result or exception.

        Raises:
            Busy: the queue is full.
        """
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        try:
            self._jobs.put_nowait((future, work))
        except queue.Full:
            raise Busy from None
        return future

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            future, work = job
            if future.cancelled():
                continue
            try:
                outcome, failed = work(), False
            except Exception as exc:
                outcome, failed = exc, True
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody is waiting
                future.get_loop().call_soon_threadsafe(_settle, future, outcome, failed)

    def close(self) -> None:
        """Let the threads finish their current job and end; queued jobs are dropped."""
        while True:
            try:
                self._jobs.get_nowait()
            except queue.Empty:
                break
        for _ in self._threads:
            self._jobs.put(None)
        for thread in self._threads:
            thread.join(timeout=5)


def _settle(future: asyncio.Future[Any], outcome: Any, failed: bool) -> None:
    if future.done():
        return
    if failed:
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


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
        self._connections: set[asyncio.Task[None]] = set()
        self._waiting: dict[asyncio.Task[None], None] = {}  # no complete request yet, oldest first
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
        for task in self._connections:
            task.cancel()
        await asyncio.gather(accepting, *self._connections, return_exceptions=True)
        self._listener.close()

    async def _accept(self) -> None:
        while True:
            try:
                connection, address = await self._loop.sock_accept(self._listener)
            except OSError as exc:  # out of file descriptors, say: wait for some to come back
                self._log(logging.WARNING, "cannot accept a connection: %s", exc)
                await asyncio.sleep(0.1)
                continue
            if len(self._connections) >= MAX_CONNECTIONS and not self._evict():
                connection.close()
                continue
            task = asyncio.create_task(self._serve_connection(connection, str(address[0])))
            task.add_done_callback(functools.partial(self._forget, connection=connection))
            self._connections.add(task)
            self._waiting[task] = None
            await asyncio.sleep(0)  # let the connections already accepted read before the next accept

    def _evict(self) -> bool:
        """Close the connection that has waited longest without a complete request."""
        if not self._waiting:
            return False
        oldest = next(iter(self._waiting))
        del self._waiting[oldest]
        self._connections.discard(oldest)
        oldest.cancel()
        return True

    def _forget(self, task: asyncio.Task[None], connection: socket.socket) -> None:
        self._connections.discard(task)
        self._waiting.pop(task, None)
        connection.close()  # its transport is closed or was never made

    async def _serve_connection(self, connection: socket.socket, source: str) -> None:
        task = asyncio.current_task()
        assert task is not None  # each connection is served by a task of its own
        writer: asyncio.StreamWriter | None = None
        finished = False
        try:
            reader = asyncio.StreamReader(limit=MAX_HEAD)
            protocol = asyncio.StreamReaderProtocol(reader)
            transport, _ = await self._loop.connect_accepted_socket(
                lambda: protocol,
                connection,
                ssl=self._tls,
                ssl_handshake_timeout=HANDSHAKE_TIMEOUT if self._tls is not None else None,
            )
            writer = asyncio.StreamWriter(transport, protocol, reader, self._loop)
            received = await self._read_request(reader, source)
            self._waiting.pop(task, None)  # from here on it is not idle: it cannot be evicted
            if received is None:
                return
            if isinstance(received, Request):
                response = await self._answer(received)
                head_only = received.method == "HEAD"
            else:
                response, head_only = received, False
            await self._write(reader, writer, response, head_only=head_only)
            finished = True
        except _QUIET as exc:
            _log.debug("connection from %s closed: %r", source, exc)
        except Exception as exc:
            self._log(logging.ERROR, "error serving a connection: %r", exc)
        finally:
            if writer is not None and not finished:
                writer.transport.abort()

    async def _read_request(self, reader: asyncio.StreamReader, source: str) -> Request | Response | None:
        """The request, a response refusing it, or None for a connection that sent none in time."""
        try:
            async with asyncio.timeout(IDLE_TIMEOUT):
                first = await reader.read(1)
            if not first:
                return None
            async with asyncio.timeout(HEAD_TIMEOUT):
                head = first + await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            return Response.text(431, "request head too large\n")
        except (TimeoutError, asyncio.IncompleteReadError):
            return None
        return parse_head(head, source)

    async def _answer(self, request: Request) -> Response:
        try:
            return await self._handler(request)
        except Busy:
            return Response.text(503, "busy: try again\n", ("Retry-After", "1"))
        except Exception as exc:
            self._log(logging.ERROR, "error answering %s %s: %r", request.method, request.path, exc)
            return Response.text(500, "internal error\n")

    async def _write(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        response: Response,
        *,
        head_only: bool,
    ) -> None:
        """Write the response and close, all within ``WRITE_TIMEOUT``; drain what the client still sends.

        The body goes out in chunks, each sent before the next is queued: a slow reader holds a view of
        the (shared) rendering, not a copy of it.
        """
        writer.transport.set_write_buffer_limits(high=0)  # drain() then waits until everything is sent
        body = memoryview(b"" if head_only else response.body)
        async with asyncio.timeout(WRITE_TIMEOUT):
            writer.write(response.head())
            for start in range(0, len(body), _CHUNK):
                writer.write(body[start : start + _CHUNK])
                await writer.drain()
            await writer.drain()
            if writer.can_write_eof():  # plain TCP: half-close, then read until the client closes too
                writer.write_eof()
                await _discard(reader)
            writer.close()
            await writer.wait_closed()


async def _discard(reader: asyncio.StreamReader) -> None:
    """Read and drop up to ``_LINGER_BYTES`` for ``LINGER`` seconds or until the client closes."""
    read = 0
    try:
        async with asyncio.timeout(LINGER):
            while read < _LINGER_BYTES and (chunk := await reader.read(65536)):
                read += len(chunk)
    except TimeoutError:
        pass
