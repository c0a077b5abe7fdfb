"""The run's recording part: what was expected of it (agents, rollouts, identities, groups, reward ranges) and
the one path of an outcome that has an identity or that its coverage account must see.

The facade counts an outcome without an identity straight into the account; everything else comes here, from
the facade, the rollout blocks (``settle``) and the file follower (``record_checked``), so the rule of how an
outcome is weighed, counted and grouped is written once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager

from rollout_telemetry._contract.failure_where import Where, failure_where
from rollout_telemetry._contract.health import TRAJECTORY, health_of
from rollout_telemetry._contract.identity import Member, member
from rollout_telemetry._contract.outcome import REACHED_OUTPUT, Classified
from rollout_telemetry._recording.rollout_log import INFO, ROLLOUTS, log_outcome
from rollout_telemetry._recording.settlement import Settlement
from rollout_telemetry._recording.spans import Attributes, SpanRecorder
from rollout_telemetry._store.account import Account
from rollout_telemetry._store.coverage import DEFAULT_MAX_ATTEMPTS, Coverage, CoverageSnapshot
from rollout_telemetry._store.groups import Groups, GroupsSnapshot
from rollout_telemetry._store.names import Names
from rollout_telemetry._store.rejections import Rejections
from rollout_telemetry._views.progress import expected_rollouts
from rollout_telemetry.errors import ConfigError, OutcomeError, Rejection

__all__ = ["Recorder"]

_log = logging.getLogger("rollout_telemetry")


class Recorder:
    """Weighs outcomes against the run's expected work, counts them in the account and gives them to groups.

    Args:
        names: the one resolution of agent and failure-kind labels.
        account: where outcomes are counted.
        rejections: the rejection policy (counted by reason, warned once per cause).
        spans: the span recorder (cleans a ``failure_reason`` for the log; makes a followed row's span).
        clock: monotonic seconds.
        min_valid_per_group: valid members a group needs to be more than ``insufficient``.
        rollout_log: write one line per rollout to ``rollout_telemetry.rollouts``.
    """

    def __init__(
        self,
        names: Names,
        account: Account,
        rejections: Rejections,
        spans: SpanRecorder,
        clock: Callable[[], float],
        *,
        min_valid_per_group: int,
        rollout_log: bool,
    ) -> None:
        self._names = names
        self._account = account
        self._rejections = rejections
        self._spans = spans
        self._clock = clock
        self._groups = Groups(names, min_valid=min_valid_per_group)
        self._rollout_log = rollout_log
        self._expected: dict[str, int] = {}  # rollouts per agent when their identities are not known
        self.coverage: Coverage | None = None
        """The run's coverage account, kept once expected work is declared or files are followed: while it is
        ``None`` an outcome without an identity goes straight to the account (the facade's common call)."""

    # -- what the run expects -------------------------------------------------------------------------

    def cover(self, max_attempts: int | None = None) -> Coverage:
        """Keep the run's coverage account from now on; return it. ``max_attempts``: NeMo Gym's attempts
        before it stops retrying (not given: the kept account's, else 3).

        Raises:
            ConfigError: ``max_attempts`` differs from the one the account was kept with.
        """
        coverage = self.coverage
        if coverage is None:
            attempts = DEFAULT_MAX_ATTEMPTS if max_attempts is None else max_attempts
            coverage = self.coverage = Coverage(self._names, max_attempts=attempts)
        elif max_attempts is not None and coverage.max_attempts != max_attempts:
            msg = (
                f"the coverage account counts {coverage.max_attempts} attempts, not {max_attempts}: give "
                "max_attempts= once, with or before the first expected identities"
            )
            raise ConfigError(msg)
        return coverage

    def expect(
        self,
        agent: str,
        *,
        rollouts: int | None = None,
        identities: Iterable[tuple[int, int]] | None = None,
        group_size: int | None = None,
        reward_range: tuple[float, float] | None = None,
        max_attempts: int | None = None,
    ) -> None:
        """Declare what ``agent`` is expected to do (arguments checked by the caller).

        Raises:
            OutcomeError: the agent name or an identity is invalid.
        """
        self._account.declare(agent)
        if reward_range is not None:
            self._account.declare_range(agent, reward_range)
            self._groups.declare_range(agent, reward_range)
        if group_size is not None:
            self._groups.declare(agent, group_size)
        if rollouts is not None:
            self._expected[agent] = rollouts
        if identities is not None:
            coverage = self.cover(max_attempts)
            for task_index, rollout_index in identities:
                coverage.expect(agent, task_index, rollout_index)
                self._groups.expect(agent, task_index, rollout_index)

    def new_run(self) -> None:
        """A new run of the source begins: its groups and coverage start again; counts go on."""
        self._groups.new_run()
        if self.coverage is not None:
            self.coverage.new_run()

    def coverage_snapshot(self) -> CoverageSnapshot:
        """The run's coverage at one moment; no agent before expected work or followed files."""
        coverage = self.coverage
        return coverage.snapshot() if coverage is not None else CoverageSnapshot(agents=())

    def expected_rollouts(self, coverage: CoverageSnapshot) -> dict[str, int]:
        """The rollouts expected of each agent (what ``reward_lower_bound`` divides by): those of its
        identities in ``coverage``, else the count declared (``expect(rollouts=)``)."""
        return {**self._expected, **expected_rollouts(coverage)}

    def groups_snapshot(self) -> GroupsSnapshot:
        """The run's groups at one moment."""
        return self._groups.snapshot()

    def deferred_groups(self) -> AbstractContextManager[None]:
        """Classify groups on leaving, from their members' final outcomes (``Groups.deferred``)."""
        return self._groups.deferred()

    # -- recording ----------------------------------------------------------------------------------

    def label(self, agent: str) -> str:
        """The ``agent`` label an outcome of ``agent`` is counted under (cut, or ``_other`` past the cap).

        Raises:
            OutcomeError: the name is not a non-empty string.
        """
        return self._names.agent(agent)[0]

    def member(self, task_index: object, rollout_index: object, attempt: object = None) -> Member | None:
        """A rollout's identity, checked before its outcome is counted; a bad one is a counted rejection
        (``invalid_task_index``, ...) and the outcome is counted without it. Neither a task index nor an
        attempt: a rollout without an identity (``None``)."""
        if task_index is None and attempt is None:
            return None
        try:
            return member(task_index, rollout_index, attempt)
        except OutcomeError as exc:
            self._rejections.reject(exc)
            return None

    def record(  # noqa: PLR0917 - record()'s arguments, passed on as they came
        self,
        agent: str,
        response: object,
        outcome: Classified,
        task_index: int | None,
        rollout_index: int | None,
        attempt: int | None,
    ) -> None:
        """``record()`` of a rollout with an identity, or once the coverage account is kept."""
        found = self.member(task_index, rollout_index, attempt)
        # The trajectory's health: a dict without one (the common response) costs no call.
        trajectory = type(response) is not dict or TRAJECTORY in response
        health = health_of(response) if trajectory else None
        self.settle((agent, outcome, None, found, None, False, health, None, None))
        if self._rollout_log and ROLLOUTS.isEnabledFor(INFO):
            self.log_rollout(agent, outcome, found, False)

    def record_absent(  # noqa: PLR0917 - record_failure()'s arguments, passed on as they came
        self,
        agent: str,
        outcome: Classified,
        task_index: int | None,
        rollout_index: int | None,
        attempt: int | None,
        terminal: bool,
        stage: object,
        delivery: object,
    ) -> None:
        """``record_failure()`` and ``record_omission()`` of a rollout with an identity, a stage or a
        delivery, or once the coverage account is kept: a stage or delivery outside NeMo Gym's is a counted
        rejection and the failure is counted with ``unknown``."""
        where, refused = failure_where(stage, delivery)
        found = None
        if task_index is not None or self.coverage is not None:  # as record(): no identity without
            found = self.member(task_index, rollout_index, attempt)
        self.settle((agent, outcome, None, found, None, terminal, None, None, where))
        for error in refused:
            self._rejections.reject(error)
        self.logged(agent, outcome, found, terminal, where)

    def record_checked(
        self,
        agent: str,
        outcome: Classified,
        identity: tuple[int, int] | None = None,
        attempt: int | None = None,
        *,
        terminal: bool = False,
        line: int = 0,
        health: tuple[str, ...] | None = None,
        where: Where | None = None,
    ) -> int | None:
        """Record an outcome its reader checked (a followed row): ``identity`` (task index, rollout index) and
        ``attempt`` as ``settle``'s member, ``line`` the row's line. Returns the attempts the identity took
        when this outcome made it final.

        Raises:
            OutcomeError: the agent name is not a non-empty string.
            Rejection: ``duplicate_rollout`` (see ``settle``): nothing was counted.
        """
        found = None if identity is None else (identity[0], identity[1], attempt)
        attempts = None
        if found is None and self.coverage is None and health is None and where is None:
            self._account.count(agent, outcome)
        else:
            attempts = self.settle((agent, outcome, None, found, None, terminal, health, line, where))
        self.logged(agent, outcome, found, terminal, where)
        return attempts

    def settle(self, settlement: Settlement) -> int | None:
        """Weigh one outcome (with what is known of its rollout: ``Settlement``) in the coverage account,
        count it (ending its flight), then give it to its group. Returns the attempts its identity took when
        this outcome made it final, else ``None``.

        Raises:
            Rejection: ``duplicate_rollout``, an outcome that reached the output repeating an earlier one of
                the same identity and attempt: nothing is counted (a rollout block's flight still ends, and
                is counted, since it ran).
        """
        agent, outcome, in_flight, found, exemplar, terminal, health, line, where = settlement
        coverage = self.coverage
        verdict = None
        if coverage is not None:
            identity, attempt = None, 0
            if found is not None:
                identity, attempt = (found[0], found[1]), found[2] or 0
                found = (found[0], found[1], attempt)  # NeMo Gym's unstamped attempt is 0, groups' too
            disposition = outcome[0]
            times = None
            if line is None and identity is not None:  # an outcome now, not a row written earlier
                now = self._clock()
                times = (now if in_flight is None else in_flight[2], now)
            earlier, verdict = coverage.observe(
                agent,
                identity,
                attempt,
                disposition,
                succeeded=disposition in REACHED_OUTPUT,
                terminal=terminal,
                line=line or 0,
                times=times,
            )
            if earlier is not None:
                if in_flight is not None:  # in flight until now: its flight ends, as anything it ran
                    self._account.count(agent, outcome, in_flight, exemplar)
                repeated = f"line {earlier}" if earlier else "an earlier outcome"
                msg = f"repeats {repeated} (same task, rollout and attempt): counted once"
                raise Rejection("duplicate_rollout", msg)
        self._account.count(agent, outcome, in_flight, exemplar)
        if where is not None:
            self._account.failed_at(agent, where)
        if verdict is not None:
            self._account.settled(
                agent, verdict.attempts, verdict.delay, exhausted=verdict.exhausted, kind=outcome[2]
            )
        if health is not None:
            self._account.checked(agent, health)
        if found is not None and self._groups.active:
            self._groups.observe(agent, found[0], found[1], outcome, found[2], health=health)
        return None if verdict is None else verdict.attempts

    def finished_span(  # noqa: PLR0917 - a followed row as the follower read it
        self,
        agent: str,
        identity: tuple[int, int] | None,
        attempt: int,
        outcome: Classified,
        start: int,
        end: int,
        attributes: Attributes,
    ) -> None:
        """A followed row's span, from ``start`` to ``end`` (nanoseconds since the epoch)."""
        task_index, rollout_index = (None, None) if identity is None else identity
        self._spans.finished(agent, task_index, rollout_index, attempt, outcome, start, end, attributes)

    def reject(self, exc: Exception, source: str | None = None) -> None:
        """Count a refused input (``Rejections.reject``)."""
        self._rejections.reject(exc, source=source)

    # -- the log ------------------------------------------------------------------------------------

    def logged(
        self,
        agent: str,
        outcome: Classified,
        found: Member | None,
        terminal: bool,
        where: Where | None = None,
    ) -> None:
        """A counted outcome's log lines: its ``failure_reason`` (free text about one occurrence: a debug
        line, never a label), and with ``rollout_log=True`` its line on ``rollout_telemetry.rollouts``."""
        if outcome[3] is not None and _log.isEnabledFor(logging.DEBUG):
            cleaned = self._spans.clean_reason(outcome[3])
            _log.debug("rollout of %s %s (%s): %s", agent, outcome[0].value, outcome[2], cleaned)
        if self._rollout_log and ROLLOUTS.isEnabledFor(INFO):
            self.log_rollout(agent, outcome, found, terminal, where)

    def log_rollout(
        self,
        agent: str,
        outcome: Classified,
        found: Member | None,
        terminal: bool,
        where: Where | None = None,
    ) -> None:
        """The rollout's line on ``rollout_telemetry.rollouts``, once counted; a raising redact hook is
        counted."""
        try:
            log_outcome(self._names, self._spans, agent, outcome, found, terminal, where=where)
        except Exception as exc:
            self._rejections.reject(exc)
