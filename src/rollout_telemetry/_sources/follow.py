"""Reading NeMo Gym's rollout JSONL files, live (``serve --follow``) and offline (``report``).

The files of a run with output ``<stem>.jsonl``:

- ``<stem>.jsonl``: one completed rollout per line (verify response fields plus identity fields);
- ``<stem>_failures.jsonl``: one line per failed attempt, ``_ng_omitted: true`` for an omission;
- ``<stem>_materialized_inputs.jsonl`` (optional): one line per rollout the run is expected to produce.

Rows carry large fields (``response``, ``responses_create_params``) that telemetry never needs, so each
line is decoded with msgspec against a schema of the few fields read: the big ones are skipped while
parsing instead of being built into Python objects and thrown away.

Each success or failure line is one event for the live counters; the coverage account keys rollouts by
identity, the newest attempt deciding. A bad line (not JSON, not an object, missing what is needed, a bad
field) is counted in ``rollout_telemetry_rejected_total{reason}`` with a rate-limited warning naming the
file and line number, and reading goes on.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import io
import logging
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from stat import S_ISREG
from typing import Any

import msgspec

from rollout_telemetry import failure_kinds
from rollout_telemetry._contract.identity import check_attempt, check_identity
from rollout_telemetry._contract.outcome import Classified, Disposition, absent, classify
from rollout_telemetry._recording.telemetry import RolloutTelemetry
from rollout_telemetry._store.coverage import Coverage
from rollout_telemetry.errors import Rejection

__all__ = ["MAX_LINE", "NO_RESULT_CLASSES", "RunFiles", "RunFollower"]

_CHUNK = 1 << 22
_HEAD = 1 << 16
"""Bytes of a file's start kept to tell a file rewritten in place from one appended to."""
_BLANK = 64  # a line longer than this is not checked for being only white space
MAX_LINE = 64 << 20
"""The longest line read (64 MiB): a longer one is skipped to its newline and counted (``line_too_long``)."""
_MAX_RECOVERY = 1024
"""Places a torn line is tried at for the whole row after it (see ``_recover``)."""

_log = logging.getLogger("rollout_telemetry.follow")


class _ModelResponse(msgspec.Struct, forbid_unknown_fields=False, gc=False):
    """The fields read from a row's ``response`` (the Responses API object): its ``output`` and the rest are
    skipped unparsed. ``outcome.check_generation`` checks them, as for any verify response."""

    status: Any = None
    incomplete_details: Any = None
    usage: Any = None


class _Row(msgspec.Struct, forbid_unknown_fields=False, gc=False):
    """The fields telemetry reads from any of the three files; everything else is skipped unparsed.

    ``gc=False`` (here and on ``_ModelResponse``): a decoded row cannot hold a reference cycle, so the cyclic
    garbage collector need not track it. Tracked, the rows' allocations set off collections that walk the
    coverage account's every rollout, a cost that grows with the run.
    """

    reward: Any = None
    mask_sample: Any = None
    failure_kind: Any = None
    failure_reason: Any = None
    # Not a Responses API object (a string, say): the row is still read, with no usage or truncation.
    response: _ModelResponse | str | int | float | bool | list[Any] | None = None
    task_index: Any = msgspec.field(default=None, name="_ng_task_index")
    rollout_index: Any = msgspec.field(default=None, name="_ng_rollout_index")
    attempt_index: Any = msgspec.field(default=None, name="_ng_attempt_index")
    environment_server: Any = msgspec.field(default=None, name="_ng_environment_server")
    agent_ref: Any = None
    failure_class: Any = msgspec.field(default=None, name="_ng_failure_class")
    failure_terminal: Any = msgspec.field(default=None, name="_ng_failure_terminal")
    failure_message: Any = msgspec.field(default=None, name="_ng_failure_message")
    failure_record: Any = msgspec.field(default=None, name="_ng_failure_record")
    judge_error: Any = msgspec.field(default=None, name="_ng_failure_judge_error")
    error_message: Any = None
    error_class: Any = None
    omitted: Any = msgspec.field(default=None, name="_ng_omitted")


_DECODER = msgspec.json.Decoder(_Row)

NO_RESULT_CLASSES = frozenset(
    {
        failure_kinds.AGENT_REQUEST_FAILED,
        failure_kinds.AGENT_RUN_ERROR,
        failure_kinds.ENVIRONMENT_SERVER_FAILED,
    }
)
"""Failure classes whose rows carry no result: a reward on them does not count in the mean reward."""

