"""Stages, stall detection, the rollouts in flight and exemplars, on the injected clock."""

from __future__ import annotations

import gc
import logging
import threading
import weakref

import pytest
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics

from rollout_telemetry import RolloutTelemetry
from tests.support import FakeClock, exposition, promtool_check_metrics, traced, value


def test_a_rollout_starts_at_agent_and_moves_through_stages(telemetry: RolloutTelemetry) -> None:
    """rollout.stage() moves the rollout's in-flight series; every stage seen stays published, at 0."""
    with telemetry.rollout("a", task_index=1, rollout_index=0) as rollout:
        assert (
            value(
                exposition(telemetry.registry), "rollout_in_flight", agent="a", stage="agent", state="active"
            )
            == 1
        )
        rollout.stage("verification")
        text = exposition(telemetry.registry)
        assert value(text, "rollout_in_flight", agent="a", stage="agent", state="active") == 0
        assert value(text, "rollout_in_flight", agent="a", stage="verification", state="active") == 1
        rollout.complete({"reward": 1.0})
    text = exposition(telemetry.registry)
    assert value(text, "rollout_in_flight", agent="a", stage="verification", state="active") == 0
    assert value(text, "rollout_oldest_in_flight_age_seconds", agent="a", stage="verification") == 0


def test_stage_names_follow_the_kind_rules(
    telemetry: RolloutTelemetry, caplog: pytest.LogCaptureFixture
) -> None:
    """Gym's stages and <server>:<stage> pass silently; another name is warned about once and kept."""
    with caplog.at_level(logging.WARNING):
        for stage in ("admission", "seed", "cleanup", "sandbox:boot", "Warm Up", "Warm Up"):
            with telemetry.rollout("a") as rollout:
                rollout.stage(stage)
                rollout.complete({"reward": 1.0})
    assert [r.getMessage() for r in caplog.records if "stage" in r.getMessage()] == [
        "unregistered stage 'Warm Up': use a registered name or namespace it as '<server>:<name>'"
    ]
    assert (
        value(exposition(telemetry.registry), "rollout_in_flight", agent="a", stage="Warm Up", state="active")
        == 0
    )


def test_a_bad_stage_is_rejected_and_the_rollout_goes_on(telemetry: RolloutTelemetry) -> None:
    """A stage that is not a string is a counted rejection; the rollout is still counted once."""
    with telemetry.rollout("a") as rollout:
        rollout.stage(7)  # type: ignore[arg-type]
        rollout.complete({"reward": 1.0})
    snap = telemetry.snapshot()
    assert snap.rejected == {"invalid_stage": 1}
    agent = snap.agent("a")
    assert agent is not None
    assert (agent.measured, agent.in_flight) == (1, 0)


