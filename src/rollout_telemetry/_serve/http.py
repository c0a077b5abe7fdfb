"""A small HTTP/1.1 server on asyncio for an endpoint that must stay up while a local process attacks it.

Built on the standard library's asyncio rather than aiohttp: the endpoint serves a few GET paths and never
reads a body, so the parsing it needs is a request line and a few headers under a size cap, while the
defences it needs (a deadline on the whole request head from its first byte, connection caps per source
and in all, eviction of connections idle past a minimum age, a cap on response bytes being written, a
bounded queue in front of the worker threads) are not aiohttp's either and would be written here all the
same. Sockets are read and written directly, TLS included (``streams`` says why); the request head is read
and parsed in ``messages``, the connections are held in ``connections`` (who makes room for a newcomer:
``admission``; their responses' bytes capped: ``output_cap``), every bound is ``limits``'.

One event-loop thread owns every connection: it accepts, runs the TLS handshake, reads the request head and
writes the response, each under its own deadline, holding no thread per connection. Only a complete request
reaches the handler, which sends slow work (scrypt, rendering the exposition) to ``workers.Workers``: a fixed
set of threads behind a bounded queue; beyond it the answer is 503. Each connection carries one request and
is closed as soon as its response is written (``Connection: close``): no body is read and no second request
parsed, so there is nothing to smuggle.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any

from rollout_telemetry._serve.connections import Connection, Connections, source_of
from rollout_telemetry._serve.limits import DEFAULT_LIMITS, Limits
from rollout_telemetry._serve.messages import Handler, Request, Response, read_request
from rollout_telemetry._serve.streams import RECV_SIZE, PlainStream, TlsStream
from rollout_telemetry._serve.workers import Busy

__all__ = ["HttpServer"]

_log = logging.getLogger("rollout_telemetry.server")

_QUIET = (OSError, TimeoutError, ssl.SSLError)


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


class HttpServer:
    """Serve ``handler`` on a bound, listening socket from an event loop in a thread of its own.

    ``limits`` are its bounds; ``clock`` is the monotonic clock a connection's age is read from, for eviction
    (a test injects one); ``connections`` the table of connections (under the same ``limits``), for a handler
    that asks it what is being written.
    """

    def __init__(
        self,
        listener: socket.socket,
        handler: Handler,
        *,
        tls: ssl.SSLContext | None,
        limits: Limits = DEFAULT_LIMITS,
        clock: Callable[[], float] = time.monotonic,
        connections: Connections | None = None,
    ) -> None:
        listener.setblocking(False)
        self._limits = limits
        self._clock = clock
        self._listener = listener
        self._handler = handler
        self._tls = tls
        self._log = ThrottledLog()
        self._loop = asyncio.new_event_loop()
        self._loop.set_exception_handler(self._loop_error)
        self._connections = connections or Connections(limits)  # touched only on the loop's thread
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
            # Let the connections already accepted run before the next batch: an accept that finds a
            # connection waiting does not yield, and a flood refused at once would otherwise hold the loop.
            await asyncio.sleep(0)
            try:
                sock, address = await self._loop.sock_accept(self._listener)
            except OSError as exc:  # out of file descriptors, say: wait for some to come back
                self._log(logging.WARNING, "cannot accept a connection: %s", exc)
                await asyncio.sleep(0.1)
                continue
            self._take(sock, address)
            # The rest of the batch: what the kernel has queued already.
            for _ in range(self._limits.accept_batch - 1):
                try:
                    sock, address = self._listener.accept()
                except (BlockingIOError, InterruptedError):
                    break
                except OSError as exc:
                    self._log(logging.WARNING, "cannot accept a connection: %s", exc)
                    break
                sock.setblocking(False)
                self._take(sock, address)

    def _take(self, sock: socket.socket, address: Any) -> None:
        connection = Connection(sock, str(address[0]), source_of(str(address[0])), self._clock())
        if not self._connections.admit(connection):
            sock.close()
            return
        connection.task = asyncio.create_task(self._serve_connection(connection))
        connection.task.add_done_callback(functools.partial(self._forget, connection))
        self._tasks.add(connection.task)

    def _forget(self, connection: Connection, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._connections.release(connection)

    async def _serve_connection(self, connection: Connection) -> None:
        try:
            progressed = functools.partial(self._progressed, connection)
            stream: PlainStream = PlainStream(self._loop, connection.sock, progressed)
            if self._tls is not None:
                async with asyncio.timeout(self._limits.handshake_timeout):
                    # No TLS state until the client sends something: OpenSSL's allocations for each of a
                    # flood of idle connections, freed as they go, left glibc's heap fragmented and large.
                    if not (hello := await self._loop.sock_recv(connection.sock, RECV_SIZE)):
                        return
                    stream = TlsStream(self._loop, connection.sock, progressed, self._tls, hello)
                    await stream.handshake()
            if await self._exchange(connection, stream):
                # Answered: the response was let go of on return, so a lingering client holds none of it.
                connection.sock.shutdown(socket.SHUT_WR)
                await _discard(stream, self._limits)
        except _QUIET as exc:
            _log.debug("connection from %s closed: %r", connection.address, exc)
        except Exception as exc:
            self._log(logging.ERROR, "error serving a connection: %r", exc)

    def _progressed(self, connection: Connection) -> None:
        connection.progressed = self._clock()

    async def _exchange(self, connection: Connection, stream: PlainStream) -> bool:
        """Read one request and write its response; False if no request came."""
        evictable = functools.partial(self._connections.evictable, connection)
        received = await read_request(stream, connection.address, self._limits, evictable)
        self._connections.stop_waiting(connection)  # it has its request: busy, not evictable
        if received is None:
            return False
        if isinstance(received, Request):
            response = await self._answer(received)
            head_only = received.method == "HEAD"
        else:
            response, head_only = received, False
        await self._write(connection, stream, response, head_only=head_only)
        self._connections.answered(connection)  # from here on it only drains: the first to go for room
        return True

    async def _answer(self, request: Request) -> Response:
        try:
            return await self._handler(request)
        except Busy:
            return _BUSY
        except Exception as exc:
            self._log(logging.ERROR, "error answering %s %s: %r", request.method, request.path, exc)
            return Response.text(500, "internal error\n")

    async def _write(
        self, connection: Connection, stream: PlainStream, response: Response, *, head_only: bool
    ) -> None:
        """Write the response within ``write_timeout`` (TLS: and close_notify).

        The body is sent from the response's own bytes (often one rendering shared by many scrapes), never
        copied per connection; it is counted against ``max_output`` until it is sent. A body that does not
        fit waits for room up to ``room_wait``; if there is none by then it is not sent: the client is told
        to come back (503), and no write in progress is cut for it.
        """
        body = b"" if head_only else response.body
        if not await self._room(connection, body):
            response, body = _BUSY, _BUSY.body
            self._connections.output.start(connection, body, self._clock())
        async with asyncio.timeout(self._limits.write_timeout):
            head = response.head()
            if len(body) <= RECV_SIZE:
                await stream.send(head + body)
            else:
                await stream.send(head)
                await stream.send(body)
            await stream.finish()
        self._connections.output.end(connection, taken=True)

    async def _room(self, connection: Connection, body: bytes) -> bool:
        """Count ``body`` against ``max_output`` for the connection, waiting up to ``room_wait`` for writes to
        end or stall if it does not fit (one body waits at a time); False if it still does not."""
        output = self._connections.output
        if output.start(connection, body, self._clock()):
            return True
        loop = asyncio.get_running_loop()  # the waits are the loop's seconds: so is the deadline
        deadline = loop.time() + self._limits.room_wait
        with output.waiting_for_room(body) as waits:
            while waits and (left := deadline - loop.time()) > 0:
                # woken when a body is freed, or after a while: a write may have stalled meanwhile
                await output.freed(min(left, self._limits.stalled_briefly))
                if output.start(connection, body, self._clock()):
                    return True
        return False


_BUSY = Response(
    503, (("Content-Type", "text/plain; charset=utf-8"), ("Retry-After", "1")), b"busy: try again\n"
)


async def _discard(stream: PlainStream, limits: Limits) -> None:
    """Read and drop up to ``linger_bytes`` for ``linger`` seconds or until the client closes."""
    read = 0
    with contextlib.suppress(TimeoutError, *_QUIET):
        async with asyncio.timeout(limits.linger):
            while read < limits.linger_bytes and (chunk := await stream.recv(65536)):
                read += len(chunk)
