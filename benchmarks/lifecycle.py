"""Cost of the lifecycle API (``with telemetry.rollout(...)``) against ``record()``, no OTel SDK configured.

Times, in interleaved rounds of one run: ``record()``; the lifecycle block with no OpenTelemetry SDK
configured (the default); the same block with spans switched off (``span_mode="off"``), which isolates
what the OpenTelemetry part costs when nothing is configured; a bare block, an object with the same
shape that records nothing, which is the floor any ``with``-block API pays in CPython before it does any
work; and the bare block forwarding its outcome to ``record()``, the least a block that counts can cost
(no clock reads, no in-flight tracking, no duration histogram). Ratios are medians of per-round ratios.
Goal: the lifecycle block at most 2x ``record()``. Also prints what a ``stage()`` call adds to a block, and
what one stall check costs (every scrape and the watcher thread run one) at 100 to 10,000 rollouts in flight.

    .venv/bin/python benchmarks/lifecycle.py [--calls 100000] [--rounds 9]
"""

from __future__ import annotations

import argparse
import statistics
import timeit
from collections.abc import Callable

from rollout_telemetry import RolloutTelemetry


class BareBlock:
    """The ``with`` protocol alone: made, entered, given an outcome and left, recording nothing."""

    __slots__ = ("agent", "attempt", "outcome", "record", "rollout_index", "task_index")

    def __init__(
        self,
        agent: str,
        task_index: int | None,
        rollout_index: int | None,
        record: Callable[[str, object], None] | None = None,
    ) -> None:
        self.agent = agent
        self.task_index = task_index
        self.rollout_index = rollout_index
        self.attempt: int | None = None
        self.outcome: object = None
        self.record = record

    def __enter__(self) -> BareBlock:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None

    def complete(self, response: object) -> None:
        self.outcome = response
        if self.record is not None:
            self.record(self.agent, response)


def candidates() -> dict[str, Callable[[], None]]:
    """One rollout recorded each way."""
    telemetry = RolloutTelemetry(run="bench")
    quiet = RolloutTelemetry(run="bench", span_mode="off")
    response = {"reward": 0.5}
    record = telemetry.record

    def with_record() -> None:
        record("math_agent", response)

    def with_lifecycle() -> None:
        with telemetry.rollout("math_agent", task_index=1, rollout_index=0) as handle:
            handle.complete(response)

    def with_stage() -> None:
        with telemetry.rollout("math_agent", task_index=1, rollout_index=0) as handle:
            handle.stage("verification")
            handle.complete(response)

    def with_lifecycle_spans_off() -> None:
        with quiet.rollout("math_agent", task_index=1, rollout_index=0) as handle:
            handle.complete(response)

    def with_bare_block() -> None:
        with BareBlock("math_agent", task_index=1, rollout_index=0) as handle:
            handle.complete(response)

    def with_forwarding_block() -> None:
        with BareBlock("math_agent", task_index=1, rollout_index=0, record=record) as handle:
            handle.complete(response)

    return {
        "record()": with_record,
        "bare block (no telemetry)": with_bare_block,
        "bare block + record()": with_forwarding_block,
        "rollout() block": with_lifecycle,
        "rollout() block, spans off": with_lifecycle_spans_off,
        "rollout() block + stage()": with_stage,
    }


def stall_check_seconds(in_flight: int) -> float:
    """One stall check (what every scrape and the watcher run) with ``in_flight`` rollouts in flight."""
    telemetry = RolloutTelemetry(run="bench", stall_after=3600.0)
    blocks = [telemetry.rollout(f"agent_{i % 8}", task_index=i) for i in range(in_flight)]
    for block in blocks:
        block.__enter__()
    seconds = min(timeit.repeat(telemetry.check_stalls, number=100, repeat=5)) / 100
    for block in blocks:
        block.__exit__(None, None, None)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    ops = candidates()
    for op in ops.values():  # warm up
        timeit.timeit(op, number=args.calls)
    times: dict[str, list[float]] = {name: [] for name in ops}
    for _ in range(args.rounds):
        for name, op in ops.items():
            times[name].append(timeit.timeit(op, number=args.calls) / args.calls)
    for name, seconds in times.items():
        print(f"{name:<28} {statistics.median(seconds) * 1e6:8.3f} us/rollout")

    def ratio(a: str, b: str) -> float:
        return statistics.median(x / y for x, y in zip(times[a], times[b], strict=True))

    print(f"\nlifecycle / record: {ratio('rollout() block', 'record()'):.2f}x (goal <= 2)")
    otel_part = ratio("rollout() block", "rollout() block, spans off")
    print(f"lifecycle with no SDK / with spans off: {otel_part:.2f}x (the unconfigured OpenTelemetry part)")
    floor = ratio("bare block (no telemetry)", "record()")
    print(f"bare block / record: {floor:.2f}x (the with-block protocol alone, before any work)")
    forwarding = ratio("bare block + record()", "record()")
    print(f"bare block forwarding to record() / record: {forwarding:.2f}x (the least a counting block costs)")
    beyond = statistics.median(
        (life - bare) / rec
        for life, bare, rec in zip(
            times["rollout() block"], times["bare block (no telemetry)"], times["record()"], strict=True
        )
    )
    print(f"(lifecycle - bare block) / record: {beyond:.2f}x (what the lifecycle does, in record() units)")
    print(f"block with a stage() call / block: {ratio('rollout() block + stage()', 'rollout() block'):.2f}x")
    for in_flight in (100, 1000, 10_000):
        check = stall_check_seconds(in_flight)
        print(f"one stall check with {in_flight:>6,} rollouts in flight: {check * 1e6:8.1f} us")


if __name__ == "__main__":
    main()
