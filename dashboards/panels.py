"""What the dashboard shows: three rows of panels, each with its query, unit, thresholds and description.

To change a panel, change it here and run ``.venv/bin/python -m dashboards.generate``; the test suite
fails while the committed JSON differs from what this module builds.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from dashboards.model import Panel, Query, Row, Step
from dashboards.promql import (
    COMPLETED,
    Scope,
    contaminated_share,
    failed_share,
    finished_rate,
    hollow_share,
    increase,
    loop_lag_quantile,
    lost_share,
    masked_share,
    mean_reward,
    or_zero,
    output_tokens_per_rollout,
    rate,
    reward_lost,
    series,
    slow_share,
    stalled_by_stage,
    truncated_share,
    uniform_share,
    unmasked_reward,
)
from dashboards.rules import (
    CONTAMINATED_HIGH,
    HOLLOW_HIGH,
    LOOP_LAG_HIGH,
    MASKED_SHARE_HIGH,
    SLOW_SHARE_HIGH,
    STALLED_FOR,
    UNIFORM_END_HIGH,
)

__all__ = ["COVERAGE_GAUGES", "NOT_FOLLOWED", "ROWS", "CoverageGauge", "coverage_gauge"]

NOT_TERMINAL = 'state!="terminal"'
"""Every rollout state but terminal (outcome counted, block not exited): the rollouts in flight."""
AGENTS = Scope(("agent",), "$__rate_interval", run="$run", agent="$agent")
"""The dashboard's scope: the run and agent variables, Grafana's rate interval, a series per agent."""
ALL = AGENTS.keeping()
"""One number over every selected run and agent."""
FOLLOWED = replace(AGENTS, agent="$followed")
"""The coverage row's agent: its repeat variable, the agents that have coverage series."""
TABLE = replace(ALL, window="$__range")
"""Increases over the dashboard's time range, for tables."""
UNLABELLED = replace(ALL, agent=None)
"""For a family without an agent label: the run variable only."""
KIND = ("failure_kind",)

GOOD, WARN, BAD, IDLE = "green", "yellow", "red", "blue"
HEALTHY_SHARE: tuple[Step, ...] = ((None, GOOD), (0.05, WARN), (MASKED_SHARE_HIGH, BAD))
"""Red where the RolloutMaskedRatioHigh alert fires."""
FAILING = 0.5
"""A failed share above 1/2 is failed > completed: where RolloutFailuresExceedCompleted fires."""
REWARD: tuple[Step, ...] = ((None, BAD), (0.0, GOOD))


LIFECYCLE_ONLY = "Not recorded: only the lifecycle API times rollouts"


def _stat(
    title: str,
    description: str,
    unit: str,
    expr: str,
    steps: tuple[Step, ...],
    *,
    decimals: int | None = None,
    no_value: str | None = None,
) -> Panel:
    return Panel(
        "stat",
        title,
        description,
        unit,
        (Query(expr, title),),
        width=3,
        height=5,
        thresholds=steps,
        decimals=decimals,
        no_value=no_value,
    )


