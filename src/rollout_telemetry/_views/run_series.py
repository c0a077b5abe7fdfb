"""The families of the run's other stores: the run coverage account (``RolloutTelemetry.cover``), the groups
and the OTLP span export statistics. The account's own families and the catalogue are in ``_views.series``."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from rollout_telemetry._store.coverage import AgentCoverage, CoverageSnapshot
from rollout_telemetry._store.groups import GROUP_STATES, GroupsSnapshot
from rollout_telemetry._views.family import Family, PerAgent, Sample

__all__ = ["COVERAGE_FAMILIES", "GROUP_FAMILIES", "SPAN_FAMILIES"]

_AGENT = ("agent",)


def _coverage_rollouts(snap: CoverageSnapshot) -> Iterator[Sample]:
    for agent in snap.agents:
        for disposition, count in agent.rollouts.items():
            yield (agent.agent, disposition.value), count
        if agent.unknown is not None:
            yield (agent.agent, "unknown"), agent.unknown


_each = PerAgent[AgentCoverage]


def _coverage_restarts(snap: CoverageSnapshot) -> Iterator[Sample]:
    if snap.restarts:
        yield (), snap.restarts


_FOLLOW = "with coverage (serve --follow, or the hook API with expected work declared), per agent"

COVERAGE_FAMILIES: tuple[Family[CoverageSnapshot], ...] = (
    Family(
        "rollout_run_rollouts", "gauge", ("agent", "disposition"), "{rollout}", _FOLLOW,
        "Distinct rollouts of the run (agent, task, rollout index) by the disposition of their newest "
        "attempt; 'unknown' is expected but not seen yet (only with materialized inputs).",
        _coverage_rollouts,
    ),
    Family(
        "rollout_run_expected", "gauge", _AGENT, "{rollout}", _FOLLOW + ", once expected work is known",
        "Rollouts the run is expected to produce, from the materialized inputs or the hook API's "
        "expect_tasks (plus any seen outside them): the sum of rollout_run_rollouts over dispositions.",
        _each(lambda a: a.expected),
    ),
    Family(
        "rollout_retried_total", "counter", _AGENT, "{attempt}", _FOLLOW,
        "Attempts beyond the first of a rollout identity.",
        _each(lambda a: a.retried),
    ),
    Family(
        "rollout_run_retryable", "gauge", _AGENT, "{rollout}", _FOLLOW,
        "Failed rollouts NeMo Gym will dispatch again on resume: no success written, no terminal failure "
        "row, fewer attempts used than NEMO_GYM_MAX_ROLLOUT_ATTEMPTS. The rest of the failed are final.",
        _each(lambda a: a.retryable),
    ),
    Family(
        "rollout_run_restarts_total", "counter", (), "{run}", "in follow mode, once a followed file restarts",
        "Times the followed run's files started over: a file recreated (NeMo Gym's fresh run over the same "
        "output), truncated or rewritten in place. The rollout_run_* gauges then describe the new run; every "
        "counter goes on from where it was.",
        _coverage_restarts,
    ),
)  # fmt: skip
"""The run coverage account's families (``serve --follow``, or the hook API's expected work)."""


def _group_states(snap: GroupsSnapshot) -> Iterator[Sample]:
    for agent in snap.agents:
        for state in GROUP_STATES:
            yield (agent.agent, state), agent.states[state]


GROUP_FAMILIES: tuple[Family[GroupsSnapshot], ...] = (
    Family(
        "rollout_groups_total", "counter", ("agent", "state"), "{group}",
        "once a group of the agent completes (every state then)",
        "Groups (the rollouts of one task, as GRPO compares them) classified once every member has an "
        "outcome: valid, degraded (some members masked, failed or omitted), uniform (every valid member "
        "got the same reward: no learning signal), insufficient (fewer valid members than "
        "min_valid_per_group, default 2) or no_valid (none valid).",
        _group_states,
    ),
)  # fmt: skip
"""The groups' families."""


def _span_results(counts: Mapping[str, int]) -> Iterator[Sample]:
    for result in ("exported", "failed", "dropped"):
        yield (result,), counts.get(result, 0)


SPAN_FAMILIES: tuple[Family[Mapping[str, int]], ...] = (
    Family(
        "rollout_telemetry_spans_total", "counter", ("result",), "{span}", "with OTLP span export",
        "Rollout spans handed to OTLP export, by result: exported, failed (endpoint down, refusing or too "
        "slow) or dropped (the export queue was full, or export was shut down; recording never waits).",
        _span_results,
    ),
)  # fmt: skip
"""The OTLP span export statistics' families."""
