"""Groups: the rollouts of one task, gathered until each member has an outcome, then classified once.

The rollouts of one (agent, task index) form a group; how a complete group is classified, and what more is
counted of it for the training signal, is ``_contract.group_state``. Besides, its task is *consistently
unhealthy* (NeMo Gym's ``task_consistently_unhealthy``) when two or more members had their trajectory checked
(``_contract.health``) and every one of them failed a check.

The size of a group comes from ``declare(agent, group_size)`` (every task of the agent has that many
rollouts) or, in follow mode, from the materialized inputs (``expect``: one call per expected rollout). A
member is keyed by its rollout index, so a retried member replaces its earlier attempt while the group is
open; once complete, a group is classified once and for all: a late retry never completes it again.

Live, a group is classified when its last member's outcome arrives, with what is known then; an outcome that
arrives later and would change it (a retry of a failed member on resume, a member beyond the group's size)
is counted as *late* and changes nothing else. A report of files that were written in full classifies each
group from its members' final outcomes instead (``deferred``): the two agree exactly when nothing was late.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

from rollout_telemetry import _fork
from rollout_telemetry._contract.group_state import (
    CONTAMINABLE,
    DEFAULT_MIN_VALID,
    GROUP_STATES,
    GroupState,
    contaminated,
    group_state,
)
from rollout_telemetry._contract.identity import (
    check_identity,
    check_task_size,
    rank,
    supersedes,
)
from rollout_telemetry._contract.outcome import ABSENT, Classified, Disposition
from rollout_telemetry._contract.reward_range import (
    DEFAULT_REWARD_RANGE,
    UNIFORM_AT,
    RewardRange,
    UniformAt,
    check_reward_range,
    uniform_at,
)
from rollout_telemetry._store.blocks import Blocks
from rollout_telemetry._store.names import Names
from rollout_telemetry._store.reads import read_locked
from rollout_telemetry._store.snapshot import by_agent
from rollout_telemetry.errors import ConfigError

__all__ = ["AgentGroups", "Groups", "GroupsSnapshot"]

_MEASURED = Disposition.MEASURED


# A member's state, packed in an int of a Blocks column (see _store.blocks): 0 is a member not known yet.
_HAS_OUTCOME = 1
_EXPECTED = 2  # among the materialized inputs
_DISPOSITION_SHIFT = 2  # three bits: the standing outcome's disposition, by its position in _DISPOSITIONS
_EVALUATED = 32  # the standing outcome's trajectory was checked for health
_UNHEALTHY = 64  # and failed a check
_RANK_SHIFT = 7  # the rank (identity.rank, below 2**18) of the outcome that stands: 25 bits in all
_DISPOSITIONS: tuple[Disposition, ...] = tuple(Disposition)
_CODES = {disposition: code for code, disposition in enumerate(_DISPOSITIONS)}
_MEASURED_CODE = _CODES[_MEASURED]
_COMPLETED = 1  # a task's flag: classified once; a late retry changes nothing
_COUNTED = _HAS_OUTCOME | 7 << _DISPOSITION_SHIFT | _EVALUATED | _UNHEALTHY
"""The bits of a member's state its group's counts depend on (its outcome's rank aside)."""


def _same(reward: float, standing: float) -> bool:
    """Whether two members' rewards are the same for their group (NaN: no valid reward, for both)."""
    return reward == standing or (math.isnan(reward) and math.isnan(standing))


class _Agent:
    """One agent's groups: every member in ``Blocks``, the open groups; only touched under the lock."""

    __slots__ = ("blocks", "expected", "expected_done", "flags", "open", "outcomes", "rewards", "states")

    def __init__(self) -> None:
        # Per member: its packed state and its reward when valid (NaN otherwise). Per task: the completed
        # flag, members with an outcome, expected members, and expected members with an outcome.
        self.blocks = Blocks(
            {"state": "L", "reward": "d"},
            {"flags": "B", "outcomes": "H", "expected": "H", "expected_done": "H"},  # at most 65,535 members
        )
        # The columns, at hand (they grow in place, never replaced).
        self.states, self.rewards = self.blocks.member["state"], self.blocks.member["reward"]
        task = self.blocks.task
        self.flags, self.outcomes = task["flags"], task["outcomes"]
        self.expected, self.expected_done = task["expected"], task["expected_done"]
        self.open = 0


class _Counts:
    """One agent's completed groups, counted for every run; only touched under the lock."""

    __slots__ = ("contaminated", "late", "members", "singles", "states", "unhealthy", "uniform")

    def __init__(self) -> None:
        self.states = dict.fromkeys(GROUP_STATES, 0)
        self.singles = dict.fromkeys(GROUP_STATES, 0)  # of those, the groups of one member
        self.contaminated = dict.fromkeys(CONTAMINABLE, 0)
        self.uniform: dict[UniformAt, int] = dict.fromkeys(UNIFORM_AT, 0)
        self.members = dict.fromkeys(_DISPOSITIONS, 0)
        self.unhealthy = 0
        self.late = 0


@dataclass(frozen=True, slots=True)
class AgentGroups:
    """One agent's completed groups by state, and how many are still open."""

    agent: str
    states: Mapping[GroupState, int]
    open: int
    singles: Mapping[GroupState, int] = field(default_factory=dict)
    """Of ``states``, the groups of one member: a task with one rollout, which nothing compares (an
    evaluation's usual shape; ``insufficient`` or ``no_valid`` by the rule, but no alarm)."""
    contaminated: Mapping[GroupState, int] = field(default_factory=lambda: dict.fromkeys(CONTAMINABLE, 0))
    """Completed groups whose valid members sat beside members that are not valid, by state."""
    uniform: Mapping[UniformAt, int] = field(default_factory=lambda: dict.fromkeys(UNIFORM_AT, 0))
    """Uniform groups by where their common reward lies in the agent's reward range."""
    members: Mapping[Disposition, int] = field(default_factory=lambda: dict.fromkeys(_DISPOSITIONS, 0))
    """Members of the completed groups by the disposition of their standing attempt."""
    unhealthy: int = 0
    """Completed groups whose task was consistently unhealthy (every checked member, two or more, failed)."""
    late: int = 0
    """Outcomes that arrived for a group already classified and would have changed it (a retry of a member
    that failed, a member beyond the group's size): the counts above keep the group as it was classified."""

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
            raise ConfigError(msg)
        self._names = names
        self.min_valid = min_valid
        self._lock = _fork.lock_for(self)
        self._sizes: dict[str, int] = {}  # agent label -> declared group size
        self._ranges: dict[str, RewardRange] = {}  # agent label -> declared reward range
        self._counts: dict[str, _Counts] = {}  # completed groups: counters, every run
        self._deferred = False  # inside deferred(): no group is classified before the end
        self.new_run()

    def new_run(self) -> None:
        """A new run begins (the files being read started over): forget the open and completed groups.

        The counts of completed groups go on (``rollout_groups_total`` is a counter); declared sizes stay.
        """
        with self._lock:
            if self._deferred:  # the groups of the run that ends are classified as they stand
                self._complete_all()
            self._agents: dict[str, _Agent] = {}
            self._from_inputs = False
            self.active = bool(self._sizes)
            """Whether any group size is known (declared, or from inputs): until then nothing is grouped."""

    def declare(self, agent: str, group_size: int) -> None:
        """Every task of ``agent`` has ``group_size`` rollouts (rollout indices 0 .. group_size - 1).

        Raises:
            ConfigError: ``group_size`` is not an integer from 1 to 65,535.
            OutcomeError: the agent name is not a non-empty string.
        """
        check_task_size(group_size)
        label = self._names.agent(agent)[0]
        with self._lock:
            self._sizes[label] = group_size
            self.active = True

    def declare_range(self, agent: str, reward_range: tuple[float, float]) -> None:
        """The lowest and highest reward of ``agent`` (default [0, 1]): where a uniform group's reward lies.

        Raises:
            ConfigError: the range is not two finite numbers, the lowest below the highest.
            OutcomeError: the agent name is not a non-empty string.
        """
        checked = check_reward_range(reward_range)
        label = self._names.agent(agent)[0]
        with self._lock:
            self._ranges[label] = checked

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """Classify each group from its members' final outcomes: inside, no group is classified; on leaving
        (or at a new run), every group whose members all have an outcome is, with the outcomes that stand.

        For a run's files read in full (``report``), where the order of the rows of two files is not known:
        the counts equal those of the live account when no outcome was late (``AgentGroups.late``).
        """
        with self._lock:
            self._deferred = True
        try:
            yield
        finally:
            with self._lock:
                self._deferred = False
                self._complete_all()

    def _complete_all(self) -> None:
        # Called under the lock: every group that is complete and not classified yet, is.
        for label, state in self._agents.items():
            for number in range(state.blocks.tasks):
                if not state.flags[number] & _COMPLETED:
                    self._complete_if_done(label, state, number)

    def _agent(self, label: str) -> _Agent:
        agent = self._agents.get(label)
        if agent is None:
            agent = self._agents[label] = _Agent()
        return agent

    def _member(self, state: _Agent, task: int, rollout: int) -> tuple[int, int]:
        """(task number, slot) of a member; a task seen for the first time opens a group."""
        blocks = state.blocks
        known = blocks.tasks
        number = blocks.add_task(task)
        if blocks.tasks > known:
            state.open += 1
        return number, blocks.slot(number, rollout)

    def expect(self, agent: str, task_index: int, rollout_index: int) -> None:
        """One rollout the run is expected to produce (a materialized inputs row): a member of its task."""
        check_identity(task_index, rollout_index)
        label = self._names.agent(agent)[0]
        with self._lock:
            self._from_inputs = True
            self.active = True
            state = self._agent(label)
            number, slot = self._member(state, task_index, rollout_index)
            member = state.states[slot]
            if state.flags[number] & _COMPLETED or member & _EXPECTED:
                return
            state.states[slot] = member | _EXPECTED
            state.expected[number] += 1
            state.expected_done[number] += bool(member & _HAS_OUTCOME)
            if not self._deferred:
                self._complete_if_done(label, state, number)

    def observe(
        self,
        agent: str,
        task_index: int,
        rollout_index: int,
        outcome: Classified,
        attempt: int | None = None,
        *,
        health: tuple[str, ...] | None = None,
    ) -> None:
        """Give one member's outcome to its group; a retried member replaces its earlier attempt.

        The precedence is the coverage account's (``identity.supersedes``): a higher ``attempt`` wins, and at
        the same attempt (or with none given) an outcome that reached the output wins over a failure or
        omission, then the later one wins.

        ``health`` is the health checks the member's trajectory failed, ``None`` without one.

        The identity is the caller's to check (``identity.check_identity``), before the outcome is counted.

        Raises:
            OutcomeError: the agent name is invalid.
        """
        if not self.active:
            # No group size known for any agent: nothing to group (read without the lock: sizes are
            # declared before the rollouts they size, and inputs are read before the rows they expect).
            return
        label = self._names.agent(agent)[0]
        new_rank = rank(attempt, outcome[0] not in ABSENT)
        reward = outcome[1] if outcome[0] is _MEASURED and outcome[1] is not None else math.nan
        with self._lock:
            state = self._agents.get(label)
            if label not in self._sizes and (
                state is None or state.blocks.number(task_index) < 0 or not self._from_inputs
            ):
                return  # no size known for this agent, and its task is not among the inputs: no group
            if state is None:
                state = self._agent(label)
            number, slot = self._member(state, task_index, rollout_index)
            member = state.states[slot]
            if member & _HAS_OUTCOME and not supersedes(new_rank, member >> _RANK_SHIFT):
                return
            new = (
                _HAS_OUTCOME
                | _CODES[outcome[0]] << _DISPOSITION_SHIFT
                | (0 if health is None else _EVALUATED | (_UNHEALTHY if health else 0))
            )
            if state.flags[number] & _COMPLETED:  # classified once already: a late outcome changes nothing
                if new != member & _COUNTED or not _same(reward, state.rewards[slot]):
                    self._counts[label].late += 1
                return
            if not member & _HAS_OUTCOME:
                state.outcomes[number] += 1
                state.expected_done[number] += bool(member & _EXPECTED)
            state.states[slot] = member & _EXPECTED | new | new_rank << _RANK_SHIFT
            state.rewards[slot] = reward
            if not self._deferred:
                self._complete_if_done(label, state, number)

    def _complete_if_done(self, label: str, state: _Agent, number: int) -> None:
        # Called under the lock. Inputs give the members of a task; otherwise the agent's declared size.
        expected = state.expected[number]
        if expected:
            done = state.expected_done[number] == expected
        else:
            size = self._sizes.get(label)
            done = size is not None and state.outcomes[number] >= size
        if not done:
            return
        counts = self._counts.get(label)
        if counts is None:
            counts = self._counts[label] = _Counts()
        states, rewards, members = state.states, state.rewards, counts.members
        valid: list[float | None] = []
        evaluated = unhealthy = 0
        for slot in state.blocks.block(number):
            member = states[slot]
            if member & _HAS_OUTCOME:
                code = member >> _DISPOSITION_SHIFT & 7
                members[_DISPOSITIONS[code]] += 1
                valid.append(rewards[slot] if code == _MEASURED_CODE else None)
                evaluated += bool(member & _EVALUATED)
                unhealthy += bool(member & _UNHEALTHY)
        if evaluated >= 2 and unhealthy == evaluated:
            counts.unhealthy += 1
        classified = group_state(valid, self.min_valid)
        counts.states[classified] += 1
        if contaminated(valid):
            counts.contaminated[classified] += 1
        if classified == "uniform":
            common = next(reward for reward in valid if reward is not None)
            counts.uniform[uniform_at(common, self._ranges.get(label, DEFAULT_REWARD_RANGE))] += 1
        if len(valid) == 1:
            counts.singles[classified] += 1
        state.flags[number] |= _COMPLETED
        state.open -= 1

    def snapshot(self) -> GroupsSnapshot:
        """Copy every agent's group counts."""
        with read_locked(self._lock):
            agents = tuple(
                AgentGroups(
                    agent=label,
                    states=counts.states.copy(),
                    open=state.open if (state := self._agents.get(label)) is not None else 0,
                    singles=counts.singles.copy(),
                    contaminated=counts.contaminated.copy(),
                    uniform=counts.uniform.copy(),
                    members=counts.members.copy(),
                    unhealthy=counts.unhealthy,
                    late=counts.late,
                )
                for label, counts in sorted(self._counts.items())
            )
        return GroupsSnapshot(agents=agents)
