"""The families of the run's other stores: the run coverage account (``RolloutTelemetry.cover``), the groups,
the OTLP span export statistics and the collecting process's runtime. The account's own families and the
catalogue are in ``_views.series``."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from rollout_telemetry._contract.group_state import GROUP_STATES
from rollout_telemetry._contract.outcome import Disposition
from rollout_telemetry._store.coverage import AgentCoverage, CoverageSnapshot
from rollout_telemetry._store.groups import AgentGroups, GroupsSnapshot
from rollout_telemetry._store.runtime_observations import RuntimeSnapshot, Series
from rollout_telemetry._views.family import Family, FamilyType, PerAgent, Sample

__all__ = [
    "COVERAGE_FAMILIES",
    "GROUP_FAMILIES",
    "PROCESS_FAMILIES",
    "RUNTIME_COUNTERS",
    "RUNTIME_FAMILIES",
    "RUNTIME_HISTOGRAMS",
    "SPAN_FAMILIES",
]

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


_FOLLOW = "with coverage (serve PATH, or the hook API with expected work declared), per agent"

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
        "expect(tasks=...) (plus any seen outside them): the sum of rollout_run_rollouts over dispositions.",
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
"""The run coverage account's families (``serve PATH``, or the hook API's expected work)."""


def _group_states(snap: GroupsSnapshot) -> Iterator[Sample]:
    for agent in snap.agents:
        for state in GROUP_STATES:
            yield (agent.agent, state), agent.states[state]


def _group_counts(
    counts: Callable[[AgentGroups], Iterable[tuple[str, int]]], appeared: Callable[[AgentGroups], bool]
) -> Callable[[GroupsSnapshot], Iterator[Sample]]:
    # Every label value of an agent's counts at once, from the first group that makes ``appeared`` true:
    # the counts only grow, so a family never disappears, and increase() sees each count from 0 on.
    def sample(snap: GroupsSnapshot) -> Iterator[Sample]:
        for agent in snap.agents:
            if appeared(agent):
                for name, count in counts(agent):
                    yield (agent.agent, name), count

    return sample


def _members(agent: AgentGroups) -> Iterable[tuple[str, int]]:
    return [(disposition.value, count) for disposition, count in agent.members.items()]


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
    Family(
        "rollout_groups_contaminated_total", "counter", ("agent", "state"), "{group}",
        "once a group of the agent completes with valid members beside masked, unscored, failed or omitted "
        "ones (degraded, uniform and insufficient then)",
        "Completed groups whose valid members sat beside members that are not valid, by state: a trainer "
        "that keeps those members as reward 0 computes the valid members' advantages against a baseline "
        "that includes infrastructure losses. Divided by rollout_groups_total: the share of groups whose "
        "baseline is contaminated.",
        _group_counts(lambda a: a.contaminated.items(), lambda a: sum(a.contaminated.values()) > 0),
    ),
    Family(
        "rollout_group_members_total", "counter", ("agent", "disposition"), "{rollout}",
        "once a group of the agent completes with a member that is not valid (every disposition then)",
        "Members of completed groups by the disposition of their standing attempt (a retried member counts "
        "once, as its newest attempt): how many masked, unscored, failed or omitted members the groups "
        "held beside the measured ones.",
        _group_counts(_members, lambda a: sum(a.members.values()) > a.members[Disposition.MEASURED]),
    ),
    Family(
        "rollout_groups_uniform_total", "counter", ("agent", "reward"), "{group}",
        "once a uniform group of the agent completes (lowest, highest and other then)",
        "Uniform groups by where their common reward lies in the agent's declared reward range (default "
        "[0, 1], expect(reward_range=...)): lowest (the task is too hard), highest (too easy) or other.",
        _group_counts(lambda a: a.uniform.items(), lambda a: a.states["uniform"] > 0),
    ),
    Family(
        "rollout_tasks_unhealthy_total", "counter", ("agent",), "{task}",
        "once a task of the agent is consistently unhealthy",
        "Tasks whose rollouts with a trajectory (two or more) all failed a health check, counted once when "
        "their group completes: NeMo Gym's task_consistently_unhealthy, live.",
        PerAgent[AgentGroups](lambda a: a.unhealthy or None),
    ),
    Family(
        "rollout_groups_late_outcomes_total", "counter", ("agent",), "{rollout}",
        "once an outcome of the agent arrives for a group already classified and would have changed it",
        "Outcomes that arrived after their group was classified (a retry of a failed member on resume, a "
        "member beyond the group's size) and would have changed its classification: the group counts keep "
        "the group as it was when it completed. rollout-telemetry report, which classifies each group from "
        "its members' final outcomes, gives the same group counts when this is 0.",
        PerAgent[AgentGroups](lambda a: a.late or None),
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


def _lag(snap: RuntimeSnapshot) -> Iterator[tuple[tuple[str, ...], Series]]:
    if snap.lag is not None:
        yield (), snap.lag


def _gc_pauses(snap: RuntimeSnapshot) -> Iterator[tuple[tuple[str, ...], Series]]:
    for generation, series in snap.gc_pauses.items():
        yield (generation,), series


def _writes(snap: RuntimeSnapshot) -> Iterator[tuple[tuple[str, ...], Series]]:
    if snap.writes is not None:
        yield (), snap.writes


def _write_bytes(snap: RuntimeSnapshot) -> Iterator[tuple[tuple[str, ...], Series]]:
    if snap.write_bytes is not None:
        yield (), snap.write_bytes


def _writes_failed(snap: RuntimeSnapshot) -> Iterator[Sample]:
    if snap.writes is not None:  # from the first write on, so increase() sees the first failure
        yield (), snap.writes_failed


@dataclass(frozen=True, slots=True)
class RuntimeHistogram:
    """A histogram of the runtime: its family and its series (labels, buckets and sum) in a snapshot."""

    family: Family[RuntimeSnapshot]
    series: Callable[[RuntimeSnapshot], Iterator[tuple[tuple[str, ...], Series]]]


def _sums(
    series: Callable[[RuntimeSnapshot], Iterator[tuple[tuple[str, ...], Series]]],
) -> Callable[[RuntimeSnapshot], Iterator[Sample]]:
    return lambda snap: ((labels, one.total) for labels, one in series(snap))


_RUNTIME = "with runtime_metrics=True (the default)"

RUNTIME_HISTOGRAMS: tuple[RuntimeHistogram, ...] = (
    RuntimeHistogram(
        Family(
            "rollout_telemetry_event_loop_lag_seconds", "histogram", (), "s",
            "once an event loop is watched: the first async rollout block on a loop",
            "How late the watched asyncio event loops woke for a timer (sampled every 0.25 s by default): "
            "time the loop spent running something else. Lag of seconds means a blocking call on the loop, "
            "and every rollout on it waited that long.",
            _sums(_lag),
        ),
        _lag,
    ),
    RuntimeHistogram(
        Family(
            "rollout_telemetry_gc_pause_seconds", "histogram", ("generation",), "s",
            f"{_RUNTIME}, per generation once a collection of it is observed",
            "How long each garbage collection stopped the process (every thread), by generation "
            "(gc.callbacks). Frequent pauses of generation 2 in a process with a large heap stall recording "
            "and scrapes alike.",
            _sums(_gc_pauses),
        ),
        _gc_pauses,
    ),
    RuntimeHistogram(
        Family(
            "rollout_output_write_seconds", "histogram", (), "s",
            "once an output write is timed (telemetry.output_write())",
            "How long each write of the collection's output took (a rollout's row appended to the results "
            "file, say), timed by telemetry.output_write(): a slow disk or network file system holds every "
            "rollout that waits for its row to be written.",
            _sums(_writes),
        ),
        _writes,
    ),
    RuntimeHistogram(
        Family(
            "rollout_output_write_bytes", "histogram", (), "By",
            "once an output write gives its size (output_write().wrote(n))",
            "The size of each output write, where the writer gave it.",
            _sums(_write_bytes),
        ),
        _write_bytes,
    ),
)  # fmt: skip
"""The runtime's histograms, as the exporters format them."""

