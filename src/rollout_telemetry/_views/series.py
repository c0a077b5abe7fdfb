"""The catalogue of published series, and how each is computed from a snapshot.

Every family any collector publishes is listed here: the account's (``FAMILIES``, ``HISTOGRAMS``, defined
here), the run coverage account's, the groups' and the span export statistics' (``_views.run_series``);
``CATALOGUE`` is all of them; the docs' metric reference is generated from it (``python -m docs.generate``)
and the dashboard tests are checked against it.
The exporters format what the families compute, so names, meanings and the appear-only-when rules live in
one place. A family with no samples is not published at all: a healthy run publishes only the always-present
set.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rollout_telemetry._contract.generation import TOKEN_TYPES, TRUNCATION_CAUSES
from rollout_telemetry._contract.health import HEALTH_CHECKS
from rollout_telemetry._contract.outcome import Disposition
from rollout_telemetry._store.observed import Observed
from rollout_telemetry._store.recovery import RecoverySnapshot
from rollout_telemetry._store.snapshot import AccountSnapshot, AgentSnapshot, LifecycleSnapshot
from rollout_telemetry._views.family import Family, PerAgent, Sample
from rollout_telemetry._views.run_series import (
    COVERAGE_FAMILIES,
    GROUP_FAMILIES,
    PROCESS_FAMILIES,
    RUNTIME_FAMILIES,
    SPAN_FAMILIES,
)

__all__ = ["CATALOGUE", "FAMILIES", "HISTOGRAM_VIEWS", "Histogram", "published"]

_each = PerAgent[AgentSnapshot]


def _masked_only(value: Callable[[AgentSnapshot], float]) -> Callable[[AccountSnapshot], Iterator[Sample]]:
    return _each(lambda agent: value(agent) if agent.masked else None)


def _by_mapping(
    value: Callable[[AgentSnapshot], Mapping[str, int]],
) -> Callable[[AccountSnapshot], Iterator[Sample]]:
    """(agent, key), count: a sample per key of a mapping of each agent (its failure kinds, say)."""

    def sample(snap: AccountSnapshot) -> Iterator[Sample]:
        for agent in snap.agents:
            for key, count in value(agent).items():
                yield (agent.agent, key), count

    return sample


def _by_kind(disposition: Disposition) -> Callable[[AccountSnapshot], Iterator[Sample]]:
    return _by_mapping(lambda agent: agent._kinds.get(disposition, {}))


def _by_stage(
    value: Callable[[LifecycleSnapshot], Mapping[str, float]],
) -> Callable[[AccountSnapshot], Iterator[Sample]]:
    def sample(snap: AccountSnapshot) -> Iterator[Sample]:
        for agent in snap.agents:
            if agent.lifecycle is not None:
                for stage, number in value(agent.lifecycle).items():
                    yield (agent.agent, stage), number

    return sample


def _tokens(snap: AccountSnapshot) -> Iterator[Sample]:
    for agent in snap.agents:
        if agent.tokens is not None:
            for token_type, count in zip(TOKEN_TYPES, agent.tokens, strict=True):
                yield (agent.agent, token_type), count


def _truncated(snap: AccountSnapshot) -> Iterator[Sample]:
    for agent in snap.agents:
        for cause in TRUNCATION_CAUSES:  # in a fixed order, only the causes seen
            count = agent.truncated.get(cause)
            if count is not None:
                yield (agent.agent, cause), count


def _findings(snap: AccountSnapshot) -> Iterator[Sample]:
    for agent in snap.agents:
        if agent._findings:  # every check from the first finding on, so increase() sees each from 0
            for check in HEALTH_CHECKS:
                yield (agent.agent, check), agent._findings.get(check, 0)


def _in_flight_age(snap: AccountSnapshot) -> Iterator[Sample]:
    for agent in snap.agents:
        if (lifecycle := agent.lifecycle) is not None:
            for stage in lifecycle.in_flight_by_stage:
                start = lifecycle.oldest_start_by_stage.get(stage)
                yield (agent.agent, stage), 0.0 if start is None else max(snap.taken_at - start, 0.0)


def _by_state(snap: AccountSnapshot) -> Iterator[Sample]:
    for agent in snap.agents:
        if agent.lifecycle is not None:
            for (stage, state), number in agent.lifecycle.in_flight_by_state.items():
                yield (agent.agent, stage, state), number


def _phases(snap: AccountSnapshot) -> Iterator[Sample]:
    for agent in snap.agents:
        if agent.lifecycle is not None:
            for phase, number in agent.lifecycle.phases.items():
                yield (agent.agent, phase), number


def _mapping(attribute: str) -> Callable[[AccountSnapshot], Iterator[Sample]]:
    def sample(snap: AccountSnapshot) -> Iterator[Sample]:
        for key, count in sorted(getattr(snap, attribute).items()):
            yield (key,), count

    return sample


def _recovered(
    counts: Callable[[RecoverySnapshot], Iterable[tuple[str | tuple[str, ...], int]]],
) -> Callable[[AccountSnapshot], Iterator[Sample]]:
    # An agent's recovery counts (_store.recovery), each key a label value or a tuple of them.
    def sample(snap: AccountSnapshot) -> Iterator[Sample]:
        for agent in snap.agents:
            if agent.recovery is not None:
                for key, count in sorted(counts(agent.recovery)):
                    yield (agent.agent, *((key,) if isinstance(key, str) else key)), count

    return sample


def _durations(agent: AgentSnapshot) -> Observed | None:
    return None if agent.lifecycle is None else agent.lifecycle.durations


def _admission_wait(agent: AgentSnapshot) -> Observed | None:
    return None if agent.lifecycle is None else agent.lifecycle.admission_wait


def _cleanup_durations(agent: AgentSnapshot) -> Observed | None:
    return None if agent.cleanups is None else agent.cleanups.durations


def _attempts(agent: AgentSnapshot) -> Observed | None:
    recovery = agent.recovery
    return recovery.attempts if recovery is not None and recovery.attempts.count else None


def _retry_delay(agent: AgentSnapshot) -> Observed | None:
    return None if agent.recovery is None else agent.recovery.retry_delay


_AGENT = ("agent",)
_KIND = ("agent", "failure_kind")
_STAGE = ("agent", "stage")
_ALWAYS = "always, per agent"
_TROUBLE = "once something is masked, failed or omitted for the agent"

FAMILIES: tuple[Family[AccountSnapshot], ...] = (
    Family(
        "rollout_completed_total", "counter", _AGENT, "{rollout}", _ALWAYS,
        "Rollouts that reached the output: measured + masked + unscored.",
        _each(lambda a: a.completed),
    ),
    Family(
        "rollout_rewarded_total", "counter", _AGENT, "{rollout}", _ALWAYS,
        "Completed rollouts that carried a reward, masked ones included: the denominator of the mean reward.",
        _each(lambda a: a.rewarded),
    ),
    Family(
        "rollout_reward_positive_total", "counter", _AGENT, "1", _ALWAYS,
        "Sum of the positive rewards (masked included). Mean reward over a window = "
        "(increase(positive) - increase(negative)) / increase(rollout_rewarded_total).",
        _each(lambda a: a._reward_positive),
    ),
    Family(
        "rollout_reward_negative_total", "counter", _AGENT, "1", _ALWAYS,
        "Sum of the magnitudes of the negative rewards (masked included); kept apart from the positive ones "
        "so that both are monotonic counters.",
        _each(lambda a: a._reward_negative),
    ),
    Family(
        "rollout_reward", "gauge", _AGENT, "1", "per agent, once it has a reward",
        "Mean reward since the exporter started, over every rewarded rollout, masked ones included.",
        _each(lambda a: a.mean_reward),
    ),
    Family(
        "rollout_reward_unmasked", "gauge", _AGENT, "1", _TROUBLE + ", if an unmasked one has a reward",
        "Mean reward over unmasked rollouts. The gap to rollout_reward is the score lost to infrastructure.",
        _each(lambda a: a.mean_reward_unmasked),
    ),
    Family(
        "rollout_masked_ratio", "gauge", _AGENT, "1", "once something is masked",
        "Share (0-1) of masked rollouts among those that count for it, as NeMo Gym computes masked_pct: "
        "masked / (masked + unmasked rollouts that carry a reward); an unscored rollout is in neither.",
        _each(lambda a: a.masked_ratio),
    ),
    Family(
        "rollout_masked_rewarded_total", "counter", _AGENT, "{rollout}", "once something is masked",
        "Masked rollouts that carried a reward; subtract from rollout_rewarded_total for the unmasked "
        "denominator.",
        _masked_only(lambda a: a._masked_rewarded),
    ),
    Family(
        "rollout_masked_reward_positive_total", "counter", _AGENT, "1", "once something is masked",
        "Sum of the positive rewards of masked rollouts.",
        _masked_only(lambda a: a._masked_positive),
    ),
    Family(
        "rollout_masked_reward_negative_total", "counter", _AGENT, "1", "once something is masked",
        "Sum of the magnitudes of the negative rewards of masked rollouts.",
        _masked_only(lambda a: a._masked_negative),
    ),
    Family(
        "rollout_masked_total", "counter", _KIND, "{rollout}", "once a rollout of that kind is masked",
        "Completed rollouts returned with mask_sample=True: their reward is not a valid measurement.",
        _by_kind(Disposition.MASKED),
    ),
    Family(
        "rollout_unscored_total", "counter", _KIND, "{rollout}", "once a rollout of that kind is unscored",
        "Completed rollouts that carried no numeric reward.",
        _by_kind(Disposition.UNSCORED),
    ),
    Family(
        "rollout_failed_total", "counter", _KIND, "{rollout}", "once a rollout of that kind fails",
        "Rollouts that never reached the output (environment, judge, transport or provider failure).",
        _by_kind(Disposition.FAILED),
    ),
    Family(
        "rollout_omitted_total", "counter", _KIND, "{rollout}", "once a rollout of that kind is omitted",
        "Rollouts left out of the output on purpose (cancelled, shut down, incomplete cohort).",
        _by_kind(Disposition.OMITTED),
    ),
    Family(
        "rollout_tokens_total", "counter", ("agent", "type"), "{token}",
        "per agent, from its first rollout that carries usage (response.usage)",
        "Tokens of the model responses, by type: input, output, cached (input_tokens_details) and reasoning "
        "(output_tokens_details), from response.usage of rollouts that carry it. Output tokens per rollout "
        "drifting up or down is an early sign of many training pathologies.",
        _tokens,
    ),
    Family(
        "rollout_truncated_total", "counter", ("agent", "cause"), "{rollout}",
        "once a response of the agent is truncated for that cause",
        "Completed rollouts whose model response was cut short, by cause: output_cap (max_output_tokens, "
        "length), context_window (the prompt and answer filled the model's context), turn_budget (the "
        "agent's max turns or steps), content_filter, or other (an unknown or unspecified reason), from "
        "incomplete_details.reason or a finish_reason that means a cut; the raw reason is on the span. A "
        "truncated answer usually scores 0 for a reason that is neither the environment nor the policy's "
        "reasoning, and each cause has its own fix.",
        _truncated,
    ),
    Family(
        "rollout_health_evaluated_total", "counter", _AGENT, "{rollout}",
        "once a rollout of the agent carries a trajectory (ng_trajectory)",
        "Rollouts whose trajectory was checked for health, as NeMo Gym 0.7.0's post-run checks would: the "
        "denominator of the health findings' shares.",
        _each(lambda a: a._evaluated or None),
    ),
    Family(
        "rollout_health_findings_total", "counter", ("agent", "check"), "{rollout}",
        "once a rollout of the agent fails a health check (every check then)",
        "Rollouts whose trajectory failed a NeMo Gym 0.7.0 health check, by check: agent_turn_hollow (a "
        "turn with no message and no tool call), model_call_runaway_generation (a call cut at its length "
        "limit with no content), model_call_zero_completion_tokens (a call that generated nothing). A "
        "rollout counts once per check.",
        _findings,
    ),
    Family(
        "rollout_in_flight", "gauge", ("agent", "stage", "state"), "{rollout}",
        "per agent and stage that used the lifecycle API: state active always, another state from the first "
        "rollout of the agent in it",
        "Rollouts started through the lifecycle API whose block has not exited, by the stage they are at "
        "(rollout.stage(); 'agent' unless told) and their state: terminal (outcome counted, block not "
        "exited), cancelled (cancel()), stalled (past stall_after), slow (past slow_after), retrying "
        "(attempt > 0), active (none of these), the first that holds. Without terminal: the rollouts "
        "without an outcome.",
        _by_state,
    ),
    Family(
        "rollout_oldest_in_flight_age_seconds", "gauge", _STAGE, "s",
        "per agent and stage that used the lifecycle API",
        "Age of the oldest rollout still in flight at that stage; 0 when none is. An age that keeps growing "
        "is a stalled rollout.",
        _in_flight_age, timely=True,
    ),
    Family(
        "rollout_stalled", "gauge", _STAGE, "{rollout}", "per agent and stage that used the lifecycle API",
        "Rollouts in flight now for longer than stall_after, by the stage they are at.",
        _by_stage(lambda lifecycle: lifecycle.stalled_by_stage),
    ),
    Family(
        "rollout_stalls_total", "counter", _STAGE, "{rollout}", "once a rollout of the agent stalls",
        "Rollouts that stayed in flight longer than stall_after, each counted once when it crossed, by the "
        "stage it was at then.",
        _by_stage(lambda lifecycle: lifecycle.stalls),
    ),
    Family(
        "rollout_collector_rollouts", "gauge", ("agent", "phase"), "{rollout}",
        "per agent that used the lifecycle API",
        "The collector's rollouts by phase: offered (a context made by telemetry.offer(...), not entered "
        "yet), resident (entered, block not exited: in flight and terminal) and active (in flight past stage "
        "admission, neither terminal nor cancelled). Offered growing while active stays flat: admission "
        "back-pressure.",
        _phases,
    ),
    Family(
        "rollout_collector_offered_total", "counter", _AGENT, "{rollout}",
        "per agent that used the lifecycle API",
        "Rollouts offered (telemetry.offer(...), entered or not) or entered (telemetry.rollout(...)): "
        "NeMo Gym's gym.driver.rollouts.offered. Its rate beside the rate of completions is the collector's "
        "intake against its output.",
        _each(lambda a: None if a.lifecycle is None else a.lifecycle.made),
    ),
    Family(
        "rollout_cleanups_failed_total", "counter", _KIND, "{cleanup}", "once a cleanup of the agent fails",
        "Cleanups (rollout.cleanup(), telemetry.cleanup(agent)) that raised or were failed (fail(kind)), by "
        "failure kind.",
        _by_mapping(lambda a: {} if a.cleanups is None else a.cleanups.failed),
    ),
    Family(
        "rollout_cleanups_unresolved", "gauge", _AGENT, "{cleanup}", "once a cleanup of the agent started",
        "Cleanups in progress, failed, or never finished (their block never exited): started and not "
        "finished successfully. Growing: environment sessions leak.",
        _each(lambda a: None if a.cleanups is None else a.cleanups.unresolved),
    ),
    Family(
        "rollout_telemetry_rejected_total", "counter", ("reason",), "{input}", "once an input is rejected",
        "Inputs the telemetry refused (bad reward, malformed row, internal error), by reason; nothing else "
        "is lost.",
        _mapping("rejected"),
    ),
    Family(
        "rollout_telemetry_label_overflow_total", "counter", ("label",), "{record}",
        "once a cardinality cap is exceeded",
        "Records whose agent or failure_kind exceeded the cardinality cap and were counted under '_other'.",
        _mapping("overflow"),
    ),
    Family(
        "rollout_retries_exhausted_total", "counter", _KIND, "{rollout}",
        "with coverage, once a rollout identity of the agent ran out of retries",
        "Rollout identities whose final outcome is a failure after at least one retry, the last failure "
        "terminal, or whose attempts NeMo Gym's budget (NEMO_GYM_MAX_ROLLOUT_ATTEMPTS) used up, by the "
        "failure kind of the last attempt.",
        _recovered(lambda r: r.exhausted.items()),
    ),
    Family(
        "rollout_failure_stages_total", "counter", ("agent", "stage", "delivery"), "{rollout}",
        "once a failure of the agent names its stage or delivery",
        "Failed and omitted rollouts by NeMo Gym's failure stage (admission, seed, agent, verification, "
        "cleanup) and delivery (not_sent, possibly_delivered, delivered: whether the request reached the "
        "environment), either 'unknown' when not said. Every failure counts once in rollout_failed_total "
        "too; these are the ones that said where.",
        _recovered(lambda r: [((stage, delivery), count) for (stage, delivery), count in r.stages.items()]),
    ),
)  # fmt: skip
"""Every scalar family, in exposition order."""

DURATION_HISTOGRAM: Family[AccountSnapshot] = Family(
    "rollout_duration_seconds", "histogram", _AGENT, "s", "per agent that used the lifecycle API",
    "Wall time of rollouts recorded through the lifecycle API, from start to outcome.",
    _each(lambda a: None if (o := _durations(a)) is None else o.total),
)  # fmt: skip

REWARD_HISTOGRAM: Family[AccountSnapshot] = Family(
    "rollout_measured_reward", "histogram", _AGENT, "1",
    "per agent with a declared reward range (expect(reward_range=...)), once it has a measured reward",
    "Rewards of measured rollouts (unmasked, with a reward) in ten equal buckets of the agent's declared "
    "reward range, the lowest reward its own bucket: the shape a mean hides (bimodal, collapsing to one "
    "end). Masked rewards are not measurements and are left out. A range below zero, or a reward below "
    "zero under a range that is not, publishes no _sum and no _count (OpenMetrics forbids a sum that can "
    "fall); the le=+Inf bucket is the count.",
    _each(lambda a: a._measured_sum if a._reward_bounds is not None and a.measured else None),
)  # fmt: skip

ATTEMPTS_HISTOGRAM: Family[AccountSnapshot] = Family(
    "rollout_attempts", "histogram", _AGENT, "{attempt}",
    "with coverage, once a rollout identity of the agent reached its terminal outcome",
    "Attempts a rollout identity (task, rollout index) took to reach its terminal outcome: a success, a "
    "terminal failure, or the failure that used NeMo Gym's last attempt. Counted once per identity.",
    _each(lambda a: None if (o := _attempts(a)) is None else o.total),
)  # fmt: skip

RETRY_DELAY_HISTOGRAM: Family[AccountSnapshot] = Family(
    "rollout_retry_delay_seconds", "histogram", _AGENT, "s",
    "with coverage in hook mode, once a retried identity of the agent reached its terminal outcome",
    "Per retried rollout identity, the time between each failed attempt's outcome and the next attempt's "
    "start, summed: on the telemetry's clock, from the lifecycle's start times or the record calls. Not "
    "measured from NeMo Gym's files, which say nothing of when a retry started.",
    _each(lambda a: None if (o := _retry_delay(a)) is None else o.total),
)  # fmt: skip

CLEANUP_HISTOGRAM: Family[AccountSnapshot] = Family(
    "rollout_cleanup_duration_seconds", "histogram", _AGENT, "s", "once a cleanup of the agent finished",
    "Wall time of cleanups (rollout.cleanup(), telemetry.cleanup(agent)): releasing an environment session, "
    "say. Failed ones included.",
    _each(lambda a: None if (o := _cleanup_durations(a)) is None else o.total),
)  # fmt: skip

ADMISSION_HISTOGRAM: Family[AccountSnapshot] = Family(
    "rollout_admission_wait_seconds", "histogram", _AGENT, "s", "once a rollout block of the agent exited",
    "Admission wait of rollouts through the lifecycle API, observed when the block exits: from "
    "telemetry.offer(...) to entering its block (none for telemetry.rollout(...), made to be entered at "
    "once), plus the time it spent at stage admission.",
    _each(lambda a: None if (o := _admission_wait(a)) is None else o.total),
)  # fmt: skip

HISTOGRAMS: tuple[Family[AccountSnapshot], ...] = (
    DURATION_HISTOGRAM,
    REWARD_HISTOGRAM,
    ATTEMPTS_HISTOGRAM,
    RETRY_DELAY_HISTOGRAM,
    CLEANUP_HISTOGRAM,
    ADMISSION_HISTOGRAM,
)

ALWAYS_PRESENT: tuple[str, ...] = (*tuple(f.name for f in FAMILIES if f.appears == _ALWAYS), "rollout_reward")
"""The families a healthy run (rewards, nothing masked, failed or omitted) publishes."""


CATALOGUE: tuple[Family[Any], ...] = (
    *FAMILIES,
    *HISTOGRAMS,
    *COVERAGE_FAMILIES,
    *GROUP_FAMILIES,
    *SPAN_FAMILIES,
    *RUNTIME_FAMILIES,
    *PROCESS_FAMILIES,
)
"""Every family any collector of this package publishes, and those of prometheus_client's process, platform
and garbage-collector collectors that it registers (``PROCESS_FAMILIES``, last)."""

PUBLISHED: frozenset[str] = frozenset(
    {family.name for family in CATALOGUE}
    | {
        f"{h.name}_{suffix}"
        for h in CATALOGUE
        if h.type == "histogram"
        for suffix in ("bucket", "sum", "count")
    }
)
"""Every series name a collector of this package publishes, a histogram's series included."""