OVERVIEW = Row(
    "Overview",
    (
        _stat(
            "Rollouts per minute",
            "Rollouts finished (completed, failed or omitted) per minute, over the selected runs and agents, "
            "summed over every exporter process: what NeMo Gym's progress/total/rollouts_per_min and top's "
            "r/min count. Red at 0 (nothing finishes: collection is stalled or over), green above.",
            "short",
            f"({finished_rate(ALL)}) * 60",
            ((None, BAD), (0.001, GOOD)),
            decimals=1,
        ),
        _stat(
            "Mean reward",
            "Mean reward over the rate window, masked rollouts included (the number NeMo Gym reports): sum "
            "of the rewards / rollouts that carried one, summed over every process and selected agent. "
            "Reward units; red below 0, green from 0 (the scale is task specific: set the step in "
            "dashboards/panels.py).",
            "none",
            mean_reward(ALL),
            REWARD,
            decimals=3,
        ),
        _stat(
            "Unmasked reward",
            "Mean reward over unmasked rollouts only: the masked rollouts' reward sums and count are taken "
            "out of the mean reward's sums. This is the policy's score on the rollouts that were valid "
            "measurements. Reward units; red below 0, green from 0.",
            "none",
            unmasked_reward(ALL),
            REWARD,
            decimals=3,
        ),
        _stat(
            "Reward lost to infrastructure",
            "Unmasked reward minus mean reward: how much of the score the masked rollouts (lost sandboxes, "
            "failed judges) take off the reported mean. Reward units; 0 in a healthy run; yellow from 0.01, "
            "red from 0.05.",
            "none",
            reward_lost(ALL),
            ((None, GOOD), (0.01, WARN), (0.05, BAD)),
            decimals=3,
        ),
        _stat(
            "Masked share",
            "Share (0-1) of masked rollouts with NeMo Gym's denominator (its masked_pct): masked / (masked + "
            "unmasked rollouts that carry a reward) = rate of rollout_masked_total / (rate of "
            "rollout_completed_total - rate of rollout_unscored_total), summed over processes; an unscored "
            f"rollout is in neither term. Yellow from 5%, red from {MASKED_SHARE_HIGH:.0%} (the "
            "RolloutMaskedRatioHigh alert).",
            "percentunit",
            masked_share(ALL),
            HEALTHY_SHARE,
            decimals=1,
        ),
        _stat(
            "Failed share",
            "Share (0-1) of rollouts that failed (never reached the output) among those that completed or "
            "failed: failed / (completed + failed), rates summed over processes; omitted rollouts were left "
            "out on purpose and are in neither term, as in the masked + failed share. Yellow from 5%, red "
            f"from {FAILING:.0%}: failures outpace completions, where RolloutFailuresExceedCompleted fires.",
            "percentunit",
            failed_share(ALL),
            ((None, GOOD), (0.05, WARN), (FAILING, BAD)),
            decimals=1,
        ),
        _stat(
            "Rollouts in flight",
            "Rollouts started through the lifecycle API and without an outcome yet, summed over processes "
            "and selected agents (rollout_in_flight without state terminal). Blue at 0 (idle or finished), "
            "green from 1.",
            "short",
            f"sum({series('rollout_in_flight', ALL, NOT_TERMINAL)})",
            ((None, IDLE), (1.0, GOOD)),
            no_value=LIFECYCLE_ONLY,
        ),
        _stat(
            "Oldest in-flight age",
            "Age in seconds of the oldest rollout still in flight, the maximum over processes and selected "
            "agents (rollout_oldest_in_flight_age_seconds); 0 when idle. A growing age is a stalled rollout "
            "(a hung sandbox or judge): yellow from 10 minutes, red from 30.",
            "s",
            f"max({series('rollout_oldest_in_flight_age_seconds', ALL)})",
            ((None, GOOD), (600, WARN), (1800, BAD)),
            no_value=LIFECYCLE_ONLY,
        ),
    ),
)


@dataclass(frozen=True, slots=True)
class CoverageGauge:
    """A per-agent gauge family of the coverage account, shown as a stat in the coverage row."""

    family: str
    title: str
    description: str


COVERAGE_GAUGES: tuple[CoverageGauge, ...] = (
    # One CoverageGauge(family, title, description) per gauge family of the coverage account; the generator
    # refuses a family the catalogue lacks, and the panel reads 0, never "No data", while it has no series.
    CoverageGauge(
        "rollout_run_retryable",
        "Retryable failures",
        "Failed rollouts NeMo Gym will dispatch again when the run resumes: no success written, no terminal "
        "failure row, fewer attempts used than NEMO_GYM_MAX_ROLLOUT_ATTEMPTS (default 3). The other failed "
        "rollouts are final. Unit: rollouts; from rollout_run_retryable (serve PATH, or the hook API "
        "with expected work declared).",
    ),
)

DONE = 'disposition!="unknown"'
"""Every disposition but unknown: the rollouts seen."""
NOT_FOLLOWED = (
    "No coverage: follow the run's files (serve PATH) or declare its expected work (expect(tasks=...))"
)
DISPOSITION_COLORS = (
    ("measured", "green"),
    ("masked", "orange"),
    ("unscored", "yellow"),
    ("failed", "red"),
    ("omitted", "purple"),
    ("unknown", "text"),
)


def coverage_gauge(gauge: CoverageGauge) -> Panel:
    """A stat of the gauge over the row's agent: green at 0, yellow from 1; 0 while the family has no series.

    Raises:
        ValueError: the catalogue has no family ``gauge.family``.
    """
    sample = f"sum({series(gauge.family, FOLLOWED)})"
    fallback = f"sum({series('rollout_run_rollouts', FOLLOWED)}) * 0"
    return Panel(
        "stat",
        gauge.title,
        gauge.description,
        "short",
        (Query(f"{sample} or {fallback}", gauge.title),),
        width=6,
        height=6,
        thresholds=((None, GOOD), (1.0, WARN)),
        no_value=NOT_FOLLOWED,
    )


