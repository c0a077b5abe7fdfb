"""Argument types and the parser class of the command line: every input checked before any work starts.

A wrong input ends in one line on stderr that names the flag or file and what would be right, and exit
status 2; argparse's own mistakes (an unknown flag, a missing value) say which command's ``--help`` to read.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar
from urllib.parse import urlsplit

from rollout_telemetry._files import regular_file_at
from rollout_telemetry.errors import ConfigError

_N = TypeVar("_N", int, float)

__all__ = [
    "OneLineParser",
    "at_least",
    "at_least_one",
    "finite",
    "non_negative",
    "port",
    "positive",
    "readable_file",
    "share",
    "url",
    "writable_file",
]


class HelpFormatter(argparse.HelpFormatter):
    """``--help`` alike in every command: a value's metavar names its kind, every default is stated.

    - An option without its own metavar gets its type's (``metavar_of``): SECONDS, SHARE, PORT, N, FILE...,
      so the same kind of value reads the same in every command.
    - An option that takes a value and whose help does not state its default gets ``(default: ...)``.
    - Text is filled paragraph by paragraph (lines kept), so an epilog can list examples one a line.
    """

    def _get_default_metavar_for_optional(self, action: argparse.Action) -> str:
        return metavar_of(action.type) or action.dest.upper()

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if (
            "default" in text
            or action.required
            or not action.option_strings
            or action.nargs == 0
            or action.default is argparse.SUPPRESS
        ):
            return action.help
        shown = "none" if action.default is None else _shown(action.default)
        return f"{text} (default: {shown.replace('%', '%%')})"

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        fill = super()._fill_text  # a line's own indent is kept
        return "\n".join(
            fill(line, width, indent + line[: len(line) - len(line.lstrip())]) for line in text.splitlines()
        )


def _shown(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line naming the command, exit status 2, and whose help is
    ``HelpFormatter``'s."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        """Print ``<prog>: error: <message> (see '<prog> --help')`` and exit 2."""
        print(f"{self.prog}: error: {message} (see '{self.prog} --help')", file=sys.stderr)
        sys.exit(2)


def _checked(text: str, convert: Callable[[str], _N], accept: Callable[[_N], bool], what: str) -> _N:
    """``convert(text)`` if that works and ``accept`` takes it; else an error saying it must be ``what``."""
    try:
        value = convert(text)
    except ValueError:
        value = None
    if value is None or not accept(value):
        msg = f"must be {what}, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return value


def positive(text: str) -> float:
    """A number of seconds (or a rate) above 0."""
    return _checked(text, float, lambda v: math.isfinite(v) and v > 0, "a number above 0")


def finite(text: str) -> float:
    """Any finite number (a reward)."""
    return _checked(text, float, math.isfinite, "a finite number")


def non_negative(text: str) -> float:
    """A number of seconds of at least 0."""
    return _checked(text, float, lambda v: math.isfinite(v) and v >= 0, "a number of at least 0")


def at_least(minimum: float) -> Callable[[str], float]:
    """A number of seconds of at least ``minimum`` (a poll or summary interval: 0 would spin a core)."""
    return functools.partial(_at_least, minimum)


def _at_least(minimum: float, text: str) -> float:
    return _checked(
        text, float, lambda v: math.isfinite(v) and v >= minimum, f"a number of at least {minimum:g}"
    )


def share(text: str) -> float:
    """A share between 0 and 1."""
    return _checked(text, float, lambda v: 0.0 <= v <= 1.0, "a share between 0 and 1")


def port(text: str) -> int:
    """A TCP port, 0 (pick a free one) to 65535."""
    return _checked(text, int, lambda v: 0 <= v <= 65535, "a port number from 0 to 65535")


def at_least_one(text: str) -> int:
    """A whole number of at least 1."""
    return _checked(text, int, lambda v: v >= 1, "a whole number of at least 1")


def url(text: str) -> str:
    """An http:// or https:// URL with a host."""
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        msg = f"must be an http:// or https:// URL with a host (e.g. http://127.0.0.1:4318), got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    try:
        parts.port  # noqa: B018 - reading it checks it
    except ValueError:
        msg = f"has an invalid port: {text!r}"
        raise argparse.ArgumentTypeError(msg) from None
    return text


def writable_file(text: str) -> Path:
    """A file that can be written: a regular file or nothing (not a link, a pipe or a directory), in a
    directory that exists and can be written to."""
    path = Path(text)
    try:
        regular_file_at(path)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    folder = path.parent
    if not folder.is_dir():
        msg = f"{text} cannot be written: {folder} is not a directory"
        raise argparse.ArgumentTypeError(msg)
    if not os.access(path if path.exists() else folder, os.W_OK):
        msg = f"{text} cannot be written (permissions)"
        raise argparse.ArgumentTypeError(msg)
    return path


def readable_file(text: str) -> str:
    """A file that exists and can be read."""
    path = Path(text)
    if path.is_dir():
        msg = f"{text} is a directory, not a file"
        raise argparse.ArgumentTypeError(msg)
    if not path.exists():
        msg = f"{text} does not exist"
        raise argparse.ArgumentTypeError(msg)
    if not os.access(path, os.R_OK):
        msg = f"{text} cannot be read (permissions)"
        raise argparse.ArgumentTypeError(msg)
    return text


_METAVARS: dict[object, str] = {
    positive: "NUMBER",  # seconds, or a rate
    finite: "NUMBER",  # a reward
    non_negative: "SECONDS",
    _at_least: "SECONDS",
    share: "SHARE",
    port: "PORT",
    at_least_one: "N",
    int: "N",
    url: "URL",
    readable_file: "FILE",
}


def metavar_of(value_type: object) -> str | None:
    """The metavar of a value of ``value_type`` (one of the types above), or ``None``."""
    if isinstance(value_type, functools.partial):
        value_type = value_type.func
    return _METAVARS.get(value_type)
