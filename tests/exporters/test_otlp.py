"""OTLP/HTTP export of spans and metrics to a real receiver on 127.0.0.1."""

from __future__ import annotations

import queue
import re
import threading

import pytest

from rollout_telemetry import RolloutTelemetry
from rollout_telemetry._cli.main import main
from rollout_telemetry.exporters.otel import otlp_providers
from tests.otlp_receiver import OTLPReceiver, ReceivedSpan
from tests.support import free_port

STATUS_ERROR = 2
SUMMARY = re.compile(
    r"^(?P<agent>\S+)\s+completed=(?P<completed>\d+) .* failed=(?P<failed>\d+) "
    r"omitted=(?P<omitted>\d+) in_flight=(?P<in_flight>\d+)$"
)


def test_spans_and_metrics_reach_a_real_receiver() -> None:
    """Measured, masked and failed rollouts arrive as decoded spans and metric points."""
    with OTLPReceiver() as receiver:
        otlp = otlp_providers(receiver.endpoint, export_interval_millis=60_000)
        telemetry = RolloutTelemetry(
            run="otlp-test", tracer_provider=otlp.tracer_provider, meter_provider=otlp.meter_provider
        )
        with telemetry.rollout("math", task_index=1, rollout_index=0) as rollout:
            rollout.complete({"reward": 1.0})
        with telemetry.rollout("math", task_index=2, rollout_index=0) as rollout:
            rollout.complete({"reward": 0.0, "mask_sample": True, "failure_kind": "judge_failed"})
        with telemetry.rollout("browser", task_index=3, rollout_index=0) as rollout:
            rollout.fail("session_lost", reason="reset timed out after 30s")
        otlp.shutdown()  # flushes the batched spans and exports the metrics once more

        spans = {
            attrs["rollout.task_index"]: (name, attrs, code, msg)
            for name, attrs, code, msg in receiver.spans()
        }
        assert set(spans) == {1, 2, 3}
        stats = otlp.span_stats  # what was counted is what the receiver got, nothing left over
        assert len(receiver.spans()) == 3  # each span once
        assert (stats.exported, stats.failed, stats.dropped) == (3, 0, 0)
        assert spans[1][1]["rollout.disposition"] == "measured"
        assert spans[1][1]["rollout.reward"] == 1.0
        assert spans[2][1]["rollout.mask_sample"] is True
        assert spans[2][1]["rollout.failure_kind"] == "judge_failed"
        name, attrs, code, message = spans[3]
        assert name == "invoke_agent browser"
        assert attrs["error.type"] == "session_lost"
        assert attrs["gen_ai.agent.name"] == "browser"
        assert code == STATUS_ERROR
        assert message == "reset timed out after 30s"

        latest = receiver.latest()
        math = (("agent", "math"), ("run", "otlp-test"))
        assert latest[("rollout_completed", math)] == 2
        assert latest[("rollout_masked_ratio", math)] == 0.5
        assert latest[("rollout_reward", math)] == 0.5
        assert (
            latest[
                (
                    "rollout_masked",
                    (("agent", "math"), ("failure_kind", "judge_failed"), ("run", "otlp-test")),
                )
            ]
            == 1
        )
        failed = (
            "rollout_failed",
            (("agent", "browser"), ("failure_kind", "session_lost"), ("run", "otlp-test")),
        )
        assert latest[failed] == 1
        assert ("rollout_failed", math) not in latest


def test_demo_sends_spans_and_metrics(capsys: pytest.CaptureFixture[str]) -> None:
    """``demo --otlp-endpoint`` exports the simulated run's spans and metrics."""
    with OTLPReceiver() as receiver:
        # No stalled rollout: one would hold the end for stall_after + 2 s.
        code = main(
            ["demo", "--port", "0", "--duration", "1", "--rate", "100", "--seed", "1", "--failed", "0.3",
             "--max-rollout-seconds", "0.05", "--summary-interval", "10", "--stalled", "0",
             "--otlp-endpoint", receiver.endpoint]
        )  # fmt: skip
        assert code == 0  # a demo that hung past its --duration fails on the test's timeout
        final: dict[str, dict[str, int]] = {}  # the demo's own final summary line of each agent
        for line in capsys.readouterr().out.splitlines():
            if match := SUMMARY.match(line):
                final[match["agent"]] = {k: int(v) for k, v in match.groupdict().items() if k != "agent"}
        assert final
        assert all(counts["in_flight"] == 0 for counts in final.values())
        spans = receiver.spans()
        assert len(spans) >= 50
        # Every rollout the demo finished reached the receiver as one span, and only those.
        assert len(spans) == sum(c["completed"] + c["failed"] + c["omitted"] for c in final.values())
        failed = [attrs for _, attrs, _, _ in spans if attrs.get("rollout.disposition") == "failed"]
        assert len(failed) == sum(c["failed"] for c in final.values()) > 0
        names = {name for name, _, _ in receiver.points()}
        assert {"rollout_completed", "rollout_failed", "rollout_in_flight"} <= names