_EXPECTED = (
    f"(sum by (agent) ({series('rollout_run_expected', FOLLOWED)})"
    f" or sum by (agent) ({series('rollout_run_rollouts', FOLLOWED)}))"
)

COVERAGE = Row(
    "Run coverage: $followed",
    (
        Panel(
            "bargauge",
            "Run progress by disposition",
            "The run's progress bar for this agent: of the rollouts it is expected to produce (from the "
            "materialized inputs; without them, of those seen), the share (0-1) whose newest attempt was "
            "measured, masked, unscored, failed or omitted, and the share still unknown (expected, not seen "
            "yet). rollout_run_rollouts by disposition / rollout_run_expected, summed over followers. "
            "Published by serve PATH, and by the hook API once expected work is declared; measured + ... "
            "+ unknown = 100%.",
            "percentunit",
            (
                Query(
                    f"sum by (agent, disposition) ({series('rollout_run_rollouts', FOLLOWED)})"
                    f" / on (agent) group_left () {_EXPECTED}",
                    "{{disposition}}",
                ),
            ),
            width=12,
            height=6,
            limits=(0.0, 1.0),
            no_value=NOT_FOLLOWED,
            colors=DISPOSITION_COLORS,
            thresholds=((None, "green"),),
        ),
        Panel(
            "stat",
            "Rollouts done of expected",
            "Distinct rollouts (agent, task, rollout index) of this agent: expected (rollout_run_expected, "
            "from the materialized inputs; without them, those seen) and done (every disposition but "
            "unknown). Rollouts; a count, not a verdict (blue): the progress bar beside it has the shares.",
            "short",
            (
                Query(_EXPECTED, "expected"),
                Query(f"sum by (agent) ({series('rollout_run_rollouts', FOLLOWED, DONE)})", "done"),
            ),
            width=6,
            height=6,
            thresholds=((None, IDLE),),
            no_value=NOT_FOLLOWED,
        ),
        Panel(
            "timeseries",
            "Retries per minute",
            "Attempts beyond the first of a rollout identity, per minute (rate of rollout_retried_total "
            "summed over followers, times 60). A failed attempt that is retried counts once here and once "
            "in the failed counters; coverage counts only its newest attempt.",
            "short",
            (Query(f"{rate('rollout_retried_total', FOLLOWED)} * 60", "{{agent}}"),),
            width=6,
            height=6,
            no_value=NOT_FOLLOWED,
        ),
        *(coverage_gauge(gauge) for gauge in COVERAGE_GAUGES),
    ),
    repeat="followed",
)


def _by_kind(name: str, title: str, description: str, *, exemplars: bool = False) -> Panel:
    """A counter per minute, stacked by agent and failure kind; 0 while nothing of the kind happened."""
    per_minute = f"{rate(name, AGENTS, by=KIND)} * 60"
    query = Query(or_zero(per_minute, AGENTS), "{{agent}} {{failure_kind}}", exemplars=exemplars)
    return Panel("timeseries", title, description, "short", (query,), stacked=True)


def _quantiles(
    name: str,
    legend: str,
    quantiles: tuple[float, ...],
    scope: Scope = AGENTS,
    by: tuple[str, ...] = (),
    *,
    exemplars: bool = False,
) -> tuple[Query, ...]:
    """Quantiles of a histogram in ``scope`` (per agent by default) and by ``by``, from its buckets summed
    over processes."""
    buckets = rate(f"{name}_bucket", scope, by=(*by, "le"))
    return tuple(
        Query(f"histogram_quantile({q:g}, {buckets})", f"{legend} p{q * 100:g}", exemplars=exemplars)
        for q in quantiles
    )


def _top(name: str) -> str:
    return f"sort_desc(topk(10, {increase(name, TABLE, by=KIND)})) or {increase(COMPLETED, TABLE)} * 0"


