"""The Prometheus rules: recording rules with dense per-agent series, the alerts on them, their thresholds.

The recording rules are the dashboard's formulas (``dashboards/promql.py``) rendered in the rules' scope:
every run and agent, a fixed window, a series per run and agent. ``python -m dashboards.generate`` writes
them to ``dashboards/prometheus/rules.yml``; the thresholds table at the top of that file and the docs'
alert table are built from the alerts below, so changing a threshold here changes all three.
"""

from __future__ import annotations

from dataclasses import replace

from dashboards.promql import (
    COMPLETED,
    NO_SIGNAL_STATES,
    Scope,
    cleanups_unresolved_rise,
    contaminated_share,
    exhausted_share,
    hollow_share,
    increase,
    loop_lag_quantile,
    lost_share,
    masked_share,
    mean_reward,
    no_signal_share,
    output_tokens_per_rollout,
    rate,
    rate0,
    series,
    slow_share,
    stalled_by_stage,
    truncated_share,
    uniform_share,
    unmasked_reward,
)
from dashboards.rulefile import Alert, Group, Record, comment, recorded, render, threshold_table
from rollout_telemetry._cli.monitoring import JOB

__all__ = [
    "JOB",
    "MASKED_SHARE_HIGH",
    "RULES",
    "STALLED_FOR",
    "alerting_rules",
    "recording_rules",
    "text",
]

# Thresholds and durations (minutes): every alert, its sentence and the docs read them from here.
WINDOW = 5
"""The rate window of the recording rules (the ``rate5m`` of their names)."""
MASKED_SHARE_HIGH = 0.20
"""Masked share (NeMo Gym's denominator) above which too few of an agent's rewards are measurements."""
MASKED_FOR = 5
"""How long the masked share stays above MASKED_SHARE_HIGH before RolloutMaskedRatioHigh fires."""
FAILURES_FOR = 5
"""How long failures outpace completions before RolloutFailuresExceedCompleted fires."""
DOWN_FOR = 2
"""How long a scrape target is down before RolloutExporterDown fires."""
NONE_COMPLETED_FOR = 10
"""Minutes without a completed rollout, and then as long again, before RolloutNoneCompleted fires."""
STALLED_FOR = 5
"""How long an agent has a rollout in flight beyond stall_after before RolloutStalled fires."""
COMPARED = 10
"""How far back the reward-drop alerts look: the mean reward and the shares against theirs then."""
REWARD_DROP = 0.1
"""A fall of the mean reward (reward units) over COMPARED minutes that is a drop."""
SHARE_RISE = 0.05
"""A rise of a share (5 points) over COMPARED minutes that is a cause of the drop."""
DROP_FOR = 2
"""How long a drop (with or without a cause) holds before a reward-drop alert fires."""
NO_SIGNAL_HIGH = 0.5
"""Share of an agent's groups without a learning signal above which RolloutGroupsNoSignal fires."""
NO_SIGNAL_FOR = 10
"""How long that share stays above NO_SIGNAL_HIGH before RolloutGroupsNoSignal fires."""
CONTAMINATED_HIGH = 0.2
"""Share of an agent's groups whose baseline includes lost members above which RolloutBaselineContaminated
fires."""
CONTAMINATED_FOR = 10
"""How long that share stays above CONTAMINATED_HIGH before RolloutBaselineContaminated fires."""
UNIFORM_END_HIGH = 0.5
"""Share of an agent's groups uniform at the lowest (highest) reward above which RolloutGroupsTooHard
(RolloutGroupsTooEasy) fires."""
UNIFORM_END_FOR = 10
"""How long that share stays above UNIFORM_END_HIGH before RolloutGroupsTooHard (TooEasy) fires."""
HOLLOW_HIGH = 0.1
"""Share of an agent's checked rollouts with a hollow turn above which RolloutHollowRollouts fires."""
HOLLOW_FOR = 10
"""How long that share stays above HOLLOW_HIGH before RolloutHollowRollouts fires."""
DRIFT_HIGH = 1.5
"""Output tokens per rollout this many times their trailing hour's average (or that many times below it)
is a drift."""
DRIFT_FOR = 10
DRIFT_BASELINE = 60
"""Minutes of the trailing window whose output tokens per rollout the last WINDOW's are compared with."""
"""How long output length stays drifted before RolloutOutputLengthDrift fires."""
RETRIES_FOR = 5
"""How long retries outpace completions before RolloutRetryStorm fires."""
EXHAUSTED_HIGH = 0.05
"""Share of an agent's rollouts reaching a final outcome with their retries exhausted above which
RolloutRetriesExhausted fires."""
EXHAUSTED_FOR = 5
"""How long that share stays above EXHAUSTED_HIGH before RolloutRetriesExhausted fires."""
LOOP_LAG_HIGH = 0.1
"""Seconds of event-loop lag (the 99th percentile of a collecting process's) above which RolloutEventLoopLag
fires: every rollout on that loop waits as long, on every await."""
LOOP_LAG_FOR = 5
"""How long the lag stays above LOOP_LAG_HIGH before RolloutEventLoopLag fires."""
CLEANUPS_OVER = 10
"""Minutes over which the rise of the unresolved cleanups is compared with the cleanups finished."""
CLEANUPS_LEFT_HIGH = 0.05
"""Unresolved cleanups added per cleanup finished (over CLEANUPS_OVER minutes) above which
RolloutCleanupsUnresolved fires: one environment session in 20 left behind."""
CLEANUPS_FOR = 5
"""How long that rise stays above CLEANUPS_LEFT_HIGH before RolloutCleanupsUnresolved fires."""
SLOW_SHARE_HIGH = 0.25
"""Share of an agent's rollouts in flight that are slow (past slow_after) above which RolloutSlowShare
fires."""
SLOW_FOR = 5
"""How long that share stays above SLOW_SHARE_HIGH before RolloutSlowShare fires."""

