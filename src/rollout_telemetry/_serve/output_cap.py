"""The responses being written: their bodies counted against ``max_output``, the writes cut for room, the
sources that read, and the one body waiting for room.

The bodies share ``max_output``, counted once however many clients a body is written to. A new body that would
not fit first cuts short the writes stalled longest (no byte taken by their client for ``stalled_after``); a
write that progresses, a scrape in progress, is never cut: the newcomer waits for room instead, up to
``room_wait`` (``http``; then it is told to come back, 503). One body waits at a time, shared by whoever asks
for the same exposition meanwhile. A *reader* is a source whose client took the whole of a body of
``reader_body`` or more: a newcomer of a reader may also cut the writes of sources that are not, stalled for
only ``stalled_briefly`` (``stalled_stranger``): clients that never read, arriving faster than their writes
stall for ``stalled_after``, would otherwise keep the cap full and a scraper out. A source whose write is cut
is a reader no more.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from rollout_telemetry._serve.limits import Limits

if TYPE_CHECKING:
    from rollout_telemetry._serve.connections import Connection

__all__ = ["Output"]


class Output:
    """The response bodies being written, by connection, within ``max_output``; the readers remembered.

    ``cut`` closes a connection whose write is cut short for room (the connection table's). Touched only on
    the event loop's thread.
    """

    def __init__(self, limits: Limits, cut: Callable[[Connection], None]) -> None:
        self._limits = limits
        self._cut = cut
        self._writing: dict[Connection, None] = {}  # oldest first
        self._bodies: dict[int, tuple[int, int]] = {}  # id of a body being written: its size, its writers
        self._output = 0
        self._readers: dict[str, None] = {}  # sources whose client took a large body whole, latest last
        self._waiting: dict[int, int] = {}  # id of the one body waiting for room: how many wait with it
        self._freed: set[asyncio.Future[None]] = set()  # woken when a body stops counting (freed)

    def is_writing(self, connection: Connection) -> bool:
        """Whether a response is being written to the connection."""
        return connection in self._writing

    def is_reader(self, source: str) -> bool:
        """Whether a client of ``source`` took a body of ``reader_body`` or more whole (lately)."""
        return source in self._readers

    def forget_reader(self, source: str) -> None:
        """``source``'s write was cut: it is a reader no more."""
        self._readers.pop(source, None)

    def stalled(
        self, now: float, after: float, among: Iterable[Connection] | None = None
    ) -> Connection | None:
        """The write stalled longest (of ``among``'s), if its client has taken nothing for ``after`` s."""
        if not self._writing:
            return None
        writes = self._writing if among is None else (c for c in among if c in self._writing)
        stalled = min(writes, key=lambda c: c.progressed, default=None)
        return stalled if stalled is not None and now - stalled.progressed >= after else None

    def stalled_stranger(self, source: str, now: float) -> Connection | None:
        """For a newcomer of a reader ``source``: the write stalled longest of a source that is not a reader,
        if it has stalled for ``stalled_briefly``."""
        if source not in self._readers or not self._writing:
            return None
        strangers = (c for c in self._writing if c.source not in self._readers)
        return self.stalled(now, self._limits.stalled_briefly, strangers)

    def start(self, connection: Connection, body: bytes, now: float) -> bool:
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

    def _cut_for(self, size: int, now: float, source: str) -> None:
        """Cut stalled writes until ``size`` more bytes fit: stalled for ``stalled_after``, and for the body
        of a reader ``source`` (still one after those cuts) also those of other sources stalled for
        ``stalled_briefly``."""
        cap = self._limits.max_output
        while self._output + size > cap and (victim := self.stalled(now, self._limits.stalled_after)):
            self._cut(victim)
        while self._output + size > cap and (victim := self.stalled_stranger(source, now)):
            self._cut(victim)

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

    def end(self, connection: Connection, *, taken: bool = False) -> None:
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
