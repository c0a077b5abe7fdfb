"""Files the package writes: regular files only, read a bounded amount, replaced whole, never followed.

A name that is a symbolic link, a named pipe, a device, a socket or a folder is refused, not written through:
a link would send the write (or the read) outside the folder the user named, a pipe would block the command,
a link to ``/dev/zero`` would be read until memory runs out. A file is written to a temporary file beside it,
then renamed onto the name: a rename replaces a link rather than following it, and a reader (Prometheus,
a browser) sees the old file or the new one, never half of one.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path

from rollout_telemetry.errors import ConfigError

__all__ = ["read_prefix", "regular_file_at", "write_whole"]

MODE = 0o644
"""What a written file's permissions are: its owner writes it, anyone (Prometheus' own user) reads it."""

_KINDS = (
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)
# Where the platform has them: no link followed at open, no wait on a pipe's writer.
_READ_FLAGS = (
    os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
)


def _not_regular(path: Path, what: str) -> ConfigError:
    return ConfigError(f"{path} is {what}, not a regular file: refused (nothing written)")


def _refuse_unless_regular(path: Path, mode: int) -> None:
    if not stat.S_ISREG(mode):
        raise _not_regular(path, next((kind for test, kind in _KINDS if test(mode)), "not a file"))


def regular_file_at(path: Path) -> bool:
    """Whether a regular file is at ``path`` (``False``: nothing is); the name itself, a link not followed.

    Raises:
        ConfigError: something else is there (a link, a pipe, a device, a socket, a folder).
    """
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return False
    _refuse_unless_regular(path, mode)
    return True


def read_prefix(path: Path, limit: int) -> bytes | None:
    """The first ``limit`` bytes of the regular file at ``path`` (``None`` if nothing is there): enough to
    tell whether it holds a given text of ``limit - 1`` bytes, however large the file.

    Raises:
        ConfigError: something else is there, or took its place between the look and the open.
        OSError: it cannot be read.
    """
    if not regular_file_at(path):
        return None
    try:
        descriptor = os.open(path, _READ_FLAGS)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW: a link put there since the look
            raise _not_regular(path, "a symbolic link") from None
        raise
    try:
        _refuse_unless_regular(path, os.fstat(descriptor).st_mode)
        chunks: list[bytes] = []
        left = limit
        while left > 0 and (chunk := os.read(descriptor, left)):
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(descriptor)


def write_whole(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in its folder renamed onto it: a reader sees the
    old file or the new one, and a link at ``path`` is replaced, never followed. The file's mode is ``MODE``.

    Raises:
        OSError: the folder cannot be written, or ``path`` is a folder.
    """
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, MODE)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
