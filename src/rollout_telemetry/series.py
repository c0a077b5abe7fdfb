"""The catalogue of published series, and how each is computed from an account snapshot.

Both exporters (Prometheus and OpenTelemetry) format what this module computes, so names, meanings and
the appear-only-when rules live in one place. A family with no samples is not published at all: a
healthy run publishes only the always-present set.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

from rollout_telemetry.account import DURATION_BUCKETS, AccountSnapshot, AgentSnapshot
from rollout_telemetry.outcome import Disposition

__all__ = ["ALWAYS_PRESENT", "FAMILIES", "HISTOGRAMS", "Family", "Sample", "duration_buckets"]

Sample = tuple[tuple[str, ...], float]
"""Label values (after any constant labels) and the value."""

FamilyType = Literal["counter", "gauge", "histogram"]


@dataclass(frozen=True, slots=True)
class Family:
    """One published metric family."""

    name: str
    """The Prometheus name; counters end in ``_total``."""
    type: FamilyType
    labels: tuple[str, ...]
    unit: str
    """The OpenTelemetry unit (UCUM): ``{rollout}``, ``1`` or ``s``."""
    appears: str
    """When the family has series, for the README."""
    help: str
    sample: Callable[[AccountSnapshot], Iterator[Sample]]

    @property
    def otel_name(self) -> str:
        """The OpenTelemetry instrument name: the Prometheus name without ``_total``."""
        return self.name.removesuffix("_total")


def _each(value: Callable[[AgentSnapshot], float | None]) -> Callable[[AccountSnapshot], Iterator[Sample]]:
    def sample(snap: AccountSnapshot) -> Iterator[Sample]:
        for agent in snap.agents:
            result = value(agent)
            if result is not None:
                yield (agent.agent,), result

    return sample


def _masked_only(value: Callable[[AgentSnapshot], float]) -> Callable[[AccountSnapshot], Iterator[Sample]]:
    return _each(lambda agent: value(agent) if agent.masked else None)


def _by_kind(disposition: Disposition) -> Callable[[AccountSnapshot], Iterator[Sample]]:
    def sample(snap: AccountSnapshot) -> Iterator[Sample]:
        for agent in snap.agents:
            for (disp, kind), count in agent.kinds.items():
                if disp is disposition:
                    yield (agent.agent, kind), count

    return sample


def _in_flight_age(snap: AccountSnapshot) -> Iterator[Sample]:
    for agent in snap.agents:
        if agent.lifecycle:
            start = agent.oldest_in_flight_start
            yield (agent.agent,), 0.0 if start is None else max(snap.taken_at - start, 0.0)


def _mapping(attribute: str) -> Callable[[AccountSnapshot], Iterator[Sample]]:
    def sample(snap: AccountSnapshot) -> Iterator[Sample]:
        for key, count in sorted(getattr(snap, attribute).items()):
            yield (key,), count

    return sample


_AGENT = ("agent",)
_KIND = ("agent", "failure_kind")
_ALWAYS = "always, per agent"
_TROUBLE = "once something is masked, failed or omitted for the agent"

FAMILIES: tuple[Family, ...] = (
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
        _each(lambda a: a.reward_positive),
    ),
    Family(
        "rollout_reward_negative_total", "counter", _AGENT, "1", _ALWAYS,
        "Sum of the magnitudes of the negative rewards (masked included); kept apart from the positive ones "
        "so that both are monotonic counters.",
        _each(lambda a: a.reward_negative),
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
        "Share (0-1) of completed rollouts that were masked.",
        _each(lambda a: a.masked_ratio),
    ),
    Family(
        "rollout_masked_rewarded_total", "counter", _AGENT, "{rollout}", "once something is masked",
        "Masked rollouts that carried a reward; subtract from rollout_rewarded_total for the unmasked "
        "denominator.",
        _masked_only(lambda a: a.masked_rewarded),
    ),
    Family(
        "rollout_masked_reward_positive_total", "counter", _AGENT, "1", "once something is masked",
        "Sum of the positive rewards of masked rollouts.",
        _masked_only(lambda a: a.masked_positive),
    ),
    Family(
        "rollout_masked_reward_negative_total", "counter", _AGENT, "1", "once something is masked",
        "Sum of the magnitudes of the negative rewards of masked rollouts.",
        _masked_only(lambda a: a.masked_negative),
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
        "rollout_in_flight", "gauge", _AGENT, "{rollout}", "per agent that used the lifecycle API",
        "Rollouts started through the lifecycle API and not finished yet.",
        _each(lambda a: a.in_flight if a.lifecycle else None),
    ),
    Family(
        "rollout_oldest_in_flight_age_seconds", "gauge", _AGENT, "s", "per agent that used the lifecycle API",
        "Age of the oldest rollout still in flight; 0 when none is. An age that keeps growing is a stalled "
        "rollout.",
        _in_flight_age,
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
)  # fmt: skip
"""Every scalar family, in exposition order."""

DURATION_HISTOGRAM = Family(
    "rollout_duration_seconds", "histogram", _AGENT, "s", "per agent that used the lifecycle API",
    "Wall time of rollouts recorded through the lifecycle API, from start to outcome.",
    _each(lambda a: a.duration_sum if a.lifecycle else None),
)  # fmt: skip

HISTOGRAMS: tuple[Family, ...] = (DURATION_HISTOGRAM,)

ALWAYS_PRESENT: tuple[str, ...] = (*tuple(f.name for f in FAMILIES if f.appears == _ALWAYS), "rollout_reward")
"""The families a healthy run (rewards, nothing masked, failed or omitted) publishes."""

BUCKET_BOUNDS: tuple[str, ...] = (*tuple(str(bound) for bound in DURATION_BUCKETS), "+Inf")


def duration_buckets(agent: AgentSnapshot) -> list[tuple[str, float]]:
    """Cumulative ``(le, count)`` pairs of an agent's duration histogram, ``+Inf`` last."""
    running = 0
    buckets: list[tuple[str, float]] = []
    for bound, count in zip(BUCKET_BOUNDS, agent.duration_buckets, strict=True):
        running += count
        buckets.append((bound, running))
    return buckets