RULES = Scope(("run", "agent"), f"{WINDOW}m")
"""The recording rules' scope: every run and agent, a fixed window, a series per run and agent."""
TRAILING = replace(RULES, window=f"{DRIFT_BASELINE}m")
"""The rules' scope over the trailing window that output length is compared with."""
CLEANUPS = replace(RULES, window=f"{CLEANUPS_OVER}m")
"""The rules' scope over the window whose cleanups the unresolved ones' rise is compared with."""
TARGETS = Scope(("job", "instance"), f"{NONE_COMPLETED_FOR}m")
"""Per scrape target: what one exporter process completed."""

RATE = f"rate{WINDOW}m"
COMPLETED_RATE = f"agent:rollout_completed:{RATE}"
MASKED_RATE = f"agent:rollout_masked:{RATE}"
FAILED_RATE = f"agent:rollout_failed:{RATE}"
OMITTED_RATE = f"agent:rollout_omitted:{RATE}"
TRUNCATED_RATE = f"agent:rollout_truncated:{RATE}"
MASKED_SHARE = f"agent:rollout_masked:ratio_{RATE}"
MEAN_REWARD = f"agent:rollout_reward:mean_{RATE}"
UNMASKED_REWARD = f"agent:rollout_reward_unmasked:mean_{RATE}"
LOST_SHARE = f"agent:rollout_lost:ratio_{RATE}"
TRUNCATED_SHARE = f"agent:rollout_truncated:ratio_{RATE}"
NO_SIGNAL_SHARE = f"agent:rollout_groups_no_signal:ratio_{RATE}"
REWARD_DROP_SERIES = f"agent:rollout_reward:drop_{COMPARED}m"
LOST_RISE = f"agent:rollout_lost:rise_{COMPARED}m"
TRUNCATED_RISE = f"agent:rollout_truncated:rise_{COMPARED}m"
CONTAMINATED_SHARE = f"agent:rollout_groups_contaminated:ratio_{RATE}"
TOO_HARD_SHARE = f"agent:rollout_groups_uniform_lowest:ratio_{RATE}"
HOLLOW_SHARE = f"agent:rollout_hollow:ratio_{RATE}"
EXHAUSTED_SHARE = f"agent:rollout_retries_exhausted:ratio_{RATE}"
CLEANUPS_LEFT = f"agent:rollout_cleanups_unresolved:rise_ratio_{CLEANUPS_OVER}m"
SLOW_SHARE = f"agent:rollout_in_flight_slow:ratio_{WINDOW}m"
LOOP_LAG_P99 = f"instance:rollout_telemetry_event_loop_lag_seconds:p99_{RATE}"
TOO_EASY_SHARE = f"agent:rollout_groups_uniform_highest:ratio_{RATE}"
OUTPUT_PER_ROLLOUT = f"agent:rollout_output_tokens:per_rollout_{RATE}"
OUTPUT_DRIFT = f"agent:rollout_output_tokens:drift_{DRIFT_BASELINE // 60}h"

