"""``rollout-telemetry gym``: run NeMo Gym's collection, serve /metrics while it runs, report at the end.

The child process itself (its command line, signals, exit status) is ``_sources.gym_process``'s; this is the
command.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from rollout_telemetry._cli import options
from rollout_telemetry._cli.args import OneLineParser, at_least, non_negative, writable_file
from rollout_telemetry.errors import ConfigError

if TYPE_CHECKING:
    from rollout_telemetry._facade.telemetry import RolloutTelemetry
    from rollout_telemetry._sources.follow import RunFollower
    from rollout_telemetry._store.coverage import CoverageSnapshot
    from rollout_telemetry._views.intervals import RewardSamples
    from rollout_telemetry._views.run_order import RunOrder

__all__ = [
    "LINGER",
    "NAME",
    "STATUS_EVERY",
    "add_parser",
    "nothing_written",
    "run",
    "say_status",
    "status_line",
]

NAME = "gym"
LINGER = 20.0
"""Seconds ``gym`` keeps serving after Gym ends unless told otherwise: a scraper every 15 s takes the end."""
STATUS_EVERY = 10.0
"""Seconds between two status lines unless told otherwise."""


def add_parser(commands: argparse._SubParsersAction[OneLineParser]) -> None:
    gym = commands.add_parser(
        NAME,
        help="run NeMo Gym's collection and watch it live: /metrics while it runs, the report at the end",
        usage="%(prog)s [options] -- GYM_COMMAND ...",
        description=(
            "Run a NeMo Gym command (everything after --) as a child process, follow the rollout files "
            "it writes (its --output, with the failures sidecar and the materialized inputs) from its first "
            "row, and serve /metrics and /rollouts meanwhile. Ctrl-C, SIGTERM, a hang-up and every other "
            "signal that would end this command are passed on to Gym, which is waited for; if this command "
            "is killed, Gym is stopped all the same. Then the report is printed (on stdout, alone: Gym's "
            "own output goes to stderr) and the exit status is Gym's. Without --resume "
            "in the Gym command, files left at the output path by an earlier run are not read: Gym replaces "
            "them."
        ),
    )
    gym.add_argument(
        "gym_command", nargs=argparse.REMAINDER, metavar="GYM_COMMAND", help="the Gym command, after --"
    )
    options.add_run_files(gym, sidecars=False)
    gym.add_argument(
        "--poll-interval",
        type=at_least(0.05),
        default=0.25,
        help="seconds between reads of the files (default: 0.25)",
    )
    gym.add_argument(
        "--linger",
        type=non_negative,
        default=LINGER,
        help=(
            f"keep serving this many seconds after Gym ends, for a scraper's last scrape; Ctrl-C ends it "
            f"(default: {LINGER:g}, past Prometheus' usual 15 s interval; not after an interrupt)"
        ),
    )
    gym.add_argument(
        "--status-every",
        type=non_negative,
        default=STATUS_EVERY,
        metavar="SECONDS",
        help=f"a status line on stderr this often while Gym runs; 0: none (default: {STATUS_EVERY:g})",
    )
    gym.add_argument(
        "--format",
        choices=("table", "json", "markdown", "csv"),
        default="table",
        help="the report's format, as report's (default: table)",
    )
    gym.add_argument(
        "--html",
        metavar="FILE",
        type=writable_file,
        help=(
            "also write the report as one self-contained HTML page with its pictures to FILE (what "
            "`report --format html` makes of the run's files)"
        ),
    )
    options.add_serve_options(gym)
    options.add_logging_options(gym, argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    """Run Gym's command to its end while serving its rollouts; print the report; return Gym's exit status."""
    from rollout_telemetry._cli.process import interrupt_on_sigterm
    from rollout_telemetry._cli.report_command import observer
    from rollout_telemetry._facade.telemetry import RolloutTelemetry
    from rollout_telemetry._sources.gym_process import GymCommand, GymProcess, describe_status

    command = GymCommand.parse(args.gym_command)  # every input checked before anything starts
    options.check_run_file(command.output, "--output ")
    security = options.endpoint_security(args)
    interrupt_on_sigterm()  # outside Gym's run (which passes it on to Gym): stop as Ctrl-C does
    from rollout_telemetry._views.intervals import RewardSamples
    from rollout_telemetry._views.run_order import RunOrder

    telemetry = RolloutTelemetry(run=args.run)
    samples = RewardSamples()  # the final report's intervals of the mean rewards
    order = RunOrder() if args.html is not None else None
    # Gym creates its output: no word while it does not exist yet.
    follower = options.run_follower(
        args,
        command.output,
        telemetry,
        skip_existing=not command.resume,
        announce=False,
        observe=observer(samples, order),
    )
    follower.poll()  # a resumed run's rows, before the first scrape
    server = options.serve_endpoint(telemetry, args, security)
    try:
        print(f"rollout-telemetry gym: serving {server.url}, following {command.output}", file=sys.stderr)
        follower.start(args.poll_interval)
        try:
            with GymProcess(command) as gym, _status_lines(follower, server.url, args.status_every):
                status = gym.wait()
        finally:
            follower.stop()
        if status:
            print(f"rollout-telemetry gym: {describe_status(status, gym.passed_on)}", file=sys.stderr)
        follower.read_all()  # what Gym wrote last
        follower.finish()
        wrote = follower.rows > 0  # a rollout or a failure row: Gym dispatched
        if not wrote:
            said = nothing_written(command.output, failed=bool(status) and not gym.passed_on)
            print(f"rollout-telemetry gym: {said}", file=sys.stderr)
        if follower.tells_of_a_run:
            if not _print_report(args, telemetry, follower, samples, order):
                status = status or 2
            options.say_unnamed(args, follower)
            options.say_gym_differences(args, follower)
            if late := sum(agent.late for agent in follower.recorder.groups_snapshot().agents):
                print(
                    f"rollout-telemetry gym: {late} outcome(s) arrived after their group was classified; the "
                    "groups above are as they completed, `rollout-telemetry report "
                    f"{command.output}` classifies them from their final outcomes",
                    file=sys.stderr,
                )
            if status and wrote and not (command.routes_failures or gym.passed_on):
                _say_failures_unrouted(follower)
            if follower.restarts:
                print(
                    f"rollout-telemetry gym: the files started over {follower.restarts} time(s) during the "
                    f"run; the event counts are of every run, `rollout-telemetry report {command.output}` "
                    "gives the last one alone",
                    file=sys.stderr,
                )
        # After an interrupt the user wants out; a run with no row has nothing for a last scrape.
        if args.linger and wrote and not gym.passed_on:
            _serve_a_while(args.linger)
    finally:
        server.stop()
    return status


def _serve_a_while(seconds: float) -> None:
    """Keep serving the final state ``seconds`` more (the server runs on its own threads), or to Ctrl-C."""
    print(
        f"rollout-telemetry gym: serving the final state {seconds:g} s more, for a last scrape "
        "(Ctrl-C to stop now)",
        file=sys.stderr,
        flush=True,
    )
    with contextlib.suppress(KeyboardInterrupt):
        time.sleep(seconds)


def _print_report(
    args: argparse.Namespace,
    telemetry: RolloutTelemetry,
    follower: RunFollower,
    samples: RewardSamples,
    order: RunOrder | None,
) -> bool:
    """Print the report, and write its page with ``--html``; False (said on stderr) if the page could not be
    written: the run's end goes on all the same."""
    from rollout_telemetry._cli.report_command import print_report

    try:
        print_report(
            telemetry, follower, args.format, samples, html=None if order is None else (args.html, order)
        )
    except ConfigError as exc:
        print(f"rollout-telemetry gym: {exc}", file=sys.stderr)
        return False
    return True


