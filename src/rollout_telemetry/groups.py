"""Groups: the rollouts of one task, compared with each other as GRPO-style training compares them.

The rollouts of one (agent, task index) form a group. A member is *valid* when it completed unmasked with a
reward (the ``measured`` disposition). Once every member has an outcome the group is classified, once:

- ``fully_masked``: no valid member (every one masked, unscored, failed or omitted);
- ``insufficient``: fewer than ``min_valid`` valid members: a noisy advantage estimate;
- ``uniform``: every valid member got the same reward: zero advantage, no learning signal;
- ``degraded``: some members are not valid, enough are, and their rewards differ;
- ``valid``: every member valid and their rewards differ.

The checks run in that order (``group_state``), so a group with one valid member is insufficient, not
uniform. The size of a group comes from ``declare(agent, group_size)`` (every task of the agent has that
many rollouts) or, in follow mode, from the materialized inputs (``expect``: one call per expected
rollout). A member is keyed by its rollout index, so a retried member replaces its earlier attempt while the
group is open; once complete, a group's members are dropped and a bounded record that it completed is kept,
so a late retry never completes it again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from rollout_telemetry import _fork
from rollout_telemetry.names import Names
from rollout_telemetry.outcome import Classified, Disposition, OutcomeError
from rollout_telemetry.snapshot import by_agent

__all__ = [
    "DEFAULT_MIN_VALID",
    "GROUP_STATES",
    "NO_SIGNAL",
    "AgentGroups",
    "GroupState",
    "Groups",
    "GroupsSnapshot",
    "Member",
    "group_state",
]

GroupState = Literal["valid", "degraded", "uniform", "insufficient", "fully_masked"]
GROUP_STATES: tuple[GroupState, ...] = ("valid", "degraded", "uniform", "insufficient", "fully_masked")
NO_SIGNAL: tuple[GroupState, ...] = ("uniform", "insufficient", "fully_masked")
"""The states of a group that gives the policy no (or only a noisy) learning signal."""

DEFAULT_MIN_VALID = 2
_MAX_COMPLETED = 1 << 20
"""Completed groups remembered (so a late retry cannot complete one again); the oldest are forgotten."""

_MEASURED = Disposition.MEASURED
_ABSENT = (Disposition.FAILED, Disposition.OMITTED)

Member = tuple[object, object, "int | None"]
"""(task index, rollout index, attempt or ``None``): which member of which group an outcome is."""


def group_state(rewards: Sequence[float | None], min_valid: int = DEFAULT_MIN_VALID) -> GroupState:
    """Classify a complete group from its members' rewards, ``None`` for a member that is not valid."""
    valid = [reward for reward in rewards if reward is not None]
    if not valid:
        return "fully_masked"
    if len(valid) < min_valid:
        return "insufficient"
    if min(valid) == max(valid):
        return "uniform"
    if len(valid) < len(rewards):
        return "degraded"
    return "valid"


def _index(value: object, field: str) -> int:
    if type(value) is not int or value < 0:
        raise OutcomeError(field, f"must be an integer >= 0, got {value!r:.40}")
    return value


class _Group:
    """One open group; only touched under the groups lock."""

    __slots__ = ("expected", "members")

    def __init__(self) -> None:
        self.expected: set[int] = set()  # rollout indices from the materialized inputs
        # rollout index -> (rank, reward if valid else None); the rank decides which attempt stands.
        self.members: dict[int, tuple[tuple[int, bool], float | None]] = {}


@dataclass(frozen=True, slots=True)
class AgentGroups:
    """One agent's completed groups by state, and how many are still open."""

    agent: str
    states: Mapping[GroupState, int]
    open: int

    @property
    def completed(self) -> int:
        """Groups classified so far."""
        return sum(self.states.values())


@dataclass(frozen=True, slots=True)
class GroupsSnapshot:
    """Every agent's groups, taken atomically."""

    agents: tuple[AgentGroups, ...] = ()

    def agent(self, name: str) -> AgentGroups | None:
        """The groups of one agent (by its label), or ``None``."""
        return by_agent(self.agents, name)


