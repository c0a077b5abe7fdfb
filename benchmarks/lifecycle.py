"""Cost of the lifecycle API (``with telemetry.rollout(...)``) against ``record()``, no OTel SDK configured.

Times, in interleaved rounds of one run: ``record()``; the lifecycle block with no OpenTelemetry SDK
configured (the default); the same block with spans switched off (``span_mode="off"``), which isolates
what the OpenTelemetry part costs when nothing is configured; a bare block, an object with the same
shape that records nothing, which is the floor any ``with``-block API pays in CPython before it does any
work; and the bare block forwarding its outcome to ``record()``, the least a block that counts can cost
(no clock reads, no in-flight tracking, no duration histogram). Ratios are medians of per-round ratios.
Goal: the lifecycle block at most 2x ``record()``. Also prints what a ``stage()`` call adds to a block, and
what one stall check costs (every scrape and the watcher thread run one) at 100 to 10,000 rollouts in flight.

With ``--against REV`` it times instead a lifecycle block with tracing on (an SDK tracer provider whose batch
processor hands spans to an exporter that drops them: what recording pays, not the network) in this tree
against the same block of revision ``REV``, both imported in one process as ``record_against.py`` does, in
interleaved rounds, in several fresh processes: this tree with the GenAI conventions' default, and with
``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental`` (the evaluation event, the newer usage
attributes). Goal: within 1.1x of ``REV``. With ``--instructions`` it counts machine instructions per block
instead (valgrind's callgrind, fixed string hashing), free of what else the machine runs; the batch processor
then holds every span (its worker never wakes), so each count is the recording path alone.

    .venv/bin/python benchmarks/lifecycle.py [--calls 100000] [--rounds 9]
    .venv/bin/python benchmarks/lifecycle.py --against e4c29d2 [--processes 5]
    .venv/bin/python benchmarks/lifecycle.py --against e4c29d2 --instructions
    .venv/bin/python benchmarks/lifecycle.py --evaluation   # the evaluation event: span event vs log record
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import timeit
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk._logs import LoggerProvider, ReadableLogRecord
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, LogRecordExporter, LogRecordExportResult
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/ is a package of the checkout

from benchmarks.record import ROWS
from benchmarks.record_against import package_at
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
    check = telemetry._stalls.check  # the check alone, as snapshot() and the watcher run it
    seconds = min(timeit.repeat(check, number=100, repeat=5)) / 100
    for block in blocks:
        block.__exit__(None, None, None)
    return seconds


class DroppingExporter(SpanExporter):
    """Takes every batch and drops it: the export side costs nothing measured here."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


TRACED = {
    "measured": "with rollout('math_agent', task_index=1, rollout_index=0) as handle:\n"
    "    handle.complete(measured)",
    "with usage": "with rollout('math_agent', task_index=1, rollout_index=0) as handle:\n"
    "    handle.complete(with_usage)",
    "failed": "with rollout('math_agent', task_index=1, rollout_index=0) as handle:\n"
    "    handle.fail('session_lost', reason='reset timed out after 30s')",
}
"""The blocks timed with tracing on: a measured row, one with usage, a failure with its reason."""


class DroppingLogExporter(LogRecordExporter):
    """Takes every batch of log records and drops it."""

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        return LogRecordExportResult.SUCCESS

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


def traced(
    telemetry_class: type[RolloutTelemetry], *, latest: bool = False, hold: int = 0, **options: Any
) -> dict[str, object]:
    """The globals a traced block sees: a telemetry on its own SDK tracer provider, and the rows.

    With ``hold`` the batch processor keeps that many spans without waking its worker thread; ``options`` go
    to the telemetry.
    """
    provider = TracerProvider()
    if hold:
        delay = 10**9  # milliseconds: never, within a run
        processor = BatchSpanProcessor(DroppingExporter(), hold, delay, max_export_batch_size=hold)
    else:
        processor = BatchSpanProcessor(DroppingExporter())
    provider.add_span_processor(processor)
    variable = "OTEL_SEMCONV_STABILITY_OPT_IN"
    before = os.environ.pop(variable, None)
    if latest:
        os.environ[variable] = "gen_ai_latest_experimental"
    try:  # read when the telemetry is made (a revision before the conventions ignores it)
        telemetry = telemetry_class(run="bench", tracer_provider=provider, **options)
    finally:
        os.environ.pop(variable, None)
        if before is not None:
            os.environ[variable] = before
    return {"rollout": telemetry.rollout, **ROWS}