def published(name: str) -> str:
    """``name``, checked to be a series this package publishes (``PUBLISHED``).

    What reads an exposition (``top``, the dashboard's queries) names series through this, so a renamed
    family fails where it is named instead of reading nothing.

    Raises:
        ValueError: no collector of this package publishes that name.
    """
    if name not in PUBLISHED:
        msg = f"{name} is not in the catalogue (rollout_telemetry._views.series.CATALOGUE)"
        raise ValueError(msg)
    return name


def _cumulative(bounds: Iterable[str], counts: Iterable[int]) -> list[tuple[str, float]]:
    running = 0
    buckets: list[tuple[str, float]] = []
    for bound, count in zip(bounds, counts, strict=True):
        running += count
        buckets.append((bound, running))
    return buckets


def reward_buckets(agent: AgentSnapshot) -> list[tuple[str, float]]:
    """Cumulative ``(le, count)`` pairs of an agent's measured-reward histogram, ``+Inf`` last."""
    bounds = agent._reward_bounds or ()
    return _cumulative((*(repr(bound) for bound in bounds), "+Inf"), agent._reward_buckets)


def monotonic_sum(bounds: Sequence[float] | None, total: float, below_zero: float = 0.0) -> float | None:
    """The ``_sum`` of a histogram with these bucket bounds: ``None`` (not published) when one is below zero,
    or when values below zero were observed (``below_zero``: their sum's magnitude; a reward under its
    declared range, say).

    OpenMetrics 1.0 forbids a sum beside negative buckets, and a negative sum: a sum of values below zero can
    fall, and ``rate()`` reads a fall as a counter reset; a strict parser (prometheus_client's) then rejects
    the whole scrape. Such a histogram has no ``_count`` either, as prometheus_client writes it: the count is
    its ``le="+Inf"`` bucket.
    """
    return None if (bounds and min(bounds) < 0) or below_zero else total