def _rollouts(telemetry: RolloutTelemetry, indices: range) -> None:
    for i in indices:
        with telemetry.rollout("math", task_index=i, rollout_index=0) as rollout:
            rollout.complete({"reward": 1.0})


def test_span_stats_count_the_spans_the_receiver_got() -> None:
    """Every span the receiver decoded is counted as exported, and nothing as failed or dropped."""
    with OTLPReceiver() as receiver:
        otlp = otlp_providers(receiver.endpoint, export_interval_millis=60_000)
        telemetry = RolloutTelemetry(tracer_provider=otlp.tracer_provider)
        _rollouts(telemetry, range(40))
        otlp.shutdown()
        received = {attrs["rollout.task_index"] for _, attrs, _, _ in receiver.spans()}
        assert received == set(range(40))
        assert otlp.span_stats.counts() == {"exported": 40, "failed": 0, "dropped": 0}


def test_span_stats_count_failures_when_the_endpoint_is_down() -> None:
    """Nobody listening: each span, sent in a batch that could not be delivered, is counted as failed."""
    otlp = otlp_providers(f"http://127.0.0.1:{free_port()}", timeout_seconds=1, max_queue_size=256)
    telemetry = RolloutTelemetry(tracer_provider=otlp.tracer_provider)
    _rollouts(telemetry, range(30))  # fewer than the queue holds: none is dropped
    otlp.shutdown()
    assert otlp.span_stats.counts() == {"exported": 0, "failed": 30, "dropped": 0}


class _HeldAnswer(threading.Event):
    """An ``OTLPReceiver.answer`` not set (the receiver holds every trace request, as after ``hold()``) that
    says on ``arrived`` each time a request starts waiting for it."""

    def __init__(self) -> None:
        super().__init__()
        self.arrived: queue.Queue[None] = queue.Queue()

    def wait(self, timeout: float | None = None) -> bool:
        self.arrived.put(None)
        return super().wait(timeout)

    def wait_arrived(self, timeout: float) -> bool:
        """Whether a request started waiting within ``timeout`` seconds."""
        try:
            self.arrived.get(timeout=timeout)
        except queue.Empty:
            return False
        return True


def test_span_stats_count_drops_when_the_queue_is_full() -> None:
    """A queue of 8 behind an export the endpoint has not answered: 8 more spans wait, the next 5 are
    dropped and counted; the 16 that waited are exported once the endpoint answers."""
    with OTLPReceiver() as receiver:
        receiver.answer = held = _HeldAnswer()
        otlp = otlp_providers(receiver.endpoint, timeout_seconds=30, max_queue_size=8)
        telemetry = RolloutTelemetry(tracer_provider=otlp.tracer_provider)
        _rollouts(telemetry, range(8))  # a full batch: the processor sends it at once
        # The first batch sent: out of the queue, its export unanswered.
        assert held.wait_arrived(timeout=30), "the first batch was not sent"
        assert receiver.trace_requests == 1
        _rollouts(telemetry, range(8, 21))  # 8 fill the queue again, 5 find it full
        assert otlp.span_stats.dropped == 5
        receiver.answer.set()
        otlp.shutdown()
        assert len(receiver.spans()) == 16
        assert otlp.span_stats.counts() == {"exported": 16, "failed": 0, "dropped": 5}


def test_span_stats_count_spans_ended_after_shutdown_as_dropped() -> None:
    """Rollouts recorded after ``shutdown()`` still count; their spans are never sent and count as dropped."""
    with OTLPReceiver() as receiver:
        otlp = otlp_providers(receiver.endpoint, export_interval_millis=60_000)
        telemetry = RolloutTelemetry(tracer_provider=otlp.tracer_provider)
        _rollouts(telemetry, range(1))
        otlp.shutdown()
        _rollouts(telemetry, range(1, 4))
        assert len(receiver.spans()) == 1
        assert otlp.span_stats.counts() == {"exported": 1, "failed": 0, "dropped": 3}
        agent = telemetry.snapshot().agent("math")
        assert agent is not None
        assert agent.measured == 4


