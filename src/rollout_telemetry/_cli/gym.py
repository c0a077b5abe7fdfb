"""``rollout-telemetry gym``: run NeMo Gym's collection, serve /metrics while it runs, report at the end.

The child process itself (its command line, signals, exit status) is ``_sources.gym``'s; this is the command.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time

from rollout_telemetry._cli import options
from rollout_telemetry._cli.args import OneLineParser, at_least, non_negative

__all__ = ["NAME", "add_parser", "run"]

NAME = "gym"


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
        default=0.0,
        help="keep serving this many seconds after Gym ends, for a last scrape (default: 0)",
    )
    gym.add_argument(
        "--format", choices=("table", "json"), default="table", help="the report's format (default: table)"
    )
    options.add_serve_options(gym)
    options.add_logging_options(gym, argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    """Run Gym's command to its end while serving its rollouts; print the report; return Gym's exit status."""
    from rollout_telemetry._cli.process import interrupt_on_sigterm
    from rollout_telemetry._cli.report import print_report
    from rollout_telemetry._facade.telemetry import RolloutTelemetry
    from rollout_telemetry._sources.gym import GymCommand, GymProcess, describe_status

    command = GymCommand.parse(args.gym_command)  # every input checked before anything starts
    options.check_run_file(command.output, "--output ")
    security = options.endpoint_security(args)
    interrupt_on_sigterm()  # outside Gym's run (which passes it on to Gym): stop as Ctrl-C does
    telemetry = RolloutTelemetry(run=args.run)
    # Gym creates its output: no word while it does not exist yet.
    follower = options.run_follower(
        args, command.output, telemetry, skip_existing=not command.resume, announce=False
    )
    follower.poll()  # a resumed run's rows, before the first scrape
    server = options.serve_endpoint(telemetry, args, security)
    try:
        print(f"rollout-telemetry gym: serving {server.url}, following {command.output}", file=sys.stderr)
        follower.start(args.poll_interval)
        try:
            with GymProcess(command) as gym:
                status = gym.wait()
        finally:
            follower.stop()
        if status:
            print(f"rollout-telemetry gym: {describe_status(status, gym.passed_on)}", file=sys.stderr)
        follower.read_all()  # what Gym wrote last
        follower.finish()
        if not follower.tells_of_a_run:
            print(f"rollout-telemetry gym: Gym wrote no rollout to {command.output}", file=sys.stderr)
        else:
            print_report(telemetry, follower, args.format)
            options.say_unnamed(args, follower)
            if late := sum(agent.late for agent in telemetry.groups.snapshot().agents):
                print(
                    f"rollout-telemetry gym: {late} outcome(s) arrived after their group was classified; the "
                    "groups above are as they completed, `rollout-telemetry report "
                    f"{command.output}` classifies them from their final outcomes",
                    file=sys.stderr,
                )
            if follower.restarts:
                print(
                    f"rollout-telemetry gym: the files started over {follower.restarts} time(s) during the "
                    f"run; the event counts are of every run, `rollout-telemetry report {command.output}` "
                    "gives the last one alone",
                    file=sys.stderr,
                )
        if args.linger:
            with contextlib.suppress(KeyboardInterrupt):
                time.sleep(args.linger)
    finally:
        server.stop()
    return status