@dataclass(frozen=True, slots=True)
class Histogram:
    """A histogram of the account: its family, and per agent its cumulative buckets, sum and count."""

    family: Family[AccountSnapshot]
    has: Callable[[AgentSnapshot], bool]
    """Whether the agent has this histogram."""
    buckets: Callable[[AgentSnapshot], list[tuple[str, float]]]
    total: Callable[[AgentSnapshot], float | None]
    """The sum of the observed values (the ``_sum`` series); ``None`` where it is not published
    (``monotonic_sum``)."""
    count: Callable[[AgentSnapshot], float]
    exemplars: Callable[[AgentSnapshot], Mapping[int, tuple[str, str, float]]] = lambda _: {}
    """(trace id, span id, value) of the latest observation with a span, by bucket index."""


def _observed(
    family: Family[AccountSnapshot],
    value: Callable[[AgentSnapshot], Observed | None],
    exemplars: Callable[[AgentSnapshot], Mapping[int, tuple[str, str, float]]] = lambda _: {},
) -> Histogram:
    """The view of a histogram the account keeps as ``Observed`` (``None``: the agent has none)."""

    def buckets(agent: AgentSnapshot) -> list[tuple[str, float]]:
        observed = value(agent)
        assert observed is not None  # has() said so
        return _cumulative((*(str(bound) for bound in observed.bounds), "+Inf"), observed.buckets)

    return Histogram(
        family,
        lambda a: value(a) is not None,
        buckets,
        lambda a: 0.0 if (o := value(a)) is None else monotonic_sum(o.bounds, o.total),
        lambda a: 0 if (o := value(a)) is None else o.count,
        exemplars,
    )


HISTOGRAM_VIEWS: tuple[Histogram, ...] = (
    _observed(DURATION_HISTOGRAM, _durations, lambda a: a._duration_exemplars),
    Histogram(
        REWARD_HISTOGRAM,
        lambda a: a._reward_bounds is not None and a.measured > 0,
        reward_buckets,
        lambda a: monotonic_sum(a._reward_bounds, a._measured_sum, a._measured_negative),
        lambda a: a.measured,
    ),
    _observed(ATTEMPTS_HISTOGRAM, _attempts),
    _observed(RETRY_DELAY_HISTOGRAM, _retry_delay),
    _observed(CLEANUP_HISTOGRAM, _cleanup_durations),
    _observed(ADMISSION_HISTOGRAM, _admission_wait),
)
"""Every histogram of the account, as the exporters format them (``HISTOGRAMS``, in that order)."""