AGENT, RUN, VALUE = "{{ $labels.agent }}", "{{ $labels.run }}", "{{ $value }}"
"""Alertmanager templates of the annotations."""


def _minutes(minutes: int) -> str:
    return f"{minutes} minute{'' if minutes == 1 else 's'}"


def _share(share: float) -> str:
    return "half" if share == 0.5 else f"{share:.0%}"


def _rise(name: str) -> str:
    """How much the recorded series ``name`` rose over the last COMPARED minutes."""
    return f"{name} - {name} offset {COMPARED}m"


def recording_rules() -> tuple[Record, ...]:
    """The recording rules in evaluation order (a rule reads only the series recorded before it).

    Raises:
        ValueError: a formula names a family the catalogue does not publish.
    """
    completed = Record(COMPLETED_RATE, rate(COMPLETED, RULES))
    masked = Record(MASKED_RATE, rate0("rollout_masked_total", RULES))
    failed = Record(FAILED_RATE, rate0("rollout_failed_total", RULES))
    truncated = Record(TRUNCATED_RATE, rate0("rollout_truncated_total", RULES))
    # The shares added with the reward-drop alerts read the rates recorded above: evaluated in the same pass,
    # they are the same numbers. The masked share and the means read the counters, so each can also be
    # evaluated alone at any instant (the end-to-end tests compare them with the exporter's account).
    rates = RULES.reading({rule.expr: rule.name for rule in (completed, masked, failed, truncated)})
    return (
        completed,
        masked,
        failed,
        Record(OMITTED_RATE, rate0("rollout_omitted_total", RULES)),
        recorded(MASKED_SHARE, masked_share, RULES),
        recorded(MEAN_REWARD, mean_reward, RULES),
        recorded(UNMASKED_REWARD, unmasked_reward, RULES),
        Record(
            f"agent_failure_kind:rollout_failed:{RATE}",
            # No fallback to 0: a series per failure kind, and none while nothing failed.
            rate("rollout_failed_total", RULES, by=("failure_kind",)),
        ),
        recorded(LOST_SHARE, lost_share, rates),
        truncated,
        recorded(TRUNCATED_SHARE, truncated_share, rates),
        recorded(OUTPUT_PER_ROLLOUT, output_tokens_per_rollout, rates),
        Record(
            OUTPUT_DRIFT,
            f"{OUTPUT_PER_ROLLOUT} / ({output_tokens_per_rollout(TRAILING)})",
            why=f"Output tokens per rollout against the same over the trailing {DRIFT_BASELINE} minutes: 1 "
            "is steady, 2 twice as long as the hour's habit (reward hacking often starts so).",
        ),
        recorded(NO_SIGNAL_SHARE, no_signal_share, RULES),
        recorded(CONTAMINATED_SHARE, contaminated_share, RULES),
        recorded(HOLLOW_SHARE, hollow_share, RULES),
        recorded(EXHAUSTED_SHARE, exhausted_share, RULES),
        Record(
            LOOP_LAG_P99,
            loop_lag_quantile(0.99, RULES),
            why="How late each collecting process's event loop woke for its timers, 99th percentile, per run "
            "and process (instance): the loop was busy with something that did not await.",
        ),
        recorded(SLOW_SHARE, slow_share, RULES),
        recorded(CLEANUPS_LEFT, cleanups_unresolved_rise, CLEANUPS),
        Record(
            TOO_HARD_SHARE,
            uniform_share(RULES, "lowest"),
            why="Groups uniform at the lowest reward of the agent's range among the groups completed.",
        ),
        Record(
            TOO_EASY_SHARE,
            uniform_share(RULES, "highest"),
            why="Groups uniform at the highest reward of the agent's range among the groups completed.",
        ),
        Record(
            REWARD_DROP_SERIES,
            f"{MEAN_REWARD} offset {COMPARED}m - {MEAN_REWARD}",
            why=f"How far the mean reward fell over the last {COMPARED} minutes (a rise is below 0).",
        ),
        Record(LOST_RISE, _rise(LOST_SHARE)),
        Record(TRUNCATED_RISE, _rise(TRUNCATED_SHARE)),
    )