RUNTIME_COUNTERS: tuple[Family[RuntimeSnapshot], ...] = (
    Family(
        "rollout_output_writes_failed_total", "counter", (), "{write}",
        "once an output write is timed (every write then)",
        "Output writes that raised (the exception is re-raised to the writer): rows that may not have "
        "reached the results file.",
        _writes_failed,
    ),
)  # fmt: skip
"""The runtime's counters."""

RUNTIME_FAMILIES: tuple[Family[RuntimeSnapshot], ...] = (
    *(view.family for view in RUNTIME_HISTOGRAMS),
    *RUNTIME_COUNTERS,
)
"""The collecting process's runtime families (``Runtime``)."""


def _nothing(_: object) -> Iterator[Sample]:
    return iter(())  # prometheus_client's collectors write these: nothing here computes them


_LINUX = "on Linux (ProcessCollector reads /proc)"
_CPYTHON = "on CPython (GCCollector)"
_GENERATION = ("generation",)
_CLIENT: tuple[tuple[str, FamilyType, tuple[str, ...], str, str, str], ...] = (
    ("process_cpu_seconds_total", "counter", (), "s", _LINUX, "user and system CPU time of the process."),
    ("process_virtual_memory_bytes", "gauge", (), "By", _LINUX, "virtual memory size."),
    ("process_resident_memory_bytes", "gauge", (), "By", _LINUX, "resident memory size."),
    ("process_start_time_seconds", "gauge", (), "s", _LINUX, "start time since the Unix epoch."),
    ("process_open_fds", "gauge", (), "{fd}", _LINUX, "open file descriptors."),
    ("process_max_fds", "gauge", (), "{fd}", _LINUX, "the limit of open file descriptors."),
    (
        "python_info", "gauge", ("implementation", "major", "minor", "patchlevel", "version"), "1",
        "always (PlatformCollector)", "the Python interpreter's version, as labels; the value is 1.",
    ),
    (
        "python_gc_objects_collected_total", "counter", _GENERATION, "{object}", _CPYTHON,
        "objects collected by the garbage collector, by generation.",
    ),
    (
        "python_gc_objects_uncollectable_total", "counter", _GENERATION, "{object}", _CPYTHON,
        "uncollectable objects found by the garbage collector, by generation.",
    ),
    (
        "python_gc_collections_total", "counter", _GENERATION, "{collection}", _CPYTHON,
        "collections of each generation.",
    ),
)  # fmt: skip

PROCESS_FAMILIES: tuple[Family[object], ...] = tuple(
    Family(name, kind, labels, unit, f"{_RUNTIME}, {appears}", f"From prometheus_client: {what}", _nothing)
    for name, kind, labels, unit, appears, what in _CLIENT
)
"""The families of prometheus_client's ProcessCollector, PlatformCollector and GCCollector, which the
telemetry registers on its registry (``runtime_metrics=True``): listed for the reference, written by
prometheus_client, not by this package."""
