"""The connections an endpoint holds, by source and by state: which are admitted, which one is closed for a
newcomer when there is no room (``admission``'s rules), and what they are writing (``output_cap``).

A client is counted by its *source* (an IPv4 address, an IPv6 /64), so one host cannot take every slot. The
kernel holds its share of a response too: a connection of a source that is not a reader is given a send
buffer of ``non_reader_send_buffer``, so a client that never reads costs the kernel that much and its write
stalls, instead of a whole exposition copied into the kernel per connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from rollout_telemetry._serve.admission import FOR_A_FULL_SERVER, FOR_A_SOURCE_AT_ITS_CAP
from rollout_telemetry._serve.limits import DEFAULT_LIMITS, Limits
from rollout_telemetry._serve.output_cap import Output

__all__ = ["Connection", "Connections", "source_of"]

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
    those answered and draining, and those writing a response (``output_cap``).

    Touched only on the event loop's thread. Each mapping keeps its connections oldest first.
    """

    def __init__(self, limits: Limits = DEFAULT_LIMITS) -> None:
        self.limits = limits
        self.output = Output(limits, self._drop)
        self._held: dict[Connection, None] = {}
        self._idle: dict[Connection, None] = {}  # may be evicted once the answered are gone
        self._draining: dict[Connection, None] = {}  # answered: the first to be evicted
        self._by_source: dict[str, dict[Connection, None]] = {}

    @property
    def idle(self) -> Mapping[Connection, None]:
        """The connections without a complete request, or waiting for their turn at a password check."""
        return self._idle

    @property
    def draining(self) -> Mapping[Connection, None]:
        """The connections answered, draining what their client still sends."""
        return self._draining

    @property
    def by_source(self) -> Mapping[str, Mapping[Connection, None]]:
        """The connections held, by source."""
        return self._by_source

    def __contains__(self, connection: Connection) -> bool:
        """Whether the connection is held (admitted, not yet evicted or released)."""
        return connection in self._held

    def admit(self, connection: Connection) -> bool:
        """Hold a newcomer, closing a connection for it if need be (``admission``); False if it cannot be."""
        if not self._make_room(connection.source, connection.opened):
            return False
        self._held[connection] = None
        self._idle[connection] = None
        self._by_source.setdefault(connection.source, {})[connection] = None
        if not self.output.is_reader(connection.source):
            with contextlib.suppress(OSError):  # a socket already gone: its first read ends its task
                connection.sock.setsockopt(
                    socket.SOL_SOCKET, socket.SO_SNDBUF, self.limits.non_reader_send_buffer
                )
        return True

    def _make_room(self, source: str, now: float) -> bool:
        """Whether a newcomer from ``source`` may be held, closing a connection for it if need be."""
        if len(self._by_source.get(source, ())) >= self.limits.max_per_source:
            rules = FOR_A_SOURCE_AT_ITS_CAP
        elif len(self._held) >= self.limits.max_connections:
            rules = FOR_A_FULL_SERVER
        else:
            return True
        for rule in rules:
            if (victim := rule(self, source, now)) is not None:
                self._drop(victim)
                return True
        return False

    def stop_waiting(self, connection: Connection) -> None:
        """The connection has its request (or its turn), or will have none: it is busy, not evictable."""
        self._idle.pop(connection, None)

    @contextlib.contextmanager
    def evictable(self, connection: Connection) -> Iterator[None]:
        """While inside, the connection waits with nothing in hand (its turn at a password check): it may be
        evicted (its task cancelled) for a newcomer, as a connection without a request may."""
        if connection in self._held:
            self._idle[connection] = None
        try:
            yield
        finally:
            self.stop_waiting(connection)

    def answered(self, connection: Connection) -> None:
        """The connection's response is written: it is the first to go when room is needed."""
        if connection in self._held:
            self._idle.pop(connection, None)
            self._draining[connection] = None

    def _drop(self, connection: Connection) -> None:
        """Close a connection now: it leaves every count at once; its task, cancelled, closes the socket
        once its pending reads and writes have let go of it (the descriptor may be reused at once). A write
        cut so makes its source a reader no more."""
        connection.cut = self.output.is_writing(connection)
        if connection.cut:
            self.output.forget_reader(connection.source)
        self._untrack(connection)
        if connection.task is not None:
            connection.task.cancel()

    def release(self, connection: Connection) -> None:
        """Forget a connection whose task has ended, and close its socket."""
        # A response cut short (for the output cap, or at the write deadline) ends in a reset, so what the
        # kernel still holds of it is dropped at once.
        if connection.cut or self.output.is_writing(connection):
            with contextlib.suppress(OSError):
                connection.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
        self._untrack(connection)
        connection.sock.close()

    def _untrack(self, connection: Connection) -> None:
        self._held.pop(connection, None)
        self._idle.pop(connection, None)
        self._draining.pop(connection, None)
        mine = self._by_source.get(connection.source)
        if mine is not None:
            mine.pop(connection, None)
            if not mine:
                del self._by_source[connection.source]
        self.output.end(connection)
