"""What a run declares of itself: its agents, expected rollouts, groups and reward range, and the coverage
account that weighs every outcome against the expected work.

A part of the facade (``RolloutTelemetry`` inherits it), kept apart because it is a concept of its own: the
recording paths (``telemetry``) count what happened; this says what was supposed to happen.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from rollout_telemetry._contract.identity import MAX_ROLLOUT_INDEX
from rollout_telemetry._contract.reward_range import check_reward_range
from rollout_telemetry._store.account import Account
from rollout_telemetry._store.coverage import DEFAULT_MAX_ATTEMPTS, Coverage, CoverageSnapshot
from rollout_telemetry._store.groups import Groups
from rollout_telemetry._store.names import Names
from rollout_telemetry._store.rejections import Rejections
from rollout_telemetry.errors import ConfigError, Rejection

__all__ = ["ExpectedWork"]


class ExpectedWork:
    """The declarations of ``RolloutTelemetry``: agents, expected rollouts, groups, reward ranges, coverage
    account."""

    # Made by RolloutTelemetry.__init__.
    names: Names
    groups: Groups
    rejections: Rejections
    _account: Account
    _expected: dict[str, int]
    _coverage: Coverage | None

    def new_run(self) -> None:
        """A new run of the source begins: its groups and coverage start again; every count goes on, never
        backwards (see ``Coverage.new_run``)."""
        self.groups.new_run()
        if self._coverage is not None:
            self._coverage.new_run()

    def declare(self, *agents: str) -> None:
        """Publish ``agents`` with zero counts before their first rollout.

        Counters that exist from 0 let PromQL's ``increase()`` see every rollout, the first included.
        """
        for agent in agents:
            self._account.declare(agent)  # raises OutcomeError for an invalid agent

    def expect(self, agent: str, count: int, *, group_size: int | None = None) -> None:
        """Declare ``agent`` and how many rollouts it is expected to produce in total.

        With ``group_size`` each of its tasks has that many rollouts: see ``declare_groups``.
        """
        if count < 0:
            msg = f"expected count for {agent!r} must be >= 0, got {count}"
            raise ConfigError(msg)
        self.declare(agent)
        self._expected[agent] = count
        if group_size is not None:
            self.declare_groups(agent, group_size=group_size)

    def declare_groups(self, *agents: str, group_size: int) -> None:
        """Each task of ``agents`` has ``group_size`` rollouts: outcomes recorded with a ``task_index`` and
        ``rollout_index`` (``record``, ``rollout()``) form groups, classified once all members have one.

        Raises:
            ConfigError: ``group_size`` is not an integer from 1 to 65,535.
        """
        for agent in agents:
            self.declare(agent)
            self.groups.declare(agent, group_size)

    def declare_reward_range(self, *agents: str, reward_range: tuple[float, float]) -> None:
        """The lowest and highest reward ``agents`` can get (default [0, 1]): a uniform group's common reward
        at either end is counted as ``lowest`` (too hard) or ``highest`` (too easy), anything else as
        ``other`` (``rollout_groups_uniform_total``), and the agents' measured rewards are histogrammed in
        ten buckets of the range (``rollout_measured_reward``). Declare it before an agent's first reward.

        Raises:
            ConfigError: the range is not two finite numbers, the lowest below the highest, or an agent
                already has a measured reward under another range.
        """
        checked = check_reward_range(reward_range)
        for agent in agents:
            self._account.declare_range(agent, checked)
            self.groups.declare_range(agent, checked)

    # -- the run's expected work: its coverage -------------------------------------------------------

    def cover(self, *, max_attempts: int | None = None) -> Coverage:
        """Keep the run's coverage account from now on (what became of each rollout identity); return it.

        ``expect_tasks``, ``expect_rollouts`` and ``expect_inputs`` call it; a file follower does too. From
        then on every outcome is weighed there, by its identity, the newest attempt deciding, and the
        ``rollout_run_*`` families and Gym's ``coverage/...`` keys (``progress_metrics``) describe it.

        Args:
            max_attempts: attempts NeMo Gym makes before it stops retrying a rollout (its
                ``NEMO_GYM_MAX_ROLLOUT_ATTEMPTS``): a failed rollout with fewer is ``retryable``. Not given:
                the kept account's, else 3.

        Raises:
            ConfigError: ``max_attempts`` is below 1, or differs from the one the account was kept with.
        """
        coverage = self._coverage
        if coverage is None:
            attempts = DEFAULT_MAX_ATTEMPTS if max_attempts is None else max_attempts
            coverage = self._coverage = Coverage(self.names, max_attempts=attempts)
        elif max_attempts is not None and coverage.max_attempts != max_attempts:
            msg = f"the coverage account counts {coverage.max_attempts} attempts, not {max_attempts}"
            raise ConfigError(msg)
        return coverage

    def expect_rollouts(self, agent: str, identities: Iterable[tuple[int, int]]) -> None:
        """Declare rollouts the run is expected to produce: ``identities`` of ``agent`` as (task index,
        rollout index) pairs, as NeMo Gym's materialized inputs list them.

        The rollouts not recorded yet are ``unknown`` in the coverage account (``rollout_run_rollouts``); each
        task's expected rollouts are its group (``rollout_groups_total``).

        Raises:
            OutcomeError: the agent name or an identity is invalid (those before it are declared).
        """
        coverage = self.cover()
        for task_index, rollout_index in identities:
            coverage.expect(agent, task_index, rollout_index)
            self.groups.expect(agent, task_index, rollout_index)

    def expect_tasks(self, agent: str, tasks: int, rollouts_per_task: int = 1) -> None:
        """Declare ``agent`` and its expected work: tasks ``0 .. tasks - 1``, each with rollouts ``0 ..
        rollouts_per_task - 1`` (``expect_rollouts``). Record outcomes with their ``task_index``,
        ``rollout_index`` and ``attempt`` to see what became of each.

        Raises:
            ConfigError: ``tasks`` is negative or ``rollouts_per_task`` is not from 1 to 65,535.
        """
        if type(tasks) is not int or tasks < 0:
            msg = f"tasks must be an integer >= 0, got {tasks!r}"
            raise ConfigError(msg)
        if type(rollouts_per_task) is not int or not 1 <= rollouts_per_task <= MAX_ROLLOUT_INDEX + 1:
            most = MAX_ROLLOUT_INDEX + 1
            msg = f"rollouts_per_task must be an integer from 1 to {most}, got {rollouts_per_task!r}"
            raise ConfigError(msg)
        self.declare(agent)
        self.expect_rollouts(agent, ((t, r) for t in range(tasks) for r in range(rollouts_per_task)))

    def expect_inputs(self, path: str | Path, *, agent: str | None = None) -> int:
        """Declare the expected work NeMo Gym materialized for a run (``<stem>_materialized_inputs.jsonl``).

        Each row names its agent (``agent_ref.name``, else ``_ng_environment_server``, else ``agent``) and
        its identity. A row that cannot be read is a counted rejection naming its line; the others are
        declared. Returns how many rollouts were declared.

        Raises:
            ConfigError: the file cannot be read.
        """
        # Imported here: _sources imports the facade.
        from rollout_telemetry._sources.inputs import read_inputs

        declared: set[str] = set()
        count = 0
        for number, expected in read_inputs(path, agent):
            if isinstance(expected, Rejection):
                located = Rejection(expected.reason, f"line {number}: {expected}")
                self.rejections.reject(located, source=str(path))
                continue
            name, identity = expected
            if name not in declared:
                self.declare(name)
                declared.add(name)
            self.expect_rollouts(name, (identity,))
            count += 1
        return count

    def coverage_snapshot(self) -> CoverageSnapshot:
        """The run's coverage (``cover``) at one moment; no agent before expected work or followed files."""
        coverage = self._coverage
        return coverage.snapshot() if coverage is not None else CoverageSnapshot(agents=())
