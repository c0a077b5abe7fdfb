"""The Prometheus exposition: which series appear when, their values, and promtool's verdict."""

from __future__ import annotations

import gc
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rollout_telemetry import RolloutTelemetry
from rollout_telemetry._views.run_series import PROCESS_FAMILIES
from rollout_telemetry._views.series import ALWAYS_PRESENT
from tests.support import (
    FakeClock,
    exposition,
    runtime_series,
    sample_names,
    samples,
    value,
)

HEALTHY = {
    "rollout_completed_total",
    "rollout_rewarded_total",
    "rollout_reward_positive_total",
    "rollout_reward_negative_total",
    "rollout_reward",
}


def test_healthy_run_exposes_exactly_the_always_present_set(telemetry: RolloutTelemetry) -> None:
    """Nothing masked, failed or omitted: no failure series at all."""
    telemetry.record("math", {"reward": 1.0})
    telemetry.record("code", {"reward": 0.0})
    assert sample_names(exposition(telemetry.registry)) - runtime_series() == HEALTHY
    assert set(ALWAYS_PRESENT) == HEALTHY


def test_troubled_run_adds_exactly_the_failure_series(telemetry: RolloutTelemetry) -> None:
    """One masked, one failed and one omitted rollout add their counters, ratio and unmasked mean."""
    telemetry.record("math", {"reward": 1.0})
    telemetry.record("math", {"reward": 0.0, "mask_sample": True, "failure_kind": "judge_failed"})
    telemetry.record_failure("math", "session_lost", reason="reset timed out after 30s")
    telemetry.record_omission("math", "cancelled")
    assert sample_names(exposition(telemetry.registry)) - runtime_series() == HEALTHY | {
        "rollout_masked_total",
        "rollout_failed_total",
        "rollout_omitted_total",
        "rollout_reward_unmasked",
        "rollout_masked_ratio",
        "rollout_masked_rewarded_total",
        "rollout_masked_reward_positive_total",
        "rollout_masked_reward_negative_total",
    }


def test_values_match_the_account(telemetry: RolloutTelemetry) -> None:
    """After a known sequence the parsed exposition equals what the account says."""
    sequence = [
        ("math", {"reward": 1.0}),
        ("math", {"reward": -0.5}),
        ("math", {"reward": 0.25, "mask_sample": True, "failure_kind": "judge_failed"}),
        ("math", {"reward": -1.0, "mask_sample": True, "failure_kind": "judge_unparseable"}),
        ("math", {"reward": None, "failure_kind": "verifier_error"}),
        ("code", {"reward": 0.5}),
    ]
    for agent, response in sequence:
        telemetry.record(agent, response)
    telemetry.record_failure("code", "session_lost")
    telemetry.record_failure("code", "session_lost")
    telemetry.record_failure("code")
    telemetry.record_omission("code", "cancelled")
    text = exposition(telemetry.registry)
    math_agent = telemetry.snapshot().agent("math")
    assert math_agent is not None
    assert value(text, "rollout_completed_total", agent="math") == math_agent.completed == 5
    assert value(text, "rollout_rewarded_total", agent="math") == math_agent.rewarded == 4
    assert value(text, "rollout_reward_positive_total", agent="math") == 1.25
    assert value(text, "rollout_reward_negative_total", agent="math") == 1.5
    assert value(text, "rollout_reward", agent="math") == pytest.approx((1.0 - 0.5 + 0.25 - 1.0) / 4)
    assert value(text, "rollout_reward_unmasked", agent="math") == pytest.approx(0.25)
    # NeMo Gym's masked_pct: 2 masked / (2 masked + 2 unmasked with a reward); unscored is in neither
    assert value(text, "rollout_masked_ratio", agent="math") == pytest.approx(2 / 4)
    assert value(text, "rollout_masked_total", agent="math", failure_kind="judge_failed") == 1
    assert value(text, "rollout_masked_total", agent="math", failure_kind="judge_unparseable") == 1
    assert value(text, "rollout_unscored_total", agent="math", failure_kind="verifier_error") == 1
    assert value(text, "rollout_masked_rewarded_total", agent="math") == 2
    assert value(text, "rollout_masked_reward_positive_total", agent="math") == 0.25
    assert value(text, "rollout_masked_reward_negative_total", agent="math") == 1.0
    assert value(text, "rollout_failed_total", agent="code", failure_kind="session_lost") == 2
    assert value(text, "rollout_failed_total", agent="code", failure_kind="unspecified") == 1
    assert value(text, "rollout_omitted_total", agent="code", failure_kind="cancelled") == 1
    assert value(text, "rollout_completed_total", agent="code") == 1


def test_every_series_carries_the_constant_labels(clock: FakeClock) -> None:
    """``run`` and other constant labels are on every series of this package (prometheus_client's process
    collectors take none)."""
    telemetry = RolloutTelemetry(run="grpo-42", const_labels={"cluster": "a"}, clock=clock)
    telemetry.record("math", {"reward": 1.0, "mask_sample": True})
    telemetry.record("math", {"reward": float("nan")})
    gc.collect()
    theirs = {family.name for family in PROCESS_FAMILIES}
    for (name, labels), _value in samples(exposition(telemetry.registry)).items():
        if name in theirs:
            continue
        assert ("run", "grpo-42") in labels
        assert ("cluster", "a") in labels