def traced_measure(rev: str, calls: int, rounds: int) -> dict[str, dict[str, float]]:
    """In this process: per block, median per-round ratios against ``rev``, and the A/A ratios."""
    with tempfile.TemporaryDirectory() as tmp:
        other = package_at(rev, Path(tmp)).RolloutTelemetry
        candidates = {
            "ours": traced(RolloutTelemetry),
            "ours again": traced(RolloutTelemetry),
            "ours, opt-in": traced(RolloutTelemetry, latest=True),
            "theirs": traced(other),
            "theirs again": traced(other),
        }
        times: dict[tuple[str, str], list[float]] = {}
        order = list(candidates)
        for round_ in range(rounds + 1):  # the first round warms up and is not kept
            for block, statement in TRACED.items():
                for who in order:
                    seconds = timeit.timeit(statement, globals=candidates[who], number=calls) / calls
                    if round_:
                        times.setdefault((block, who), []).append(seconds)
            order.append(order.pop(0))

    def ratio(block: str, a: str, b: str) -> float:
        pairs = zip(times[block, a], times[block, b], strict=True)
        return statistics.median(x / y for x, y in pairs)

    return {
        block: {
            "ours_us": statistics.median(times[block, "ours"]) * 1e6,
            "theirs_us": statistics.median(times[block, "theirs"]) * 1e6,
            "ratio": ratio(block, "ours", "theirs"),
            "ratio_opt_in": ratio(block, "ours, opt-in", "theirs"),
            "aa_ours": ratio(block, "ours again", "ours"),
            "aa_theirs": ratio(block, "theirs again", "theirs"),
        }
        for block in TRACED
    }


def traced_against(rev: str, calls: int, rounds: int, processes: int) -> None:
    """Print the traced blocks of this tree against ``rev``: medians over fresh processes, then min-max."""
    command = [sys.executable, __file__, "--against", rev, "--one-process"]
    command += ["--calls", str(calls), "--rounds", str(rounds)]
    runs = []
    for _ in range(processes):
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            sys.exit(f"lifecycle.py: a measuring process failed: {done.stderr.strip()[-500:]}")
        runs.append(json.loads(done.stdout))
    print(f"a lifecycle block with tracing on, this tree against {rev}: {processes} processes, each {rounds}")
    print(f"interleaved rounds of {calls:,} blocks. Median over processes, then min-max. Goal: within 1.1x.")
    print(
        f"{'block':<12}{'this tree':>10}{rev:>10}  {'ratio':<22}{'ratio, opt-in':<22}{'A/A this tree':<22}A/A"
    )
    for block in TRACED:

        def over(key: str, block: str = block) -> str:
            values = sorted(run[block][key] for run in runs)
            return f"{statistics.median(values):.3f}x ({values[0]:.3f}-{values[-1]:.3f})"

        ours = statistics.median(run[block]["ours_us"] for run in runs)
        theirs = statistics.median(run[block]["theirs_us"] for run in runs)
        print(
            f"{block:<12}{ours:>8.2f}us{theirs:>8.2f}us  {over('ratio'):<22}{over('ratio_opt_in'):<22}"
            f"{over('aa_ours'):<22}{over('aa_theirs')}"
        )


CANDIDATES = ("ours", "ours, opt-in", "theirs")


def run_blocks(rev: str, which: str, block: str, calls: int) -> None:
    """In this process: ``calls`` traced blocks of one candidate (after a warm-up of 1,000)."""
    with tempfile.TemporaryDirectory() as tmp:
        telemetry = RolloutTelemetry if which != "theirs" else package_at(rev, Path(tmp)).RolloutTelemetry
        names = traced(telemetry, latest=which == "ours, opt-in", hold=calls + 1_000)
        timeit.timeit(TRACED[block], globals=names, number=1_000)
        timeit.timeit(TRACED[block], globals=names, number=calls)


