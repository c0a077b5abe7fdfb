"""Reading a file of lines incrementally, live and offline: complete lines only, a restart detected.

A ``Tail`` hands out each complete line once, with its number, as a view into its read buffer; it holds
back a last line still being written, passes over a line longer than its cap (yielded as ``None``, for the
reader to count), opens only regular files and notices a file that starts over. It knows nothing of what
the lines say.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from stat import S_ISREG

__all__ = ["MAX_LINE", "NotRegular", "Tail", "open_regular"]

_CHUNK = 1 << 22
_HEAD = 1 << 16
"""Bytes of a file's start kept to tell a file rewritten in place from one appended to."""
_BLANK = 64  # a line longer than this is not checked for being only white space
MAX_LINE = 64 << 20
"""The longest line read (64 MiB): a longer one is skipped to its newline and yielded as ``None``."""

_log = logging.getLogger("rollout_telemetry.follow")  # the follower's: what a tail says is about following


def _state(stat: os.stat_result) -> tuple[int, int, int, int]:
    """What changes when a file is written: (device, inode, size, modification time in ns)."""
    return stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns


class NotRegular(OSError):
    """The path names a FIFO, a device, a socket or a directory: not a file of lines that ends."""


def open_regular(path: Path) -> tuple[io.FileIO, os.stat_result]:
    """Open ``path`` for reading if what is opened is a regular file, with that file's status.

    What is checked is the open descriptor, never the path before it: a path swapped for a symlink to
    ``/dev/zero`` or for a FIFO between a check and the open cannot be read forever or block. The open does
    not wait for a FIFO's writer (``O_NONBLOCK``, which changes nothing for a regular file). A symlink to a
    regular file is followed, as a user who links the latest run expects.

    Raises:
        NotRegular: it is not a regular file (closed at once, nothing read).
        OSError: it cannot be opened (missing, say).
    """
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        stat = os.fstat(descriptor)
        if not S_ISREG(stat.st_mode):
            msg = "not a regular file (a FIFO, device or directory)"
            raise NotRegular(msg)
        return io.FileIO(descriptor, "rb", closefd=True), stat
    except BaseException:
        os.close(descriptor)
        raise