def _evaluations_over_otlp(
    monkeypatch: pytest.MonkeyPatch, *, opt_in: bool, **options: object
) -> tuple[OTLPReceiver, list[ReceivedSpan]]:
    """A measured, a masked and a failed rollout (its reason free text) through a real OTLP receiver, with
    or without the GenAI opt-in: what the receiver decoded."""
    if opt_in:
        monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    else:
        monkeypatch.delenv("OTEL_SEMCONV_STABILITY_OPT_IN", raising=False)
    with OTLPReceiver() as receiver:
        otlp = otlp_providers(receiver.endpoint, export_interval_millis=60_000)
        telemetry = RolloutTelemetry(
            runtime_metrics=False,
            tracer_provider=otlp.tracer_provider,
            logger_provider=otlp.logger_provider,
            **options,  # type: ignore[arg-type]
        )
        with telemetry.rollout("math", task_index=1, rollout_index=0) as rollout:
            rollout.complete({"reward": 0.75})
        with telemetry.rollout("math", task_index=2, rollout_index=0) as rollout:
            rollout.complete({"reward": 0.0, "mask_sample": True, "failure_kind": "judge_failed"})
        with telemetry.rollout("browser", task_index=3, rollout_index=0) as rollout:
            rollout.fail("session_lost", reason="reset of sandbox sb-7 timed out after 30s")
        assert otlp.shutdown(timeout=10)
        return receiver, receiver.received()


def test_the_evaluation_result_is_a_log_record_in_its_spans_context(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the opt-in, each rollout's outcome reaches the receiver as a ``gen_ai.evaluation.result`` log
    record (OTLP logs): the score and label of its outcome, ``error.type`` unless measured, the trace and span
    ids of its rollout's span, the conventions' schema URL; no body, no free text (no redact hook), and no
    evaluation event on the spans any more."""
    receiver, spans = _evaluations_over_otlp(monkeypatch, opt_in=True)
    records = receiver.log_records()
    assert [record.event_name for record in records] == ["gen_ai.evaluation.result"] * 3
    by_task = {span.attributes["rollout.task_index"]: span for span in spans}
    expected = {
        1: {"gen_ai.evaluation.name": "reward", "gen_ai.evaluation.score.label": "measured",
            "gen_ai.evaluation.score.value": 0.75},
        2: {"gen_ai.evaluation.name": "reward", "gen_ai.evaluation.score.label": "masked",
            "gen_ai.evaluation.score.value": 0.0, "error.type": "judge_failed"},
        3: {"gen_ai.evaluation.name": "reward", "gen_ai.evaluation.score.label": "failed",
            "error.type": "session_lost"},
    }  # fmt: skip
    for record in records:
        (task,) = [t for t, span in by_task.items() if span.span_id == record.span_id]
        span = by_task[task]
        assert record.trace_id == span.trace_id
        assert record.attributes == expected[task]
        assert record.body is None
        assert record.schema_url.endswith("1.41.0")
        assert span.start_ns <= record.time_ns <= span.end_ns + 10**9
        assert all(name != "gen_ai.evaluation.result" for name, _ in span.events)
    assert not any("sb-7" in str(value) for record in records for value in record.attributes.values())


def test_the_evaluation_result_as_a_span_event_and_without_the_opt_in(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``evaluation_event="span"``: the result is a span event, as backends that read span events only need,
    and no log record is sent; without the opt-in there is neither (the v1.36.0 conventions have none)."""
    receiver, spans = _evaluations_over_otlp(monkeypatch, opt_in=True, evaluation_event="span")
    assert receiver.log_records() == []
    for span in spans:
        (evaluation,) = [attrs for name, attrs in span.events if name == "gen_ai.evaluation.result"]
        assert evaluation["gen_ai.evaluation.name"] == "reward"
    receiver, spans = _evaluations_over_otlp(monkeypatch, opt_in=False)
    assert receiver.log_records() == []
    assert not any(name == "gen_ai.evaluation.result" for span in spans for name, _ in span.events)


def test_a_redact_hook_gives_the_evaluation_record_its_explanation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Free text reaches the log record only through the user's redact hook: as the hook returned it."""
    receiver, _ = _evaluations_over_otlp(
        monkeypatch, opt_in=True, redact_reason=lambda reason: reason.replace("sb-7", "<sandbox>")
    )
    (failed,) = [
        r for r in receiver.log_records() if r.attributes["gen_ai.evaluation.score.label"] == "failed"
    ]
    assert (
        failed.attributes["gen_ai.evaluation.explanation"] == "reset of sandbox <sandbox> timed out after 30s"
    )