def test_a_stall_is_counted_once_noted_on_the_span_and_cleared_when_it_ends(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Past stall_after: stalled now and one stall counted, one warning, one span event; then cleared."""
    telemetry, exporter = traced(clock, stall_after=10.0)
    with (
        caplog.at_level(logging.WARNING),
        telemetry.rollout("a", task_index=3, rollout_index=1, attempt=0) as rollout,
    ):
        rollout.stage("verification")
        clock.advance(10.0)
        text = exposition(telemetry.registry)
        assert value(text, "rollout_stalled", agent="a", stage="verification") == 0  # not past it yet
        clock.advance(0.5)
        for _ in range(3):  # scraped again and again: counted once
            text = exposition(telemetry.registry)
            assert value(text, "rollout_stalled", agent="a", stage="verification") == 1
            assert value(text, "rollout_stalls_total", agent="a", stage="verification") == 1
        rollout.complete({"reward": 1.0})
    text = exposition(telemetry.registry)
    assert value(text, "rollout_stalled", agent="a", stage="verification") == 0
    assert value(text, "rollout_stalls_total", agent="a", stage="verification") == 1
    warnings = [r.getMessage() for r in caplog.records if "stalled" in r.getMessage()]
    assert warnings == [
        "rollout of a (task 3, rollout 1, attempt 0) stalled: in flight for 10 s, at stage verification"
    ]
    (span,) = exporter.get_finished_spans()
    assert [event.name for event in span.events] == ["rollout.stalled"]


def _stalls(telemetry: RolloutTelemetry) -> dict[str, int]:
    """Rollouts found stalled so far, per agent, as a snapshot (which checks first) counts them."""
    return {
        agent.agent: sum(agent.lifecycle.stalls.values()) if agent.lifecycle else 0
        for agent in telemetry.snapshot().agents
    }


def test_stall_after_per_agent_and_off(clock: FakeClock) -> None:
    """A per-agent bound overrides the default; stall_after=None publishes no stall counts at all."""
    telemetry = RolloutTelemetry(clock=clock, stall_after=100.0, stall_after_by_agent={"quick": 5.0})
    with telemetry.rollout("quick"), telemetry.rollout("slow"):
        clock.advance(6.0)
        assert _stalls(telemetry) == {"quick": 1, "slow": 0}
        clock.advance(100.0)
        assert _stalls(telemetry) == {"quick": 1, "slow": 1}  # the quick one is not counted again
    off = RolloutTelemetry(clock=clock, stall_after=None)
    with off.rollout("a"):
        clock.advance(10_000.0)
        assert _stalls(off) == {"a": 0}
        assert value(exposition(off.registry), "rollout_stalled", agent="a", stage="agent") == 0


def test_the_rollouts_in_flight_oldest_first(clock: FakeClock) -> None:
    """Identity, stage, age, stalled and trace ids, oldest first, limited; never free text."""
    telemetry, _ = traced(clock, stall_after=50.0)
    contexts = []
    for i in range(1000):
        context = telemetry.rollout("a", task_index=i, rollout_index=0, attempt=0)
        context.__enter__()
        contexts.append(context)
        clock.advance(0.1)
    contexts[3].stage("cleanup")
    listing = telemetry.rollouts_in_flight(limit=5)
    assert listing["in_flight"] == 1000
    rollouts = listing["rollouts"]
    assert isinstance(rollouts, list)
    assert [r["task_index"] for r in rollouts] == [0, 1, 2, 3, 4]
    assert set(rollouts[0]) == {
        "agent", "task_index", "rollout_index", "attempt", "stage", "age_seconds", "stalled", "trace_id",
        "span_id", "state", "heartbeat_age_seconds",
    }  # fmt: skip
    assert rollouts[3]["stage"] == "cleanup"
    assert rollouts[0]["age_seconds"] == pytest.approx(100.0)
    assert rollouts[0]["stalled"] is True and rollouts[-1]["stalled"] is True  # noqa: PT018
    assert len(rollouts[0]["trace_id"]) == 32 and len(rollouts[0]["span_id"]) == 16  # noqa: PT018
    assert len(telemetry.rollouts_in_flight(limit=5000)["rollouts"]) == 1000  # type: ignore[arg-type]
    for context in reversed(contexts):  # last in, first out, as nested blocks leave: no span left current
        context.complete({"reward": 1.0})
        context.__exit__(None, None, None)
    assert telemetry.rollouts_in_flight()["rollouts"] == []


def test_exemplars_carry_the_trace_of_the_latest_failure_in_openmetrics_only(clock: FakeClock) -> None:
    """OpenMetrics shows the trace id of the latest failed and masked rollout and of duration buckets; the
    classic exposition has none. promtool (whose check reads the classic format only) accepts the classic one;
    the OpenMetrics one passes prometheus_client's strict OpenMetrics parser (and a real Prometheus, e2e)."""
    telemetry, exporter = traced(clock)
    for reason in ("first", "second"):
        with telemetry.rollout("a") as rollout:
            clock.advance(3.0)
            rollout.fail("session_lost", reason=reason)
    with telemetry.rollout("a") as rollout:
        rollout.complete({"reward": 0.0, "mask_sample": True, "failure_kind": "judge_failed"})
    last_failed, masked = exporter.get_finished_spans()[1:]
    om = openmetrics(telemetry.registry).decode()  # type: ignore[no-untyped-call]
    exemplars = {
        (sample.name, sample.labels.get("failure_kind") or sample.labels.get("le")): sample.exemplar
        for family in parse_openmetrics(om)  # type: ignore[no-untyped-call]
        for sample in family.samples
        if sample.exemplar is not None
    }
    failed = exemplars[("rollout_failed_total", "session_lost")]
    assert failed.labels["trace_id"] == format(last_failed.context.trace_id, "032x")
    assert failed.labels["span_id"] == format(last_failed.context.span_id, "016x")
    assert exemplars[("rollout_masked_total", "judge_failed")].labels["trace_id"] == format(
        masked.context.trace_id, "032x"
    )
    assert exemplars[("rollout_duration_seconds_bucket", "5.0")].value == 3.0
    classic = exposition(telemetry.registry)
    assert "trace_id" not in classic
    result = promtool_check_metrics(classic)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


class _Said(logging.Handler):
    """A log handler that keeps the records with ``words`` in them and sets ``said`` at the first."""

    def __init__(self, words: str) -> None:
        super().__init__(logging.WARNING)
        self.words = words
        self.records: list[logging.LogRecord] = []
        self.said = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.words in record.getMessage():
            self.records.append(record)
            self.said.set()


def test_the_watcher_thread_finds_a_stall_without_a_scrape(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A stalled rollout is flagged and said between scrapes, by the watcher thread (it wakes every second
    and checks the telemetry's clock); a telemetry no longer used is not kept alive by it."""
    telemetry = RolloutTelemetry(stall_after=0.25, clock=clock)
    context = telemetry.rollout("a", task_index=3, rollout_index=1)
    said = _Said("rollout of a (task 3, rollout 1, attempt None) stalled")  # not another test's telemetry
    logger = logging.getLogger("rollout_telemetry")
    logger.addHandler(said)
    try:
        with caplog.at_level(logging.WARNING, logger="rollout_telemetry"):
            context.__enter__()
            clock.advance(1.0)  # past stall_after: nothing but the watcher looks
            assert said.said.wait(timeout=10), "the watcher thread said no stall within 10 s"
    finally:
        logger.removeHandler(said)
    (record,) = said.records
    assert record.threadName == "rollout-telemetry-stalls"
    assert record.getMessage() == (
        "rollout of a (task 3, rollout 1, attempt None) stalled: in flight for 1 s, at stage agent"
    )
    # The account's own snapshot: snapshot() would check for stalls itself.
    assert telemetry._account.snapshot().agent("a").lifecycle.stalls == {"agent": 1}  # type: ignore[union-attr]
    context.complete({"reward": 1.0})
    context.__exit__(None, None, None)
    alive = weakref.ref(telemetry)
    del telemetry, context
    gc.collect()
    assert alive() is None
