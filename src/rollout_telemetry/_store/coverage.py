"""The run coverage account: of the rollouts a run was supposed to produce, what became of each.

Live counters count *events* (every success line and every failure line). Coverage counts *rollouts*: each
is keyed by its identity (agent, task index, rollout index), and its newest attempt decides its disposition.
NeMo Gym writes no attempt index on a first attempt and stamps retries 1, 2, ...; so an unstamped row is
attempt 0. A higher attempt wins; at the same attempt a success (a row of the main output) wins over a
failure, and between two failures the later line wins. Because each file is read in its own order, the
outcome does not depend on how appends to the two files interleave: a live follower, a restarted one and
``report`` agree.

A main-output row with the same identity and attempt as an earlier one is a duplicate: ``observe`` says so
and changes nothing. A row without an identity is a rollout of its own that nothing can match (no retry, no
expected input); it is counted, and counted apart as ``unidentified``.

With the expected identities known (from the materialized inputs), at every moment

    expected = measured + masked + unscored + failed + omitted + unknown

where unknown is expected but not seen yet; a rollout seen outside the expected ones counts in expected too.
A row without an identity cannot say which expected rollout it is, but it is one of the run's: as NeMo Gym
counts its rows against the materialized inputs, each such rollout of an agent counts against one of the
agent's unknown ones (and only beyond them adds to expected).

A failed rollout is *retryable* when NeMo Gym would dispatch it again on resume: no success was written for
it, none of its failure rows is terminal, and it has used fewer than ``max_attempts`` attempts (its failure
rows). Every count is kept current as rows arrive, so a snapshot costs the same at ten rollouts and at ten
million.

The row that makes an identity's outcome final (a success, a terminal failure, or the failure that used its
last attempt) returns a ``Verdict``, once per identity: the attempts it took, the time it waited between
them when the caller gave times (the hook API), and whether its retries ran out. The facade counts it
(``rollout_attempts``, ``rollout_retry_delay_seconds``, ``rollout_retries_exhausted_total``), so both doors,
the hook API and followed files, count retries by this one rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from rollout_telemetry import _fork
from rollout_telemetry._contract.identity import check_identity, rank, supersedes
from rollout_telemetry._contract.outcome import REACHED_OUTPUT, Disposition
from rollout_telemetry._store.blocks import Blocks
from rollout_telemetry._store.names import Names
from rollout_telemetry._store.reads import read_locked
from rollout_telemetry._store.snapshot import by_agent
from rollout_telemetry.errors import ConfigError

__all__ = ["DEFAULT_MAX_ATTEMPTS", "AgentCoverage", "Coverage", "CoverageSnapshot"]

DEFAULT_MAX_ATTEMPTS = 3
"""NeMo Gym's default for ``NEMO_GYM_MAX_ROLLOUT_ATTEMPTS``."""

_DISPOSITIONS = tuple(Disposition)
"""The dispositions of a rollout whose deciding row is in the main output."""
_MEASURED, _MASKED = Disposition.MEASURED, Disposition.MASKED
_CODE = {disposition: code for code, disposition in enumerate(_DISPOSITIONS, start=1)}
_CODE_MASKED = _CODE[_MASKED]
_CODES_REACHED = frozenset(_CODE[d] for d in REACHED_OUTPUT)  # the deciding row is in the main output

# One identity's state, packed in an int of a Blocks column (_store.blocks): 0 is an identity not known yet.
# The task columns count members, at most MAX_ROLLOUT_INDEX + 1 of them: two bytes each.
_DISP = 0b111  # the deciding row's disposition, _CODE (0: no row yet)
_EXPECTED = 1 << 3  # among the materialized inputs
_TERMINAL = 1 << 4  # a failure row NeMo Gym will not retry
_FAILURES_SHIFT, _FAILURES_MAX = 5, 63  # failure rows (attempts used), saturating
_FAILURES = _FAILURES_MAX << _FAILURES_SHIFT
_RANK_SHIFT, _RANK_MASK = 11, (1 << 17) - 1  # the deciding row's rank (identity.rank)
_SUCCESSES_SHIFT = 28  # success rows: 0, 1, or 2 for more (the rest are in the store's _more_successes)
_SUCCESSES = 0b11 << _SUCCESSES_SHIFT
_FIRST_SHIFT = 30  # the attempt of the first success row
_ATTEMPT_MASK = 0xFFFF