def instructions(rev: str, calls: int) -> None:
    """Print the machine instructions per traced block of each candidate (callgrind), and the ratios.

    Each count is the difference between a process running ``3 * calls`` blocks and one running ``calls``, so
    start-up cancels.
    """
    if shutil.which("valgrind") is None:
        sys.exit("lifecycle.py: --instructions needs valgrind (apt-get install valgrind)")

    def collected(which: str, block: str, n: int) -> int:
        command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, __file__]
        command += ["--against", rev, "--run-blocks", str(n), "--which", which, "--block", block]
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0:
            sys.exit(f"lifecycle.py: a measuring process failed: {done.stderr.strip()[-500:]}")
        return int(re.findall(r"Collected : (\d+)", done.stderr)[-1])

    print(f"machine instructions per lifecycle block with tracing on (callgrind), this tree against {rev}")
    print(f"{'block':<12}{'this tree':>10}{'opt-in':>10}{rev:>10}{'ratio':>8}{'opt-in':>8}")
    for block in TRACED:
        per_block = {
            which: (collected(which, block, 3 * calls) - collected(which, block, calls)) / (2 * calls)
            for which in CANDIDATES
        }
        ours, opt_in, theirs = (per_block[which] for which in CANDIDATES)
        counts = f"{ours:>10.0f}{opt_in:>10.0f}{theirs:>10.0f}"
        print(f"{block:<12}{counts}{ours / theirs:>7.3f}x{opt_in / theirs:>7.3f}x")


def evaluation_costs(calls: int, rounds: int) -> None:
    """A traced block with the GenAI opt-in, its evaluation event a span event or a log record (an SDK logger
    provider whose batch processor drops what it exports), against the same block without the opt-in."""
    logs = LoggerProvider()
    logs.add_log_record_processor(BatchLogRecordProcessor(DroppingLogExporter()))
    candidates = {
        "tracing (v1.36.0, no event)": traced(RolloutTelemetry),
        "opt-in, event on the span": traced(RolloutTelemetry, latest=True, evaluation_event="span"),
        "opt-in, event as a log record": traced(RolloutTelemetry, latest=True, logger_provider=logs),
    }
    statement = TRACED["measured"]
    times: dict[str, list[float]] = {name: [] for name in candidates}
    order = list(candidates)
    for round_ in range(rounds + 1):  # the first round warms up and is not kept
        for name in order:
            seconds = timeit.timeit(statement, globals=candidates[name], number=calls) / calls
            if round_:
                times[name].append(seconds)
        order.append(order.pop(0))
    base = "tracing (v1.36.0, no event)"
    for name, taken in times.items():
        ratio = statistics.median(x / y for x, y in zip(taken, times[base], strict=True))
        print(f"{name:<32} {statistics.median(taken) * 1e6:8.2f} us/block  {ratio:.3f}x of tracing alone")
    logs.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--against", metavar="REV", help="time traced blocks against this revision instead")
    parser.add_argument("--processes", type=int, default=5, help="fresh processes, with --against")
    parser.add_argument("--instructions", action="store_true", help="with --against: count instructions")
    parser.add_argument("--one-process", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--run-blocks", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--which", choices=CANDIDATES, help=argparse.SUPPRESS)
    parser.add_argument("--block", choices=list(TRACED), help=argparse.SUPPRESS)
    parser.add_argument(
        "--evaluation", action="store_true", help="time the evaluation event as a span event and a log record"
    )
    args = parser.parse_args()
    if args.evaluation:
        evaluation_costs(args.calls // 10, args.rounds)
        return
    if args.against:
        if args.run_blocks is not None:
            run_blocks(args.against, args.which, args.block, args.run_blocks)
        elif args.instructions:
            instructions(args.against, 2_000)
        elif args.one_process:
            print(json.dumps(traced_measure(args.against, args.calls, args.rounds)))
        else:
            traced_against(args.against, args.calls, args.rounds, args.processes)
        return
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
