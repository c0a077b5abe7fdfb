"""End to end: ``serve PATH --otlp-endpoint`` as a real process sends one span per row it reads, and the
metrics, to a real OTLP/HTTP receiver on 127.0.0.1."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.e2e.processes import Exporter
from tests.otlp_receiver import OTLPReceiver
from tests.support import samples, wait_until


def test_serve_follow_sends_a_span_per_row_it_reads(tmp_path: Path) -> None:
    """Rows present at the start and rows appended later each reach the receiver as one ``invoke_agent``
    span with the row's outcome, timed by the row's ``ng_perf`` where it has one; SIGTERM flushes the rest."""
    main = tmp_path / "rollouts.jsonl"
    failures = tmp_path / "rollouts_failures.jsonl"

    def row(i: int) -> dict[str, object]:
        return {
            "reward": i / 10,
            "_ng_task_index": i,
            "_ng_rollout_index": 0,
            "agent_ref": {"name": "weather"},
            "ng_perf": {"total_latency_ms": 250 * (i + 1)},
        }

    main.write_text("".join(json.dumps(row(i)) + "\n" for i in range(5)))
    with OTLPReceiver() as receiver:
        args = [
            "serve",
            str(main),
            "--poll-interval",
            "0.1",
            "--otlp-endpoint",
            receiver.endpoint,
        ]
        exporter = Exporter(args, tmp_path / "serve.log")
        with exporter:
            with main.open("a") as out:
                for i in range(5, 8):
                    out.write(json.dumps(row(i)) + "\n")
            failure = {
                "_ng_failure_class": "agent_run_error",
                "_ng_failure_message": "500 from /run",
                "_ng_task_index": 100,
                "_ng_rollout_index": 0,
                "agent_ref": {"name": "weather"},
            }
            failures.write_text(json.dumps(failure) + "\n")

            def counted() -> bool:
                parsed = samples(exporter.scrape())
                return sum(v for (n, _), v in parsed.items() if n == "rollout_completed_total") == 8

            wait_until(counted, timeout=30, what="every row in /metrics")
            wait_until(lambda: "rollout_failed_total" in exporter.scrape(), timeout=30, what="the failure")
            stopped_at = time.time_ns()
        assert exporter.process is not None
        assert exporter.process.returncode == 0, (tmp_path / "serve.log").read_text()
        spans = receiver.received()
        by_task = {span.attributes["rollout.task_index"]: span for span in spans}
        assert len(spans) == len(by_task) == 9  # one span per row, each once
        for i in range(8):
            span = by_task[i]
            assert span.name == "invoke_agent weather"
            assert span.attributes["rollout.reward"] == i / 10
            assert span.attributes["nemo.gym.rollout.id"] == f"{i}-0"
            assert span.attributes["rollout.timing"] == "ng_perf"
            assert span.end_ns - span.start_ns == 250_000_000 * (i + 1)
            # bound: an order of events (the row before the stop), no duration
            assert span.end_ns <= stopped_at
        failed = by_task[100]
        assert failed.attributes["error.type"] == "agent_run_error"
        assert failed.attributes["rollout.timing"] == "read"
        assert failed.start_ns == failed.end_ns
        assert failed.status_message == "500 from /run"
        names = {name for name, _, _ in receiver.points()}
        assert {"rollout_completed", "rollout_failed"} <= names  # the metrics went too
