"""``rollout-telemetry gym -- <command>``: run NeMo Gym's collection as a child process and watch its files.

A user prefixes the command they already run. The output file comes from the command's own arguments
(``--output``/``-o``, or Hydra's ``output_jsonl_fpath=``), and with it the failures sidecar and the
materialized inputs. A fresh run (no ``--resume``) replaces the files of an earlier run with the same output,
so whatever is there at start is not read until Gym writes it; a resumed run appends, so its files are read
from their start.

The child runs in a process group of its own, so the terminal's Ctrl-C reaches this process alone; each
SIGINT or SIGTERM is passed on to the child's group once, as the terminal would have, and Gym is waited for.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from rollout_telemetry.errors import ConfigError

__all__ = ["GymCommand", "GymProcess", "describe_status", "exit_status"]

_OUTPUT_FLAGS = ("--output", "-o")
_OUTPUT_KEY = "output_jsonl_fpath"
_RESUME_FLAG = "--resume"
_RESUME_KEY = "resume_from_cache"
_TRUE = ("true", "1", "yes")


def _hydra(argument: str, key: str) -> str | None:
    """The value of a Hydra override ``key=value`` (also ``+key=`` and ``++key=``), or ``None``."""
    name, equals, value = argument.lstrip("+").partition("=")
    return value if equals and name == key else None


@dataclass(frozen=True, slots=True)
class GymCommand:
    """A Gym command line and what this tool reads from it: the output file and whether it resumes."""

    argv: tuple[str, ...]
    output: Path
    resume: bool

    @classmethod
    def parse(cls, argv: Sequence[str]) -> GymCommand:
        """Find the output file and ``--resume`` in a Gym command line (the last of each wins, as in Gym).

        Raises:
            ConfigError: no command, or no output file in it.
        """
        words = list(argv)
        if words[:1] == ["--"]:
            words = words[1:]
        if not words:
            msg = (
                "give the Gym command after --, e.g. rollout-telemetry gym -- gym eval run --output "
                "out/rollouts.jsonl ..."
            )
            raise ConfigError(msg)
        output: str | None = None
        resume = False
        for index, word in enumerate(words):
            if word in _OUTPUT_FLAGS and index + 1 < len(words):
                output = words[index + 1]
            elif word.startswith(("--output=", "-o=")):
                output = word.partition("=")[2]
            elif (value := _hydra(word, _OUTPUT_KEY)) is not None:
                output = value
            elif word == _RESUME_FLAG:
                resume = True
            elif (value := _hydra(word, _RESUME_KEY)) is not None:
                resume = value.lower() in _TRUE
        if not output:
            msg = (
                f"the Gym command names no output file: add --output PATH (or {_OUTPUT_KEY}=PATH) to it, "
                "so its rollouts can be followed"
            )
            raise ConfigError(msg)
        if shutil.which(words[0]) is None:
            msg = (
                f"cannot run {words[0]!r}: no such command (is NeMo Gym installed in this environment? "
                "pip install nemo-gym)"
            )
            raise ConfigError(msg)
        return cls(argv=tuple(words), output=Path(output), resume=resume)


def exit_status(returncode: int) -> int:
    """A child's exit status as a shell reports it: 128 + the signal's number when a signal ended it."""
    return 128 - returncode if returncode < 0 else returncode


def describe_status(status: int) -> str:
    """One line on how the Gym command ended, from its shell exit status."""
    if status > 128:
        with contextlib.suppress(ValueError):
            return f"Gym was ended by {signal.Signals(status - 128).name} (exit status {status})"
    return f"Gym exited with status {status}"


class GymProcess:
    """The Gym command as a child in a process group of its own; SIGINT and SIGTERM passed on to it."""

    def __init__(self, command: GymCommand) -> None:
        self.command = command
        self._process: subprocess.Popen[bytes] | None = None
        self._previous: dict[int, Any] = {}  # the handlers to put back

    def __enter__(self) -> GymProcess:
        for signum in (signal.SIGINT, signal.SIGTERM):
            self._previous[signum] = signal.signal(signum, self._forward)
        try:
            self._process = subprocess.Popen(self.command.argv, process_group=0)
        except BaseException:
            self._restore()
            raise
        return self

    def _forward(self, signum: int, frame: FrameType | None) -> None:
        process = self._process
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # it has just ended
                os.killpg(process.pid, signum)

    def wait(self) -> int:
        """Wait for the child to end (signals received meanwhile are passed on); its exit status."""
        assert self._process is not None
        return exit_status(self._process.wait())

    @property
    def pid(self) -> int:
        """The child's process id (and its process group's)."""
        assert self._process is not None
        return self._process.pid

    def _restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def __exit__(self, *exc: object) -> None:
        try:
            process = self._process
            if process is not None and process.poll() is None:  # this process is ending first: stop Gym
                self._forward(signal.SIGTERM, None)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
        finally:
            self._restore()
