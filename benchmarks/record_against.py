"""Cost of record() in this tree against record() of another revision, both in one process.

The other revision's package is taken from git (``git archive``) into a temporary directory and imported
beside this one, so both are timed in the same interpreter, in interleaved rounds, on the same inputs:
a measured row, a masked row, a failed rollout (``record_failure``), a measured row whose model response
carries usage (which the other revision may not read at all), and a lifecycle block (``with rollout()``)
that completes with the measured row, its context made to be entered at once; ``lifecycle-offered`` is the
same block with its context offered ahead (``offer()``, timing its admission wait; a revision without
``offer()`` made every context with ``rollout()``).

The default revision is the last one before tokens, truncation and groups were added, whose goal is that a
row without usage costs what it cost before. Each revision is timed twice per round, as two instances, so
each one's code runs as often as the other's; one instance against the other (an A/A ratio) shows what the
machine and the layout of objects in memory move on their own: a difference within that spread is noise.

Ratios are medians of per-round ratios (each pair timed moments apart, so drift cancels), taken in several
fresh processes one after the other: the median over processes is the figure, their range the spread.

With ``--instructions`` it counts the machine instructions per call instead (valgrind's callgrind, in fresh
processes with fixed string hashing): the same figure on every run, free of the machine's noise, though an
instruction is not a fixed time.

    .venv/bin/python benchmarks/record_against.py [--rev afb5812] [--processes 5] [--outcomes measured ...]
    .venv/bin/python benchmarks/record_against.py --instructions
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import timeit
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/ is a package of the checkout

from benchmarks.record import ROWS  # this directory's record.py: the same rows
from rollout_telemetry import RolloutTelemetry
from rollout_telemetry._cli.args import at_least_one  # the CLI's check, and its message

BEFORE_USAGE = "afb5812"
"""main just before tokens, truncation and groups were merged."""

STATEMENTS = {
    "measured": "record('math_agent', measured)",
    "masked": "record('math_agent', masked)",
    "failed": "record_failure('math_agent', 'session_lost')",
    "measured-with-usage": "record('math_agent', with_usage)",
    "lifecycle": (
        "with rollout('math_agent', task_index=1, rollout_index=0) as handle:\n    handle.complete(measured)"
    ),
    "lifecycle-offered": (
        "with offer('math_agent', task_index=1, rollout_index=0) as handle:\n    handle.complete(measured)"
    ),
}


def package_at(rev: str, into: Path) -> SimpleNamespace:
    """``RolloutTelemetry`` as it was at ``rev``, imported beside the one already imported (through the public
    name, so the revision's module layout does not matter)."""
    archive = into / "src.tar"
    repo = Path(__file__).resolve().parent.parent
    subprocess.run(
        ["git", "-C", str(repo), "archive", "--format=tar", f"--output={archive}", rev, "src"], check=True
    )
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    # Swap the package out of sys.modules while the other one imports, then put ours back: each package's
    # modules keep references to their own siblings, bound when they were imported.
    ours = {
        name: module for name, module in sys.modules.items() if name.partition(".")[0] == "rollout_telemetry"
    }
    for name in ours:
        del sys.modules[name]
    sys.path.insert(0, str(into / "src"))
    try:
        # The package loads its names lazily: resolve the class now, while the other revision is importable.
        telemetry = importlib.import_module("rollout_telemetry").RolloutTelemetry
        theirs = [name for name in sys.modules if name.partition(".")[0] == "rollout_telemetry"]
        for name in theirs:
            sys.modules[f"_at_{rev}_{name}"] = sys.modules.pop(name)
    finally:
        sys.path.remove(str(into / "src"))
        sys.modules.update(ours)
    if not Path(telemetry.record.__code__.co_filename).is_relative_to(into / "src"):  # not the other revision
        msg = f"the package at {rev} was not the one imported"
        raise RuntimeError(msg)
    return SimpleNamespace(RolloutTelemetry=telemetry)


def names_for(telemetry: object) -> dict[str, object]:
    """The globals a timed statement sees: one telemetry's record functions and the rows."""
    return {
        "record": telemetry.record,  # type: ignore[attr-defined]
        "record_failure": telemetry.record_failure,  # type: ignore[attr-defined]
        "rollout": telemetry.rollout,  # type: ignore[attr-defined]
        "offer": getattr(telemetry, "offer", telemetry.rollout),  # type: ignore[attr-defined]
        **ROWS,
    }


def measure(rev: str, calls: int, rounds: int, outcomes: list[str]) -> dict[str, dict[str, float]]:
    """In this process: the median per-round ratios of each outcome (this tree / rev, and both A/A)."""
    with tempfile.TemporaryDirectory() as tmp:
        other = package_at(rev, Path(tmp))
        if other.RolloutTelemetry.record.__code__.co_filename == RolloutTelemetry.record.__code__.co_filename:
            raise RuntimeError("both candidates are this tree's code")
        # Each revision twice, so that each one's code runs as often as the other's (a code path run more
        # often stays warmer in the processor's caches), and each has its own A/A ratio.
        candidates = {
            "ours": names_for(RolloutTelemetry(run="bench")),
            "ours again": names_for(RolloutTelemetry(run="bench")),
            "theirs": names_for(other.RolloutTelemetry(run="bench")),
            "theirs again": names_for(other.RolloutTelemetry(run="bench")),
        }
        times: dict[tuple[str, str], list[float]] = {}
        order = list(candidates)
        for round_ in range(rounds + 1):  # the first round warms up and is not kept
            for outcome in outcomes:
                for who in order:
                    seconds = (
                        timeit.timeit(STATEMENTS[outcome], globals=candidates[who], number=calls) / calls
                    )
                    if round_:
                        times.setdefault((outcome, who), []).append(seconds)
            order.append(order.pop(0))  # each candidate goes first as often as the others

    def ratio(outcome: str, a: list[str], b: list[str]) -> float:
        numerator: list[float] = [sum(t) for t in zip(*(times[outcome, who] for who in a), strict=True)]
        denominator: list[float] = [sum(t) for t in zip(*(times[outcome, who] for who in b), strict=True)]
        return statistics.median(x / y for x, y in zip(numerator, denominator, strict=True))

    return {
        outcome: {
            "ours_ns": statistics.median(times[outcome, "ours"]) * 1e9,
            "theirs_ns": statistics.median(times[outcome, "theirs"]) * 1e9,
            "ratio": ratio(outcome, ["ours", "ours again"], ["theirs", "theirs again"]),
            "aa_ours": ratio(outcome, ["ours again"], ["ours"]),
            "aa_theirs": ratio(outcome, ["theirs again"], ["theirs"]),
        }
        for outcome in outcomes
    }


def run_calls(rev: str, which: str, outcome: str, calls: int) -> None:
    """In this process: ``calls`` calls of one outcome's statement by one revision (after a warm-up)."""
    with tempfile.TemporaryDirectory() as tmp:
        telemetry = RolloutTelemetry if which == "ours" else package_at(rev, Path(tmp)).RolloutTelemetry
        names = names_for(telemetry(run="bench"))
        timeit.timeit(STATEMENTS[outcome], globals=names, number=1_000)
        timeit.timeit(STATEMENTS[outcome], globals=names, number=calls)


def worker(command: list[str], env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """Run one measuring process; if it fails, exit with the last line it wrote to stderr (named by the
    script that ran it)."""
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        sys.exit(f"{Path(sys.argv[0]).name}: a measuring process failed: {last}")
    return done


def instructions(rev: str, outcomes: list[str], calls: int) -> None:
    """Print the machine instructions per call of each revision (valgrind's callgrind), without noise.

    Each count is the difference between a process making ``3 * calls`` calls and one making ``calls``, so
    start-up cancels; string hashing is fixed (PYTHONHASHSEED=0) so dictionaries probe the same way.
    """
    if shutil.which("valgrind") is None:
        sys.exit("record_against.py: --instructions needs valgrind (apt-get install valgrind)")

    def collected(which: str, outcome: str, n: int) -> int:
        command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, __file__]
        command += ["--run-calls", str(n), "--which", which, "--rev", rev, "--outcomes", outcome]
        done = worker(command, {**os.environ, "PYTHONHASHSEED": "0"})
        return int(re.findall(r"Collected : (\d+)", done.stderr)[-1])

    print(f"machine instructions per record() call (callgrind), this tree against {rev}")
    print(f"{'outcome':<21}{'this tree':>10}{rev:>10}{'ratio':>8}")
    for outcome in outcomes:
        per_call = {
            which: (collected(which, outcome, 3 * calls) - collected(which, outcome, calls)) / (2 * calls)
            for which in ("ours", "theirs")
        }
        ratio = per_call["ours"] / per_call["theirs"]
        print(f"{outcome:<21}{per_call['ours']:>10.0f}{per_call['theirs']:>10.0f}{ratio:>7.3f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", default=BEFORE_USAGE, help="the revision to compare with")
    parser.add_argument("--calls", type=at_least_one, default=20_000, help="calls per timing")
    parser.add_argument("--rounds", type=at_least_one, default=31, help="interleaved rounds per process")
    parser.add_argument(
        "--processes", type=at_least_one, default=5, help="fresh processes, one after the other"
    )
    parser.add_argument(
        "--outcomes", nargs="+", choices=list(STATEMENTS), default=list(STATEMENTS), metavar="OUTCOME"
    )
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="count machine instructions per call with valgrind instead",
    )
    parser.add_argument("--one-process", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--run-calls", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--which", choices=("ours", "theirs"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    repo = Path(__file__).resolve().parent.parent
    found = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{args.rev}^{{commit}}"],
        capture_output=True,
        check=False,
    )
    if found.returncode != 0:
        sys.exit(f"record_against.py: {args.rev!r} is not a commit of the repository at {repo}")
    if args.run_calls is not None:
        run_calls(args.rev, args.which, args.outcomes[0], args.run_calls)
        return
    if args.instructions:
        instructions(args.rev, args.outcomes, 10_000)
        return
    if args.one_process:
        print(json.dumps(measure(args.rev, args.calls, args.rounds, args.outcomes)))
        return
    # Each process lays out its objects and hashes its strings differently, which moves a call's cost by a
    # few percent one way or the other; several processes show that spread, and their median is the figure.
    command = [sys.executable, __file__, "--one-process", "--rev", args.rev, "--calls", str(args.calls)]
    command += ["--rounds", str(args.rounds), "--outcomes", *args.outcomes]
    runs = [json.loads(worker(command, os.environ).stdout) for _ in range(args.processes)]
    print(
        f"record() of this tree against {args.rev}: {args.processes} processes, each {args.rounds}"
        f" interleaved rounds of {args.calls:,} calls"
    )
    print("ratio: this tree / the revision (each timed twice per round); A/A: one instance of a revision")
    print("against another instance of the same: the noise. Median over processes, then min-max.")
    header = (
        f"{'outcome':<21}{'this tree':>10}{args.rev:>10}  {'ratio':<22}{'A/A this tree':<22}A/A {args.rev}"
    )
    print(header)
    for outcome in args.outcomes:

        def over_runs(key: str, outcome: str = outcome) -> str:
            values = sorted(run[outcome][key] for run in runs)
            return f"{statistics.median(values):.3f}x ({values[0]:.3f}-{values[-1]:.3f})"

        ours = statistics.median(run[outcome]["ours_ns"] for run in runs)
        theirs = statistics.median(run[outcome]["theirs_ns"] for run in runs)
        print(
            f"{outcome:<21}{ours:>8.0f}ns{theirs:>8.0f}ns  {over_runs('ratio'):<22}"
            f"{over_runs('aa_ours'):<22}{over_runs('aa_theirs')}"
        )


if __name__ == "__main__":
    main()