@contextlib.contextmanager
def _status_lines(follower: RunFollower, url: str, every: float) -> Iterator[None]:
    """While inside, a status line on stderr every ``every`` seconds (none if 0): it survives Gym's output."""
    if not every:
        yield
        return
    stop = threading.Event()
    started = time.monotonic()
    before = sum(agent.seen for agent in follower.coverage.snapshot().agents)  # a resumed run's rows

    def say() -> None:
        while not stop.wait(every):
            line = status_line(follower.coverage.snapshot(), time.monotonic() - started, url, before)
            say_status(line, sys.stderr)

    thread = threading.Thread(target=say, name="rollout-telemetry-gym-status", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


_CLEAR_LINE = "\r\x1b[K"
"""To the start of the line and clear it: what a progress bar drew there it draws again, below."""


def say_status(line: str, stream: TextIO) -> None:
    """Write the status ``line`` to ``stream`` on a line of its own: Gym's progress bar on the same stream
    ends its lines with carriage returns, so the cursor may sit at the end of the bar. On a terminal the
    bar's line is cleared first (it is drawn again at its next update, as tqdm's own messages do); else a
    newline ends the bar's line."""
    fresh = _CLEAR_LINE if stream.isatty() else "\n"
    stream.write(f"{fresh}rollout-telemetry gym: {line}\n")
    stream.flush()


def nothing_written(output: Path, *, failed: bool) -> str:
    """What to say of a run that wrote no row to ``output``; one that ``failed`` (an error status, not an
    interrupt) ended before any rollout came back: a wrong server address, say, as its own output tells (not
    a failed rollout that the failures sidecar would have held: that is said only of a run that wrote)."""
    if failed:
        return (
            f"Gym ended before writing any rollout or failure to {output}: it dispatched none, or none came "
            "back; its own output above says why"
        )
    return f"Gym wrote no rollout to {output}"


def status_line(coverage: CoverageSnapshot, elapsed: float, url: str, before: int = 0) -> str:
    """Where the run stands: rollouts written (of those expected), the rate since ``elapsed`` seconds ago when
    ``before`` were written already, the time left at that rate, the failed and masked so far (by each
    rollout's newest attempt), and where it is served."""
    from rollout_telemetry._contract.outcome import Disposition

    agents = coverage.agents
    done = sum(agent.seen for agent in agents)
    failed = sum(agent.rollouts.get(Disposition.FAILED, 0) for agent in agents)
    masked = sum(agent.rollouts.get(Disposition.MASKED, 0) for agent in agents)
    rate = max(done - before, 0) / elapsed * 60 if elapsed > 0 else 0.0
    expected = sum(agent.expected or 0 for agent in agents) if coverage.expected_known else None
    progress = f"{done:,} rollouts written"
    if expected:
        progress = f"{done:,} of {expected:,} rollouts written ({100 * done / expected:.0f}%)"
    pace = f"{rate:,.1f}/min"
    if expected and rate > 0 and done < expected:
        pace += f", about {_duration((expected - done) / rate * 60)} left"
    return f"{progress}, {pace}; {failed:,} failed, {masked:,} masked; {url}"


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _say_failures_unrouted(follower: RunFollower) -> None:
    """Rollouts never written and no failure row: say that Gym, its failures not routed to the sidecar, ends
    the run at its first failed rollout and writes that failure nowhere, and the flag that routes them."""
    from rollout_telemetry._sources.gym_process import ROUTE_FAILURES

    unknown = sum(agent.unknown or 0 for agent in follower.coverage.snapshot().agents)
    failures = follower.files.failures
    if not unknown or (failures is not None and _has_rows(failures)):
        return
    print(
        f"rollout-telemetry gym: {unknown:,} expected rollout(s) were never written and Gym wrote no "
        f"failure: unless its configuration sets +{ROUTE_FAILURES}=true, NeMo Gym 0.7.0 ends the run at a "
        "failed rollout and writes that failure nowhere; add it to the Gym command to see failures by kind",
        file=sys.stderr,
    )


def _has_rows(path: Path) -> bool:
    try:
        return path.stat().st_size > 0
    except OSError:
        return False