_LINES_MAX = 2**32 - 1

Key = tuple[str, int, int]
"""(agent label, task index, rollout index)."""
_TASK_COLUMNS = ("reached", "unmasked")


def _failures(state: int) -> int:
    return (state >> _FAILURES_SHIFT) & _FAILURES_MAX


class _Agent:
    """One agent's identities (in ``Blocks``) and its counts, kept current; only touched under the lock."""

    __slots__ = (
        "blocks",
        "fully_masked_tasks",
        "lines",
        "measured_tasks",
        "retried",
        "retryable",
        "rollouts",
        "states",
        "task_reached",
        "task_unmasked",
        "unexpected",
        "unidentified",
        "unknown",
    )

    def __init__(self) -> None:
        # Per member: its packed state and the line of its first success row. Per task, for its flags as NeMo
        # Gym computes them: rollouts decided by a row of the main output, and of those the unmasked ones.
        self.blocks = Blocks({"state": "Q", "line": "L"}, dict.fromkeys(_TASK_COLUMNS, "H"))
        # The columns, at hand (they grow in place, never replaced).
        self.states, self.lines = self.blocks.member["state"], self.blocks.member["line"]
        task = self.blocks.task
        self.task_reached, self.task_unmasked = task["reached"], task["unmasked"]
        self.rollouts = dict.fromkeys(_DISPOSITIONS, 0)
        self.unknown = 0
        self.unexpected = 0
        self.unidentified = 0
        self.retried = 0
        self.retryable = 0
        self.measured_tasks = 0
        self.fully_masked_tasks = 0


@dataclass(frozen=True, slots=True)
class AgentCoverage:
    """One agent's coverage at one moment."""

    agent: str
    rollouts: Mapping[Disposition, int]
    """Rollouts by the disposition of their newest attempt (those without an identity included)."""
    expected: int | None
    unknown: int | None
    retried: int
    """Attempts beyond the first of a rollout identity."""
    measured_tasks: int
    """Tasks with a rollout in the main output that is not masked (NeMo Gym's ``coverage/measured_tasks``)."""
    fully_masked_tasks: int
    """Tasks with rollouts in the main output, every one masked (NeMo Gym's ``coverage/fully_masked_tasks``);
    its failed and unseen rollouts do not count either way."""
    retryable: int = 0
    """Failed rollouts NeMo Gym would dispatch again on resume."""
    unidentified: int = 0
    """Rows without an identity: each a rollout of its own, matched to no retry and no expected input."""

    @property
    def seen(self) -> int:
        """Distinct rollouts seen."""
        return sum(self.rollouts.values())


@dataclass(frozen=True, slots=True)
class CoverageSnapshot:
    """Every agent's coverage, taken atomically."""

    agents: tuple[AgentCoverage, ...]
    expected_known: bool = False
    unexpected: int = field(default=0)
    """Rollouts seen that were not among the expected ones (0 when none are expected)."""
    restarts: int = 0
    """Times the run started over: a new run in the same files."""

    def agent(self, name: str) -> AgentCoverage | None:
        """The coverage of one agent, or ``None``."""
        return by_agent(self.agents, name)


class Verdict(NamedTuple):
    """An identity's outcome became final with one row (``Coverage.observe``): counted once per identity.

    A named tuple: made on the recording path, where a frozen dataclass costs several times as much."""

    attempts: int
    """Attempts it took: its highest attempt index + 1, or the rows seen if more (unstamped retries)."""
    delay: float | None
    """Seconds between each failed attempt's outcome and the next attempt's start, summed, when it was
    retried and every time was given (the hook API's clock); ``None`` otherwise."""
    exhausted: bool
    """Its final outcome is a failure after a retry, the last failure terminal, or NeMo Gym's attempts budget
    (``max_attempts``) ran out."""