def _uniform_end(name: str, at: str, share: str, too: str) -> Alert:
    """The alert on groups uniform at one end (``at``: lowest or highest) of the agent's reward range."""
    return Alert(
        name,
        f"{share} > {UNIFORM_END_HIGH:g}",
        UNIFORM_END_FOR,
        "warning",
        summary=f"{AGENT}: most groups score the {at} reward on every member",
        description=f"More than {_share(UNIFORM_END_HIGH)} of the groups of agent {AGENT} (run {RUN}) "
        f"completed in the last {_minutes(WINDOW)} were uniform at the {at} reward of its range: the tasks "
        f"are too {too} for the policy, and those groups teach it nothing. Check "
        "rollout_groups_uniform_total by reward.",
        when=f"more than {UNIFORM_END_HIGH:g} of the groups an agent completed over {_minutes(WINDOW)} are "
        f"uniform at the {at} reward (`{share}`), for {_minutes(UNIFORM_END_FOR)}",
    )


def alerting_rules() -> tuple[Alert, ...]:
    """The alerts, each on recorded series or on a formula of ``dashboards/promql.py``.

    Raises:
        ValueError: a formula names a family the catalogue does not publish.
    """
    up = f'up{{job="{JOB}"}}'
    dropped = f"{REWARD_DROP_SERIES} > {REWARD_DROP:g}"
    lost_rose = f"{LOST_RISE} > {SHARE_RISE:g}"
    truncated_rose = f"{TRUNCATED_RISE} > {SHARE_RISE:g}"
    drop = f"mean reward of agent {AGENT} (run {RUN}) fell by more than {REWARD_DROP:g} in {COMPARED} minutes"
    rose = f"rose by more than {SHARE_RISE * 100:g} points"
    fell = (
        f"an agent's {WINDOW}-minute mean reward is more than {REWARD_DROP:g} below its value {COMPARED} "
        f"minutes earlier (`{REWARD_DROP_SERIES}`)"
    )
    states = [f"`{state}`" for state in NO_SIGNAL_STATES]
    return (
        Alert(
            "RolloutMaskedRatioHigh",
            f"{MASKED_SHARE} > {MASKED_SHARE_HIGH:g}",
            MASKED_FOR,
            "warning",
            summary=f"{AGENT}: {{{{ $value | humanizePercentage }}}} of rollouts are masked",
            description=f"More than {MASKED_SHARE_HIGH:.0%} of the rollouts of agent {AGENT} (run {RUN}) "
            "that count for the masked share (masked + unmasked with a reward) came back with "
            f"mask_sample=True over the last {_minutes(MASKED_FOR)}: their rewards are not valid "
            "measurements. Check rollout_masked_total by failure_kind for the cause.",
            when=f"an agent's masked share (`{MASKED_SHARE}`, masked / (completed - unscored)) is above "
            f"{MASKED_SHARE_HIGH:g} for {_minutes(MASKED_FOR)}",
        ),
        Alert(
            "RolloutFailuresExceedCompleted",
            f"{FAILED_RATE} > {COMPLETED_RATE}",
            FAILURES_FOR,
            "critical",
            summary=f"{AGENT}: more rollouts fail than complete",
            description=f"Agent {AGENT} (run {RUN}) has failed faster than it completed for "
            f"{_minutes(FAILURES_FOR)}: the run is burning its reward signal on infrastructure. Check "
            "rollout_failed_total by failure_kind.",
            when=f"an agent's failed rate exceeds its completed rate (its failed share is above 0.5) for "
            f"{_minutes(FAILURES_FOR)}",
        ),
        Alert(
            "RolloutExporterDown",
            f"{up} == 0",
            DOWN_FOR,
            "critical",
            summary="rollout-telemetry exporter {{ $labels.instance }} is down",
            description=f"Prometheus has not scraped {{{{ $labels.instance }}}} for {_minutes(DOWN_FOR)}: "
            "rollout outcomes from that collector are not being seen.",
            when=f"a `{JOB}` target is down for {_minutes(DOWN_FOR)}",
        ),
        Alert(
            "RolloutNoneCompleted",
            # An exporter that has never published the family completes nothing either.
            f"({increase(COMPLETED, TARGETS)} == 0 and on (job, instance) {up} == 1) or ({up} == 1"
            f" unless on (job, instance) group by (job, instance) ({series(COMPLETED, TARGETS)}))",
            NONE_COMPLETED_FOR,
            "warning",
            summary=f"no rollout completed on {{{{ $labels.instance }}}} for {_minutes(NONE_COMPLETED_FOR)}",
            description="The exporter at {{ $labels.instance }} is up but no rollout has completed for "
            f"{_minutes(NONE_COMPLETED_FOR)}: collection is stalled (check rollout_in_flight and "
            "rollout_oldest_in_flight_age_seconds).",
            when=f"an exporter is up but no rollout completed for {_minutes(NONE_COMPLETED_FOR)}",
        ),
        Alert(
            "RolloutRewardDropInfrastructure",
            f"{dropped} and on (run, agent) {lost_rose}",
            DROP_FOR,
            "warning",
            cause="infrastructure",
            summary=f"{AGENT}: reward fell while more rollouts are masked or failed",
            description=f"The {drop} while the masked + failed share {rose}: the infrastructure, not the "
            "policy. Check rollout_masked_total and rollout_failed_total by failure_kind.",
            when=f"{fell} while its masked + failed share rose by more than {SHARE_RISE:g} "
            f"(`{LOST_RISE}`), for {_minutes(DROP_FOR)}",
        ),
        Alert(
            "RolloutRewardDropTruncation",
            f"{dropped} and on (run, agent) {truncated_rose}",
            DROP_FOR,
            "warning",
            cause="truncation",
            summary=f"{AGENT}: reward fell while more answers are truncated",
            description=f"The {drop} while the truncated share {rose}: answers are cut short (check "
            "rollout_truncated_total by cause and output tokens per rollout against max_output_tokens).",
            when=f"{fell} while its truncated share rose by more than {SHARE_RISE:g} "
            f"(`{TRUNCATED_RISE}`), for {_minutes(DROP_FOR)}",
        ),
        Alert(
            "RolloutRewardDropPolicy",
            f"{dropped} unless on (run, agent) ({lost_rose} or {truncated_rose})",
            DROP_FOR,
            "warning",
            cause="policy",
            summary=f"{AGENT}: reward fell with no infrastructure or truncation cause",
            description=f"The {drop} while neither the masked + failed share nor the truncated share rose: "
            "the policy's score fell. Check the group states and output tokens per rollout.",
            when=f"{fell} while neither share rose by more than {SHARE_RISE:g}, for {_minutes(DROP_FOR)}",
        ),
        Alert(
            "RolloutGroupsNoSignal",
            f"{NO_SIGNAL_SHARE} > {NO_SIGNAL_HIGH:g}",
            NO_SIGNAL_FOR,
            "warning",
            summary=f"{AGENT}: most groups give no learning signal",
            description=f"More than {_share(NO_SIGNAL_HIGH)} of the groups of agent {AGENT} (run {RUN}) "
            f"completed in the last {_minutes(WINDOW)} were uniform (every valid member got the same "
            "reward), insufficient (too few valid members) or without a valid member: their advantages are "
            "zero or noise. Check rollout_groups_total by state.",
            when=f"more than {NO_SIGNAL_HIGH:g} of the groups an agent completed over {_minutes(WINDOW)} are "
            f"{', '.join(states[:-1])} or {states[-1]} (`{NO_SIGNAL_SHARE}`), for "
            f"{_minutes(NO_SIGNAL_FOR)}",
        ),
        Alert(
            "RolloutBaselineContaminated",
            f"{CONTAMINATED_SHARE} > {CONTAMINATED_HIGH:g}",
            CONTAMINATED_FOR,
            "warning",
            summary=f"{AGENT}: {{{{ $value | humanizePercentage }}}} of group baselines include lost members",
            description=f"More than {_share(CONTAMINATED_HIGH)} of the groups of agent {AGENT} (run {RUN}) "
            f"completed in the last {_minutes(WINDOW)} had valid members beside masked, unscored, failed or "
            "omitted ones: a trainer that keeps those as reward 0 computes the valid members' advantages "
            "against a wrong baseline. Check rollout_group_members_total by disposition and "
            "rollout_failed_total by failure_kind.",
            when=f"more than {CONTAMINATED_HIGH:g} of the groups an agent completed over {_minutes(WINDOW)} "
            f"have a contaminated baseline (`{CONTAMINATED_SHARE}`), for {_minutes(CONTAMINATED_FOR)}",
        ),
        _uniform_end("RolloutGroupsTooHard", "lowest", TOO_HARD_SHARE, "hard"),
        _uniform_end("RolloutGroupsTooEasy", "highest", TOO_EASY_SHARE, "easy"),
        Alert(
            "RolloutHollowRollouts",
            f"{HOLLOW_SHARE} > {HOLLOW_HIGH:g}",
            HOLLOW_FOR,
            "warning",
            summary=f"{AGENT}: {{{{ $value | humanizePercentage }}}} of rollouts have a hollow turn",
            description=f"More than {_share(HOLLOW_HIGH)} of the rollouts of agent {AGENT} (run {RUN}) whose "
            f"trajectory was checked over the last {_minutes(WINDOW)} had an agent turn with no message and "
            "no tool call (NeMo Gym's agent_turn_hollow): they are recorded as completions but did nothing. "
            "Check rollout_health_findings_total by check and the model server.",
            when=f"more than {HOLLOW_HIGH:g} of an agent's rollouts with a trajectory over "
            f"{_minutes(WINDOW)} have a hollow turn (`{HOLLOW_SHARE}`), for {_minutes(HOLLOW_FOR)}",
        ),
        Alert(
            "RolloutOutputLengthDrift",
            f"{OUTPUT_DRIFT} > {DRIFT_HIGH:g} or {OUTPUT_DRIFT} < 1 / {DRIFT_HIGH:g}",
            DRIFT_FOR,
            "warning",
            summary=f"{AGENT}: output length drifted from its trailing hour's",
            description=f"The output tokens per rollout of agent {AGENT} (run {RUN}) over the last "
            f"{_minutes(WINDOW)} have been more than {DRIFT_HIGH:g} times (or less than 1/{DRIFT_HIGH:g} of) "
            f"those over the trailing {_minutes(DRIFT_BASELINE)} for {_minutes(DRIFT_FOR)}. Longer "
            "answers while the reward rises are an early sign of reward hacking; shorter ones, of a policy "
            "giving up. Check the reward and rollout_truncated_total by cause.",
            when=f"an agent's output tokens per rollout are more than {DRIFT_HIGH:g} times, or less than "
            f"1/{DRIFT_HIGH:g} of, those over the trailing {_minutes(DRIFT_BASELINE)} (`{OUTPUT_DRIFT}`), "
            f"for {_minutes(DRIFT_FOR)}",
        ),
        Alert(
            "RolloutRetryStorm",
            f"{rate('rollout_retried_total', RULES)} > {COMPLETED_RATE}",
            RETRIES_FOR,
            "warning",
            summary=f"{AGENT}: more retries than completions",
            description=f"Agent {AGENT} (run {RUN}) retried rollouts faster than it completed them for "
            f"{_minutes(RETRIES_FOR)}: attempts are burning capacity. Check rollout_failed_total by "
            "failure_kind.",
            when="an agent retries rollouts faster than it completes them (`rollout_retried_total`, "
            f"`serve PATH`), for {_minutes(RETRIES_FOR)}",
        ),
        Alert(
            "RolloutRetriesExhausted",
            f"{EXHAUSTED_SHARE} > {EXHAUSTED_HIGH:g}",
            EXHAUSTED_FOR,
            "warning",
            summary=f"{AGENT}: {{{{ $value | humanizePercentage }}}} of rollouts ran out of retries",
            description=f"More than {_share(EXHAUSTED_HIGH)} of the rollouts of agent {AGENT} (run {RUN}) "
            f"that reached a final outcome over the last {_minutes(WINDOW)} failed on their last attempt (a "
            "terminal failure after a retry, or the last of NeMo Gym's attempts): retrying does not recover "
            "them, and a resume will not either. Check rollout_retries_exhausted_total by failure_kind.",
            when=f"more than {EXHAUSTED_HIGH:g} of the rollouts an agent finished over {_minutes(WINDOW)} "
            f"exhausted their retries (`{EXHAUSTED_SHARE}`), for {_minutes(EXHAUSTED_FOR)}",
        ),
        Alert(
            "RolloutEventLoopLag",
            f"{LOOP_LAG_P99} > {LOOP_LAG_HIGH:g}",
            LOOP_LAG_FOR,
            "warning",
            summary="{{ $labels.instance }}: the event loop wakes {{ $value | humanizeDuration }} late",
            description=f"The 99th percentile of how late the asyncio event loop of the collector at "
            f"{{{{ $labels.instance }}}} (run {RUN}) woke for its timers has been above {LOOP_LAG_HIGH:g} s "
            f"for {_minutes(LOOP_LAG_FOR)}: something runs on the loop without awaiting (CPU-bound "
            "post-processing, a blocking call), and every rollout on it waits as long. Check "
            "rollout_telemetry_gc_pause_seconds and process_cpu_seconds_total.",
            when=f"the 99th percentile of a collecting process's event-loop lag (`{LOOP_LAG_P99}`) is above "
            f"{LOOP_LAG_HIGH:g} s, for {_minutes(LOOP_LAG_FOR)}",
        ),
        Alert(
            "RolloutCleanupsUnresolved",
            # A share, not a count: the same leak is more cleanups a minute in a faster run. In-progress
            # cleanups come and go and add little over a window of many; a failed cleanup stays unresolved.
            f"{CLEANUPS_LEFT} > {CLEANUPS_LEFT_HIGH:g}",
            CLEANUPS_FOR,
            "warning",
            summary=f"{AGENT}: unresolved cleanups are growing",
            description=f"The unresolved cleanups of agent {AGENT} (run {RUN}) rose by more than "
            f"{CLEANUPS_LEFT_HIGH:g} per cleanup finished over the last {_minutes(CLEANUPS_OVER)}, for "
            f"{_minutes(CLEANUPS_FOR)}: cleanups fail or never finish, and what they release (environment "
            "sessions, sandboxes) is leaking. Check rollout_cleanups_failed_total by failure_kind and the "
            "environment's session pool.",
            when=f"an agent's unresolved cleanups rise by more than {CLEANUPS_LEFT_HIGH:g} per cleanup "
            f"finished over {_minutes(CLEANUPS_OVER)} (`{CLEANUPS_LEFT}`: failed or hung cleanups, not the "
            f"ones in progress), for {_minutes(CLEANUPS_FOR)}",
        ),
        Alert(
            "RolloutSlowShare",
            f"{SLOW_SHARE} > {SLOW_SHARE_HIGH:g}",
            SLOW_FOR,
            "warning",
            summary=f"{AGENT}: {{{{ $value | humanizePercentage }}}} of rollouts in flight are slow",
            description=f"More than {_share(SLOW_SHARE_HIGH)} of the rollouts of agent {AGENT} (run {RUN}) "
            f"in flight over the last {_minutes(WINDOW)} were past slow_after, for {_minutes(SLOW_FOR)}: a "
            "slow model server, judge or environment is holding the collection back before anything "
            "stalls. Check rollout_in_flight by stage and the rollout duration quantiles.",
            when=f"more than {SLOW_SHARE_HIGH:g} of an agent's rollouts in flight (terminal ones left out) "
            f"are `slow` over {_minutes(WINDOW)} (`{SLOW_SHARE}`), for {_minutes(SLOW_FOR)}",
        ),
        Alert(
            "RolloutStalled",
            f"{stalled_by_stage(RULES)} > 0",
            STALLED_FOR,
            "warning",
            summary=f"{AGENT}: {VALUE} rollout(s) stalled at stage {{{{ $labels.stage }}}}",
            description=f"Agent {AGENT} (run {RUN}) has had rollouts in flight longer than stall_after at "
            f"stage {{{{ $labels.stage }}}} for {_minutes(STALLED_FOR)}. GET /rollouts on the exporter lists "
            "them, oldest first, with their trace ids.",
            when="an agent has a rollout in flight longer than `stall_after` (`rollout_stalled` > 0) for "
            f"{_minutes(STALLED_FOR)}",
        ),
    )