_TERMINAL_CLASSES = frozenset({"skipped"})
"""Failure classes NeMo Gym never retries, whatever the row's ``_ng_failure_terminal`` says."""


def _decode(line: bytes | memoryview) -> _Row:
    try:
        return _DECODER.decode(line)
    except msgspec.ValidationError as exc:
        if "Expected `object`" in str(exc):
            raise Rejection("not_an_object", "the line is JSON but not an object") from exc
        raise Rejection("malformed_json", str(exc)) from exc
    except Exception as exc:  # DecodeError, and what else a hostile line sets off (RecursionError: too deep)
        raise Rejection("malformed_json", f"{type(exc).__name__}: {exc!s:.200}") from exc


def _recover(line: bytes | memoryview) -> tuple[int, _Row] | None:
    """The whole row at the end of a line whose start is torn, if there is one: (its offset, the row).

    A writer that dies mid-line leaves a line without its newline; the next writer's first row is then
    appended to it. Only a malformed line is searched, from the left, for a row that decodes whole, and at
    most ``_MAX_RECOVERY`` places are tried: a hostile line of nested objects costs a bounded number of
    decodes, not one per object.
    """
    data = bytes(line)  # only a malformed line comes here: one copy, then views of it
    view = memoryview(data)
    start = data.find(b'{"', 1)
    for _ in range(_MAX_RECOVERY):
        if start < 0:
            break
        try:
            return start, _DECODER.decode(view[start:])
        except Exception:  # as in _decode: whatever the decoder raises, this is not the row
            start = data.find(b'{"', start + 1)
    return None


def _row_agent(row: _Row) -> str | None:
    """The agent a row names: ``agent_ref.name``, else ``_ng_environment_server``.

    NeMo Gym 0.7.0's own rule for the agent a rollout ran on: its materialized inputs row names the agent
    (``agent_ref``) and its result and sidecar rows add the environment server that fronted it, so the
    agent is the one name all three rows share; a materialized taskset row names only its environment
    server, and so do its results. Gym keys its ``progress/<agent>/...`` metrics by that agent.
    """
    agent = row.agent_ref.get("name") if isinstance(row.agent_ref, dict) else None
    if agent is None or agent == "":
        agent = row.environment_server
    if agent is None or agent == "":
        return None
    if not isinstance(agent, str):
        raise Rejection("invalid_agent", f"the agent must be a string, got {type(agent).__name__}")
    return agent


def _identity(row: _Row) -> tuple[int, int] | None:
    """(task index, rollout index), or ``None`` when the row carries neither (``check_identity``'s rule)."""
    task, rollout = row.task_index, row.rollout_index
    if task is None and rollout is None:
        return None
    check_identity(task, rollout)
    return task, rollout


def _attempt(row: _Row) -> int:
    """The attempt index: NeMo Gym stamps retries 1, 2, ... and leaves the first attempt unstamped (0)."""
    attempt = row.attempt_index
    if attempt is None:
        return 0
    check_attempt(attempt)
    return int(attempt)


def _failure_outcome(row: _Row) -> tuple[Classified, bool]:
    """The outcome of a failures-file row and whether NeMo Gym treats it as terminal."""
    record = row.failure_record
    failure = record.get("failure") if isinstance(record, dict) else None
    failure = failure if isinstance(failure, dict) else {}
    kind = failure.get("failure_kind") or row.failure_kind or row.failure_class
    reason = next(
        (
            text
            for text in (
                failure.get("failure_reason"),
                row.failure_reason,
                row.failure_message,
                row.error_message,
                row.judge_error,
                row.error_class,
            )
            if isinstance(text, str) and text
        ),
        None,
    )
    disposition = Disposition.OMITTED if row.omitted is True else Disposition.FAILED
    reward = None if row.failure_class in NO_RESULT_CLASSES else row.reward
    terminal = row.failure_terminal is True or row.failure_class in _TERMINAL_CLASSES
    return absent(disposition, kind, reason, reward), terminal


def _state(stat: os.stat_result) -> tuple[int, int, int, int]:
    """What changes when a file is written: (device, inode, size, modification time in ns)."""
    return stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns


