"""Following NeMo Gym's rollout JSONL files, live (``serve PATH``) and offline (``report``).

The files of a run with output ``<stem>.jsonl``:

- ``<stem>.jsonl``: one completed rollout per line (verify response fields plus identity fields);
- ``<stem>_failures.jsonl``: one line per failed attempt, ``_ng_omitted: true`` for an omission;
- ``<stem>_materialized_inputs.jsonl`` (optional): one line per rollout the run is expected to produce.

Each file is read by a ``tail.Tail`` and each line decoded as a ``gym_rows.Row``. Each success or failure
line is one event for the live counters; the coverage account keys rollouts by identity, the newest attempt
deciding. A bad line (not JSON, not an object, missing what is needed, a bad field) is counted in
``rollout_telemetry_rejected_total{reason}`` with a rate-limited warning naming the file and line number,
and reading goes on.

With ``spans=True`` each counted row is also one span (``SpanRecorder.finished``): the rows carry no start
or end time, so a span ends when its row is read and lasts the rollout's ``ng_perf.total_latency_ms`` when
Gym wrote one (an instant otherwise); ``rollout.timing`` says which.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from rollout_telemetry._contract.failure_where import Where
from rollout_telemetry._contract.health import findings
from rollout_telemetry._contract.outcome import Classified, classify
from rollout_telemetry._recording.spans import Attributes, recovery_attributes
from rollout_telemetry._sources.gym_account import differences
from rollout_telemetry._sources.gym_rows import (
    Row,
    decode_row,
    failure_outcome,
    gym_rollout_id,
    recover_row,
    row_agent,
    row_attempt,
    row_identity,
    row_latency,
    row_perf_counts,
    row_run_id,
)
from rollout_telemetry._sources.inputs import input_rollout
from rollout_telemetry._sources.run_files import RunFiles
from rollout_telemetry._sources.tail import MAX_LINE, Tail
from rollout_telemetry._store.coverage import DEFAULT_MAX_ATTEMPTS
from rollout_telemetry.errors import Rejection

if TYPE_CHECKING:  # the facade hands its recorder to the follower: it sits above the sources
    from rollout_telemetry._recording.recorder import Recorder

__all__ = ["Observer", "RunFiles", "RunFollower"]

Observer = Callable[
    [str, Classified, "tuple[int, int] | None", int, "tuple[str, int, float | None, str | None]"], None
]
"""What a follower hands each counted row: its agent's label, outcome, identity (or ``None``), attempt, and
where it is with what its file says of it: ``(file, line number, duration in seconds or None, failure stage
or None)``."""

_log = logging.getLogger("rollout_telemetry.follow")

MAX_RUNS = 64
"""Runs a follower begins because a row names another run (``_ng_run_id``): NeMo Gym writes one run to a set
of files, so more is hostile input, and each would read the inputs again."""


class RunFollower:
    """Feeds a run's files into a telemetry account and a coverage account, once or continuously.

    The agent of a row is its ``agent_ref.name``, else its ``_ng_environment_server``, else that of the
    materialized inputs row with the same identity, else the one agent the inputs name (when they name
    exactly one: a run's rows are its inputs' rollouts), else ``default_agent``; rows counted under
    ``default_agent`` are counted in ``unnamed``. A row whose identity is not in the inputs yet waits for them
    (it is counted when they catch up, never dropped); ``finish()`` settles what still waits once the files
    are complete.

    When a file of the run starts over (NeMo Gym's fresh run over the same output deletes and recreates
    the output and its sidecar and rewrites the inputs), a new run begins: what describes the run (the
    coverage account, the groups, the rows waiting for their input) starts again, while every counter
    continues, so no series goes backwards and no line is counted twice. The files that started over are
    read from their start, the others from where reading was, and the inputs (which count nothing) again
    from their start. When rows carry their run's id (``_ng_run_id``, NeMo Gym's next release), a row of
    another run begins a new run the same way, the inputs read again at once; a row of a run that already
    ended is rejected (``earlier_run``), so two runs' rows in the same files never flip the account back,
    and so is one of a run past the ``MAX_RUNS``-th that rows began (``too_many_runs``).

    Args:
        recorder: the telemetry's recording part, which every row is recorded through.
        files: the run's files.
        max_attempts: attempts NeMo Gym makes before it stops retrying a rollout (its
            ``NEMO_GYM_MAX_ROLLOUT_ATTEMPTS``), for the run's coverage account.
        default_agent: the agent of rows that name none and that the inputs cannot tell
            (``RunFiles.name`` is the command line's).
        skip_existing: files present now are left from an earlier run (a fresh run is about to replace
            them): each is read only once it changes, from its start.
        max_line: the longest line read, in bytes; a longer one is skipped to its newline, once, and
            counted as ``line_too_long``.
        spans: make one span per counted rollout through the telemetry's span recorder (off by default).
        wall_clock: nanoseconds since the epoch, when a span's row is read.
        announce: warn once that the main file is awaited while it does not exist (off for a caller that
            starts what writes it).
        observe: given each row's agent label, outcome, identity (``None`` without one), attempt and place
            (``Observer``) once it is counted (``report``'s reward samples, the run's order of its pictures
            and its notable rollouts).
    """

    def __init__(
        self,
        recorder: Recorder,
        files: RunFiles,
        *,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        default_agent: str | None = None,
        skip_existing: bool = False,
        max_line: int = MAX_LINE,
        spans: bool = False,
        wall_clock: Callable[[], int] = time.time_ns,
        announce: bool = True,
        observe: Observer | None = None,
    ) -> None:
        self.recorder = recorder
        """What every row is recorded through (the telemetry's recording part)."""
        self._observe = observe
        self.spans = spans
        self._wall_clock = wall_clock
        self.files = files
        self.coverage = recorder.cover(max_attempts)
        """The run's coverage account, which every row is weighed in."""
        self.default_agent = default_agent
        self.max_line = max_line
        tail = functools.partial(Tail, skip_existing=skip_existing, max_line=max_line)
        self._inputs = tail(files.inputs) if files.inputs else None
        self._main = tail(files.main, announce=announce)
        self._failures = tail(files.failures) if files.failures else None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # one poll at a time: the background thread and finish()
        self.restarts = 0
        """Times the run started over (a new run in the same files)."""
        self.rows = 0
        """Rows counted (successes and failures; duplicates and rejected rows excluded), every run."""
        self.unnamed = 0
        """Rows counted under ``default_agent``: nothing in the files named their agent."""
        self.run_id: str | None = None
        """The id of the run being read (``_ng_run_id`` of its rows), ``None`` before a row carried one."""
        self._ended_runs: set[str] = set()
        self._input_agents: set[str] = set()
        self._waiting: dict[tuple[int, int], list[tuple[Tail, int, Row]]] = {}

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

    def unnamed_note(self) -> str | None:
        """The line saying how many rows named no agent and took ``default_agent``, and how to name them."""
        if not self.unnamed:
            return None
        return (
            f"{self.unnamed} rows of {self.files.main} name no agent (no agent_ref.name, "
            f"_ng_environment_server or materialized inputs row): shown as '{self.default_agent}'; "
            "--agent NAME names them"
        )

    def gym_differences(self) -> list[str]:
        """At the end of a run, the lines where NeMo Gym's own account of it (``<stem>_coverage.json``, its
        next release) differs from what was read, one per field (``gym_account.differences``); none
        without it."""
        files = self.files
        rows = tuple(path for path in (files.main, files.failures) if path is not None)
        coverage = self.coverage
        return differences(
            (files.coverage, files.manifest, rows), coverage.snapshot(), coverage.max_attempts, self.run_id,
            _modified,
        )  # fmt: skip

    @property
    def tells_of_a_run(self) -> bool:
        """Whether what was read tells of a run: a row counted, or the rollouts it was to produce (an empty
        output beside its materialized inputs is a run whose every rollout is unknown, as Gym counts it)."""
        return self.rows > 0 or self.coverage.snapshot().expected_known

    @property
    def waiting(self) -> int:
        """Rows that name no agent and wait for their materialized inputs row."""
        return sum(len(rows) for rows in self._waiting.values())

    def _tails(self) -> Iterator[Tail]:
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
                    self._take(tail, number, line)
                    read += 1
            return read

    def _take(self, tail: Tail, number: int, line: memoryview | None) -> None:
        if line is None:
            msg = f"longer than {self.max_line} bytes: skipped"
            self._reject(tail, number, Rejection("line_too_long", msg))
        else:
            self._handle(tail, number, line)

    def read_all(self) -> int:
        """Read every file to its current end in one go, as ``report`` does; return the lines read.

        The cyclic garbage collector is paused meanwhile: reading makes no reference cycles, and each of its
        full collections would walk every rollout of the coverage account again (docs/performance.md).
        Reference counting frees as usual.
        """
        enabled = gc.isenabled()
        gc.disable()
        try:
            return self.poll()
        finally:
            if enabled:
                gc.enable()

    def finish(self) -> None:
        """The files are complete: read a last line that has no newline (a writer that never ends its last
        row, as some of NeMo Gym's example files), then count the rows still waiting for an input row under
        ``default_agent``, or reject them as ``missing_agent``."""
        with self._lock:
            for tail in self._tails():
                if tail.identity is not None and (last := tail.last_line()) is not None:
                    self._take(tail, *last)
            waiting, self._waiting = self._waiting, {}
            for identity, rows in waiting.items():
                for tail, number, row in rows:
                    self._counted(tail, number, row, None, identity)

    def _start_over(self, started_over: set[Tail]) -> None:
        # A new run (see the class): the run's description starts again; the counters go on.
        self.restarts += 1
        self.run_id = None  # the new run's id, from its first row that carries one
        self._input_agents = set()
        self.recorder.new_run()  # its coverage and groups
        # Rows waiting for their input row are kept, unless their file is read again from its start.
        self._waiting = {
            identity: kept
            for identity, rows in self._waiting.items()
            if (kept := [row for row in rows if row[0] not in started_over])
        }
        if self._inputs is not None:
            self._inputs.rewind()

    def _handle(self, tail: Tail, number: int, line: memoryview) -> None:
        try:
            row = decode_row(line)
        except Rejection as exc:
            recovered = recover_row(line) if exc.reason == "malformed_json" else None
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

    def _run_of(self, row: Row) -> None:
        # A row of another run than the one being read begins a new run (see the class).
        run_id = row_run_id(row)
        if run_id is None or run_id == self.run_id:
            return
        if run_id in self._ended_runs:
            msg = f"a row of run {run_id[:80]!r}, which ended when run {self.run_id!s:.80} began"
            raise Rejection("earlier_run", msg)
        if self.run_id is not None:
            if len(self._ended_runs) >= MAX_RUNS:  # each new run reads the inputs again: a bounded number
                msg = f"a row of a run beyond the {MAX_RUNS} runs one follower begins by run id"
                raise Rejection("too_many_runs", msg)
            self._ended_runs.add(self.run_id)
            self._start_over(set())
            if self._inputs is not None and self._inputs.check() is not None:
                for number, line in self._inputs.lines():  # the new run's expected rollouts, before its rows
                    self._take(self._inputs, number, line)
        self.run_id = run_id

    def _resolve(self, tail: Tail, number: int, row: Row) -> None:
        self._run_of(row)
        # Which agent: the row's own, its input row's, or (once nothing else can tell) the default.
        agent = row_agent(row)
        identity = row_identity(row)
        if agent is None and identity is not None:
            agent = self.coverage.expected_agent(*identity)
            if agent is None and (self._inputs is not None and self._inputs.identity is not None):
                self._waiting.setdefault(identity, []).append((tail, number, row))
                return
        self._count(tail, number, row, agent, identity)

    def _counted(
        self, tail: Tail, number: int, row: Row, agent: str | None, identity: tuple[int, int]
    ) -> None:
        try:
            self._count(tail, number, row, agent, identity)
        except Rejection as exc:
            self._reject(tail, number, exc)

    def _input(self, row: Row) -> None:
        agent, identity = input_rollout(row, self.default_agent)
        self.recorder.expect(agent, identities=(identity,))
        self._input_agents.add(agent)
        for tail, number, waiting in self._waiting.pop(identity, ()):
            self._counted(tail, number, waiting, agent, identity)

    def _count(
        self, tail: Tail, number: int, row: Row, agent: str | None, identity: tuple[int, int] | None
    ) -> None:
        unnamed = False
        if agent is None:  # nothing names it: the inputs' one agent, else the default
            if len(self._input_agents) == 1:
                agent = next(iter(self._input_agents))
            else:
                agent, unnamed = self.default_agent, True
        if agent is None:
            raise Rejection("missing_agent", "no agent_ref.name, _ng_environment_server or input row")
        attempt = row_attempt(row)
        health = where = None
        refused: tuple[Rejection, ...] = ()
        if tail is self._main:
            outcome, terminal, health = classify(row), False, findings(row.trajectory)
        else:
            outcome, terminal, where, refused = failure_outcome(row)
        # The one path of every outcome: coverage (a repeated row is refused there), counts, groups.
        attempts = self.recorder.record_checked(
            agent, outcome, identity, attempt, terminal=terminal, line=number, health=health, where=where
        )
        self.rows += 1
        self.unnamed += unnamed
        if self._observe is not None:  # counted: a repeated row raised before it; by the agent's label
            place = (str(tail.path), number, row_latency(row), None if where is None else where[0])
            self._observe(self.recorder.label(agent), outcome, identity, attempt, place)
        for error in refused:  # the failure is counted, at an unknown stage or delivery
            self._reject(tail, number, error)
        if self.spans:
            self._span(row, agent, identity, attempt, outcome, (where, attempts))

    def _span(  # noqa: PLR0917 - what _count knows of the row
        self,
        row: Row,
        agent: str,
        identity: tuple[int, int] | None,
        attempt: int,
        outcome: Classified,
        facts: tuple[Where | None, int | None],
    ) -> None:
        # After the row is counted: a span that cannot be made (a raising redact hook, a broken provider)
        # is counted as an internal error and loses nothing else.
        try:
            end = self._wall_clock()
            latency = row_latency(row)
            attributes: Attributes = {"rollout.timing": "read" if latency is None else "ng_perf"}
            attributes |= row_perf_counts(row)
            attributes |= recovery_attributes(*facts)
            rollout_id = gym_rollout_id(row, identity, attempt)
            if rollout_id is not None:
                attributes["nemo.gym.rollout.id"] = rollout_id
            start = end if latency is None else end - round(latency * 1e9)
            self.recorder.finished_span(agent, identity, attempt, outcome, start, end, attributes)
        except Exception as exc:
            self.recorder.reject(exc)

    def _reject(self, tail: Tail, number: int, exc: Rejection) -> None:
        located = Rejection(exc.reason, f"line {number}: {exc}")
        self.recorder.reject(located, str(tail.path))

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


def _modified(path: Path) -> int | None:
    """A file's modification time in ns (a link followed, as the rows' files are), ``None`` if not there."""
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None
