"""``rollout-telemetry report``: a run's coverage, rewards and failure kinds, read from its rollout files."""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from pathlib import Path

from rollout_telemetry._cli import options
from rollout_telemetry._cli.args import OneLineParser
from rollout_telemetry._recording.telemetry import RolloutTelemetry
from rollout_telemetry._sources.follow import RunFollower
from rollout_telemetry._views.report import build_report, render_table

__all__ = ["NAME", "add_parser", "print_report", "run"]

NAME = "report"


def add_parser(commands: argparse._SubParsersAction[OneLineParser]) -> None:
    report = commands.add_parser(
        NAME,
        help="print a run's coverage, rewards and failure kinds from its rollout JSONL files",
        description=(
            "Read a finished (or running) run's files and print a per-agent table: the coverage account "
            "(expected, measured, masked, unscored, failed, omitted, unknown, retried), mean and unmasked "
            "reward, masked share, top failure kinds, and NeMo Gym's end-of-run coverage keys."
        ),
    )
    report.add_argument("path", metavar="PATH", help="the run's main output file, <stem>.jsonl")
    options.add_run_files(report)
    report.add_argument("--format", choices=("table", "json"), default="table", help="output format")
    options.add_logging_options(report, argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    """Read the run's files to their end and print the report; status 1 if no row could be used."""
    options.check_run_file(Path(args.path), "", must_exist=True)
    telemetry = RolloutTelemetry()
    follower = options.run_follower(args, args.path, telemetry)
    main_file = follower.files.main
    _read_with_progress(follower)
    follower.finish()
    if follower.rows == 0:
        rejected = sum(telemetry.snapshot().rejected.values())
        why = f"all {rejected} rows were rejected" if rejected else "it is empty"
        print(f"rollout-telemetry report: no usable rollout row in {main_file}: {why}", file=sys.stderr)
        return 1
    print_report(telemetry, follower, args.format)
    return 0


def print_report(telemetry: RolloutTelemetry, follower: RunFollower, output_format: str) -> None:
    """Print the report of what ``follower`` has read, as a table (as wide as the terminal) or as JSON."""
    report = build_report(telemetry.snapshot(), follower.coverage.snapshot(), telemetry.groups.snapshot())
    if output_format == "json":
        print(json.dumps(report, indent=2, sort_keys=False), flush=True)
        return
    from rich.console import Console

    console = Console()
    if not console.is_terminal:  # piped: as wide as COLUMNS says, else wide rather than squeezed
        console = Console(width=int(os.environ.get("COLUMNS", "") or 0) or 200)
    console.print(render_table(report, console.width))


def _read_with_progress(follower: RunFollower) -> None:
    """Read the run's files; on a terminal, with a progress bar on stderr (silent when piped)."""
    from rich.console import Console

    console = Console(stderr=True)
    if not console.is_terminal:
        follower.read_all()
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

    reader = threading.Thread(target=follower.read_all, name="rollout-telemetry-report")
    with Progress(
        "reading", BarColumn(), DownloadColumn(), TimeRemainingColumn(), console=console, transient=True
    ) as progress:
        task = progress.add_task("read", total=follower.size)
        reader.start()
        while reader.is_alive():
            reader.join(0.1)
            progress.update(task, completed=follower.position)