class Coverage:
    """Identities of a run and the newest attempt of each; thread-safe.

    Args:
        names: resolves agent names to labels (cut, capped) as the account does, so a name is one row.
        max_attempts: attempts NeMo Gym makes before it stops retrying a rollout (its
            ``NEMO_GYM_MAX_ROLLOUT_ATTEMPTS``).
    """

    def __init__(self, names: Names | None = None, *, max_attempts: int = DEFAULT_MAX_ATTEMPTS) -> None:
        if max_attempts < 1:
            msg = f"max_attempts must be at least 1, got {max_attempts}"
            raise ConfigError(msg)
        self._names = names if names is not None else Names()
        self.max_attempts = max_attempts
        self._lock = _fork.lock_for(self)
        self._retried_before: dict[str, int] = {}  # retries of earlier runs, by agent: a counter goes on
        self._restarts = 0
        self._clear()

    def new_run(self) -> None:
        """A new run begins (the files being read started over): forget the rollouts and what was expected.

        The retries counted so far stay counted (``rollout_retried_total`` is a counter) and the restart is
        counted (``rollout_run_restarts_total``).
        """
        with self._lock:
            for label, state in self._agents.items():
                self._retried_before[label] = self._retried_before.get(label, 0) + state.retried
            self._restarts += 1
            self._clear()

    def _clear(self) -> None:
        # At construction, or under the lock.
        self._agents: dict[str, _Agent] = {}
        # (label, task, rollout) -> (attempt, line) of success rows after the first
        self._more_successes: dict[Key, list[tuple[int, int]]] = {}
        # (label, task, rollout) -> (its last failure's time, seconds waited so far) of an identity not final
        # yet whose failures came with times (the hook API): what its retry delay is summed from
        self._waits: dict[Key, tuple[float, float]] = {}
        self._expected_known = False

    def _agent(self, label: str) -> _Agent:
        agent = self._agents.get(label)
        if agent is None:
            agent = self._agents[label] = _Agent()
        return agent

    @staticmethod
    def _member(agent: _Agent, task_index: int, rollout_index: int) -> tuple[int, int]:
        """(task number, slot) of an identity, its task made known if it was not."""
        blocks = agent.blocks
        number = blocks.add_task(task_index)
        return number, blocks.slot(number, rollout_index)

    def expect(self, agent: str, task_index: int, rollout_index: int) -> None:
        """Declare one identity the run is expected to produce."""
        label = self._names.agent(agent)[0]
        check_identity(task_index, rollout_index)
        with self._lock:
            self._expected_known = True
            state = self._agent(label)
            states = state.states
            slot = state.blocks.find(task_index, rollout_index)
            if slot >= 0 and states[slot] & _EXPECTED:
                return
            seen = slot >= 0 and states[slot] & _DISP
            slot = self._member(state, task_index, rollout_index)[1]
            states[slot] |= _EXPECTED
            if seen:  # seen before it was declared: no longer unexpected
                state.unexpected -= 1
            else:
                state.unknown += 1

    def expected_agent(self, task_index: int, rollout_index: int) -> str | None:
        """The label of the agent an identity is expected of (from the materialized inputs), if any."""
        with self._lock:
            for label, state in self._agents.items():
                slot = state.blocks.find(task_index, rollout_index)
                if slot >= 0 and state.states[slot] & _EXPECTED:
                    return label
        return None

    def observe(
        self,
        agent: str,
        identity: tuple[int, int] | None,
        attempt: int,
        disposition: Disposition,
        *,
        succeeded: bool,
        terminal: bool = False,
        line: int = 0,
        times: tuple[float, float] | None = None,
    ) -> tuple[int | None, Verdict | None]:
        """Record one row of a rollout: a success (``succeeded``: a row of the main output) or a failure.

        Returns (the line of the earlier row when this success repeats one with the same identity and
        attempt: a duplicate, which changes nothing; the identity's ``Verdict`` when this row made its
        outcome final: a success, a terminal failure, or the failure that used its last attempt, NeMo Gym's
        resume rule, ``_final``). ``terminal`` marks a failure NeMo Gym will not retry; ``times`` is (the
        attempt's start, its outcome) on the telemetry's clock, when known: an identity's retry delay is
        summed from them. The identity and the attempt are the caller's to check (``check_identity``,
        ``check_attempt``): the follower does, before anything is counted.
        """
        label = self._names.agent(agent)[0]
        with self._lock:
            state = self._agent(label)
            if identity is None:  # a rollout of its own, final at once: counted, never stored
                state.unidentified += 1
                state.unexpected += 1
                state.rollouts[disposition] += 1
                return None, None
            number, slot = self._member(state, *identity)
            current = state.states[slot]
            key = (label, *identity)
            if succeeded and current & _SUCCESSES:  # a success row before: this one may repeat it
                earlier = self._duplicate(state, key, current, attempt)
                if earlier is not None:
                    return earlier, None
            final_before = self._final(current)
            retryable_before = bool(current & _FAILURES) and self._retryable(current)
            current = self._with_row(state, key, slot, current, (attempt, line, succeeded, terminal))
            current = self._decided(state, number, current, rank(attempt, succeeded), _CODE[disposition])
            state.states[slot] = current
            if current & _FAILURES:
                state.retryable += self._retryable(current) - retryable_before
            if final_before:
                return None, None
            waited = self._waited(key, times, succeeded)
            if not self._final(current):
                return None, None
            self._waits.pop(key, None)
            return None, self._verdict(current, succeeded, terminal, waited)

    def _waited(self, key: Key, times: tuple[float, float] | None, succeeded: bool) -> float | None:
        """The seconds an identity not final before this row has waited between attempts, this one's start
        included; ``None`` when not measurable. A failure row with times is remembered for the next."""
        if times is None:
            self._waits.pop(key, None)  # a row without times: the sum can no longer be whole
            return None
        started, ended = times
        waiting = self._waits.get(key)
        waited = None if waiting is None else waiting[1] + max(started - waiting[0], 0.0)
        if not succeeded:
            self._waits[key] = (ended, 0.0 if waited is None else waited)
        return waited

    def _final(self, state: int) -> bool:
        # NeMo Gym's resume rule: a success written (for any attempt), a terminal failure row, or max_attempts
        # failure rows (attempts used) make an identity's outcome final; Gym dispatches no further attempt.
        return bool(state & (_SUCCESSES | _TERMINAL)) or _failures(state) >= self.max_attempts

    def _verdict(self, state: int, succeeded: bool, terminal: bool, waited: float | None) -> Verdict:
        """The verdict on an identity whose outcome this row made final."""
        failures = _failures(state)
        attempts = max((state >> _RANK_SHIFT & _RANK_MASK) >> 1, failures + bool(state & _SUCCESSES))
        exhausted = not succeeded and ((terminal and attempts > 1) or failures >= self.max_attempts)
        return Verdict(attempts, waited if attempts > 1 else None, exhausted)

    def _with_row(
        self, state: _Agent, key: Key, slot: int, current: int, row: tuple[int, int, bool, bool]
    ) -> int:
        """An identity's state with one more row: (attempt, line, a success, a terminal failure)."""
        attempt, line, succeeded, terminal = row
        if not succeeded:
            if current & _FAILURES != _FAILURES:  # saturates at 63
                current += 1 << _FAILURES_SHIFT
            return current | _TERMINAL if terminal else current
        if not current & _SUCCESSES:
            state.lines[slot] = min(line, _LINES_MAX)
            return current | 1 << _SUCCESSES_SHIFT | attempt << _FIRST_SHIFT
        # A second success row of another attempt (Gym never writes one): kept apart, it is that rare.
        self._more_successes.setdefault(key, []).append((attempt, line))
        return current & ~_SUCCESSES | 2 << _SUCCESSES_SHIFT

    def _decided(self, state: _Agent, number: int, current: int, new_rank: int, code: int) -> int:
        """An identity's state once a row of rank ``new_rank`` and disposition ``code`` is weighed (the one
        precedence rule, ``supersedes``), with every count moved to match."""
        old = current & _DISP
        if old:
            state.retried += 1
            if not supersedes(new_rank, (current >> _RANK_SHIFT) & _RANK_MASK):
                return current
        elif current & _EXPECTED:
            state.unknown -= 1
        else:
            state.unexpected += 1
        if code != old:
            self._recount(state, number, old, code)
        return current & ~(_DISP | _RANK_MASK << _RANK_SHIFT) | code | new_rank << _RANK_SHIFT

    def _duplicate(self, state: _Agent, key: Key, current: int, attempt: int) -> int | None:
        """The line of an earlier success row of the same attempt, if there is one."""
        if (current >> _FIRST_SHIFT) & _ATTEMPT_MASK == attempt:
            slot = state.blocks.find(key[1], key[2])
            return int(state.lines[slot])
        for earlier_attempt, earlier_line in self._more_successes.get(key, ()):
            if earlier_attempt == attempt:
                return earlier_line
        return None

    def _retryable(self, state: int) -> bool:
        # A failed rollout NeMo Gym would dispatch again on resume: one whose outcome is not final.
        return _failures(state) > 0 and not self._final(state)

    @staticmethod
    def _recount(state: _Agent, number: int, old: int, code: int) -> None:
        """Move an identity's count from disposition ``old`` (0: none yet) to ``code``, with its task's flags:
        whether one of its rows in the main output is unmasked, or every one is masked."""
        reached, unmasked = state.task_reached, state.task_unmasked
        was_measured, was_masked = unmasked[number] > 0, reached[number] > 0 and not unmasked[number]
        if old:
            state.rollouts[_DISPOSITIONS[old - 1]] -= 1
            reached[number] -= old in _CODES_REACHED
            unmasked[number] -= old in _CODES_REACHED and old != _CODE_MASKED
        state.rollouts[_DISPOSITIONS[code - 1]] += 1
        reached[number] += code in _CODES_REACHED
        unmasked[number] += code in _CODES_REACHED and code != _CODE_MASKED
        state.measured_tasks += (unmasked[number] > 0) - was_measured
        state.fully_masked_tasks += (reached[number] > 0 and not unmasked[number]) - was_masked

    def snapshot(self) -> CoverageSnapshot:
        """Copy the coverage of every agent: O(agents), whatever the number of rollouts."""
        with read_locked(self._lock):
            known = self._expected_known
            # The rollouts without an identity that fill expected ones, by agent (see the module).
            filled = {label: min(state.unidentified, state.unknown) for label, state in self._agents.items()}
            agents = tuple(
                AgentCoverage(
                    agent=label,
                    rollouts=dict(state.rollouts),
                    expected=sum(state.rollouts.values()) + state.unknown - filled[label] if known else None,
                    unknown=state.unknown - filled[label] if known else None,
                    retried=state.retried + self._retried_before.get(label, 0),
                    measured_tasks=state.measured_tasks,
                    fully_masked_tasks=state.fully_masked_tasks,
                    retryable=state.retryable,
                    unidentified=state.unidentified,
                )
                for label, state in sorted(self._agents.items())
            )
            unexpected = (
                sum(s.unexpected - filled[label] for label, s in self._agents.items()) if known else 0
            )
            restarts = self._restarts
        return CoverageSnapshot(agents=agents, expected_known=known, unexpected=unexpected, restarts=restarts)