class Tail:
    """One file read incrementally: complete lines only; a file that starts over is detected.

    A file starts over when it is replaced (a new inode: its writer deleted and recreated it), truncated
    below what was read, or rewritten in place: its first bytes, kept as read (up to ``_HEAD``), differ from
    what is there now. That last check catches a file truncated and regrown past the read offset between
    two polls, which neither the inode nor the size shows.

    With ``skip_existing`` a file present at start is left from an earlier run: it is not read until it
    changes (its inode, size or modification time), and then from its start.
    """

    def __init__(
        self, path: Path, *, announce: bool = False, skip_existing: bool = False, max_line: int = MAX_LINE
    ) -> None:
        self.path = path
        self.announce = announce  # say that the file is awaited (one that must come; an optional one is not)
        self.max_line = max_line
        self.skipping = False  # in a line longer than max_line: passing over it to its newline
        self.offset = 0
        self.line_number = 0
        self.identity: tuple[int, int] | None = None
        self.head = b""  # the file's first bytes as read, at most _HEAD of them
        self.unreadable_said: str | None = None  # why the file was last not read, once said
        self.stale: tuple[int, int, int, int] | None = None
        if skip_existing:
            with contextlib.suppress(OSError):
                self.stale = _state(os.stat(path))

    def rewind(self) -> None:
        self.offset = 0
        self.line_number = 0
        self.head = b""
        self.skipping = False

    def check(self) -> bool | None:
        """Whether the file started over since the last read; None if it is missing, stale or unreadable.

        What is checked is what ``open_regular`` opened; each condition that keeps the file from being read
        (missing, not regular, unreadable) is said once, until it changes.
        """
        try:
            handle, stat = open_regular(self.path)
        except OSError as exc:
            self._cannot_read(exc)
            return None
        with handle:
            self.unreadable_said = None
            if self.stale is not None:
                if _state(stat) == self.stale:
                    return None  # left from an earlier run and unchanged: not this run's
                self.stale = None  # written since: this run's, read from its start
            identity = (stat.st_dev, stat.st_ino)
            started_over = self.identity is not None and (
                identity != self.identity or stat.st_size < self.offset or not self._same_head(handle)
            )
        if started_over:
            _log.warning("%s was truncated, replaced or rewritten; reading it from the start", self.path)
            self.rewind()
        self.identity = identity
        return started_over

    def _cannot_read(self, exc: OSError) -> None:
        """Say why the file is not read, once per reason (not at every poll)."""
        reason = "missing" if isinstance(exc, FileNotFoundError) else str(exc.strerror or exc)
        if reason == self.unreadable_said:
            return
        self.unreadable_said = reason
        if isinstance(exc, FileNotFoundError):
            if self.identity is not None:
                _log.warning("%s disappeared; waiting for it to come back", self.path)
            elif self.announce:
                _log.warning("waiting for %s: it does not exist yet", self.path)
        elif isinstance(exc, NotRegular):
            _log.warning("%s is not a regular file (a FIFO, device or directory): not read", self.path)
        else:
            _log.warning("cannot read %s: %s", self.path, reason)

    def _same_head(self, handle: io.FileIO) -> bool:
        """Whether the file still starts with the bytes kept when it was read."""
        if not self.head:
            return True
        return os.pread(handle.fileno(), len(self.head), 0) == self.head

    def _open_checked(self) -> io.FileIO | None:
        """The file opened again to be read, if it is still the one ``check()`` saw (else the next poll's
        ``check()`` sees what changed)."""
        try:
            handle, stat = open_regular(self.path)
        except OSError as exc:
            self._cannot_read(exc)
            return None
        if (stat.st_dev, stat.st_ino) != self.identity:
            handle.close()
            return None
        return handle

    def lines(self) -> Iterator[tuple[int, memoryview | None]]:
        """Yield the new complete lines with their numbers; a last line without its newline waits.

        A line longer than ``max_line`` bytes is yielded as ``None`` once its newline is found; its bytes are
        passed over as they come and never held in memory or read again.

        The file is read in chunks of ``_CHUNK`` bytes and each line is handed out as a view into its chunk,
        never copied (rows are tens of kilobytes); only a line cut by the end of a chunk is copied, to be
        joined with the next one. Memory stays the same whatever the file's size. A yielded view is valid
        until the next line is asked for.
        """
        handle = self._open_checked()
        if handle is None:
            return
        with handle:
            try:
                yield from self._read(handle)
            finally:
                # The first bytes read (whole lines only), kept to tell a rewrite from an append.
                size = min(self.offset, _HEAD)
                if len(self.head) < size:
                    self.head = os.pread(handle.fileno(), size, 0)

    def last_line(self) -> tuple[int, memoryview | None] | None:
        """The file's last line when it has no newline, taken as whole: call once the file is complete.

        ``None`` when there is none (or only white space); like ``lines()``, a line longer than ``max_line``
        (or the end of one being passed over) comes as ``(number, None)``.
        """
        handle = self._open_checked()
        if handle is None:
            return None
        with handle:
            rest = os.pread(handle.fileno(), self.max_line + 1, self.offset)
        if not rest.strip() and not self.skipping:
            return None
        self.offset += len(rest)
        self.line_number += 1
        too_long, self.skipping = self.skipping or len(rest) > self.max_line, False
        return self.line_number, None if too_long else memoryview(rest)

    def _read(self, handle: io.FileIO) -> Iterator[tuple[int, memoryview | None]]:
        handle.seek(self.offset)
        buffer = bytearray(_CHUNK)
        view = memoryview(buffer)
        kept = 0  # bytes at the buffer's start: a line the last chunk cut, to be joined with the next
        while True:
            read = handle.readinto(view[kept:])
            if not read:
                return  # what is kept is a last line still being written: read again, whole, later
            size = kept + read
            start = 0
            find = buffer.find
            if self.skipping:  # the rest of a line longer than the cap: passed over to its newline, unread
                end = find(b"\n", 0, size)
                if end < 0:
                    self.offset += size
                    continue
                self.offset += end + 1
                self.line_number += 1
                self.skipping = False
                yield self.line_number, None
                start = end + 1
            while (end := find(b"\n", start, size)) >= 0:
                self.offset += end + 1 - start
                self.line_number += 1
                if end > start and (end - start > _BLANK or not buffer[start:end].isspace()):
                    yield self.line_number, view[start:end]
                start = end + 1
            kept = size - start
            if kept >= self.max_line:  # longer than any row may be: skipped from here, never held or re-read
                self.offset += kept
                self.skipping = True
                kept = 0
            elif kept == len(buffer):  # one line longer than the buffer: a larger one, the line moved
                buffer = bytearray(2 * len(buffer))
                buffer[:kept] = view[start:size]
                view = memoryview(buffer)
            else:
                buffer[:kept] = buffer[start:size]  # same length: the buffer is not resized
