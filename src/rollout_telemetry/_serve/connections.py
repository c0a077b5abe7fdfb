"""The connections an endpoint holds: which are admitted, which are evicted for a newcomer, and how many bytes
of responses they may be writing at once.

A client is counted by its *source* (an IPv4 address, an IPv6 /64), so one host cannot take every slot. When
a newcomer needs room (its source at its cap, or the server full), the first to go is a connection already
answered (it is only draining what its client still sends); then an idle one: without a complete request,
or waiting for its turn at a password check. A source gives up its own at any age; a full server gives up
its oldest idle connection past ``EVICT_AFTER``, or else the oldest idle one of the source holding the most
connections, if that is more than ``FAIR_SHARE``: a few addresses cannot hold every slot, while a client
whose request is a round trip away is not evicted by a flood from many. The responses being written share
``MAX_OUTPUT``; the writes running longest are cut short to make room for the newest.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import struct
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass

__all__ = [
    "EVICT_AFTER",
    "FAIR_SHARE",
    "MAX_CONNECTIONS",
    "MAX_OUTPUT",
    "MAX_PER_SOURCE",
    "Connection",
    "Connections",
    "evictable",
    "serving",
    "source_of",
]

MAX_CONNECTIONS = 512
"""Connections held at once; when full, one idle past ``EVICT_AFTER`` is closed for the newcomer."""
MAX_PER_SOURCE = 128
"""Connections one source (an IPv4 address, an IPv6 /64) may hold; beyond, its own oldest idle one goes."""
EVICT_AFTER = 1.0
"""Seconds a connection is safe from eviction by a newcomer to a full server: a remote client's request
takes a round trip or a TLS handshake to arrive."""
MAX_OUTPUT = 32 * 1024 * 1024
"""Bytes of responses being written at once, counted per response; beyond, the longest-running writes
are cut short (their connections reset) to make room for the newest."""
FAIR_SHARE = MAX_CONNECTIONS // 16
"""Connections a source may hold on a full server before its young idle ones may be evicted for others."""
_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() resets the connection


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


@dataclass(eq=False, slots=True)
class Connection:
    """What the loop knows of one connection: whose it is, since when, and what it is doing."""

    sock: socket.socket
    address: str
    source: str
    opened: float
    task: asyncio.Task[None] | None = None
    output: int = 0  # bytes of the response being written, counted against MAX_OUTPUT
    cut: bool = False  # its response was cut short: reset, not closed


class Connections:
    """The connections held, by source: those idle (no request yet, or waiting for a password check's turn),
    those answered and draining, and those writing a response.

    Touched only on the event loop's thread. Each dict keeps its connections oldest first.
    """

    def __init__(self) -> None:
        self._held: dict[Connection, None] = {}
        self._idle: dict[Connection, None] = {}  # may be evicted once the answered are gone
        self._answered: dict[Connection, None] = {}  # the first to be evicted
        self._by_source: dict[str, dict[Connection, None]] = {}
        self._writing: dict[Connection, None] = {}
        self._output = 0

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
        return True

    def _make_room(self, source: str, now: float) -> bool:
        """Whether a newcomer from ``source`` may be held, closing a connection for it if need be."""
        mine = self._by_source.get(source, {})
        if len(mine) >= MAX_PER_SOURCE:  # it competes only with itself: its own, at any age
            victim = next((c for c in mine if c in self._answered), None) or next(
                (c for c in mine if c in self._idle), None
            )
        elif len(self._held) >= MAX_CONNECTIONS:
            victim = next(iter(self._answered), None) or self._idle_victim(now)
        else:
            return True
        if victim is None:
            return False
        self._drop(victim)
        return True

    def _idle_victim(self, now: float) -> Connection | None:
        """On a full server: the oldest idle connection past ``EVICT_AFTER``, else the oldest idle one of the
        source holding the most connections if that is more than ``FAIR_SHARE``."""
        oldest = next(iter(self._idle), None)
        if oldest is None or now - oldest.opened >= EVICT_AFTER:
            return oldest
        heaviest = max(self._by_source.values(), key=len)
        if len(heaviest) <= FAIR_SHARE:
            return None
        return next((c for c in heaviest if c in self._idle), None)

    def stop_waiting(self, connection: Connection) -> None:
        """The connection has its request (or its turn), or will have none: it is busy, not evictable."""
        self._idle.pop(connection, None)

    def wait(self, connection: Connection) -> None:
        """The connection waits with nothing in hand (its turn at a password check): it may be evicted."""
        if connection in self._held:
            self._idle[connection] = None

    def answered(self, connection: Connection) -> None:
        """The connection's response is written: it is the first to go when room is needed."""
        if connection in self._held:
            self._idle.pop(connection, None)
            self._answered[connection] = None

    def _drop(self, connection: Connection) -> None:
        """Close a connection now: it leaves every count at once; its task, cancelled, closes the socket
        once its pending reads and writes have let go of it (the descriptor may be reused at once)."""
        connection.cut = connection in self._writing
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

    def start_output(self, connection: Connection, size: int) -> None:
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

    def end_output(self, connection: Connection) -> None:
        """The connection's response is written: its bytes no longer count against ``MAX_OUTPUT``."""
        if connection in self._writing:
            del self._writing[connection]
            self._output -= connection.output
            connection.output = 0


_serving: ContextVar[tuple[Connections, Connection] | None] = ContextVar(
    "rollout_telemetry_serving", default=None
)


def serving(connections: Connections, connection: Connection) -> None:
    """Name the connection the calling task serves (called first thing in the connection's own task)."""
    _serving.set((connections, connection))


@contextlib.contextmanager
def evictable() -> Iterator[None]:
    """While inside, the connection the calling task serves waits with nothing in hand: it may be evicted
    (its task cancelled) for a newcomer, as a connection without a request may. Outside a served connection's
    task it does nothing."""
    current = _serving.get()
    if current is None:
        yield
        return
    connections, connection = current
    connections.wait(connection)
    try:
        yield
    finally:
        connections.stop_waiting(connection)
