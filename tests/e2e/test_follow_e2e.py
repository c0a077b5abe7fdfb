"""End to end: ``rollout-telemetry serve PATH`` as a real process while a writer appends rows."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from tests.e2e.processes import Exporter
from tests.support import promtool_check_metrics, samples, wait_until


def _row(i: int) -> dict[str, object]:
    agent = ("math_agent", "code_agent")[i % 2]
    return {
        "reward": (i % 5) / 4 - 0.5,
        "mask_sample": i % 7 == 0,
        "failure_kind": "judge_failed" if i % 7 == 0 else None,
        "_ng_task_index": i // 4,
        "_ng_rollout_index": i % 4,
        "_ng_environment_server": agent,
        "response": {"output": [{"content": "x" * 2000}]},
    }


def test_serve_follow_counts_what_a_writer_appends(tmp_path: Path) -> None:
    """Rows appended in pieces (half lines included) show up in /metrics with exact counts."""
    main = tmp_path / "rollouts.jsonl"
    failures = tmp_path / "rollouts_failures.jsonl"
    rows, failed = 300, 40
    done = threading.Event()

    def writer() -> None:
        with main.open("ab", buffering=0) as out, failures.open("ab", buffering=0) as side:
            for i in range(rows):
                line = json.dumps(_row(i)).encode() + b"\n"
                out.write(line[:100])  # a half-written line is visible for a moment
                time.sleep(0.002)  # the behaviour under test: the reader meets the half line; not a wait
                out.write(line[100:])
                if i < failed:
                    record = {
                        "_ng_failure_class": "timeout_exceeded",
                        "_ng_task_index": 1000 + i,
                        "_ng_rollout_index": 0,
                        "_ng_environment_server": "browser_agent",
                        "_ng_failure_record": {"failure": {"failure_kind": "session_lost"}},
                    }
                    side.write(json.dumps(record).encode() + b"\n")
        done.set()

    args = ["serve", str(main), "--poll-interval", "0.2", "--run", "follow-e2e"]
    with Exporter(args, tmp_path / "serve.log") as exporter:
        thread = threading.Thread(target=writer)
        thread.start()

        def counted() -> bool:
            parsed = samples(exporter.scrape())
            completed = sum(v for (n, _), v in parsed.items() if n == "rollout_completed_total")
            lost = sum(v for (n, _), v in parsed.items() if n == "rollout_failed_total")
            return completed == rows and lost == failed

        wait_until(counted, timeout=60, what="every written row in /metrics")
        thread.join()
        assert done.is_set()
        text = exporter.scrape()
        parsed = samples(text)
        masked = sum(v for (n, _), v in parsed.items() if n == "rollout_masked_total")
        assert masked == sum(1 for i in range(rows) if i % 7 == 0)
        assert "rollout_telemetry_rejected_total" not in text  # no half line was ever taken for a row
        result = promtool_check_metrics(text)
        assert result.returncode == 0, result.stderr


def test_each_new_line_reaches_metrics_as_the_file_grows(tmp_path: Path) -> None:
    """With the default poll interval each line appended is counted in /metrics, one at a time, while the
    exporter follows the file (how soon, in ms against the poll interval: benchmarks/gym_lag.py)."""
    main = tmp_path / "rollouts.jsonl"
    main.write_text("")
    with Exporter(["serve", str(main)], tmp_path / "serve.log") as exporter:
        for i in range(3):
            with main.open("a") as out:
                out.write(json.dumps(_row(i)) + "\n")

            def seen(count: int = i + 1) -> bool:
                parsed = samples(exporter.scrape())
                return sum(v for (n, _), v in parsed.items() if n == "rollout_completed_total") == count

            # bound: a follower that reads new lines at all does so within its poll interval (0.5 s); one
            # that does not never counts the line.
            wait_until(seen, timeout=30, what="the new line")
