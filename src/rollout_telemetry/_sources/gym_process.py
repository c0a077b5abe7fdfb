"""``rollout-telemetry gym -- <command>``: run NeMo Gym's collection as a child process and watch its files.

A user prefixes the command they already run. The output file comes from the command's own arguments
(``--output``/``-o``, or Hydra's ``output_jsonl_fpath=``), and with it the failures sidecar and the
materialized inputs. A fresh run (no ``--resume``) replaces the files of an earlier run with the same output,
so whatever is there at start is not read until Gym writes it; a resumed run appends, so its files are read
from their start.

The child runs in a process group of its own, so the terminal's Ctrl-C reaches this process alone; each
signal that would end this process (a hang-up, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2) is passed on to the
child's group once, as the terminal would have, and Gym is waited for. Whatever ends this process, Gym ends
with it: a guard process, in a session of its own, holds a pipe from this one, and when the pipe closes
without this process saying Gym has ended (SIGKILL, a crash: no handler ran), it stops Gym's group as this
process would have. A pipe rather than Linux's parent-death signal: that signal reaches the one child, not
the servers and Ray processes in its group, and setting it needs code run between fork and exec, which is
unsafe in a process with threads.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from rollout_telemetry.errors import ConfigError

__all__ = ["ROUTE_FAILURES", "GymCommand", "GymProcess", "describe_status"]

_OUTPUT_FLAGS = ("--output", "-o")
_OUTPUT_KEY = "output_jsonl_fpath"
_RESUME_FLAG = "--resume"
_RESUME_KEY = "resume_from_cache"
_TRUE = ("true", "1", "yes")
ROUTE_FAILURES = "route_failures_to_sidecar"
"""The Gym 0.7.0 setting that writes a failed rollout to the failures sidecar instead of ending the run."""
PASSED_ON = (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)
"""The signals that would end this process: each is passed on to Gym's group, and Gym is waited for."""
GRACE = 30.0
"""Seconds Gym has to end after SIGTERM when its watcher ends first, before its group is killed."""
_ENDED = b"ended"  # what the watcher tells its guard once Gym has ended: nothing is left to stop


def _hydra(argument: str, key: str) -> str | None:
    """The value of a Hydra override ``key=value`` (also ``+key=`` and ``++key=``), or ``None``."""
    name, equals, value = argument.lstrip("+").partition("=")
    return value if equals and name == key else None


@dataclass(frozen=True, slots=True)
class GymCommand:
    """A Gym command line and what this tool reads from it: the output file, whether it resumes, and whether
    it routes failed rollouts to the failures sidecar (``+route_failures_to_sidecar=true``)."""

    argv: tuple[str, ...]
    output: Path
    resume: bool
    routes_failures: bool = False

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
        resume = routes_failures = False
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
            elif (value := _hydra(word, ROUTE_FAILURES)) is not None:
                routes_failures = value.lower() in _TRUE
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
        return cls(argv=tuple(words), output=Path(output), resume=resume, routes_failures=routes_failures)


def exit_status(returncode: int) -> int:
    """A child's exit status as a shell reports it: 128 + the signal's number when a signal ended it."""
    return 128 - returncode if returncode < 0 else returncode


def describe_status(status: int, passed_on: Sequence[int] = ()) -> str:
    """One line on how the Gym command ended, from its shell exit status and the signals passed on to it."""
    told = ""
    if passed_on:
        names = list(dict.fromkeys(_signal_name(signum) for signum in passed_on))
        told = f" after {', '.join(names)} {'was' if len(names) == 1 else 'were'} passed on to it"
    if status > 128:
        ended = f"Gym was ended by {_signal_name(status - 128)} (exit status {status}){told}"
        if passed_on and status - 128 == signal.SIGSEGV:  # how NeMo Gym 0.7.0 ends when interrupted
            ended += " (expected: NeMo Gym 0.7.0 ends so on an interrupt; everything it wrote was read)"
        return ended
    return f"Gym exited with status {status}{told}"


def _stderr() -> int | None:
    """This process's standard error, for a child's output; None (inherited) if it has no descriptor."""
    try:
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return None


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _stop_group(group: int, running: Callable[[], bool]) -> None:
    """SIGTERM to a process group; SIGKILL if ``running()`` still holds after ``GRACE`` seconds."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGTERM)
    deadline = time.monotonic() + GRACE
    while running() and time.monotonic() < deadline:
        time.sleep(0.05)
    if running():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)


def _group_exists(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def guard() -> None:
    """The guard process's work (``python -c``, the group as its argument): wait for the watcher's pipe to
    close; unless the watcher said Gym had ended, stop Gym's group."""
    group = int(sys.argv[1])
    for signum in PASSED_ON:  # the watcher's signals are its own to pass on; this one waits for its pipe
        signal.signal(signum, signal.SIG_IGN)
    if sys.stdin.buffer.read() != _ENDED:
        _stop_group(group, lambda: _group_exists(group))


_GUARD = "from rollout_telemetry._sources.gym_process import guard; guard()"


class GymProcess:
    """The Gym command as a child in a process group of its own; the signals that would end this process
    passed on to it, and a guard that stops it if this process ends without a handler running."""

    def __init__(self, command: GymCommand) -> None:
        self.command = command
        self._process: subprocess.Popen[bytes] | None = None
        self._guard: subprocess.Popen[bytes] | None = None
        self._early: list[int] = []  # signals received before the child's id was known
        self.passed_on: list[int] = []
        """The signals passed on to the child, in order."""
        self._previous: dict[int, Any] = {}  # the handlers to put back

    def __enter__(self) -> GymProcess:
        for signum in PASSED_ON:
            self._previous[signum] = signal.signal(signum, self._forward)
        try:
            # Gym's own output goes to stderr: stdout is the report's (``--format json`` is JSON alone).
            process = subprocess.Popen(self.command.argv, process_group=0, stdout=_stderr())
            try:
                self._guard = subprocess.Popen(
                    [sys.executable, "-c", _GUARD, str(process.pid)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.DEVNULL,
                    start_new_session=True,  # no terminal's signal reaches it
                )
            finally:
                self._process = process
        except BaseException:
            self.__exit__()
            raise
        for early in self._early:  # a Ctrl-C in the instant before the child's id was known
            self._forward(early, None)
        return self

    def _forward(self, signum: int, frame: FrameType | None) -> None:
        process = self._process
        if process is None:
            self._early.append(signum)
        elif process.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # it has just ended
                os.killpg(process.pid, signum)
                self.passed_on.append(signum)

    def wait(self) -> int:
        """Wait for the child to end (signals received meanwhile are passed on); its exit status."""
        assert self._process is not None
        return exit_status(self._process.wait())

    @property
    def pid(self) -> int:
        """The child's process id (and its process group's)."""
        assert self._process is not None
        return self._process.pid

    def __exit__(self, *exc: object) -> None:
        try:
            process = self._process
            if process is not None and process.poll() is None:  # this process is ending first: stop Gym
                _stop_group(process.pid, lambda: process.poll() is None)
                process.wait()
        finally:
            for number, handler in self._previous.items():
                signal.signal(number, handler)
            self._previous.clear()
            if self._guard is not None:
                with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                    self._guard.communicate(_ENDED, timeout=5)
