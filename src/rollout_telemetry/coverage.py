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

A failed rollout is *retryable* when NeMo Gym would dispatch it again on resume: no success was written for
it, none of its failure rows is terminal, and it has used fewer than ``max_attempts`` attempts (its failure
rows). Every count is kept current as rows arrive, so a snapshot costs the same at ten rollouts and at ten
million.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field

from rollout_telemetry import _fork
from rollout_telemetry.names import Names
from rollout_telemetry.outcome import Disposition
from rollout_telemetry.snapshot import by_agent

__all__ = ["DEFAULT_MAX_ATTEMPTS", "AgentCoverage", "Coverage", "CoverageSnapshot", "coverage_metrics"]

DEFAULT_MAX_ATTEMPTS = 3
"""NeMo Gym's default for ``NEMO_GYM_MAX_ROLLOUT_ATTEMPTS``."""

_DISPOSITIONS = tuple(Disposition)
_SCORED = (Disposition.MEASURED, Disposition.MASKED, Disposition.UNSCORED)
"""The dispositions of a rollout whose deciding row is in the main output."""
_MEASURED, _MASKED = Disposition.MEASURED, Disposition.MASKED

Key = tuple[str, int, int]
"""(agent label, task index, rollout index)."""


class _Rollout:
    """What is known of one identity; only touched under the coverage lock."""

    __slots__ = ("attempt", "disposition", "failures", "main_lines", "records", "succeeded", "terminal")

    def __init__(self) -> None:
        self.disposition: Disposition | None = None  # None: expected, not seen yet
        self.attempt = -1
        self.succeeded = False  # the deciding row is a success
        self.records = 0  # rows counted for it (duplicates excluded)
        self.failures = 0  # failure rows: NeMo Gym's count of attempts used
        self.terminal = False
        self.main_lines: tuple[tuple[int, int], ...] = ()  # (attempt, line) of each success row


class _Task:
    __slots__ = ("masked", "measured", "members", "seen")

    def __init__(self) -> None:
        self.members = 0  # identities known: expected or seen
        self.seen = 0
        self.measured = 0
        self.masked = 0

    def flags(self) -> tuple[bool, bool]:
        """(has a measured rollout, every member seen and masked)."""
        return self.measured > 0, self.members > 0 and self.masked == self.members


