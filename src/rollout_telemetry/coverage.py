"""The run coverage account: of the rollouts a run was supposed to produce, what became of each.

Live counters count *events* (every success line and every failure line). Coverage counts *identities*:
each rollout is keyed by (agent, task index, rollout index) and its newest attempt decides its disposition
(a higher attempt index wins; for equal or missing indices, the later line). With the expected identities
known (from the materialized inputs), at every moment

    expected = measured + masked + unscored + failed + omitted + unknown

where unknown is expected but not seen yet. A row whose identity is not among the expected ones is still
covered, and counted in expected too, so the identity always holds. Without expected identities, expected
and unknown are not known and not published.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from rollout_telemetry import _fork
from rollout_telemetry.names import Names
from rollout_telemetry.outcome import Disposition

__all__ = ["AgentCoverage", "Coverage", "CoverageSnapshot", "coverage_metrics"]

Identity = tuple[str, int, int]
"""(agent, task index, rollout index)."""

_DISPOSITIONS = tuple(Disposition)


class _Latest:
    __slots__ = ("attempt", "disposition")

    def __init__(self, disposition: Disposition, attempt: int | None) -> None:
        self.disposition = disposition
        self.attempt = attempt


@dataclass(frozen=True, slots=True)
class AgentCoverage:
    """One agent's coverage at one moment."""

    agent: str
    rollouts: Mapping[Disposition, int]
    """Identities by the disposition of their newest attempt."""
    expected: int | None
    unknown: int | None
    retried: int
    """Attempts beyond the first of an identity."""
    measured_tasks: int
    """Tasks with at least one measured rollout."""
    fully_masked_tasks: int
    """Tasks all of whose rollouts are seen and masked."""

    @property
    def seen(self) -> int:
        """Distinct identities seen."""
        return sum(self.rollouts.values())


@dataclass(frozen=True, slots=True)
class CoverageSnapshot:
    """Every agent's coverage, taken atomically."""

    agents: tuple[AgentCoverage, ...]
    expected_known: bool = False
    unexpected: int = field(default=0)
    """Identities seen that were not among the expected ones (0 when none are expected)."""

    def agent(self, name: str) -> AgentCoverage | None:
        """The coverage of one agent, or ``None``."""
        for agent in self.agents:
            if agent.agent == name:
                return agent
        return None


class Coverage:
    """Identities of a run and the newest attempt of each; thread-safe.

    Args:
        names: resolves agent names to labels (cut, capped) as the account does; a name is one row.
    """

    def __init__(self, names: Names | None = None) -> None:
        self._names = names if names is not None else Names()
        self._lock = threading.Lock()
        self.reset()
        _fork.track(self)

    def _after_fork_in_child(self) -> None:
        self._lock = threading.Lock()

    def reset(self) -> None:
        """Forget everything (the files being read started over)."""
        with self._lock:
            self._latest: dict[Identity, _Latest] = {}
            self._expected: set[Identity] = set()
            self._expected_known = False
            self._retried: dict[str, int] = {}

    def expect(self, agent: str, task_index: int, rollout_index: int) -> None:
        """Declare one identity the run is expected to produce."""
        agent = self._names.agent(agent)[0]
        with self._lock:
            self._expected_known = True
            self._expected.add((agent, task_index, rollout_index))

    def observe(
        self,
        agent: str,
        task_index: int,
        rollout_index: int,
        attempt: int | None,
        disposition: Disposition,
    ) -> None:
        """Record one attempt; the newest attempt of an identity decides its disposition."""
        agent = self._names.agent(agent)[0]
        key = (agent, task_index, rollout_index)
        with self._lock:
            latest = self._latest.get(key)
            if latest is None:
                self._latest[key] = _Latest(disposition, attempt)
                return
            self._retried[agent] = self._retried.get(agent, 0) + 1
            if attempt is None or latest.attempt is None or attempt >= latest.attempt:
                latest.disposition = disposition
                latest.attempt = attempt

    def snapshot(self) -> CoverageSnapshot:
        """Copy the coverage of every agent atomically."""
        with self._lock:
            per_agent: dict[str, dict[Disposition, int]] = {}
            tasks: dict[tuple[str, int], list[Disposition | None]] = {}
            for (agent, task, _), latest in self._latest.items():
                counts = per_agent.setdefault(agent, dict.fromkeys(_DISPOSITIONS, 0))
                counts[latest.disposition] += 1
                tasks.setdefault((agent, task), []).append(latest.disposition)
            unknown: dict[str, int] = {}
            expected: dict[str, int] = {}
            unexpected = 0
            if self._expected_known:
                for agent, task, rollout in self._expected:
                    per_agent.setdefault(agent, dict.fromkeys(_DISPOSITIONS, 0))
                    if (agent, task, rollout) not in self._latest:
                        unknown[agent] = unknown.get(agent, 0) + 1
                        tasks.setdefault((agent, task), []).append(None)
                unexpected = sum(1 for key in self._latest if key not in self._expected)
                for agent, counts in per_agent.items():
                    expected[agent] = sum(counts.values()) + unknown.get(agent, 0)
            measured_tasks: dict[str, int] = {}
            fully_masked: dict[str, int] = {}
            for (agent, _), dispositions in tasks.items():
                if Disposition.MEASURED in dispositions:
                    measured_tasks[agent] = measured_tasks.get(agent, 0) + 1
                if all(d is Disposition.MASKED for d in dispositions):
                    fully_masked[agent] = fully_masked.get(agent, 0) + 1
            known = self._expected_known
            agents = tuple(
                AgentCoverage(
                    agent=agent,
                    rollouts=counts,
                    expected=expected.get(agent, 0) if known else None,
                    unknown=unknown.get(agent, 0) if known else None,
                    retried=self._retried.get(agent, 0),
                    measured_tasks=measured_tasks.get(agent, 0),
                    fully_masked_tasks=fully_masked.get(agent, 0),
                )
                for agent, counts in sorted(per_agent.items())
            )
            return CoverageSnapshot(agents=agents, expected_known=known, unexpected=unexpected)


def coverage_metrics(snapshot: CoverageSnapshot) -> dict[str, int]:
    """NeMo Gym's end-of-run ``coverage/...`` keys.

    ``coverage/measured_rollouts``, ``masked_rollouts``, ``measured_tasks`` and ``fully_masked_tasks``
    appear only when something is masked; the run-level ``coverage/expected``, ``measured``, ``masked``,
    ``unscored``, ``failed``, ``omitted`` and ``unknown`` only when the expected rollouts are known.
    """
    keys: dict[str, int] = {}
    total = dict.fromkeys(_DISPOSITIONS, 0)
    for agent in snapshot.agents:
        for disposition, count in agent.rollouts.items():
            total[disposition] += count
    if total[Disposition.MASKED]:
        keys["coverage/measured_rollouts"] = total[Disposition.MEASURED]
        keys["coverage/masked_rollouts"] = total[Disposition.MASKED]
        keys["coverage/measured_tasks"] = sum(a.measured_tasks for a in snapshot.agents)
        keys["coverage/fully_masked_tasks"] = sum(a.fully_masked_tasks for a in snapshot.agents)
    if snapshot.expected_known:
        keys["coverage/expected"] = sum(a.expected or 0 for a in snapshot.agents)
        for disposition in _DISPOSITIONS:
            keys[f"coverage/{disposition.value}"] = total[disposition]
        keys["coverage/unknown"] = sum(a.unknown or 0 for a in snapshot.agents)
    return keys