INTRO = f"""\
Recording and alerting rules for rollout-telemetry. GENERATED by `python -m dashboards.generate` from \
dashboards/rules.py and the formulas of dashboards/promql.py: edit those, then regenerate.

Recording rules give dense per-agent series: they are the dashboard's formulas over {WINDOW}-minute windows \
for every run and agent. Each ratio is a sum of counter rates divided by a sum of counter rates across \
every exporter process (never an average of ratios), and each numerator that can be absent (nothing \
masked, failed or omitted yet) falls back to 0 whenever the agent is completing rollouts, so a healthy run \
reads 0 rather than nothing.

Why is reward dropping? Each reward-drop alert compares the {WINDOW}-minute mean reward with its value \
{COMPARED} minutes earlier ({REWARD_DROP_SERIES}) and tells the causes apart by what rose over the same \
{COMPARED} minutes. A drop is visible for {COMPARED} minutes after it happens, while the earlier window \
still holds the old mean.

The alerts and their thresholds (set at the top of dashboards/rules.py):"""


def text() -> str:
    """The text of ``dashboards/prometheus/rules.yml``: the recording rules, then the alerts that read them.

    Raises:
        ValueError: a formula names a family the catalogue does not publish, or a rule reads a recorded
            series no rule before it records.
    """
    alerts = alerting_rules()
    groups = (
        Group("rollout_telemetry_recording", recording_rules()),
        Group("rollout_telemetry_alerts", alerts),
    )
    return render([*comment(INTRO), *threshold_table(alerts)], groups)