class Groups:
    """Group state per (agent label, task index), fed the classified outcomes the account counts.

    Args:
        names: resolves agent names to labels, as the account does.
        min_valid: valid members a group needs to give more than a noisy signal (``min_valid_per_group``).
    """

    def __init__(self, names: Names, *, min_valid: int = DEFAULT_MIN_VALID) -> None:
        if min_valid < 1:
            msg = f"min_valid_per_group must be at least 1, got {min_valid}"
            raise ValueError(msg)
        self._names = names
        self.min_valid = min_valid
        self._lock = _fork.lock_for(self)
        self._sizes: dict[str, int] = {}  # agent label -> declared group size
        self._states: dict[str, dict[GroupState, int]] = {}  # completed groups: a counter, every run
        self.new_run()

    def new_run(self) -> None:
        """A new run begins (the files being read started over): forget the open and completed groups.

        The counts of completed groups go on (``rollout_groups_total`` is a counter); declared sizes stay.
        """
        with self._lock:
            self._open: dict[tuple[str, int], _Group] = {}
            self._completed: dict[tuple[str, int], None] = {}
            self._open_count: dict[str, int] = {}  # kept current, so a snapshot is O(agents)
            self._from_inputs = False
            self.active = bool(self._sizes)
            """Whether any group size is known (declared, or from inputs): until then nothing is grouped."""

    def declare(self, agent: str, group_size: int) -> None:
        """Every task of ``agent`` has ``group_size`` rollouts (rollout indices 0 .. group_size - 1).

        Raises:
            ValueError: ``group_size`` is not an integer >= 1.
            OutcomeError: the agent name is not a non-empty string.
        """
        if type(group_size) is not int or group_size < 1:
            msg = f"group_size must be an integer >= 1, got {group_size!r}"
            raise ValueError(msg)
        label = self._names.agent(agent)[0]
        with self._lock:
            self._sizes[label] = group_size
            self.active = True

    def expect(self, agent: str, task_index: int, rollout_index: int) -> None:
        """One rollout the run is expected to produce (a materialized inputs row): a member of its task."""
        label = self._names.agent(agent)[0]
        key = (label, task_index)
        with self._lock:
            self._from_inputs = True
            self.active = True
            if key in self._completed:
                return
            group = self._open.get(key)
            if group is None:
                group = self._opened(key)
            group.expected.add(rollout_index)
            self._complete_if_done(key, group)

    def observe(
        self,
        agent: str,
        task_index: object,
        rollout_index: object,
        outcome: Classified,
        attempt: int | None = None,
    ) -> None:
        """Give one member's outcome to its group; a retried member replaces its earlier attempt.

        As in the coverage account, a higher ``attempt`` wins, and at the same attempt (or with none given)
        an outcome that reached the output wins over a failure or omission, then the later one wins.

        Raises:
            OutcomeError: the task or rollout index is not an integer >= 0, or the agent name is invalid.
        """
        if not self.active:
            # No group size known for any agent: nothing to group (read without the lock: sizes are
            # declared before the rollouts they size, and inputs are read before the rows they expect).
            return
        task = _index(task_index, "task_index")
        member = _index(rollout_index, "rollout_index")
        label = self._names.agent(agent)[0]
        key = (label, task)
        reward = outcome[1] if outcome[0] is _MEASURED else None
        rank = (-1 if attempt is None else attempt, outcome[0] not in _ABSENT)
        with self._lock:
            if key in self._completed:
                return  # a late retry: the group was classified once already
            group = self._open.get(key)
            if group is None:
                if label not in self._sizes and not self._from_inputs:
                    return  # no size known for this agent: its tasks form no groups
                group = self._opened(key)
            earlier = group.members.get(member)
            if earlier is None or rank >= earlier[0]:
                group.members[member] = (rank, reward)
            self._complete_if_done(key, group)

    def _opened(self, key: tuple[str, int]) -> _Group:
        # Called under the lock.
        group = self._open[key] = _Group()
        self._open_count[key[0]] = self._open_count.get(key[0], 0) + 1
        return group

    def _complete_if_done(self, key: tuple[str, int], group: _Group) -> None:
        # Called under the lock. Inputs give the members of a task; otherwise the agent's declared size.
        if group.expected:
            done = group.expected.issubset(group.members)
        else:
            size = self._sizes.get(key[0])
            done = size is not None and len(group.members) >= size
        if not done:
            return
        state = group_state([reward for _, reward in group.members.values()], self.min_valid)
        counts = self._states.get(key[0])
        if counts is None:
            counts = self._states[key[0]] = dict.fromkeys(GROUP_STATES, 0)
        counts[state] += 1
        del self._open[key]
        self._open_count[key[0]] -= 1
        self._completed[key] = None
        if len(self._completed) > _MAX_COMPLETED:
            del self._completed[next(iter(self._completed))]

    def snapshot(self) -> GroupsSnapshot:
        """Copy every agent's group counts."""
        with self._lock:
            agents = tuple(
                AgentGroups(agent=label, states=dict(counts), open=self._open_count.get(label, 0))
                for label, counts in sorted(self._states.items())
            )
        return GroupsSnapshot(agents=agents)