OVER_TIME = Row(
    "Over time, per agent",
    (
        Panel(
            "timeseries",
            "Mean reward vs unmasked reward",
            "Mean reward per agent over the rate window, masked rollouts included (as NeMo Gym reports it), "
            "beside the mean over unmasked rollouts only. Both are sums of reward counters divided by sums "
            "of rollout counters across every exporter process. Reward units. The gap between the two lines "
            "is the score the run lost to its own infrastructure.",
            "none",
            (
                Query(mean_reward(AGENTS), "{{agent}} reward"),
                Query(unmasked_reward(AGENTS), "{{agent}} unmasked"),
            ),
        ),
        Panel(
            "timeseries",
            "Reward lost to infrastructure per agent",
            "Unmasked mean reward minus mean reward, per agent: how much of the reported score is an "
            "artefact of masked rollouts being averaged in. Reward units; 0 in a healthy run.",
            "none",
            (Query(reward_lost(AGENTS), "{{agent}}"),),
        ),
        Panel(
            "timeseries",
            "Masked share per agent",
            "Share (0-1) of masked rollouts per agent with NeMo Gym's denominator: masked / (masked + "
            "unmasked rollouts that carry a reward) = masked rate / (completed rate - unscored rate), each "
            "summed over processes; an unscored rollout is in neither term. 0 when nothing is masked.",
            "percentunit",
            (Query(masked_share(AGENTS), "{{agent}}"),),
            limits=(0.0, 1.0),
        ),
        Panel(
            "timeseries",
            "Rollouts finished per minute",
            "Rollouts finished (completed, failed or omitted) per minute, per agent, summed over exporter "
            "processes: the throughput of each agent.",
            "short",
            (Query(f"({finished_rate(AGENTS)}) * 60", "{{agent}}"),),
        ),
        _by_kind(
            "rollout_failed_total",
            "Failed per minute by failure kind",
            "Rollouts that never reached the output, per minute, stacked by agent and failure_kind. Reads 0 "
            "while nothing fails. With spans and Prometheus' exemplar storage, the dots are exemplars: each "
            "links to the trace of the latest failed rollout of its kind.",
            exemplars=True,
        ),
        _by_kind(
            "rollout_omitted_total",
            "Omitted per minute by failure kind",
            "Rollouts left out of the output on purpose, per minute, stacked by agent and failure_kind. "
            "Reads 0 while nothing is omitted.",
        ),
        _by_kind(
            "rollout_masked_total",
            "Masked per minute by failure kind",
            "Masked rollouts per minute, stacked by agent and failure_kind (why the reward was not valid). "
            "Reads 0 while nothing is masked. Exemplars (with spans) link to the latest masked rollout's "
            "trace.",
            exemplars=True,
        ),
        Panel(
            "table",
            "Top failure kinds",
            "The ten most frequent failure kinds over the dashboard's time range (rollouts), for failed, "
            "masked and omitted rollouts, summed over agents and processes. A row reading 0 with no kind "
            "means nothing of that disposition happened.",
            "short",
            (
                Query(_top("rollout_failed_total"), "failed {{failure_kind}}", table=True),
                Query(_top("rollout_masked_total"), "masked {{failure_kind}}", table=True),
                Query(_top("rollout_omitted_total"), "omitted {{failure_kind}}", table=True),
            ),
        ),
        Panel(
            "timeseries",
            "Rollout duration quantiles",
            "p50, p90 and p99 of rollout wall time in seconds (lifecycle API), per agent, from the "
            "rollout_duration_seconds histogram summed over processes. Exemplars (with spans) link to the "
            "trace of the latest rollout in each duration bucket.",
            "s",
            _quantiles("rollout_duration_seconds", "{{agent}}", (0.5, 0.9, 0.99), exemplars=True),
            no_value=LIFECYCLE_ONLY,
        ),
        Panel(
            "timeseries",
            "Rollouts in flight per agent",
            "Rollouts started through the lifecycle API and without an outcome yet (rollout_in_flight "
            "without state terminal), per agent, summed over processes.",
            "short",
            (Query(f"sum by (agent) ({series('rollout_in_flight', AGENTS, NOT_TERMINAL)})", "{{agent}}"),),
            no_value=LIFECYCLE_ONLY,
        ),
        Panel(
            "timeseries",
            "Oldest in-flight rollout age",
            "Age in seconds of the oldest rollout still in flight, per agent (the maximum over processes). 0 "
            "when idle; an age that keeps growing is a stalled rollout (a hung sandbox or judge).",
            "s",
            (
                Query(
                    f"max by (agent) ({series('rollout_oldest_in_flight_age_seconds', AGENTS)})", "{{agent}}"
                ),
            ),
            no_value=LIFECYCLE_ONLY,
        ),
        Panel(
            "timeseries",
            "Stalled rollouts by stage",
            "Rollouts in flight longer than stall_after (default 600 s), per agent and the stage they are "
            "stuck at, summed over processes: a rollout counts from the moment it crosses until it ends. "
            "GET /rollouts on an exporter lists them, oldest first, with their trace ids. The RolloutStalled "
            f"alert fires after {STALLED_FOR} minutes above 0.",
            "short",
            (Query(stalled_by_stage(AGENTS), "{{agent}} {{stage}}"),),
            no_value=LIFECYCLE_ONLY,
        ),
        Panel(
            "timeseries",
            "Rejected inputs per minute",
            "Inputs the telemetry refused (NaN reward, malformed row, internal error) per minute, by reason. "
            "Nothing else is lost when an input is rejected; reads 0 when nothing is.",
            "short",
            (
                Query(
                    f"{rate('rollout_telemetry_rejected_total', UNLABELLED, by=('reason',))} * 60"
                    f" or {rate(COMPLETED, ALL)} * 0",
                    "{{reason}}",
                ),
            ),
        ),
    ),
)