@dataclass(frozen=True, slots=True)
class RunFiles:
    """The files of one run: the main output, its failures sidecar, its materialized inputs."""

    main: Path
    failures: Path | None = None
    inputs: Path | None = None

    @classmethod
    def from_main(
        cls, main: str | Path, *, failures: str | Path | None = None, inputs: str | Path | None = None
    ) -> RunFiles:
        """Find the sidecars by name next to ``<stem>.jsonl`` unless given explicitly."""
        path = Path(main)
        stem = path.name.removesuffix(".jsonl")
        return cls(
            main=path,
            failures=Path(failures) if failures else path.with_name(f"{stem}_failures.jsonl"),
            inputs=Path(inputs) if inputs else path.with_name(f"{stem}_materialized_inputs.jsonl"),
        )


class _Tail:
    """One file read incrementally: complete lines only; a file that starts over is detected.

    A file starts over when it is replaced (a new inode: NeMo Gym deletes and recreates its output for a
    fresh run), truncated below what was read, or rewritten in place: its first bytes, kept as read (up to
    ``_HEAD``), differ from what is there now. That last check catches a file truncated and regrown past
    the read offset between two polls (Gym rewrites the materialized inputs in place), which neither the
    inode nor the size shows.

    With ``skip_existing`` a file present at start is left from an earlier run: it is not read until it
    changes (its inode, size or modification time), and then from its start.
    """

    def __init__(
        self, path: Path, *, announce: bool = False, skip_existing: bool = False, max_line: int = MAX_LINE
    ) -> None:
        self.path = path
        self.announce = announce  # say that the file is awaited (the main file; the sidecars are optional)
        self.max_line = max_line
        self.skipping = False  # in a line longer than max_line: passing over it to its newline
        self.not_regular_said = False
        self.offset = 0
        self.line_number = 0
        self.identity: tuple[int, int] | None = None
        self.head = b""  # the file's first bytes as read, at most _HEAD of them
        self.missing_said = False
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
        """Whether the file started over since the last read; None if it is missing (or stale)."""
        try:
            stat = os.stat(self.path)
        except OSError:
            if not self.missing_said:  # said once per absence, not at every poll
                if self.identity is not None:
                    _log.warning("%s disappeared; waiting for it to come back", self.path)
                elif self.announce:
                    _log.warning("waiting for %s: it does not exist yet", self.path)
                self.missing_said = True
            return None
        self.missing_said = False
        if not S_ISREG(stat.st_mode):  # a FIFO would block the open, a device never ends: never opened
            if not self.not_regular_said:
                _log.warning("%s is not a regular file (a FIFO, device or directory): not read", self.path)
                self.not_regular_said = True
            return None
        self.not_regular_said = False
        if self.stale is not None:
            if _state(stat) == self.stale:
                return None  # left from an earlier run and unchanged: not this run's
            self.stale = None  # written since: this run's, read from its start
        identity = (stat.st_dev, stat.st_ino)
        started_over = self.identity is not None and (
            identity != self.identity or stat.st_size < self.offset or not self._same_head()
        )
        if started_over:
            _log.warning("%s was truncated, replaced or rewritten; reading it from the start", self.path)
            self.rewind()
        self.identity = identity
        return started_over

    def _same_head(self) -> bool:
        """Whether the file still starts with the bytes kept when it was read."""
        if not self.head:
            return True
        try:
            with open(self.path, "rb", buffering=0) as handle:
                return handle.read(len(self.head)) == self.head
        except OSError:
            return True  # gone between the stat and the open: the next poll sees it

    def lines(self) -> Iterator[tuple[int, memoryview | None]]:
        """Yield the new complete lines with their numbers; a last line without its newline waits.

        A line longer than ``max_line`` bytes is yielded as ``None`` once its newline is found; its bytes are
        passed over as they come and never held in memory or read again.

        The file is read in chunks of ``_CHUNK`` bytes and each line is handed out as a view into its chunk,
        never copied (rows are tens of kilobytes); only a line cut by the end of a chunk is copied, to be
        joined with the next one. Memory stays the same whatever the file's size. A yielded view is valid
        until the next line is asked for.
        """
        try:
            handle = open(self.path, "rb", buffering=0)  # noqa: SIM115 - closed below, also on an early stop
        except OSError as exc:
            _log.warning("cannot read %s: %s", self.path, exc)
            return
        with handle:
            try:
                yield from self._read(handle)
            finally:
                # The first bytes read (whole lines only), kept to tell a rewrite from an append.
                size = min(self.offset, _HEAD)
                if len(self.head) < size:
                    self.head = os.pread(handle.fileno(), size, 0)

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


