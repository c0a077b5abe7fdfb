"""``rollout-telemetry serve``: follow a run's rollout files live and serve /metrics (zero-code mode)."""

from __future__ import annotations

import argparse
import threading
from pathlib import Path

from rollout_telemetry._cli import options
from rollout_telemetry._cli.args import OneLineParser, at_least
from rollout_telemetry._cli.otlp import add_otlp_option, otlp_export
from rollout_telemetry.errors import ConfigError

__all__ = ["NAME", "add_parser", "run"]

NAME = "serve"


def add_parser(commands: argparse._SubParsersAction[OneLineParser]) -> None:
    serve = commands.add_parser(
        NAME,
        help="follow a run's rollout JSONL files live and serve /metrics (zero-code mode)",
        description=(
            "Read a NeMo Gym run's output files (PATH = <stem>.jsonl, with <stem>_failures.jsonl and "
            "<stem>_materialized_inputs.jsonl found by name), then follow appends and serve /metrics with "
            "the live counters and the run coverage account. Lines still being written are read once their "
            "newline arrives; a truncated or replaced file is read again from the start."
        ),
    )
    serve.add_argument("path", nargs="?", metavar="PATH", help="the run's main output file, <stem>.jsonl")
    # The older spelling, kept only to be refused with the one that replaced it.
    serve.add_argument("--follow", metavar="PATH", help=argparse.SUPPRESS)
    options.add_run_files(serve)
    serve.add_argument(
        "--poll-interval",
        type=at_least(0.05),
        default=0.5,
        help="seconds between reads of the files (default: 0.5)",
    )
    add_otlp_option(serve, "the metrics and one span per finished rollout (its row's outcome)")
    options.add_serve_options(serve)
    options.add_logging_options(serve, argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    """Serve the run's counters and coverage until Ctrl-C/SIGTERM; then say how many outcomes were read."""
    from rollout_telemetry._cli.process import freeze_the_heap, install_sigterm
    from rollout_telemetry._facade.telemetry import RolloutTelemetry
    from rollout_telemetry._sources.file_kind import check_main_file

    if args.follow is not None:
        msg = f"serve --follow PATH is serve PATH now: rollout-telemetry serve {args.follow}"
        raise ConfigError(msg)
    if args.path is None:
        msg = "give the run's main output file: serve PATH"
        raise ConfigError(msg)
    path = Path(args.path)
    check_main_file(path, "")
    options.check_run_file(path, "")
    security = options.endpoint_security(args)  # every input checked before anything starts
    otlp = otlp_export(args, NAME)
    telemetry = RolloutTelemetry(
        run=args.run,
        tracer_provider=None if otlp is None else otlp.tracer_provider,
        meter_provider=None if otlp is None else otlp.meter_provider,
        logger_provider=None if otlp is None else otlp.logger_provider,
    )
    if otlp is not None:
        otlp.attach(telemetry.registry, args.run)
    follower = options.run_follower(args, path, telemetry, spans=otlp is not None)
    files = follower.files
    follower.poll()  # what is already there, before the first scrape can see partial counts
    server = options.serve_endpoint(telemetry, args, security)
    stopped = threading.Event()
    install_sigterm(stopped.set)
    freeze_the_heap()
    print(f"serving {server.url} following {files.main}", flush=True)
    follower.start(args.poll_interval)
    try:
        while not stopped.wait(1.0):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        follower.stop()
        follower.poll()  # what was written since the last read: the run's end, when it is over
        server.stop()
        if otlp is not None:
            otlp.shutdown()
        snap = telemetry.snapshot()
        done = sum(a.completed + a.failed + a.omitted for a in snap.agents)
        print(f"stopped: {done} rollout outcomes read from {files.main}", flush=True)
        options.say_unnamed(args, follower)
        options.say_gym_differences(args, follower)
    return 0