NO_USAGE = "No usage: no rollout carried response.usage"
NO_GROUPS = "No groups: declare a group size, or follow a run with materialized inputs"
GROUP_COLORS = (
    ("valid", "green"),
    ("degraded", "yellow"),
    ("uniform", "blue"),
    ("insufficient", "orange"),
    ("no_valid", "red"),
)

WHY = Row(
    "Why is reward dropping?",
    (
        Panel(
            "timeseries",
            "Reward: mean and unmasked",
            "Mean reward per agent over the rate window (masked rollouts included, as NeMo Gym reports it) "
            "beside the mean over unmasked rollouts. Reward units. Read it with the panels beside it: a fall "
            "with a rising masked + failed share is the infrastructure (RolloutRewardDropInfrastructure), "
            "with a rising truncated share is truncation (RolloutRewardDropTruncation), with neither is the "
            "policy (RolloutRewardDropPolicy).",
            "none",
            (
                Query(mean_reward(AGENTS), "{{agent}} mean"),
                Query(unmasked_reward(AGENTS), "{{agent}} unmasked"),
            ),
            width=8,
        ),
        Panel(
            "timeseries",
            "Truncated share",
            "Share (0-1) of completed rollouts whose model response was incomplete "
            "(incomplete_details.reason, for example max_output_tokens): rate of rollout_truncated_total / "
            "rate of rollout_completed_total, summed over processes. 0 while nothing is truncated. A "
            "truncated answer usually scores 0 whatever the policy's reasoning.",
            "percentunit",
            (Query(truncated_share(AGENTS), "{{agent}}"),),
            width=8,
            limits=(0.0, 1.0),
        ),
        Panel(
            "timeseries",
            "Masked + failed share",
            "Share (0-1) of finished rollouts lost to infrastructure: (masked + failed) / (completed + "
            "failed), rates summed over processes; omitted rollouts are in neither term. 0 in a healthy run.",
            "percentunit",
            (Query(lost_share(AGENTS), "{{agent}}"),),
            width=8,
            limits=(0.0, 1.0),
        ),
        Panel(
            "timeseries",
            "Output tokens per rollout",
            "Output tokens per completed rollout (response.usage.output_tokens, reasoning tokens included): "
            "rate of rollout_tokens_total{type=output} / rate of rollout_completed_total. Rollouts without "
            "usage count in the denominator. A drift up (toward max_output_tokens) or down is an early sign "
            "of many training pathologies. Tokens.",
            "short",
            (Query(output_tokens_per_rollout(AGENTS), "{{agent}}"),),
            width=12,
            no_value=NO_USAGE,
        ),
        Panel(
            "timeseries",
            "Group states per minute",
            "Groups (the rollouts of one task) completed per minute by state, stacked: valid, degraded (some "
            "members masked, failed or omitted), uniform (every valid member got the same reward: zero "
            "advantage), insufficient (fewer than min_valid_per_group valid members) and no_valid (no valid "
            "member). Uniform + insufficient + no_valid give no learning signal (RolloutGroupsNoSignal). "
            "Groups.",
            "short",
            (Query(f"{rate('rollout_groups_total', ALL, by=('state',))} * 60", "{{state}}"),),
            width=12,
            stacked=True,
            colors=GROUP_COLORS,
            no_value=NO_GROUPS,
        ),
    ),
)

