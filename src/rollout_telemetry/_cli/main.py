"""The ``rollout-telemetry`` command line: ``demo`` (a simulated run) and the tools around the exporter.

Each command is a module here with ``NAME``, ``add_parser(commands)`` and ``run(args) -> int``; this one
assembles the parser, sets up logging, and turns what a command raises into one line and an exit status.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import Protocol, TextIO

from rollout_telemetry._cli import (
    demo,
    gym_command,
    hash_password,
    monitoring,
    options,
    ray_targets,
    report_command,
    serve_command,
    top,
)
from rollout_telemetry._cli.args import OneLineParser
from rollout_telemetry._recording.rollout_log import ROLLOUTS
from rollout_telemetry.errors import RolloutTelemetryError

__all__ = ["main"]


class _Command(Protocol):
    """A command's module: its name, the parser it declares, and what runs it."""

    NAME: str
    """The command's name on the command line."""

    def add_parser(self, commands: argparse._SubParsersAction[OneLineParser]) -> None:
        """Declare the command, named ``NAME``, with its options and help."""

    def run(self, args: argparse.Namespace) -> int:
        """Run the command with what was parsed; return the exit status."""


_COMMANDS: tuple[_Command, ...] = (
    demo,
    serve_command,
    gym_command,
    report_command,
    top,
    monitoring,
    hash_password,
    ray_targets,
)
"""The commands, in the order ``--help`` lists them."""

EXAMPLES = {
    demo.NAME: "rollout-telemetry demo --port 9464 --duration 60",
    serve_command.NAME: "rollout-telemetry serve results/rollouts.jsonl --port 9464 --run grpo-exp-42",
    gym_command.NAME: "rollout-telemetry gym --port 9464 -- gym eval run --no-serve "
    "--agent my_env_simple_agent --input data.jsonl --output out/rollouts.jsonl "
    "+route_failures_to_sidecar=true",
    report_command.NAME: "rollout-telemetry report results/rollouts.jsonl --format json",
    top.NAME: "rollout-telemetry top --follow results/rollouts.jsonl",
    monitoring.NAME: "rollout-telemetry monitoring prometheus --scrape http://127.0.0.1:9464/metrics",
    hash_password.NAME: "rollout-telemetry hash-password < password.txt > metrics.hash",
    ray_targets.NAME: "rollout-telemetry ray-targets --address 10.0.0.1:6379 --namespace grpo-exp-42 --url",
}
"""One example per command: at the end of its ``--help``, and all of them at the end of the tool's."""


def _parser() -> tuple[OneLineParser, dict[str, argparse.ArgumentParser]]:
    parser = OneLineParser(
        prog="rollout-telemetry",
        description=(
            "Live progress telemetry for RL rollout collection: masked, failed and omitted rollouts "
            "as Prometheus metrics and OpenTelemetry spans."
        ),
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    options.add_logging_options(parser, None)
    commands = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, parser_class=OneLineParser
    )
    for command in _COMMANDS:
        command.add_parser(commands)
    for name, subcommand in commands.choices.items():
        subcommand.epilog = f"example: {EXAMPLES[name]}"
    parser.epilog = "examples:\n" + "\n".join(f"  {EXAMPLES[command.NAME]}" for command in _COMMANDS)
    return parser, dict(commands.choices)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rollout-telemetry")
    except PackageNotFoundError:  # run from a source tree that is not installed
        return "(not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status (130 after Ctrl-C, quietly, as a shell reports it)."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader of stdout went away (`| head`): nothing more to say to it
        _silence(sys.stdout)
        return 141
    except OSError as exc:
        if exc.errno != errno.EIO:
            raise
        # The terminal hung up (it was closed): nothing more can be said to it; ended as a hang-up ends a
        # command (what `rollout-telemetry gym` passed on to Gym meanwhile).
        _silence(sys.stdout, sys.stderr)
        return 128 + signal.SIGHUP


def _silence(*streams: TextIO) -> None:
    """Point the streams at /dev/null, so that the interpreter's last flush does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in streams:
        os.dup2(devnull, stream.fileno())


def _main(argv: Sequence[str] | None) -> int:
    parser, subcommands = _parser()
    try:
        args, unknown = parser.parse_known_args(argv)
        if unknown:  # the chosen command says what it does not know, with its own --help
            subcommands[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    except SystemExit as exit_:  # argparse has said what is wrong (or printed --help): its status
        return exit_.code if isinstance(exit_.code, int) else 2
    if args.verbose:
        print(f"rollout-telemetry {args.command}: -v is --log-level debug now", file=sys.stderr)
        return 2
    level = getattr(logging, (args.log_level or "info").upper())
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # A line per rollout is for the library's users who ask for it (docs/reference/rollout-log.md), not
    # the command line's log.
    ROLLOUTS.setLevel(logging.WARNING)
    run = {command.NAME: command.run for command in _COMMANDS}[args.command]
    try:
        return run(args)
    except BrokenPipeError:
        raise
    except (RolloutTelemetryError, ValueError, OSError, ImportError) as exc:
        print(f"rollout-telemetry {args.command}: {exc}", file=sys.stderr)
        return 2
