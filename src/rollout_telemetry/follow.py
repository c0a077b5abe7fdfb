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

import logging
import mmap
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from rollout_telemetry.coverage import Coverage
from rollout_telemetry.outcome import Disposition, absent, classify
from rollout_telemetry.rejections import Rejection
from rollout_telemetry.telemetry import RolloutTelemetry

__all__ = ["RunFiles", "RunFollower"]

_log = logging.getLogger("rollout_telemetry.follow")


class _Row(msgspec.Struct, forbid_unknown_fields=False):
    """The fields telemetry reads from any of the three files; everything else is skipped unparsed."""

    reward: Any = None
    mask_sample: Any = None
    failure_kind: Any = None
    failure_reason: Any = None
    task_index: Any = msgspec.field(default=None, name="_ng_task_index")
    rollout_index: Any = msgspec.field(default=None, name="_ng_rollout_index")
    attempt_index: Any = msgspec.field(default=None, name="_ng_attempt_index")
    environment_server: Any = msgspec.field(default=None, name="_ng_environment_server")
    agent_ref: Any = None
    failure_class: Any = msgspec.field(default=None, name="_ng_failure_class")
    failure_message: Any = msgspec.field(default=None, name="_ng_failure_message")
    failure_record: Any = msgspec.field(default=None, name="_ng_failure_record")
    omitted: Any = msgspec.field(default=None, name="_ng_omitted")


_DECODER = msgspec.json.Decoder(_Row)


def _decode(line: bytes) -> _Row:
    try:
        return _DECODER.decode(line)
    except msgspec.ValidationError as exc:
        if "Expected `object`" in str(exc):
            raise Rejection("not_an_object", "the line is JSON but not an object") from exc
        raise Rejection("malformed_json", str(exc)) from exc
    except msgspec.DecodeError as exc:
        raise Rejection("malformed_json", str(exc)) from exc


def _agent(row: _Row) -> str:
    agent = row.environment_server
    if agent is None and isinstance(row.agent_ref, dict):
        agent = row.agent_ref.get("name")
    if not isinstance(agent, str) or not agent:
        raise Rejection("missing_agent", "no _ng_environment_server or agent_ref.name")
    return agent


def _index(value: Any, name: str) -> int:
    if type(value) is not int:
        raise Rejection("missing_identity", f"{name} must be an integer, got {value!r:.40}")
    return value


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
    """One file read incrementally: complete lines only, truncation and replacement detected."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.line_number = 0
        self.identity: tuple[int, int] | None = None
        self.missing_said = False

    def rewind(self) -> None:
        self.offset = 0
        self.line_number = 0

    def check(self) -> bool | None:
        """Whether the file started over (truncated or replaced) since the last read; None if missing."""
        try:
            stat = os.stat(self.path)
        except OSError:
            if self.identity is not None and not self.missing_said:
                _log.warning("%s disappeared; waiting for it to come back", self.path)
                self.missing_said = True
            return None
        self.missing_said = False
        identity = (stat.st_dev, stat.st_ino)
        started_over = self.identity is not None and (identity != self.identity or stat.st_size < self.offset)
        if started_over:
            _log.warning("%s was truncated or replaced; reading it from the start", self.path)
            self.rewind()
        self.identity = identity
        return started_over

    def lines(self) -> Iterator[tuple[int, bytes]]:
        """Yield the new complete lines with their numbers; a last line without its newline waits."""
        try:
            handle = open(self.path, "rb")  # noqa: SIM115 - closed below, also when the caller stops early
        except OSError as exc:
            _log.warning("cannot read %s: %s", self.path, exc)
            return
        with handle:
            size = os.fstat(handle.fileno()).st_size
            if size <= self.offset:
                return
            # Mapping the file lets each line be found with one memchr and copied once, instead of being
            # read through a buffer and then split: rows are tens of kilobytes.
            with mmap.mmap(handle.fileno(), size, access=mmap.ACCESS_READ) as mapped:
                position = self.offset
                while True:
                    end = mapped.find(b"\n", position)
                    if end < 0:
                        break  # a last line still being written: read it again, whole, next time
                    self.offset = end + 1
                    self.line_number += 1
                    line = mapped[position:end]
                    position = end + 1
                    if line and not line.isspace():
                        yield self.line_number, line


class RunFollower:
    """Feeds a run's files into a telemetry account and a coverage account, once or continuously.

    Args:
        telemetry: the account the live counters go to.
        files: the run's files.
        coverage: the coverage account; a new one by default.
    """

    def __init__(
        self, telemetry: RolloutTelemetry, files: RunFiles, coverage: Coverage | None = None
    ) -> None:
        self.telemetry = telemetry
        self.files = files
        self.coverage = coverage if coverage is not None else Coverage(telemetry.names)
        self._inputs = _Tail(files.inputs) if files.inputs else None
        self._main = _Tail(files.main)
        self._failures = _Tail(files.failures) if files.failures else None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.restarts = 0

    def _tails(self) -> Iterator[_Tail]:
        for tail in (self._inputs, self._main, self._failures):
            if tail is not None:
                yield tail

    def poll(self) -> int:
        """Read whatever complete lines are new in every file; return how many lines were read."""
        if any(tail.check() for tail in self._tails()):
            self._start_over()
        read = 0
        for tail in self._tails():
            if tail.identity is None:
                continue  # not there (yet)
            for number, line in tail.lines():
                self._handle(tail, number, line)
                read += 1
        return read

    def _start_over(self) -> None:
        # A file started over: rebuild every count from the files, so nothing is counted twice.
        self.restarts += 1
        self.telemetry.reset()
        self.coverage.reset()
        for tail in self._tails():
            tail.rewind()

    def _handle(self, tail: _Tail, number: int, line: bytes) -> None:
        try:
            row = _decode(line)
            if tail is self._main:
                self._completed(row)
            elif tail is self._failures:
                self._failed(row)
            else:
                agent = _agent(row)
                task = _index(row.task_index, "_ng_task_index")
                self.coverage.expect(agent, task, _index(row.rollout_index, "_ng_rollout_index"))
        except Rejection as exc:
            self.telemetry.rejections.reject(
                Rejection(exc.reason, f"line {number}: {exc}"), source=str(tail.path)
            )

    def _identity(self, row: _Row) -> tuple[str, int, int, int | None]:
        agent = _agent(row)
        task = _index(row.task_index, "_ng_task_index")
        rollout = _index(row.rollout_index, "_ng_rollout_index")
        attempt = None if row.attempt_index is None else _index(row.attempt_index, "_ng_attempt_index")
        return agent, task, rollout, attempt

    def _completed(self, row: _Row) -> None:
        agent, task, rollout, attempt = self._identity(row)
        outcome = classify(row)
        self.telemetry.record_classified(agent, outcome)
        self.coverage.observe(agent, task, rollout, attempt, outcome[0])

    def _failed(self, row: _Row) -> None:
        agent, task, rollout, attempt = self._identity(row)
        kind: object = row.failure_class
        record = row.failure_record
        if isinstance(record, dict) and isinstance(record.get("failure"), dict):
            kind = record["failure"].get("failure_kind") or kind
        disposition = Disposition.OMITTED if row.omitted is True else Disposition.FAILED
        outcome = absent(disposition, kind)
        self.telemetry.record_classified(agent, outcome)
        self.coverage.observe(agent, task, rollout, attempt, disposition)

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
