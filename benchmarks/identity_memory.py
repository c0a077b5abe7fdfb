"""What a run's rollout identities cost in memory: a million of them, followed from NeMo Gym-shaped files.

Writes a run's files (materialized inputs, then one main-output row per identity; one rollout per task, then
16 per task), reads them with ``RunFollower.read_all`` (as ``report`` does) and prints the memory the
coverage account, the groups and the follower hold afterwards, per identity and for the million (tracemalloc:
Python's own allocations, so the figure does not depend on the allocator or on what else the process did).
Goal: a million terminal identities (expected, then written) add at most 100 MB.

    .venv/bin/python benchmarks/identity_memory.py [--identities 1000000]
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import time
import tracemalloc
from pathlib import Path

from rollout_telemetry import RolloutTelemetry
from rollout_telemetry._sources.follow import RunFiles

GOAL = 100 * 2**20
AGENT = '{"name": "agent"}'


def write_run(folder: Path, identities: int, per_task: int) -> Path:
    """The run's inputs and outputs, one agent, rewards alternating so the groups are classified."""
    main = folder / f"run-{per_task}.jsonl"
    inputs = folder / f"run-{per_task}_materialized_inputs.jsonl"
    with inputs.open("w") as expected, main.open("w") as written:
        for i in range(identities):
            task, rollout = divmod(i, per_task)
            identity = f'"_ng_task_index": {task}, "_ng_rollout_index": {rollout}, "agent_ref": {AGENT}'
            expected.write(f'{{"responses_create_params": {{"input": []}}, {identity}}}\n')
            written.write(f'{{"reward": {i % 2}.0, "mask_sample": false, {identity}}}\n')
    return main


def measure(main: Path, identities: int) -> tuple[float, float]:
    """(bytes held per identity after reading, seconds to read)."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    start = time.perf_counter()
    telemetry = RolloutTelemetry()
    follower = telemetry._run_follower(RunFiles.from_main(main))
    follower.read_all()
    follower.finish()
    seconds = time.perf_counter() - start
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    coverage = follower.coverage.snapshot().agent("agent")
    assert coverage is not None
    assert coverage.seen == identities
    assert coverage.unknown == 0
    return held / identities, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--identities", type=int, default=1_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        for per_task in (1, 16):
            main_file = write_run(Path(folder), args.identities, per_task)
            per_identity, seconds = measure(main_file, args.identities)
            total = per_identity * args.identities
            print(
                f"{args.identities:,} identities, {per_task} per task: {per_identity:.0f} B each, "
                f"{total / 2**20:.0f} MiB in all ({total / GOAL:.2f}x the 100 MiB goal); "
                f"read in {seconds:.1f} s ({2 * args.identities / seconds:,.0f} rows/s, tracemalloc on)"
            )
            main_file.unlink()


if __name__ == "__main__":
    main()
