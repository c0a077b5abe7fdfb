"""What a run declares of itself: its agents, expected rollouts, groups and reward range, and the coverage
account that weighs every outcome against the expected work.

A part of the facade (``RolloutTelemetry`` inherits it), kept apart because it is a concept of its own: the
recording paths (``telemetry``) count what happened; this says what was supposed to happen.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from rollout_telemetry._contract.identity import check_task_size
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

    def expect(
        self,
        *agents: str,
        rollouts: int | None = None,
        tasks: int | None = None,
        rollouts_per_task: int = 1,
        identities: Iterable[tuple[int, int]] | None = None,
        group_size: int | None = None,
        reward_range: tuple[float, float] | None = None,
    ) -> None:
        """Declare what ``agents`` are expected to do; each is published with zero counts from now on, so
        PromQL's ``increase()`` sees every rollout, the first included. The one way to declare expected work.

        Args:
            rollouts: how many rollouts each agent is expected to produce in all, when their identities are
                not known (``reward_lower_bound``, Gym's ``progress/...`` keys).
            tasks: tasks ``0 .. tasks - 1``, each with rollouts ``0 .. rollouts_per_task - 1``: the run's
                coverage account weighs every outcome recorded with its ``task_index``, ``rollout_index``
                and ``attempt`` against them (``rollout_run_*``), and each task's rollouts are its group.
            rollouts_per_task: see ``tasks``.
            identities: the (task index, rollout index) pairs expected, as NeMo Gym's materialized inputs
                list them: as ``tasks``, for any set of identities.
            group_size: each task has this many rollouts: outcomes recorded with a ``task_index`` and
                ``rollout_index`` (``record``, ``rollout()``) form groups, classified once all members have
                one.
            reward_range: the lowest and highest reward the agents can get (default [0, 1]): a uniform
                group's common reward at either end is counted as ``lowest`` (too hard) or ``highest`` (too
                easy), anything else as ``other`` (``rollout_groups_uniform_total``), and their measured
                rewards are histogrammed in ten buckets of the range (``rollout_measured_reward``). Declare it
                before an agent's first reward.

        Raises:
            ConfigError: a count is not a whole number in its range, more than one of ``rollouts``, ``tasks``
                and ``identities`` is given, the reward range is not two finite numbers, the lowest below the
                highest, or an agent already has a measured reward under another range.
            OutcomeError: an agent name or an identity is invalid (what came before it is declared).
        """
        _check_work(agents, rollouts, tasks, rollouts_per_task, identities, group_size)
        if tasks is not None:
            identities = _tasks(tasks, rollouts_per_task)
        checked = None if reward_range is None else check_reward_range(reward_range)
        if identities is not None and len(agents) > 1:
            identities = tuple(identities)  # walked once per agent
        for agent in agents:
            self._account.declare(agent)  # raises OutcomeError for an invalid agent
            if checked is not None:
                self._account.declare_range(agent, checked)
                self.groups.declare_range(agent, checked)
            if group_size is not None:
                self.groups.declare(agent, group_size)
            if rollouts is not None:
                self._expected[agent] = rollouts
            if identities is not None:
                coverage = self.cover()
                for task_index, rollout_index in identities:
                    coverage.expect(agent, task_index, rollout_index)
                    self.groups.expect(agent, task_index, rollout_index)

    # -- the run's expected work: its coverage -------------------------------------------------------

    def cover(self, *, max_attempts: int | None = None) -> Coverage:
        """Keep the run's coverage account from now on (what became of each rollout identity); return it.

        ``expect`` (with ``tasks`` or ``identities``) and ``expect_inputs`` call it; a file follower does too.
        From then on every outcome is weighed there, by its identity, the newest attempt deciding, and the
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

    def expect_inputs(self, path: str | Path, *, agent: str | None = None) -> int:
        """Declare the expected work NeMo Gym materialized for a run (``<stem>_materialized_inputs.jsonl``).

        Each row names its agent (``agent_ref.name``, else ``_ng_environment_server``, else ``agent``) and
        its identity. A row that cannot be read is a counted rejection naming its line; the others are
        declared. Returns how many rollouts were declared.

        Raises:
            ConfigError: the file cannot be read.
        """
        # Imported when used: recording loads no file source (tests/test_imports.py).
        from rollout_telemetry._sources.inputs import read_inputs

        count = 0
        for number, expected in read_inputs(path, agent):
            if isinstance(expected, Rejection):
                located = Rejection(expected.reason, f"line {number}: {expected}")
                self.rejections.reject(located, source=str(path))
                continue
            name, identity = expected
            self.expect(name, identities=(identity,))
            count += 1
        return count

    def coverage_snapshot(self) -> CoverageSnapshot:
        """The run's coverage (``cover``) at one moment; no agent before expected work or followed files."""
        coverage = self._coverage
        return coverage.snapshot() if coverage is not None else CoverageSnapshot(agents=())


def _check_work(  # noqa: PLR0917 - expect()'s arguments, checked before anything is declared
    agents: tuple[object, ...],
    rollouts: object,
    tasks: object,
    rollouts_per_task: object,
    identities: object,
    group_size: object,
) -> None:
    """Refuse what ``expect()`` cannot declare, before it declares anything."""
    if not all(isinstance(agent, str) for agent in agents):
        msg = f"expect() takes agent names, then the work as keywords (rollouts=N, tasks=N): got {agents!r}"
        raise ConfigError(msg)
    if tasks is None and rollouts_per_task != 1:
        msg = "rollouts_per_task is the rollouts of each of tasks=: give tasks too"
        raise ConfigError(msg)
    if group_size is not None:
        check_task_size(group_size)
    if sum(given is not None for given in (rollouts, tasks, identities)) > 1:
        msg = "give at most one of rollouts, tasks and identities"
        raise ConfigError(msg)
    for name, count in (("rollouts", rollouts), ("tasks", tasks)):
        if count is not None and (type(count) is not int or count < 0):
            msg = f"{name} must be an integer >= 0, got {count!r}"
            raise ConfigError(msg)
    if tasks is not None:
        check_task_size(rollouts_per_task, "rollouts_per_task")


def _tasks(tasks: int, rollouts_per_task: int) -> Iterator[tuple[int, int]]:
    """The identities of ``tasks`` tasks of ``rollouts_per_task`` rollouts each (``_check_work`` checked)."""
    return ((t, r) for t in range(tasks) for r in range(rollouts_per_task))
