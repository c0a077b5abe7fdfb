"""The connections an endpoint holds: which are admitted, which are evicted for a newcomer, and how many bytes
of responses they may be writing at once.

A client is counted by its *source* (an IPv4 address, an IPv6 /64), so one host cannot take every slot. When
a newcomer needs room (its source at its cap, or the server full), the first to go is a connection already
answered (it is only draining what its client still sends); then an idle one: without a complete request,
or waiting for its turn at a password check. A source gives up its own at any age; a full server gives up
its oldest idle connection past ``evict_after``, or else the oldest idle one of the source holding the most
connections, if that is more than ``fair_share``: a few addresses cannot hold every slot, while a client
whose request is a round trip away is not evicted by a flood from many; a write that has stalled (its client
reads nothing) for ``evict_after`` goes before the idle, and for a newcomer from a *reader* (below) so does
a write of a source that is not one stalled for ``stalled_briefly``: clients that never read, arriving faster
than their writes stall for ``evict_after``, would otherwise hold every slot and keep a scraper out.

The responses being written share ``max_output``, counted by the bodies they hold: one rendering written to
many clients counts once. A new body that would not fit first cuts short the writes stalled longest (no
byte taken by their client for ``stalled_after``); a write that progresses, a scrape in progress, is never
cut: the newcomer waits for room instead, up to ``room_wait`` (then it is told to come back, 503). One body
waits at a time, shared by whoever asks for the same exposition meanwhile. A newcomer whose source is a
*reader* (its client took the whole of a large response before, ``reader_body``) may also cut writes of
sources that are not, stalled for only ``stalled_briefly``: clients that never read, arriving faster than
their writes stall for ``stalled_after``, would otherwise keep the cap full and a scraper out. A source
whose write is cut as stalled is a reader no more.

The kernel holds its share of a response too: a connection of a source that is not a reader is given a send
buffer of ``non_reader_send_buffer``, so a client that never reads costs the kernel that much and its write
stalls, instead of a whole exposition copied into the kernel per connection. With buffers the kernel tuned,
600 such clients a second of a 2.5 MB exposition made it copy 1.5 GB/s, and an authorised scrape waited
0.5 to 1.5 s for the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from rollout_telemetry._serve.limits import DEFAULT_LIMITS, Limits

__all__ = [
    "Connection",
    "Connections",
    "source_of",
]

_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() resets the connection


def source_of(address: str) -> str:
    """The source a client address counts as for caps and fairness: the IPv4 address, or the IPv6 /64.

    One host on IPv6 usually has a whole /64 to pick addresses from; an IPv4-mapped address is its IPv4.
    """
    if ":" not in address:  # IPv4, as a socket gives it: its own source, without ipaddress's parsing
        return address
    try:
        ip = ipaddress.IPv6Address(address.partition("%")[0])
    except ValueError:
        return address
    if ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ipaddress.IPv6Network((ip, 64), strict=False))


@dataclass(eq=False, slots=True)
class Connection:
    """What the loop knows of one connection: whose it is, since when, and what it is doing."""

    sock: socket.socket
    address: str
    source: str
    opened: float
    task: asyncio.Task[None] | None = None
    body: bytes | None = None  # the response body being written, counted against max_output
    progressed: float = 0.0  # when its client last took a byte of the response (or it began)
    cut: bool = False  # its response was cut short: reset, not closed


class Connections:
    """The connections held, by source: those idle (no request yet, or waiting for a password check's turn),
    those answered and draining, and those writing a response.

    Touched only on the event loop's thread. Each dict keeps its connections oldest first.
    """

    def __init__(self, limits: Limits = DEFAULT_LIMITS) -> None:
        self._limits = limits
        self._held: dict[Connection, None] = {}
        self._idle: dict[Connection, None] = {}  # may be evicted once the answered are gone
        self._answered: dict[Connection, None] = {}  # the first to be evicted
        self._by_source: dict[str, dict[Connection, None]] = {}
        self._writing: dict[Connection, None] = {}
        self._bodies: dict[int, tuple[int, int]] = {}  # id of a body being written: its size, its writers
        self._output = 0
        self._readers: dict[str, None] = {}  # sources whose client took a large body whole, latest last
        self._waiting: dict[int, int] = {}  # id of the one body waiting for room: how many wait with it
        self._freed: set[asyncio.Future[None]] = set()  # woken when a body stops counting (freed)

    def __contains__(self, connection: Connection) -> bool:
        """Whether the connection is held (admitted, not yet evicted or released)."""
        return connection in self._held

    def admit(self, connection: Connection) -> bool:
        """Hold a newcomer, closing an idle connection for it if need be; False if there is no room."""
        if not self._make_room(connection.source, connection.opened):
            return False
        self._held[connection] = None
        self._idle[connection] = None
        self._by_source.setdefault(connection.source, {})[connection] = None
        if connection.source not in self._readers:
            with contextlib.suppress(OSError):  # a socket already gone: its first read ends its task
                connection.sock.setsockopt(
                    socket.SOL_SOCKET, socket.SO_SNDBUF, self._limits.non_reader_send_buffer
                )
        return True

    def _make_room(self, source: str, now: float) -> bool:
        """Whether a newcomer from ``source`` may be held, closing a connection for it if need be."""
        mine = self._by_source.get(source, {})
        if len(mine) >= self._limits.max_per_source:  # it competes only with itself: its own, at any age
            # Each scan of the source's connections only if there is something to find.
            answered = next((c for c in mine if c in self._answered), None) if self._answered else None
            stalled = self._stalled(now, self._limits.evict_after, among=mine) if self._writing else None
            victim = answered or stalled or next((c for c in mine if c in self._idle), None)
        elif len(self._held) >= self._limits.max_connections:
            victim = (
                next(iter(self._answered), None)
                or self._stalled(now, self._limits.evict_after)
                or self._stalled_for_reader(source, now)
                or self._idle_victim(now)
            )
        else:
            return True
        if victim is None:
            return False
        self._drop(victim)
        return True

    def _idle_victim(self, now: float) -> Connection | None:
        """On a full server: the oldest idle connection past ``evict_after``, else the oldest idle one of the
        source holding the most connections if that is more than ``fair_share``."""
        oldest = next(iter(self._idle), None)
        if oldest is None or now - oldest.opened >= self._limits.evict_after:
            return oldest
        heaviest = max(self._by_source.values(), key=len)
        if len(heaviest) <= self._limits.fair_share:
            return None
        return next((c for c in heaviest if c in self._idle), None)

    def _stalled(
        self, now: float, after: float, among: Iterable[Connection] | None = None
    ) -> Connection | None:
        """The write stalled longest, if its client has taken nothing for ``after`` seconds."""
        writes = self._writing if among is None else (c for c in among if c in self._writing)
        stalled = min(writes, key=lambda c: c.progressed, default=None)
        return stalled if stalled is not None and now - stalled.progressed >= after else None

    def _cut_for(self, size: int, now: float, source: str) -> None:
        """Cut stalled writes until ``size`` more bytes fit: stalled for ``stalled_after``, and for the body
        of a reader ``source`` (still one after those cuts) also those of other sources stalled for
        ``stalled_briefly``."""
        while self._output + size > self._limits.max_output and (
            victim := self._stalled(now, self._limits.stalled_after)
        ):
            self._drop(victim)
        while self._output + size > self._limits.max_output and (
            victim := self._stalled_for_reader(source, now)
        ):
            self._drop(victim)

    def _stalled_for_reader(self, source: str, now: float) -> Connection | None:
        """For a newcomer from a reader ``source``: the write stalled longest of a source not a reader, if it
        has stalled for ``stalled_briefly``."""
        if source not in self._readers or not self._writing:
            return None
        return self._stalled(
            now, self._limits.stalled_briefly, (c for c in self._writing if c.source not in self._readers)
        )

    def stop_waiting(self, connection: Connection) -> None:
        """The connection has its request (or its turn), or will have none: it is busy, not evictable."""
        self._idle.pop(connection, None)

    def wait(self, connection: Connection) -> None:
        """The connection waits with nothing in hand (its turn at a password check): it may be evicted."""
        if connection in self._held:
            self._idle[connection] = None

    @contextlib.contextmanager
    def evictable(self, connection: Connection) -> Iterator[None]:
        """While inside, the connection waits with nothing in hand (its turn at a password check): it may be
        evicted (its task cancelled) for a newcomer, as a connection without a request may."""
        self.wait(connection)
        try:
            yield
        finally:
            self.stop_waiting(connection)

    def answered(self, connection: Connection) -> None:
        """The connection's response is written: it is the first to go when room is needed."""
        if connection in self._held:
            self._idle.pop(connection, None)
            self._answered[connection] = None

    def _drop(self, connection: Connection) -> None:
        """Close a connection now: it leaves every count at once; its task, cancelled, closes the socket
        once its pending reads and writes have let go of it (the descriptor may be reused at once). A write
        cut so makes its source a reader no more."""
        connection.cut = connection in self._writing
        if connection.cut:
            self._readers.pop(connection.source, None)
        self._untrack(connection)
        if connection.task is not None:
            connection.task.cancel()

    def release(self, connection: Connection) -> None:
        """Forget a connection whose task has ended, and close its socket."""
        # A response cut short (for the output cap, or at the write deadline) ends in a reset, so what the
        # kernel still holds of it is dropped at once.
        if connection.cut or connection in self._writing:
            with contextlib.suppress(OSError):
                connection.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
        self._untrack(connection)
        connection.sock.close()

    def _untrack(self, connection: Connection) -> None:
        self._held.pop(connection, None)
        self._idle.pop(connection, None)
        self._answered.pop(connection, None)
        mine = self._by_source.get(connection.source)
        if mine is not None:
            mine.pop(connection, None)
            if not mine:
                del self._by_source[connection.source]
        self.end_output(connection)

    def start_output(self, connection: Connection, body: bytes, now: float) -> bool:
        """Count ``body`` against ``max_output`` while it is written to the connection; False if it does not
        fit even once the stalled writes are cut short (the caller refuses the request instead).

        A body already being written to another client costs nothing more. A new one that would not fit
        cuts the writes stalled longest (``stalled_after``) until it does; a write whose client is taking
        it is never cut. One body larger than the cap is written when nothing else is.
        """
        size = len(body)
        held = self._bodies.get(id(body))
        if held is None:
            self._cut_for(size, now, connection.source)
            if self._output + size > self._limits.max_output and self._output:
                return False
            self._output += size
        self._bodies[id(body)] = (size, 1 + (held[1] if held is not None else 0))
        connection.body = body
        connection.progressed = now
        self._writing[connection] = None
        return True

    def writing(self, body: bytes) -> bool:
        """Whether ``body`` (this very object) is being written to a connection, or waits for room to be."""
        return id(body) in self._bodies or id(body) in self._waiting

    @contextlib.contextmanager
    def waiting_for_room(self, body: bytes) -> Iterator[bool]:
        """While inside, ``body`` waits for room (``writing`` says so: a scrape asking for the same exposition
        meanwhile shares it); yields False if another body waits already (the caller refuses at once)."""
        key = id(body)
        if self._waiting and key not in self._waiting:
            yield False
            return
        self._waiting[key] = self._waiting.get(key, 0) + 1
        try:
            yield True
        finally:
            if waiters := self._waiting.pop(key) - 1:
                self._waiting[key] = waiters

    async def freed(self, timeout: float) -> None:
        """Return once a body being written stops counting against ``max_output``, or after ``timeout``
        seconds."""
        future = asyncio.get_running_loop().create_future()
        self._freed.add(future)
        try:
            await asyncio.wait_for(future, timeout)
        except TimeoutError:
            pass
        finally:
            self._freed.discard(future)

    def end_output(self, connection: Connection, *, taken: bool = False) -> None:
        """The connection's response is written (``taken``: its client took it whole) or abandoned: its body
        no longer counts against ``max_output`` (once no other write holds it). A client that took a body of
        ``reader_body`` or more makes its source a reader."""
        if connection not in self._writing:
            return
        del self._writing[connection]
        body, connection.body = connection.body, None
        assert body is not None
        if taken and len(body) >= self._limits.reader_body:
            self._readers.pop(connection.source, None)
            self._readers[connection.source] = None
            if len(self._readers) > self._limits.max_readers:
                del self._readers[next(iter(self._readers))]
        size, writers = self._bodies.pop(id(body))
        if writers > 1:
            self._bodies[id(body)] = (size, writers - 1)
        else:
            self._output -= size
            for future in self._freed:
                if not future.done():
                    future.set_result(None)