class RunFollower:
    """Feeds a run's files into a telemetry account and a coverage account, once or continuously.

    The agent of a row is its ``agent_ref.name``, else its ``_ng_environment_server``, else that of the
    materialized inputs row with the same identity, else ``default_agent``. A row whose identity is not in
    the inputs yet waits for them (it is counted when they catch up, never dropped); ``finish()`` settles
    what still waits once the files are complete.

    When a file of the run starts over (NeMo Gym's fresh run over the same output deletes and recreates
    the output and its sidecar and rewrites the inputs), a new run begins: what describes the run (the
    coverage account, the groups, the rows waiting for their input) starts again, while every counter
    continues, so no series goes backwards and no line is counted twice. The files that started over are
    read from their start, the others from where reading was, and the inputs (which count nothing) again
    from their start.

    Args:
        telemetry: the account the live counters go to.
        files: the run's files.
        coverage: the coverage account; a new one (sharing the telemetry's names) by default.
        default_agent: the agent of rows that name none and match no input row.
        skip_existing: files present now are left from an earlier run (a fresh run is about to replace
            them): each is read only once it changes, from its start.
        max_line: the longest line read, in bytes; a longer one is skipped to its newline, once, and
            counted as ``line_too_long``.
    """

    def __init__(
        self,
        telemetry: RolloutTelemetry,
        files: RunFiles,
        coverage: Coverage | None = None,
        *,
        default_agent: str | None = None,
        skip_existing: bool = False,
        max_line: int = MAX_LINE,
    ) -> None:
        self.telemetry = telemetry
        self.files = files
        self.coverage = coverage if coverage is not None else Coverage(telemetry.names)
        self.default_agent = default_agent
        self.max_line = max_line
        tail = functools.partial(_Tail, skip_existing=skip_existing, max_line=max_line)
        self._inputs = tail(files.inputs) if files.inputs else None
        self._main = tail(files.main, announce=True)
        self._failures = tail(files.failures) if files.failures else None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # one poll at a time: the background thread and finish()
        self.restarts = 0
        """Times the run started over (a new run in the same files)."""
        self.rows = 0
        """Rows counted (successes and failures; duplicates and rejected rows excluded), every run."""
        self._waiting: dict[tuple[int, int], list[tuple[_Tail, int, _Row]]] = {}

    @property
    def position(self) -> int:
        """Bytes read so far, over every file (for a progress bar)."""
        return sum(tail.offset for tail in self._tails())

    @property
    def size(self) -> int:
        """The size of the files now, in bytes (what ``position`` reaches once all is read)."""
        total = 0
        for tail in self._tails():
            with contextlib.suppress(OSError):
                total += tail.path.stat().st_size
        return total

    @property
    def waiting(self) -> int:
        """Rows that name no agent and wait for their materialized inputs row."""
        return sum(len(rows) for rows in self._waiting.values())

    def _tails(self) -> Iterator[_Tail]:
        for tail in (self._inputs, self._main, self._failures):
            if tail is not None:
                yield tail

    def poll(self) -> int:
        """Read whatever complete lines are new in every file; return how many lines were read."""
        with self._lock:
            present = {tail: tail.check() for tail in self._tails()}
            started_over = {tail for tail, started in present.items() if started}
            if started_over:
                self._start_over(started_over)
            read = 0
            for tail in self._tails():
                if present[tail] is None:
                    continue  # not there (yet, or any more)
                for number, line in tail.lines():
                    if line is None:
                        msg = f"longer than {self.max_line} bytes: skipped"
                        self._reject(tail, number, Rejection("line_too_long", msg))
                    else:
                        self._handle(tail, number, line)
                    read += 1
            return read

    def read_all(self) -> int:
        """Read every file to its current end in one go, as ``report`` does; return the lines read.

        The cyclic garbage collector is paused meanwhile: reading makes no reference cycles, and with millions
        of rollouts in the coverage account each of its full collections would walk them all again (about 8%
        of the time at 50,000 rows, more as the run grows). Reference counting frees as usual.
        """
        enabled = gc.isenabled()
        gc.disable()
        try:
            return self.poll()
        finally:
            if enabled:
                gc.enable()

    def finish(self) -> None:
        """The files are complete: count the rows still waiting for an input row under ``default_agent``,
        or reject them as ``missing_agent``."""
        with self._lock:
            waiting, self._waiting = self._waiting, {}
            for identity, rows in waiting.items():
                for tail, number, row in rows:
                    self._counted(tail, number, row, self.default_agent, identity)

    def _start_over(self, started_over: set[_Tail]) -> None:
        # A new run (see the class): the run's description starts again; the counters go on.
        self.restarts += 1
        self.coverage.new_run()
        self.telemetry.new_run()
        # Rows waiting for their input row are kept, unless their file is read again from its start.
        self._waiting = {
            identity: kept
            for identity, rows in self._waiting.items()
            if (kept := [row for row in rows if row[0] not in started_over])
        }
        if self._inputs is not None:
            self._inputs.rewind()

    def _handle(self, tail: _Tail, number: int, line: memoryview) -> None:
        try:
            row = _decode(line)
        except Rejection as exc:
            recovered = _recover(line) if exc.reason == "malformed_json" else None
            self._reject(tail, number, exc if recovered is None else Rejection(exc.reason, "a torn line"))
            if recovered is None:
                return
            row = recovered[1]
        try:
            if tail is self._inputs:
                self._input(row)
            else:
                self._resolve(tail, number, row)
        except Rejection as exc:
            self._reject(tail, number, exc)

    def _resolve(self, tail: _Tail, number: int, row: _Row) -> None:
        # Which agent: the row's own, its input row's, or (once nothing else can tell) the default.
        agent = _row_agent(row)
        identity = _identity(row)
        if agent is None and identity is not None:
            agent = self.coverage.expected_agent(*identity)
            if agent is None and (self._inputs is not None and self._inputs.identity is not None):
                self._waiting.setdefault(identity, []).append((tail, number, row))
                return
        self._count(tail, number, row, agent or self.default_agent, identity)

    def _counted(
        self, tail: _Tail, number: int, row: _Row, agent: str | None, identity: tuple[int, int]
    ) -> None:
        try:
            self._count(tail, number, row, agent, identity)
        except Rejection as exc:
            self._reject(tail, number, exc)

    def _input(self, row: _Row) -> None:
        identity = _identity(row)
        agent = _row_agent(row) or self.default_agent
        if identity is None:
            raise Rejection("missing_identity", "a materialized inputs row needs its identity")
        if agent is None:
            raise Rejection("missing_agent", "no agent_ref.name or _ng_environment_server")
        self.coverage.expect(agent, *identity)
        self.telemetry.groups.expect(agent, *identity)
        for tail, number, waiting in self._waiting.pop(identity, ()):
            self._counted(tail, number, waiting, agent, identity)

    def _count(
        self, tail: _Tail, number: int, row: _Row, agent: str | None, identity: tuple[int, int] | None
    ) -> None:
        if agent is None:
            raise Rejection("missing_agent", "no agent_ref.name, _ng_environment_server or input row")
        attempt = _attempt(row)
        if tail is self._main:
            outcome = classify(row)
            earlier = self.coverage.observe(agent, identity, attempt, outcome[0], succeeded=True, line=number)
            if earlier is not None:
                msg = f"line {number} repeats line {earlier} (same task, rollout and attempt): counted once"
                raise Rejection("duplicate_rollout", msg)
        else:
            outcome, terminal = _failure_outcome(row)
            self.coverage.observe(agent, identity, attempt, outcome[0], succeeded=False, terminal=terminal)
        self.telemetry.record_classified(agent, outcome, identity, attempt)
        self.rows += 1

    def _reject(self, tail: _Tail, number: int, exc: Rejection) -> None:
        located = Rejection(exc.reason, f"line {number}: {exc}")
        self.telemetry.rejections.reject(located, source=str(tail.path))

    # -- running in the background ----------------------------------------------------------------

    def start(self, interval: float = 0.5) -> None:
        """Poll every ``interval`` seconds in a background thread until ``stop()``."""

        def loop() -> None:
            while not self._stop.is_set():
                try:
                    self.poll()
                except Exception:  # keep following whatever happens to one poll
                    _log.exception("error while following %s", self.files.main)
                self._stop.wait(interval)

        self._thread = threading.Thread(target=loop, name="rollout-telemetry-follow", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the background thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
