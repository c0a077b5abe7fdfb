"""``rollout-telemetry report``: a run's coverage, rewards and failure kinds, read from its rollout files."""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rollout_telemetry._cli import options
from rollout_telemetry._cli.args import OneLineParser, finite
from rollout_telemetry._files import regular_file_at, write_whole
from rollout_telemetry.errors import ConfigError, RolloutTelemetryError

if TYPE_CHECKING:
    from rollout_telemetry._contract.outcome import Classified
    from rollout_telemetry._facade.telemetry import RolloutTelemetry
    from rollout_telemetry._sources.follow import Observer, RunFollower
    from rollout_telemetry._views.intervals import RewardSamples
    from rollout_telemetry._views.notable import NotableRollouts, Place
    from rollout_telemetry._views.run_order import RunOrder

__all__ = [
    "NAME",
    "add_parser",
    "html_page",
    "main_files",
    "observer",
    "print_report",
    "run",
    "show_report",
]

NAME = "report"

NOTABLE_LIMIT = 10
"""Rollouts listed per category of the notable ones (failed, masked, slowest, longest output)."""


def add_parser(commands: argparse._SubParsersAction[OneLineParser]) -> None:
    report = commands.add_parser(
        NAME,
        help="print a run's coverage, rewards and failure kinds from its rollout JSONL files",
        description=(
            "Read a finished (or running) run's files and print a per-agent table: the coverage account "
            "(expected, measured, masked, unscored, failed, omitted, unknown, retried), mean and unmasked "
            "reward, masked and truncated shares, mean input and output tokens, top failure kinds, groups "
            "(where a task has more than one rollout), and NeMo Gym's end-of-run coverage keys. Several "
            "PATHs (or a quoted glob) are reported one after the other; a run's sidecars among them are "
            "read with their main file; with --compare, two runs are compared task by task instead. Exit "
            "status: 0, 1 if a file has no usable row, 2 for a wrong input."
        ),
    )
    report.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="a run's main output file, <stem>.jsonl; several, or a glob such as 'runs/*.jsonl'",
    )
    options.add_run_files(report)
    report.add_argument(
        "--format",
        choices=("table", "json", "markdown", "csv", "html"),
        default="table",
        help=(
            "output format (default: table; json: one object, a list of them for several PATHs; markdown: "
            "per agent the mean rewards with 95%% confidence intervals and the counts, for a paper or a pull "
            "request; csv: the same figures, a row per agent; html: one self-contained page with the "
            "pictures, for one PATH: redirect it to a file and open it in a browser)"
        ),
    )
    report.add_argument(
        "--compare",
        action="store_true",
        help=(
            "compare two runs, A B: per agent, the difference of mean rewards B - A over the tasks both ran, "
            "with a paired 95%% interval (task by task), the tasks solved in one run only and the smallest "
            "difference these tasks could detect at 80%% power; refused when the runs share no task"
        ),
    )
    report.add_argument(
        "--compare-agents",
        nargs=2,
        metavar=("NAME", "NAME"),
        help=(
            "compare two agents of one run as --compare compares two runs: the second's mean minus the "
            "first's on the tasks both ran, paired task by task (default: no comparison)"
        ),
    )
    report.add_argument(
        "--pass-threshold",
        type=finite,
        help=(
            "the reward at or above which a rollout solves its task, for pass@k and the tasks never and "
            "always solved, and for the tasks --compare finds flipped (solved: at least half its rollouts "
            "solve it; default: those figures only when every reward is 0 or 1)"
        ),
    )
    report.add_argument(
        "--reasons",
        action="store_true",
        help=(
            "show each notable rollout's failure_reason, the text of the error from your run's files (off by "
            "default: it may hold prompts, paths or secrets; never on a served page)"
        ),
    )
    options.add_logging_options(report, argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    """Report each run given; the exit status is the worst: 2 for a wrong input, 1 for a file with no row."""
    paths = main_files(args.paths)
    _check_inputs(args, paths)
    if args.compare or args.compare_agents:
        return _compare(args, paths)
    one = len(args.paths) == 1 and os.path.lexists(args.paths[0])  # one run named: no list, no heading
    return _report_each(args, paths, one)


def _check_inputs(args: argparse.Namespace, paths: list[Path]) -> None:
    """Raise ConfigError for flags that do not go with the runs given, or name a file that is not there."""
    if len(paths) > 1 and (args.failures or args.inputs):
        msg = "--failures and --inputs name one run's files: give one PATH with them"
        raise ConfigError(msg)
    if args.compare and len(paths) != 2:
        msg = f"--compare takes two runs, A B, and {len(paths)} files were given"
        raise ConfigError(msg)
    if args.compare_agents and (args.compare or len(paths) != 1):
        msg = "--compare-agents compares two agents of one run: give one PATH, without --compare"
        raise ConfigError(msg)
    if len(paths) > 1 and args.format == "html" and not args.compare:
        msg = f"--format html shows one run, and {len(paths)} files were given: give one PATH"
        raise ConfigError(msg)
    if args.format == "html" and sys.stdout.isatty():
        msg = "--format html writes a page: send it to a file, as in `> run.html`, and open that in a browser"
        raise ConfigError(msg)
    for flag, given in (("--failures", args.failures), ("--inputs", args.inputs)):
        if given and not os.path.lexists(given):  # a finished run's file that is not there: a typo
            msg = f"{flag} {given} does not exist"
            raise ConfigError(msg)


def _report_each(args: argparse.Namespace, paths: list[Path], one: bool) -> int:
    """Read and show each run: as it is read, or (JSON, CSV) all at once at the end; the worst status."""
    status, reports = 0, []
    for path in paths:
        try:
            read = _read(args, path)
        except RolloutTelemetryError as exc:
            print(f"rollout-telemetry report: {exc}", file=sys.stderr)
            status = 2
            continue
        if read is None:
            status = max(status, 1)
            continue
        report, page = read
        if page is not None:  # --format html
            sys.stdout.write(page)
            sys.stdout.flush()
        elif args.format in ("json", "csv"):
            reports.append(report)
        else:
            show_report(report, args.format, heading=None if one else str(path))
    if reports and args.format == "csv":
        from rollout_telemetry._views.summary import render_csv

        sys.stdout.write(render_csv(reports))
    elif reports:
        print(json.dumps(reports[0] if one else reports, indent=2), flush=True)
    return status


def _compare(args: argparse.Namespace, paths: list[Path]) -> int:
    """Compare run B (``paths[1]``) with run A (``paths[0]``) agent by agent, on the tasks both ran; or, with
    ``--compare-agents``, one run's two agents.

    Raises:
        ConfigError: a file cannot be read, an agent is not in the run, or the two share no task.
    """
    from rollout_telemetry._views import comparison

    runs = []
    for path in paths:
        read = _read_samples(args, path)
        if read is None:
            return 1
        runs.append(read[2])
    if args.compare_agents:
        (run,), (agent_a, agent_b) = runs, args.compare_agents
        for agent in (agent_a, agent_b):
            if agent not in run.agents():
                msg = f"{paths[0]} has no reward of agent {agent!r}"
                raise ConfigError(msg)
        label = f"{agent_b} - {agent_a}"
        rows = [
            comparison.compare_agent(
                label, run.by_task(agent_a)[0], run.by_task(agent_b)[0], args.pass_threshold
            )
        ]
        names, unpaired = (f"{paths[0]} {agent_a}", f"{paths[0]} {agent_b}"), []
    else:
        run_a, run_b = runs
        in_a, in_b = set(run_a.agents()), set(run_b.agents())
        rows = [
            comparison.compare_agent(
                agent, run_a.by_task(agent)[0], run_b.by_task(agent)[0], args.pass_threshold
            )
            for agent in sorted(in_a & in_b)
        ]
        names, unpaired = (str(paths[0]), str(paths[1])), sorted(in_a ^ in_b)
    if not any(row["tasks"] for row in rows):
        msg = f"{names[0]} and {names[1]} share no task: nothing to pair"
        raise ConfigError(msg)
    compared = {"a": names[0], "b": names[1], "agents": rows, "agents_unpaired": unpaired}
    if args.format == "json":
        print(json.dumps(compared, indent=2), flush=True)
    elif args.format == "markdown":
        print(comparison.comparison_markdown(compared), flush=True)
    elif args.format == "csv":
        sys.stdout.write(comparison.comparison_csv(compared))
        sys.stdout.flush()
    elif args.format == "html":
        from rollout_telemetry._views.page import plain_document

        sys.stdout.write(plain_document(f"{names[1]} - {names[0]}", comparison.comparison_html(compared)))
        sys.stdout.flush()
    else:
        _console().print(comparison.comparison_table(compared))
    return 0


def main_files(given: list[str]) -> list[Path]:
    """The main files ``given`` names, a glob expanded; a run's sidecar dropped when its main file is there.

    Raises:
        ConfigError: a glob that matches no file.
    """
    from rollout_telemetry._sources.file_kind import SIDECAR_SUFFIXES

    paths: list[Path] = []
    for text in given:
        if not Path(text).exists() and glob.has_magic(text):
            matched = sorted(glob.glob(text, recursive=True))
            if not matched:
                msg = f"{text} matches no file"
                raise ConfigError(msg)
            paths += map(Path, matched)
        else:
            paths.append(Path(text))
    named = set(paths)
    return [
        path
        for path in dict.fromkeys(paths)
        if not any(
            path.name.endswith(suffix) and path.with_name(path.name.removesuffix(suffix) + ".jsonl") in named
            for suffix in SIDECAR_SUFFIXES
        )
    ]


def _read(args: argparse.Namespace, path: Path) -> tuple[dict[str, Any], str | None] | None:
    """Read one run's files to their end: its report and, with ``--format html``, its page; ``None`` (said on
    stderr) when no row was usable.

    Raises:
        ConfigError: the file is missing, not a run's main output, or not JSON Lines.
    """
    read = _read_samples(args, path)
    if read is None:
        return None
    telemetry, follower, samples, order, notable = read
    report = {"file": str(path), **_report(telemetry, follower, samples, args.pass_threshold)}
    report["notable"] = notable.listing()
    return report, None if order is None else html_page(report, order, str(path))


def _read_samples(
    args: argparse.Namespace, path: Path
) -> tuple[RolloutTelemetry, RunFollower, RewardSamples, RunOrder | None, NotableRollouts] | None:
    """Read one run's files to their end, its rewards by task kept, its notable rollouts (and its order for a
    report's page); ``None`` (said on stderr) when no row was usable.

    Raises:
        ConfigError: the file is missing, not a run's main output, or not JSON Lines.
    """
    from rollout_telemetry._facade.telemetry import RolloutTelemetry
    from rollout_telemetry._sources.file_kind import check_main_file

    check_main_file(path)
    options.check_run_file(path, "", must_exist=True)
    from rollout_telemetry._views.intervals import RewardSamples
    from rollout_telemetry._views.notable import NotableRollouts
    from rollout_telemetry._views.run_order import RunOrder

    telemetry = RolloutTelemetry()
    samples = RewardSamples()
    order = RunOrder() if args.format == "html" and not (args.compare or args.compare_agents) else None
    notable = NotableRollouts(NOTABLE_LIMIT, reasons=args.reasons)
    follower = options.run_follower(args, path, telemetry, observe=observer(samples, order, notable))
    # The rows of the main file and its sidecar in no known order: each group from its final outcomes.
    with follower.recorder.deferred_groups():
        _read_with_progress(follower)
        follower.finish()
    options.say_unnamed(args, follower)
    options.say_gym_differences(args, follower)
    if not follower.tells_of_a_run:
        rejected = sum(telemetry.snapshot().rejected.values())
        why = f"all {rejected} rows were rejected" if rejected else "it is empty"
        print(f"rollout-telemetry report: no usable rollout row in {path}: {why}", file=sys.stderr)
        return None
    return telemetry, follower, samples, order, notable


def observer(
    samples: RewardSamples, order: RunOrder | None, notable: NotableRollouts | None = None
) -> Observer:
    """Each counted outcome to the reward samples (with its task), for the pictures (``--format html``) to
    the run's order, and with its place in the files to the notable rollouts."""

    def observe(
        agent: str, outcome: Classified, identity: tuple[int, int] | None, attempt: int, place: Place
    ) -> None:
        samples.observe(agent, outcome, None if identity is None else identity[0])
        if order is not None:
            order.observe(agent, outcome, identity, attempt)
        if notable is not None:
            notable.observe(agent, outcome, identity, attempt, place)

    return observe


def html_page(report: dict[str, Any], order: RunOrder, title: str) -> str:
    """The self-contained HTML page of a run read from its files: ``report``'s numbers, and its charts drawn
    in the run's order (``RunOrder``)."""
    from rollout_telemetry._views.page import render_page

    ordered = order.replay()
    return render_page(report, ordered.points, title=title, x_axis=ordered.story.x_axis)


def _report(
    telemetry: RolloutTelemetry,
    follower: RunFollower,
    samples: RewardSamples | None,
    threshold: float | None = None,
) -> dict[str, Any]:
    from rollout_telemetry._views.run_report import build_report

    return build_report(
        telemetry.snapshot(),
        follower.coverage.snapshot(),
        follower.recorder.groups_snapshot(),
        samples=samples,
        threshold=threshold,
    )


def print_report(
    telemetry: RolloutTelemetry,
    follower: RunFollower,
    output_format: str,
    samples: RewardSamples | None = None,
    *,
    html: tuple[Path, RunOrder] | None = None,
) -> None:
    """Print the report of what ``follower`` has read, as a table (as wide as the terminal) or as JSON; with
    ``html``, the same report as a page written to its path, with the charts of the run's order.

    Raises:
        ConfigError: the page cannot be written, or its path is not a regular file (the report is printed all
            the same).
    """
    report = _report(telemetry, follower, samples)
    show_report(report, output_format)
    if html is not None:
        path, order = html
        page = html_page(report, order, str(follower.files.main))
        try:
            regular_file_at(path)  # a link, a pipe or a folder there since the command started: refused
            write_whole(path, page.encode("utf-8"))
        except OSError as exc:
            msg = f"cannot write the HTML report to {path}: {exc.strerror or exc}"
            raise ConfigError(msg) from exc


def show_report(report: dict[str, Any], output_format: str, *, heading: str | None = None) -> None:
    """Print a report, as a table (as wide as the terminal, under ``heading`` if given), as JSON, or as the
    summary for a paper: Markdown (under a ``heading`` of its own) or CSV."""
    from rollout_telemetry._views.escaping import terminal_text
    from rollout_telemetry._views.run_report import render_table

    if output_format == "json":
        print(json.dumps(report, indent=2, sort_keys=False), flush=True)
        return
    if output_format == "markdown":
        from rollout_telemetry._views.summary import render_markdown

        print(render_markdown(report, heading), flush=True)
        return
    if output_format == "csv":
        from rollout_telemetry._views.summary import render_csv

        sys.stdout.write(render_csv([report]))
        sys.stdout.flush()
        return
    console = _console()
    if heading is not None:
        console.rule(terminal_text(heading), align="left")  # a path: text, never markup
    console.print(render_table(report, console.width))


def _console() -> Any:
    """A rich console on stdout: as wide as the terminal or, piped, as COLUMNS says, else wide."""
    from rich.console import Console

    console = Console()
    if not console.is_terminal:  # piped: as wide as COLUMNS says, else wide rather than squeezed
        console = Console(width=int(os.environ.get("COLUMNS", "") or 0) or 200)
    return console


def _read_with_progress(follower: RunFollower) -> None:
    """Read the run's files; on a terminal, with a progress bar on stderr (silent when piped)."""
    from rich.console import Console

    console = Console(stderr=True)
    if not console.is_terminal:
        follower.read_all()
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

    # A daemon: on Ctrl-C the command ends at once, not when the reading does.
    reader = threading.Thread(target=follower.read_all, name="rollout-telemetry-report", daemon=True)
    with Progress(
        "reading", BarColumn(), DownloadColumn(), TimeRemainingColumn(), console=console, transient=True
    ) as progress:
        task = progress.add_task("read", total=follower.size)
        reader.start()
        while reader.is_alive():
            reader.join(0.1)
            progress.update(task, completed=follower.position)