def test_agent_with_only_failures_has_a_zero_completed_series(telemetry: RolloutTelemetry) -> None:
    """Dashboards divide by completed: it exists (as 0) for an agent that only failed."""
    telemetry.record_failure("browser", "session_lost")
    text = exposition(telemetry.registry)
    assert value(text, "rollout_completed_total", agent="browser") == 0
    assert "rollout_reward" not in sample_names(text)


def test_declared_agent_starts_at_zero(telemetry: RolloutTelemetry) -> None:
    """A declared agent publishes its always-present counters at 0 before its first rollout."""
    telemetry.expect("math")
    text = exposition(telemetry.registry)
    assert value(text, "rollout_completed_total", agent="math") == 0
    assert value(text, "rollout_reward_positive_total", agent="math") == 0


def test_collectors_describe_their_families_so_a_second_registration_fails(
    telemetry: RolloutTelemetry,
) -> None:
    """describe() names every family: registering the same kind of collector twice raises."""
    from prometheus_client import CollectorRegistry

    from rollout_telemetry._store.coverage import Coverage
    from rollout_telemetry.exporters._prometheus import (
        AccountCollector,
        CoverageCollector,
        SpanStatsCollector,
    )

    with pytest.raises(ValueError, match="Duplicated timeseries"):
        telemetry.registry.register(AccountCollector(telemetry.snapshot))
    registry = CollectorRegistry()
    registry.register(CoverageCollector(Coverage().snapshot))
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        registry.register(CoverageCollector(Coverage().snapshot))
    registry.register(SpanStatsCollector(dict))
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        registry.register(SpanStatsCollector(dict))


def test_name_filter_returns_that_family(telemetry: RolloutTelemetry) -> None:
    """/metrics?name[]=rollout_failed_total returns that family alone, as prometheus_client filters it."""
    from prometheus_client.exposition import generate_latest

    telemetry.record("math", {"reward": 1.0})
    telemetry.record_failure("math", "session_lost")
    text = generate_latest(telemetry.registry.restricted_registry(["rollout_failed_total"])).decode()
    assert sample_names(text) == {"rollout_failed_total"}
    assert value(text, "rollout_failed_total", agent="math", failure_kind="session_lost") == 1.0


def test_a_registry_formats_a_family_in_turns(clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """prometheus_client formats each family's samples as it iterates them, holding the interpreter: the
    samples are given in turns, so the interpreter is handed over within a family of 300 series (once a
    turn: at least once every 5 samples when each takes 0.3 turn), and the exposition is the same bytes."""
    from collections.abc import Iterable, Iterator

    from prometheus_client.exposition import generate_latest

    from rollout_telemetry._store.reads import TURN_SECONDS, in_turns
    from rollout_telemetry.exporters import _prometheus as prometheus

    telemetry = RolloutTelemetry(clock=clock, runtime_metrics=False)
    for agent in range(300):
        telemetry.record(f"agent-{agent}", {"reward": 1.0})
    before = generate_latest(telemetry.registry)
    ticking, handed = FakeClock(), [0]

    def tick() -> float:
        ticking.advance(0.3 * TURN_SECONDS)  # each sample's formatting takes 0.3 turn
        return ticking()

    def hand() -> None:
        handed[0] += 1

    def turns(parts: Iterable[object]) -> Iterator[object]:
        return in_turns(parts, clock=tick, hand=hand)

    monkeypatch.setattr(prometheus, "in_turns", turns)
    assert generate_latest(telemetry.registry) == before
    formatted = sum(len(family.samples) for family in telemetry.registry.collect())
    assert formatted > 4 * 300  # completed, rewarded, both reward sums, the reward gauge: 300 each
    assert handed[0] >= formatted // 5


def test_a_registry_makes_no_samples_of_a_family_without_any(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through a registry, a family with no sample in the snapshot (a healthy run's failure families) is left
    out without its samples being made for every agent to find it empty; each one published is made once."""
    from prometheus_client.exposition import generate_latest

    from rollout_telemetry.exporters import _prometheus as prometheus

    telemetry = RolloutTelemetry(clock=clock, runtime_metrics=False)
    for agent in range(30):
        telemetry.record(f"agent-{agent}", {"reward": 1.0})
    made: list[str] = []
    samples = prometheus._CatalogueCollector._samples

    def noting(self: Any, index: int, snap: Any) -> Any:
        made.append(self._empty(tuple(self._described())[index]).name)
        return samples(self, index, snap)

    monkeypatch.setattr(prometheus._CatalogueCollector, "_samples", noting)
    published = {
        family.name for family in text_string_to_metric_families(generate_latest(telemetry.registry).decode())
    }
    assert set(made) == published
    assert all(made.count(name) <= 31 for name in published)  # the account's own part and each agent's
