"""Following a run at any size: read speed against ``json.loads``, ``report``'s memory, and scrape cost.

1. Generates a rollout file in NeMo Gym's shape (default 100,000 rows of about 20 KB, mostly the large
   ``response`` and ``responses_create_params`` fields: about 2 GB; every response carries ``usage`` and
   one in 17 is truncated, so the reader parses what it counts and skips the ``output``), then times
   reading it completely into the account and coverage (``RunFollower.read_all``, as ``report`` does)
   against a baseline that reads the lines and ``json.loads`` each one. Goal: the reader at least 2x the
   baseline.
2. Runs ``rollout-telemetry report`` on that file as a process and prints its peak resident memory (the
   file is read a fixed-size chunk at a time). Goal: under 256 MB at any file size.
3. Times one scrape of a follower's ``/metrics`` (the account and the coverage account) with 10 thousand,
   100 thousand and 1 million rollouts recorded. Goal: the same cost at every size (the coverage counts
   are kept current as rows arrive; a scrape reads per-agent totals only).

    .venv/bin/python benchmarks/follow.py [--rows 100000] [--row-kb 20]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from prometheus_client import generate_latest

from rollout_telemetry import RolloutTelemetry
from rollout_telemetry._sources.follow import RunFiles

AGENTS = ("math_agent", "code_agent", "browser_agent")


def generate(path: Path, rows: int, row_kb: int) -> int:
    """Write ``rows`` rows of about ``row_kb`` KB; return the file size in bytes."""
    filler = "The model reasons step by step about the task. " * (row_kb * 1024 // 60)
    template = {
        "reward": 0.0,
        "mask_sample": False,
        "_ng_task_index": 0,
        "_ng_rollout_index": 0,
        "_ng_environment_server": "math_agent",
        "responses_create_params": {"input": [{"role": "user", "content": filler[: len(filler) // 4]}]},
        "response": {
            "id": "resp_0",
            "output": [{"type": "message", "content": [{"type": "output_text", "text": filler}]}],
            "status": "completed",
            "incomplete_details": None,
            "usage": {
                "input_tokens": 1200,
                "input_tokens_details": {"cached_tokens": 300},
                "output_tokens": 900,
                "output_tokens_details": {"reasoning_tokens": 400},
                "total_tokens": 2100,
            },
        },
    }
    truncated = {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}
    complete = {"status": "completed", "incomplete_details": None}
    with path.open("w") as out:
        for i in range(rows):
            template["reward"] = (i % 11) / 10 - 0.5
            template["mask_sample"] = i % 13 == 0
            template["_ng_task_index"] = i // 8
            template["_ng_rollout_index"] = i % 8
            template["_ng_environment_server"] = ("math_agent", "code_agent", "browser_agent")[i % 3]
            template["response"].update(truncated if i % 17 == 0 else complete)  # type: ignore[attr-defined]
            out.write(json.dumps(template) + "\n")
    return path.stat().st_size


def baseline(path: Path) -> int:
    """Read every line and parse it whole with json.loads."""
    count = 0
    with path.open("rb") as handle:
        for line in handle:
            json.loads(line)
            count += 1
    return count


def reader(path: Path) -> int:
    """Read the file with the follower into a fresh account and coverage."""
    telemetry = RolloutTelemetry()
    follower = telemetry._run_follower(RunFiles(path))
    follower.read_all()  # what report does
    return sum(a.completed for a in telemetry.snapshot().agents)


def report_peak_rss(path: Path) -> int:
    """Run ``rollout-telemetry report`` on ``path`` as a process; return its peak resident memory in bytes."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    subprocess.run(
        [sys.executable, "-m", "rollout_telemetry", "report", str(path), "--format", "json"],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    assert after >= before, "an earlier child used more memory: the figure would be that child's"
    return after * 1024  # kilobytes on Linux


def scrape_seconds(rollouts: int) -> float:
    """The time of one /metrics render of a follower that has recorded ``rollouts`` rollouts (best of 5)."""
    telemetry = RolloutTelemetry()
    telemetry.expect(max_attempts=3)  # as a follower does: every outcome weighed in the coverage account
    for i in range(rollouts):
        telemetry.record(AGENTS[i % 3], {"reward": 0.5}, task_index=i // 8, rollout_index=i % 8, attempt=0)
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        generate_latest(telemetry.registry)
        best = min(best, time.perf_counter() - started)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--row-kb", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "rollouts.jsonl"
        size = generate(path, args.rows, args.row_kb)
        baseline(path)  # warm the page cache for both
        times: dict[str, list[float]] = {"json.loads per line": [], "follower reader": []}
        for _ in range(args.rounds):
            for name, read in (("json.loads per line", baseline), ("follower reader", reader)):
                started = time.perf_counter()
                assert read(path) == args.rows
                times[name].append(time.perf_counter() - started)
        peak = report_peak_rss(path)
    print(f"{args.rows:,} rows, {size / 2**20:,.0f} MiB ({size / args.rows / 1024:.1f} KiB per row)")
    best = {name: min(ts) for name, ts in times.items()}
    for name, seconds in best.items():
        print(f"{name:<22} {args.rows / seconds:>10,.0f} rows/s {size / 2**20 / seconds:>8,.0f} MiB/s")
    ratio = best["json.loads per line"] / best["follower reader"]
    print(f"reader / baseline throughput: {ratio:.2f}x (goal >= 2)")
    print(f"report on the {size / 2**30:.1f} GiB file: peak RSS {peak / 2**20:.0f} MiB (goal < 256 MiB)")
    scrapes = {n: scrape_seconds(n) for n in (10_000, 100_000, 1_000_000)}
    for n, seconds in scrapes.items():
        print(f"one scrape of a follower with {n:>9,} rollouts: {seconds * 1e3:6.2f} ms")
    print(f"scrape at 1M / scrape at 10k: {scrapes[1_000_000] / scrapes[10_000]:.2f}x (goal: about 1x)")


if __name__ == "__main__":
    main()