NO_RANGE = "No reward range declared: expect(reward_range=...) turns the histogram on"
QUANTILES = (0.1, 0.5, 0.9)


def _alerting_share(title: str, description: str, expr: str, high: float, no_value: str) -> Panel:
    """A share (0-1) per agent, red above the threshold its alert fires at."""
    return Panel(
        "timeseries",
        title,
        description,
        "percentunit",
        (Query(expr, "{{agent}}"),),
        width=8,
        limits=(0.0, 1.0),
        thresholds=((None, GOOD), (high, BAD)),
        no_value=no_value,
    )


SIGNAL = Row(
    "Is the training signal sound?",
    (
        _alerting_share(
            "Contaminated baselines",
            "Share (0-1) of completed groups whose valid members sat beside masked, unscored, failed or "
            "omitted ones: a trainer that keeps those members as reward 0 computes the valid members' "
            "advantages against a baseline that includes infrastructure losses (RolloutBaselineContaminated "
            f"above {CONTAMINATED_HIGH:g}). 0 while nothing is contaminated.",
            contaminated_share(AGENTS),
            CONTAMINATED_HIGH,
            NO_GROUPS,
        ),
        Panel(
            "timeseries",
            "Uniform groups: too hard, too easy",
            "Share (0-1) of completed groups uniform at the lowest reward of the agent's declared range "
            "(too hard: RolloutGroupsTooHard) and at the highest (too easy: RolloutGroupsTooEasy), each "
            f"firing above {UNIFORM_END_HIGH:g}. The range is [0, 1] unless declared "
            "(expect(reward_range=...)).",
            "percentunit",
            (
                Query(uniform_share(AGENTS, "lowest"), "{{agent}} too hard"),
                Query(uniform_share(AGENTS, "highest"), "{{agent}} too easy"),
            ),
            width=8,
            limits=(0.0, 1.0),
            no_value=NO_GROUPS,
        ),
        Panel(
            "timeseries",
            "Group members by disposition per minute",
            "Members of the groups completed per minute by the disposition of their standing attempt, "
            "stacked: how many masked, unscored, failed or omitted members sat beside the measured ones. "
            "Appears once a group holds a member that is not valid. Rollouts.",
            "short",
            (
                Query(
                    f"{or_zero(rate('rollout_group_members_total', ALL, by=('disposition',)), ALL)} * 60",
                    "{{disposition}}",
                ),
            ),
            width=8,
            stacked=True,
        ),
        Panel(
            "timeseries",
            "Truncated per minute by cause",
            "Truncated answers per minute by cause: output_cap (raise max_output_tokens), context_window "
            "(shorten the prompt or history), turn_budget (the agent's max turns), content_filter, other. "
            "The raw reason is on the rollout's span. Rollouts.",
            "short",
            (
                Query(
                    f"{or_zero(rate('rollout_truncated_total', ALL, by=('cause',)), ALL)} * 60", "{{cause}}"
                ),
            ),
            width=8,
            stacked=True,
        ),
        _alerting_share(
            "Hollow rollouts share",
            "Share (0-1) of the rollouts whose trajectory (ng_trajectory) was checked that had an agent turn "
            "with no message and no tool call (NeMo Gym's agent_turn_hollow): recorded as completions, they "
            f"did nothing (RolloutHollowRollouts above {HOLLOW_HIGH:g}).",
            hollow_share(AGENTS),
            HOLLOW_HIGH,
            "No trajectory: rows carry no ng_trajectory",
        ),
        Panel(
            "timeseries",
            "Measured reward: 10th, 50th and 90th percentiles",
            "Percentiles of the measured rewards (unmasked, with a reward) over the rate window, from the "
            "rollout_measured_reward histogram (ten buckets of the declared reward range): a spread that "
            "opens is a bimodal reward, one that closes on an end a collapsing one. Reward units.",
            "none",
            _quantiles("rollout_measured_reward", "{{agent}}", QUANTILES),
            width=8,
            no_value=NO_RANGE,
        ),
    ),
)