class _Agent:
    __slots__ = (
        "expected_known",
        "fully_masked_tasks",
        "measured_tasks",
        "retried",
        "retryable",
        "rollouts",
        "unexpected",
        "unidentified",
        "unknown",
    )

    def __init__(self) -> None:
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
    """Tasks with at least one measured rollout."""
    fully_masked_tasks: int
    """Tasks all of whose rollouts are seen and masked."""
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
            raise ValueError(msg)
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
        self._rollouts: dict[Key, _Rollout] = {}
        self._tasks: dict[tuple[str, int], _Task] = {}
        self._agents: dict[str, _Agent] = {}
        self._expected: set[Key] = set()
        self._expected_known = False
        self._unidentified_keys = itertools.count()

    def _agent(self, label: str) -> _Agent:
        agent = self._agents.get(label)
        if agent is None:
            agent = self._agents[label] = _Agent()
        return agent

    def _task_changed(self, agent: _Agent, task: _Task, before: tuple[bool, bool]) -> None:
        after = task.flags()
        agent.measured_tasks += after[0] - before[0]
        agent.fully_masked_tasks += after[1] - before[1]

    def expect(self, agent: str, task_index: int, rollout_index: int) -> None:
        """Declare one identity the run is expected to produce."""
        label = self._names.agent(agent)[0]
        key = (label, task_index, rollout_index)
        with self._lock:
            self._expected_known = True
            if key in self._expected:
                return
            self._expected.add(key)
            state = self._agent(label)
            if key in self._rollouts:  # seen before it was declared: no longer unexpected
                state.unexpected -= 1
                return
            state.unknown += 1
            self._rollouts[key] = _Rollout()
            task = self._tasks.setdefault((label, task_index), _Task())
            before = task.flags()
            task.members += 1
            self._task_changed(state, task, before)

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
    ) -> int | None:
        """Record one row of a rollout: a success (``succeeded``: a row of the main output) or a failure.

        Returns the line of the earlier row when this success repeats one with the same identity and
        attempt: a duplicate, which changes nothing. ``terminal`` marks a failure NeMo Gym will not retry.
        """
        label = self._names.agent(agent)[0]
        with self._lock:
            state = self._agent(label)
            if identity is None:
                key: Key = (label, -1, -1 - next(self._unidentified_keys))
                state.unidentified += 1
            else:
                key = (label, *identity)
            rollout, task = self._rollout(state, key, identity is not None)
            if succeeded:
                for earlier_attempt, earlier_line in rollout.main_lines:
                    if earlier_attempt == attempt:
                        return earlier_line
            retryable_before = rollout.failures > 0 and self._retryable(rollout)
            if succeeded:
                rollout.main_lines += ((attempt, line),)
            else:
                rollout.failures += 1
                # NeMo Gym cannot retry what it cannot key: a failure without identity is final.
                rollout.terminal = rollout.terminal or terminal or identity is None
            rollout.records += 1
            state.retried += rollout.records > 1
            if rollout.disposition is None:  # first seen
                task.seen += 1
                state.unknown -= key in self._expected
            rank = (attempt, succeeded)
            current = (rollout.attempt, rollout.succeeded)
            # Newer attempt wins; at the same attempt a success wins; between two failures, the later line.
            if rank > current or (rank == current and not succeeded):
                flags_before = task.flags()
                self._decide(state, task, rollout, disposition, rank)
                if identity is not None:
                    self._task_changed(state, task, flags_before)
            if rollout.failures:
                state.retryable += self._retryable(rollout) - retryable_before
            return None

    def _rollout(self, state: _Agent, key: Key, in_a_task: bool) -> tuple[_Rollout, _Task]:
        rollout = self._rollouts.get(key)
        if rollout is not None:
            return rollout, self._tasks[(key[0], key[1])]
        rollout = self._rollouts[key] = _Rollout()
        state.unexpected += 1  # not declared (yet): expect() takes it back if it comes later
        if not in_a_task:  # a row without identity: in a task of its own, which no task count includes
            return rollout, _Task()
        task = self._tasks.get((key[0], key[1]))
        if task is None:
            task = self._tasks[(key[0], key[1])] = _Task()
        elif task.flags()[1]:  # fully masked until now; a new, unseen member ends that
            state.fully_masked_tasks -= 1
        task.members += 1
        return rollout, task

    def _retryable(self, rollout: _Rollout) -> bool:
        # NeMo Gym's resume rule: no success written (for any attempt), no terminal failure row, and fewer
        # failure rows (attempts used) than max_attempts.
        return 0 < rollout.failures < self.max_attempts and not rollout.main_lines and not rollout.terminal

    @staticmethod
    def _decide(
        state: _Agent, task: _Task, rollout: _Rollout, disposition: Disposition, rank: tuple[int, bool]
    ) -> None:
        """Make ``disposition`` the rollout's, moving its count from the old one."""
        old = rollout.disposition
        if old is not None:
            state.rollouts[old] -= 1
            task.measured -= old is _MEASURED
            task.masked -= old is _MASKED
        state.rollouts[disposition] += 1
        task.measured += disposition is _MEASURED
        task.masked += disposition is _MASKED
        rollout.disposition = disposition
        rollout.attempt, rollout.succeeded = rank

    def snapshot(self) -> CoverageSnapshot:
        """Copy the coverage of every agent: O(agents), whatever the number of rollouts."""
        with self._lock:
            known = self._expected_known
            agents = tuple(
                AgentCoverage(
                    agent=label,
                    rollouts=dict(state.rollouts),
                    expected=sum(state.rollouts.values()) + state.unknown if known else None,
                    unknown=state.unknown if known else None,
                    retried=state.retried + self._retried_before.get(label, 0),
                    measured_tasks=state.measured_tasks,
                    fully_masked_tasks=state.fully_masked_tasks,
                    retryable=state.retryable,
                    unidentified=state.unidentified,
                )
                for label, state in sorted(self._agents.items())
            )
            unexpected = sum(state.unexpected for state in self._agents.values()) if known else 0
            restarts = self._restarts
        return CoverageSnapshot(agents=agents, expected_known=known, unexpected=unexpected, restarts=restarts)


def coverage_metrics(snapshot: CoverageSnapshot) -> dict[str, int]:
    """NeMo Gym 0.7.0's end-of-run ``coverage/...`` keys, as its collection computes them.

    - ``coverage/expected``: the rollouts of the materialized inputs; ``coverage/scored``: the distinct
      rollouts with a row in the main output; ``coverage/missing``: expected - scored. Only when the
      expected rollouts are known (Gym counts the materialized inputs file, which a run always writes).
    - ``coverage/measured_rollouts``, ``masked_rollouts``, ``measured_tasks`` and ``fully_masked_tasks``
      (Gym's reward profile) only when something is masked.
    """
    keys: dict[str, int] = {}
    total = dict.fromkeys(_DISPOSITIONS, 0)
    for agent in snapshot.agents:
        for disposition, count in agent.rollouts.items():
            total[disposition] += count
    if snapshot.expected_known:
        expected = sum(a.expected or 0 for a in snapshot.agents) - snapshot.unexpected
        scored = sum(total[d] for d in _SCORED)
        keys["coverage/expected"] = expected
        keys["coverage/scored"] = scored
        keys["coverage/missing"] = expected - scored
    if total[Disposition.MASKED]:
        keys["coverage/measured_rollouts"] = total[Disposition.MEASURED]
        keys["coverage/masked_rollouts"] = total[Disposition.MASKED]
        keys["coverage/measured_tasks"] = sum(a.measured_tasks for a in snapshot.agents)
        keys["coverage/fully_masked_tasks"] = sum(a.fully_masked_tasks for a in snapshot.agents)
    return keys
