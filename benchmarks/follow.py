"""Reading a finished run: the follower's reader against a plain ``json.loads`` per line, same file, one run.

Generates a rollout file in NeMo Gym's shape (default 100,000 rows of about 20 KB, mostly the large
``response`` and ``responses_create_params`` fields), then times reading it completely into the account
and coverage (``RunFollower.poll``) and a baseline that reads the lines and ``json.loads`` each one. Prints
rows/s and MB/s of both and the ratio (goal: the reader at least 2x the baseline).

    .venv/bin/python benchmarks/follow.py [--rows 100000] [--row-kb 20]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from rollout_telemetry import RolloutTelemetry
from rollout_telemetry.follow import RunFiles, RunFollower


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
        "response": {"output": [{"type": "message", "content": [{"type": "output_text", "text": filler}]}]},
    }
    with path.open("w") as out:
        for i in range(rows):
            template["reward"] = (i % 11) / 10 - 0.5
            template["mask_sample"] = i % 13 == 0
            template["_ng_task_index"] = i // 8
            template["_ng_rollout_index"] = i % 8
            template["_ng_environment_server"] = ("math_agent", "code_agent", "browser_agent")[i % 3]
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
    follower = RunFollower(telemetry, RunFiles(path))
    follower.poll()
    return sum(a.completed for a in telemetry.snapshot().agents)


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
    print(f"{args.rows:,} rows, {size / 2**20:,.0f} MiB ({size / args.rows / 1024:.1f} KiB per row)")
    best = {name: min(ts) for name, ts in times.items()}
    for name, seconds in best.items():
        print(f"{name:<22} {args.rows / seconds:>10,.0f} rows/s {size / 2**20 / seconds:>8,.0f} MiB/s")
    ratio = best["json.loads per line"] / best["follower reader"]
    print(f"\nreader / baseline throughput: {ratio:.2f}x (goal >= 2)")


if __name__ == "__main__":
    main()