STATE_COLORS = (
    ("active", "green"),
    ("slow", "yellow"),
    ("retrying", "orange"),
    ("stalled", "red"),
    ("cancelled", "purple"),
    ("terminal", "blue"),
)
NO_IDENTITY = "No identities: rollouts carry no task and rollout index"
NO_CLEANUPS = "No cleanups: nothing is released in ctx.cleanup()"
NO_LOOP = "No event loop watched: no async rollout block, or runtime_metrics=False"
NO_RUNTIME = "No runtime metrics: runtime_metrics=False, or not on Linux/CPython"
NO_WRITES = "No output writes timed: nothing is written in telemetry.output_write()"
PER_PROCESS = Scope(("instance",), "$__rate_interval")
"""prometheus_client's process families: no run or agent label, a series per process (restricted to the
selected runs' processes by ``_of_the_run``)."""


def _per_process(gauge: str) -> str:
    """A gauge of prometheus_client's process collector, a series per process."""
    return f"sum by (instance) ({series(gauge, PER_PROCESS)})"


def _of_the_run(expr: str) -> str:
    """``expr`` on a process family (no run label), kept to the processes (instances) of the selected runs."""
    return f"{expr} and on (instance) group by (instance) ({rate(COMPLETED, AGENTS.keeping('instance'))})"


RECOVERY = Row(
    "Recovery and runtime",
    (
        Panel(
            "timeseries",
            "Rollouts in flight by state",
            "Rollouts inside their lifecycle block by state, stacked, summed over processes and selected "
            "agents: active, slow (past slow_after), retrying (a later attempt), stalled (past stall_after), "
            "cancelled (ctx.cancel, block not exited) and terminal (outcome counted, still releasing its "
            "session). Rollouts.",
            "short",
            (Query(f"sum by (state) ({series('rollout_in_flight', ALL)})", "{{state}}"),),
            stacked=True,
            colors=STATE_COLORS,
            no_value=LIFECYCLE_ONLY,
        ),
        _alerting_share(
            "Slow share",
            "Share (0-1) of the rollouts in flight (terminal ones left out) that are slow, past the agent's "
            "slow_after, over the rate window's samples: a slow model server, judge or environment before "
            f"anything stalls (RolloutSlowShare above {SLOW_SHARE_HIGH:g}). 0 while none is slow.",
            slow_share(AGENTS),
            SLOW_SHARE_HIGH,
            LIFECYCLE_ONLY,
        ),
        Panel(
            "timeseries",
            "Attempts to a final outcome",
            "How many attempts the rollouts that reached a final outcome took (rollout_attempts: 1 is no "
            "retry): the mean, and the 90th and 99th percentiles, per agent. Attempts; a rise is "
            "infrastructure the retries are covering for.",
            "short",
            (
                Query(
                    f"{rate('rollout_attempts_sum', AGENTS)} / {rate('rollout_attempts_count', AGENTS)}",
                    "{{agent}} mean",
                ),
                *_quantiles("rollout_attempts", "{{agent}}", (0.9, 0.99)),
            ),
            width=8,
            no_value=NO_IDENTITY,
        ),
        _by_kind(
            "rollout_retries_exhausted_total",
            "Retries exhausted per minute by failure kind",
            "Rollouts whose final outcome is a failure after at least one retry (a terminal failure, or the "
            "last of NeMo Gym's attempts), per minute, stacked by agent and the last failure's kind. Reads 0 "
            "while none ran out (RolloutRetriesExhausted reads their share).",
        ),
        Panel(
            "timeseries",
            "Failure stages per minute",
            "Failed rollouts per minute by the stage they failed at (admission, seed, agent, verification, "
            "cleanup, unknown), stacked: where the collection breaks. Reads 0 while nothing failed at a "
            "known stage or delivery. Rollouts.",
            "short",
            (
                Query(
                    f"{or_zero(rate('rollout_failure_stages_total', ALL, by=('stage',)), ALL)} * 60",
                    "{{stage}}",
                ),
            ),
            width=8,
            stacked=True,
        ),
        Panel(
            "timeseries",
            "Cleanup duration quantiles",
            "p50 and p99 of how long cleanups took (ctx.cleanup(): releasing an environment session, say), "
            "failed ones included, per agent, from rollout_cleanup_duration_seconds summed over processes.",
            "s",
            _quantiles("rollout_cleanup_duration_seconds", "{{agent}}", (0.5, 0.99)),
            width=8,
            no_value=NO_CLEANUPS,
        ),
        Panel(
            "timeseries",
            "Unresolved cleanups",
            "Cleanups started and not finished successfully (in progress, failed, or left open when their "
            "rollout's block exited), per agent, summed over processes. A steady line is cleanups in "
            "progress; a climbing one is sessions leaking (RolloutCleanupsUnresolved, on the rise per "
            "cleanup finished). Cleanups.",
            "short",
            (
                Query(
                    or_zero(f"sum by (agent) ({series('rollout_cleanups_unresolved', AGENTS)})", AGENTS),
                    "{{agent}}",
                ),
            ),
            width=8,
            no_value=NO_CLEANUPS,
        ),
        Panel(
            "timeseries",
            "Admission wait quantiles",
            "p50 and p99 of how long rollouts waited to be admitted (from telemetry.offer(...) to entering "
            "its block, plus time at stage admission), per agent, from rollout_admission_wait_seconds: a "
            "collector at its concurrency limit, or environments short of sessions.",
            "s",
            _quantiles("rollout_admission_wait_seconds", "{{agent}}", (0.5, 0.99)),
            width=8,
            no_value=LIFECYCLE_ONLY,
        ),
        Panel(
            "timeseries",
            "Collector phases",
            "Rollouts per phase of the collector, summed over processes and selected agents: offered "
            "(made by telemetry.offer(...), block not entered), resident (block entered, not exited) and "
            "active (in flight past admission). Offered far above resident is a collector that cannot keep "
            "up. Rollouts.",
            "short",
            (Query(f"sum by (phase) ({series('rollout_collector_rollouts', ALL)})", "{{phase}}"),),
            width=8,
            no_value=LIFECYCLE_ONLY,
        ),
        Panel(
            "timeseries",
            "Event-loop lag p99 per process",
            "99th percentile of how late each collecting process's asyncio event loop woke for its timers "
            "(rollout_telemetry_event_loop_lag_seconds): time the loop ran something that did not await, "
            f"and every rollout on it waited. Red above {LOOP_LAG_HIGH:g} s (RolloutEventLoopLag).",
            "s",
            (Query(loop_lag_quantile(0.99, AGENTS), "{{instance}}"),),
            width=8,
            thresholds=((None, GOOD), (LOOP_LAG_HIGH, BAD)),
            no_value=NO_LOOP,
        ),
        Panel(
            "timeseries",
            "GC pause p99 by generation",
            "99th percentile of how long each garbage collection stopped the collecting processes, by "
            "generation (rollout_telemetry_gc_pause_seconds): frequent long generation-2 pauses stall "
            "recording and scrapes alike.",
            "s",
            _quantiles(
                "rollout_telemetry_gc_pause_seconds",
                "generation {{generation}}",
                (0.99,),
                UNLABELLED,
                ("generation",),
            ),
            width=8,
            no_value=NO_RUNTIME,
        ),
        Panel(
            "timeseries",
            "Output write quantiles",
            "p50 and p99 of how long each write of the collection's output took (telemetry.output_write(): a "
            "rollout's row appended to the results file, say), over the selected runs' processes, from "
            "rollout_output_write_seconds: a slow disk or network file system holds every rollout waiting "
            "for its row. Writes that raised: rollout_output_writes_failed_total.",
            "s",
            _quantiles("rollout_output_write_seconds", "write", (0.5, 0.99), UNLABELLED),
            width=8,
            no_value=NO_WRITES,
        ),
        Panel(
            "timeseries",
            "Process CPU",
            "CPU time the collecting processes used per second (process_cpu_seconds_total from "
            "prometheus_client's process collector), per process of the selected runs: 1 is one core busy. "
            "Cores.",
            "short",
            (Query(_of_the_run(rate("process_cpu_seconds_total", PER_PROCESS)), "{{instance}}"),),
            width=12,
            no_value=NO_RUNTIME,
        ),
        Panel(
            "timeseries",
            "Process resident memory",
            "Resident memory of the collecting processes (process_resident_memory_bytes from "
            "prometheus_client's process collector), per process of the selected runs. Bytes.",
            "bytes",
            (Query(_of_the_run(_per_process("process_resident_memory_bytes")), "{{instance}}"),),
            width=12,
            no_value=NO_RUNTIME,
        ),
    ),
)

ROWS: tuple[Row, ...] = (OVERVIEW, WHY, SIGNAL, RECOVERY, COVERAGE, OVER_TIME)
"""The dashboard, top to bottom."""
