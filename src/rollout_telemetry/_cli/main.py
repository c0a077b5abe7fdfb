"""The ``rollout-telemetry`` command line: ``demo`` (a simulated run) and the tools around the exporter."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from stat import S_ISDIR, S_ISREG
from types import FrameType

from rollout_telemetry._cli.args import (
    OneLineParser,
    at_least,
    at_least_one,
    non_negative,
    port,
    positive,
    readable_file,
    share,
    url,
)
from rollout_telemetry._cli.simulation import SCENARIOS, DemoConfig, run_demo, summary_lines
from rollout_telemetry._recording.telemetry import RolloutTelemetry
from rollout_telemetry._serve.credentials import BasicAuth, hash_password
from rollout_telemetry._serve.server import MetricsServer, TLSConfig
from rollout_telemetry._sources.follow import RunFiles, RunFollower
from rollout_telemetry._sources.gym import GymCommand, GymProcess, describe_status
from rollout_telemetry._store.coverage import DEFAULT_MAX_ATTEMPTS, Coverage
from rollout_telemetry._views.report import build_report, render_table
from rollout_telemetry.errors import ConfigError, RolloutTelemetryError
from rollout_telemetry.exporters.prometheus import CoverageCollector

__all__ = ["main"]

_log = logging.getLogger("rollout_telemetry.cli")

OTLP_FLUSH_SECONDS = 3.0
"""The longest the demo waits at exit for an OTLP endpoint to take what is pending."""


def _add_serve_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("endpoint")
    group.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    group.add_argument(
        "--port", type=port, default=9464, help="port for /metrics (default: 9464; 0 picks one)"
    )
    group.add_argument(
        "--port-range",
        type=at_least_one,
        default=1,
        metavar="N",
        help="take the first free port of PORT..PORT+N-1 (one per process on a node; default: 1)",
    )
    group.add_argument("--run", default=None, help="run name, added as a 'run' label on every series")
    _add_security_options(parser)


def _add_security_options(parser: argparse.ArgumentParser) -> None:
    """The TLS and basic-auth flags of an endpoint, read by ``_security()``."""
    security = parser.add_argument_group("security (see the README's Security section)")
    security.add_argument(
        "--tls-cert", metavar="FILE", type=readable_file, help="serve HTTPS with this certificate (PEM)"
    )
    security.add_argument(
        "--tls-key", metavar="FILE", type=readable_file, help="the certificate's private key (PEM)"
    )
    security.add_argument(
        "--tls-client-ca", metavar="FILE", type=readable_file, help="require client certificates from this CA"
    )
    security.add_argument("--basic-auth-user", metavar="NAME", help="require HTTP basic auth as this user")
    security.add_argument(
        "--basic-auth-hash-file",
        metavar="FILE",
        type=readable_file,
        help="file holding the password hash (from hash-password)",
    )
    security.add_argument(
        "--basic-auth-hash-env", metavar="VAR", help="environment variable holding the password hash"
    )


def _logging_options(parser: argparse.ArgumentParser, default: object) -> None:
    # On the command and on every subcommand, so `rollout-telemetry serve -v ...` works as well.
    parser.add_argument("-v", "--verbose", action="store_true", default=default, help="log debug messages")
    parser.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        default=default,
        help="the least severe log messages shown (default: info; -v is debug)",
    )


def _parser() -> tuple[OneLineParser, dict[str, argparse.ArgumentParser]]:
    parser = OneLineParser(
        prog="rollout-telemetry",
        description=(
            "Live progress telemetry for RL rollout collection: masked, failed and omitted rollouts "
            "as Prometheus metrics and OpenTelemetry spans."
        ),
    )
    _logging_options(parser, None)
    commands = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, parser_class=OneLineParser
    )

    demo = commands.add_parser(
        "demo",
        help="run a simulated rollout collection and serve its /metrics",
        description=(
            "Simulate a rollout collection (several agents, a share of masked, failed and omitted "
            "rollouts, rewards in [-0.2, 1], token usage, truncated answers, groups of --group-size "
            "rollouts per task) through the lifecycle API, serve /metrics, and print one summary line per "
            "agent every few seconds. --scenario makes the reward fall after --drop-after seconds for one "
            "cause. Stops after --duration seconds, or on Ctrl-C/SIGTERM."
        ),
    )
    _add_serve_options(demo)
    _logging_options(demo, argparse.SUPPRESS)
    demo.add_argument(
        "--agents", default="math_agent,code_agent,browser_agent", help="comma-separated agents"
    )
    demo.add_argument("--rate", type=positive, default=20.0, help="rollouts started per second (default: 20)")
    demo.add_argument("--duration", type=non_negative, default=0.0, help="seconds to run; 0 = until stopped")
    demo.add_argument("--masked", type=share, default=0.1, help="share of masked rollouts (default: 0.1)")
    demo.add_argument("--failed", type=share, default=0.05, help="share of failed rollouts (default: 0.05)")
    demo.add_argument("--omitted", type=share, default=0.02, help="share of omitted rollouts (default: 0.02)")
    demo.add_argument("--seed", type=int, default=None, help="random seed, for a repeatable run")
    demo.add_argument(
        "--no-negative-rewards", action="store_true", help="draw rewards from [0, 1] instead of [-0.2, 1]"
    )
    demo.add_argument(
        "--max-rollout-seconds", type=positive, default=2.0, help="longest simulated rollout (default: 2)"
    )
    demo.add_argument(
        "--summary-interval", type=at_least(0.5), default=5.0, help="seconds between summaries (default: 5)"
    )
    demo.add_argument(
        "--stalled",
        type=share,
        default=0.01,
        help="share of rollouts that hang at verification (default: 0.01)",
    )
    demo.add_argument(
        "--stall-after",
        type=positive,
        default=5.0,
        help="seconds in flight after which a rollout counts as stalled (default: 5, short for a demo)",
    )
    demo.add_argument(
        "--otlp-endpoint",
        type=url,
        default=None,
        help="also send spans and metrics over OTLP/HTTP to this base URL (e.g. http://127.0.0.1:4318); "
        "needs rollout-telemetry[otel]",
    )
    demo.add_argument(
        "--linger", type=non_negative, default=0.0, help="keep serving this many seconds after the run"
    )
    serve = commands.add_parser(
        "serve",
        help="follow a run's rollout JSONL files live and serve /metrics (zero-code mode)",
        description=(
            "Read a NeMo Gym run's output files (PATH = <stem>.jsonl, with <stem>_failures.jsonl and "
            "<stem>_materialized_inputs.jsonl found by name), then follow appends and serve /metrics with "
            "the live counters and the run coverage account. Lines still being written are read once their "
            "newline arrives; a truncated or replaced file is read again from the start."
        ),
    )
    serve.add_argument(
        "--follow", required=True, metavar="PATH", help="the run's main output file, <stem>.jsonl"
    )
    _add_run_files(serve)
    serve.add_argument(
        "--poll-interval",
        type=at_least(0.05),
        default=0.5,
        help="seconds between reads of the files (default: 0.5)",
    )
    _add_serve_options(serve)
    _logging_options(serve, argparse.SUPPRESS)

    _add_gym(commands)
    report = commands.add_parser(
        "report",
        help="print a run's coverage, rewards and failure kinds from its rollout JSONL files",
        description=(
            "Read a finished (or running) run's files and print a per-agent table: the coverage account "
            "(expected, measured, masked, unscored, failed, omitted, unknown, retried), mean and unmasked "
            "reward, masked share, top failure kinds, and NeMo Gym's end-of-run coverage keys."
        ),
    )
    report.add_argument("path", metavar="PATH", help="the run's main output file, <stem>.jsonl")
    _add_run_files(report)
    report.add_argument("--format", choices=("table", "json"), default="table", help="output format")
    _logging_options(report, argparse.SUPPRESS)
    _add_top(commands)
    hash_command = commands.add_parser(
        "hash-password",
        help="hash a password for --basic-auth-hash-file / --basic-auth-hash-env",
        description="Read a password from standard input (or a prompt) and print its scrypt hash.",
    )
    _logging_options(hash_command, argparse.SUPPRESS)
    _add_ray_targets(commands)
    demo.add_argument(
        "--group-size", type=at_least_one, default=4, help="rollouts per task, one GRPO group (default: 4)"
    )
    demo.add_argument(
        "--uniform",
        type=share,
        default=0.1,
        help="share of easy tasks, all members scoring 1 (default: 0.1)",
    )
    demo.add_argument(
        "--truncated", type=share, default=0.03, help="share of truncated answers (default: 0.03)"
    )
    demo.add_argument(
        "--scenario",
        choices=SCENARIOS,
        default=None,
        help="make the reward fall after --drop-after seconds: healthy (it does not), infrastructure "
        "(failures rise and leak into scores), truncation (answers hit max_output_tokens) or policy",
    )
    demo.add_argument(
        "--drop-after",
        type=non_negative,
        default=30.0,
        help="seconds before the scenario's cause starts (default: 30)",
    )
    demo.add_argument(
        "--warmup",
        type=non_negative,
        default=0.0,
        help="serve the agents at zero for this many seconds before the first rollout",
    )
    return parser, dict(commands.choices)


def _add_gym(commands: argparse._SubParsersAction[OneLineParser]) -> None:
    gym = commands.add_parser(
        "gym",
        help="run NeMo Gym's collection and watch it live: /metrics while it runs, the report at the end",
        usage="%(prog)s [options] -- GYM_COMMAND ...",
        description=(
            "Run a NeMo Gym command (everything after --) as a child process, follow the rollout files "
            "it writes (its --output, with the failures sidecar and the materialized inputs) from its first "
            "row, and serve /metrics and /rollouts meanwhile. Ctrl-C and SIGTERM are passed on to Gym, "
            "which is waited for; then the report is printed and the exit status is Gym's. Without --resume "
            "in the Gym command, files left at the output path by an earlier run are not read: Gym replaces "
            "them."
        ),
        epilog="example: rollout-telemetry gym --port 9464 -- gym eval run --no-serve --agent my_agent "
        "--input data.jsonl --output out/rollouts.jsonl",
    )
    gym.add_argument(
        "gym_command", nargs=argparse.REMAINDER, metavar="GYM_COMMAND", help="the Gym command, after --"
    )
    _add_run_files(gym, sidecars=False)
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
    _add_serve_options(gym)
    _logging_options(gym, argparse.SUPPRESS)


def _add_top(commands: argparse._SubParsersAction[OneLineParser]) -> None:
    top = commands.add_parser(
        "top",
        help="a live terminal view of exporters, or of a run's files",
        description=(
            "Show, per agent, rollouts per minute, mean and unmasked reward, masked share, failed and "
            "omitted rollouts with their top kind, rollouts in flight, the oldest one's age (! = stalled) "
            "and a reward sparkline; below, the oldest rollouts in flight. Reads each exporter's /metrics "
            "and /rollouts (URL: http://host:port or https://...), or a run's files with --follow. q quits."
        ),
    )
    top.add_argument("urls", nargs="*", metavar="URL", help="exporters to show (default: 127.0.0.1:9464)")
    top.add_argument("--follow", metavar="PATH", help="show a run's files instead: its <stem>.jsonl")
    _add_run_files(top)
    top.add_argument(
        "--interval", type=at_least(0.1), default=2.0, help="seconds between refreshes (default: 2)"
    )
    security = top.add_argument_group("security (the client side of serve's flags)")
    security.add_argument(
        "--tls-ca", metavar="FILE", type=readable_file, help="verify HTTPS exporters against this CA (PEM)"
    )
    security.add_argument("--tls-cert", metavar="FILE", type=readable_file, help="client certificate (PEM)")
    security.add_argument(
        "--tls-key", metavar="FILE", type=readable_file, help="the client certificate's private key (PEM)"
    )
    security.add_argument("--basic-auth-user", metavar="NAME", help="HTTP basic auth as this user")
    security.add_argument(
        "--basic-auth-password-file", metavar="FILE", type=readable_file, help="file holding the password"
    )
    security.add_argument(
        "--basic-auth-password-env", metavar="VAR", help="environment variable holding the password"
    )
    _logging_options(top, argparse.SUPPRESS)


def _top(args: argparse.Namespace) -> int:
    from rollout_telemetry._cli.top_sources import (
        ClientSecurity,
        ExporterSource,
        FollowSource,
        Poller,
        Source,
    )
    from rollout_telemetry._cli.top_terminal import run_top

    if args.interval <= 0:
        msg = "--interval must be positive"
        raise ValueError(msg)
    sources: list[Source] = []
    if args.follow:
        if args.urls:
            msg = "give exporter URLs or --follow PATH, not both"
            raise ValueError(msg)
        telemetry = RolloutTelemetry()
        follower = _follower(args, args.follow, telemetry)
        sources.append(FollowSource(follower, telemetry.registry))
    else:
        password = None
        if args.basic_auth_password_file:
            with open(args.basic_auth_password_file, encoding="utf-8") as file:
                password = file.readline().rstrip("\r\n")
        elif args.basic_auth_password_env:
            password = os.environ.get(args.basic_auth_password_env)
            if password is None:
                msg = f"environment variable {args.basic_auth_password_env} is not set"
                raise ValueError(msg)
        if (password is None) != (args.basic_auth_user is None):
            msg = "--basic-auth-user goes with --basic-auth-password-file or --basic-auth-password-env"
            raise ValueError(msg)
        if bool(args.tls_cert) != bool(args.tls_key):
            msg = "--tls-cert and --tls-key go together"
            raise ValueError(msg)
        security = ClientSecurity(args.tls_ca, args.tls_cert, args.tls_key, args.basic_auth_user, password)
        timeout = min(max(args.interval * 2, 2.0), 10.0)
        urls = args.urls or ["127.0.0.1:9464"]
        sources.extend(ExporterSource(url, security, timeout=timeout) for url in urls)
    return run_top([Poller(source, args.interval) for source in sources], args.interval)


def _attempts(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        msg = f"must be a whole number of at least 1, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return value


def _default_max_attempts() -> int:
    # NeMo Gym's own setting and fallback: NEMO_GYM_MAX_ROLLOUT_ATTEMPTS, else (or if invalid) 3.
    text = os.environ.get("NEMO_GYM_MAX_ROLLOUT_ATTEMPTS", "")
    try:
        return at_least_one(text)
    except argparse.ArgumentTypeError:
        return DEFAULT_MAX_ATTEMPTS


def _add_run_files(parser: argparse.ArgumentParser, *, sidecars: bool = True) -> None:
    if sidecars:
        parser.add_argument(
            "--failures", default=None, help="the failures sidecar (default: <stem>_failures.jsonl)"
        )
        parser.add_argument(
            "--inputs",
            default=None,
            help="the materialized inputs (default: <stem>_materialized_inputs.jsonl)",
        )
    parser.add_argument(
        "--agent",
        default=None,
        metavar="NAME",
        help="the agent of rows that name none (no _ng_environment_server or agent_ref.name) and match no "
        "materialized inputs row",
    )
    parser.add_argument(
        "--max-attempts",
        type=at_least_one,
        default=None,
        metavar="N",
        help="attempts NeMo Gym makes per rollout, which tells retryable failures from final ones "
        "(default: $NEMO_GYM_MAX_ROLLOUT_ATTEMPTS, else 3)",
    )


def _follower(
    args: argparse.Namespace, path: str | Path, telemetry: RolloutTelemetry, *, skip_existing: bool = False
) -> RunFollower:
    failures, inputs = getattr(args, "failures", None), getattr(args, "inputs", None)
    files = RunFiles.from_main(path, failures=failures, inputs=inputs)
    max_attempts = args.max_attempts or _default_max_attempts()
    coverage = Coverage(telemetry.names, max_attempts=max_attempts)
    return RunFollower(telemetry, files, coverage, default_agent=args.agent, skip_existing=skip_existing)


def _security(args: argparse.Namespace) -> tuple[TLSConfig | None, BasicAuth | None]:
    tls = None
    if args.tls_client_ca and not (args.tls_cert and args.tls_key):
        msg = "--tls-client-ca needs --tls-cert and --tls-key (the server's own certificate and key)"
        raise ConfigError(msg)
    if bool(args.tls_cert) != bool(args.tls_key):
        msg = "--tls-cert and --tls-key go together: give both"
        raise ConfigError(msg)
    if args.tls_cert:
        tls = TLSConfig(args.tls_cert, args.tls_key, args.tls_client_ca)
        tls.context()  # load the files now: a wrong one is named before anything starts
    if args.basic_auth_hash_file and args.basic_auth_hash_env:
        msg = "give the password hash once: --basic-auth-hash-file or --basic-auth-hash-env, not both"
        raise ConfigError(msg)
    auth = None
    if args.basic_auth_user:
        if args.basic_auth_hash_file:
            auth = BasicAuth.from_file(args.basic_auth_user, args.basic_auth_hash_file)
        elif args.basic_auth_hash_env:
            auth = BasicAuth.from_env(args.basic_auth_user, args.basic_auth_hash_env)
        else:
            msg = "--basic-auth-user needs --basic-auth-hash-file or --basic-auth-hash-env"
            raise ConfigError(msg)
    elif args.basic_auth_hash_file or args.basic_auth_hash_env:
        msg = "a password hash needs --basic-auth-user"
        raise ConfigError(msg)
    return tls, auth


def _serve_endpoint(
    telemetry: RolloutTelemetry,
    args: argparse.Namespace,
    security: tuple[TLSConfig | None, BasicAuth | None],
) -> MetricsServer:
    tls, auth = security
    return telemetry.serve(port=args.port, host=args.host, port_range=args.port_range, tls=tls, auth=auth)


def _freeze_the_heap() -> None:
    # A long-running exporter: what is loaded by now stays, so the garbage collector's full collections (which
    # stop every thread) need not walk it again at every scrape (benchmarks/scrape_stall.py measures both).
    gc.collect()
    gc.freeze()


def _interrupt_on_sigterm() -> None:
    # From the first line printed on, SIGTERM stops the command as Ctrl-C does: cleanly, status 0.
    def on_signal(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)


def _hash_password() -> int:
    if sys.stdin.isatty():
        import getpass

        password = getpass.getpass("password: ")
    else:
        password = sys.stdin.readline().rstrip("\n")
    if not password:
        print("rollout-telemetry hash-password: empty password", file=sys.stderr)
        return 2
    print(hash_password(password))
    return 0


def _install_sigterm(handler: Callable[[], None]) -> None:
    def on_signal(signum: int, frame: FrameType | None) -> None:
        handler()

    signal.signal(signal.SIGTERM, on_signal)


def _cancel(loop: asyncio.AbstractEventLoop, task: asyncio.Task[None]) -> None:
    loop.call_soon_threadsafe(task.cancel)


def _demo(args: argparse.Namespace) -> int:
    config = DemoConfig(
        agents=tuple(a.strip() for a in args.agents.split(",") if a.strip()),
        rate=args.rate,
        duration=args.duration,
        masked=args.masked,
        failed=args.failed,
        omitted=args.omitted,
        seed=args.seed,
        negative_rewards=not args.no_negative_rewards,
        max_rollout_seconds=args.max_rollout_seconds,
        stalled=args.stalled,
        stall_after=args.stall_after,
        group_size=args.group_size,
        uniform=args.uniform,
        truncated=args.truncated,
        scenario=args.scenario,
        drop_after=args.drop_after,
    )
    security = _security(args)  # every input checked before anything starts
    shutdown_otel: Callable[[], None] | None = None
    if args.otlp_endpoint:
        from rollout_telemetry.exporters.otel import instrument_meter, otlp_providers

        if not args.verbose:  # the SDK logs every failed batch; the demo says it once, at exit
            logging.getLogger("opentelemetry").setLevel(logging.CRITICAL)
        otlp = otlp_providers(args.otlp_endpoint, export_interval_millis=2000, timeout_seconds=2.0)
        telemetry = RolloutTelemetry(
            run=args.run, tracer_provider=otlp.tracer_provider, stall_after=config.stall_after
        )
        instrument_meter(telemetry, otlp.meter_provider)
        telemetry.registry.register(otlp.span_stats.collector(telemetry.const_labels))

        def shutdown_otel() -> None:
            finished = otlp.shutdown(timeout=OTLP_FLUSH_SECONDS)
            lost = otlp.span_stats.failed + otlp.span_stats.dropped
            if lost or not finished:
                print(
                    f"rollout-telemetry demo: {lost} spans could not be sent to {args.otlp_endpoint}"
                    + ("" if finished else f" (stopped waiting after {OTLP_FLUSH_SECONDS:g} s)"),
                    file=sys.stderr,
                )
    else:
        telemetry = RolloutTelemetry(run=args.run, stall_after=config.stall_after)
    server = _serve_endpoint(telemetry, args, security)
    _interrupt_on_sigterm()
    _freeze_the_heap()
    print(f"serving {server.url}", flush=True)

    def tick() -> None:
        for line in summary_lines(telemetry):
            print(line, flush=True)

    async def main_task() -> None:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        _install_sigterm(lambda: _cancel(loop, task))
        if args.warmup > 0:
            telemetry.declare(*config.agents)
            await asyncio.sleep(args.warmup)
        await run_demo(telemetry, config, on_tick=tick, tick_seconds=args.summary_interval)
        if args.linger > 0:
            await asyncio.sleep(args.linger)

    try:
        asyncio.run(main_task())
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("stopping", flush=True)
    finally:
        tick()
        server.stop()
        if shutdown_otel is not None:
            shutdown_otel()
    return 0


def _check_run_file(path: Path, what: str, *, must_exist: bool = False) -> None:
    """A run's file: a regular file that can be read, or one that does not exist yet (unless ``must_exist``).

    Raises:
        ConfigError: a directory, a FIFO, a device, an unreadable file, or a missing one that must exist.
    """
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        if must_exist:
            msg = f"{what}{path} does not exist"
            raise ConfigError(msg) from None
        return
    except OSError as exc:
        msg = f"{what}{path} cannot be read: {exc.strerror}"
        raise ConfigError(msg) from None
    if S_ISDIR(mode):
        msg = f"{what}{path} is a directory: give the run's <stem>.jsonl"
        raise ConfigError(msg)
    if not S_ISREG(mode):
        msg = f"{what}{path} is not a regular file (a FIFO or a device): give the run's <stem>.jsonl"
        raise ConfigError(msg)
    if not os.access(path, os.R_OK):
        msg = f"{what}{path} cannot be read (permissions)"
        raise ConfigError(msg)


def _serve(args: argparse.Namespace) -> int:
    _check_run_file(Path(args.follow), "--follow ")
    security = _security(args)  # every input checked before anything starts
    telemetry = RolloutTelemetry(run=args.run)
    follower = _follower(args, args.follow, telemetry)
    files = follower.files
    telemetry.registry.register(CoverageCollector(follower.coverage, telemetry.const_labels))
    follower.poll()  # what is already there, before the first scrape can see partial counts
    server = _serve_endpoint(telemetry, args, security)
    stopped = threading.Event()
    _install_sigterm(stopped.set)
    _freeze_the_heap()
    print(f"serving {server.url} following {files.main}", flush=True)
    follower.start(args.poll_interval)
    try:
        while not stopped.wait(1.0):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        follower.stop()
        server.stop()
        snap = telemetry.snapshot()
        done = sum(a.completed + a.failed + a.omitted for a in snap.agents)
        print(f"stopped: {done} rollout outcomes read from {files.main}", flush=True)
    return 0


def _gym(args: argparse.Namespace) -> int:
    command = GymCommand.parse(args.gym_command)  # every input checked before anything starts
    _check_run_file(command.output, "--output ")
    security = _security(args)
    _interrupt_on_sigterm()  # outside Gym's run (which passes it on to Gym): stop as Ctrl-C does
    telemetry = RolloutTelemetry(run=args.run)
    follower = _follower(args, command.output, telemetry, skip_existing=not command.resume)
    telemetry.registry.register(CoverageCollector(follower.coverage, telemetry.const_labels))
    follower.poll()  # a resumed run's rows, before the first scrape
    server = _serve_endpoint(telemetry, args, security)
    try:
        print(f"rollout-telemetry gym: serving {server.url}, following {command.output}", file=sys.stderr)
        follower.start(args.poll_interval)
        try:
            with GymProcess(command) as gym:
                status = gym.wait()
        finally:
            follower.stop()
        if status:
            print(f"rollout-telemetry gym: {describe_status(status)}", file=sys.stderr)
        follower.read_all()  # what Gym wrote last
        follower.finish()
        if follower.rows == 0 and not follower.coverage.snapshot().expected_known:
            print(f"rollout-telemetry gym: Gym wrote no rollout to {command.output}", file=sys.stderr)
        else:
            _print_report(telemetry, follower, args.format)
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


def _print_report(telemetry: RolloutTelemetry, follower: RunFollower, output_format: str) -> None:
    report = build_report(telemetry.snapshot(), follower.coverage.snapshot(), telemetry.groups.snapshot())
    if output_format == "json":
        print(json.dumps(report, indent=2, sort_keys=False), flush=True)
        return
    from rich.console import Console

    console = Console()
    if not console.is_terminal:  # piped: as wide as COLUMNS says, else wide rather than squeezed
        console = Console(width=int(os.environ.get("COLUMNS", "") or 0) or 200)
    console.print(render_table(report, console.width))


def _report(args: argparse.Namespace) -> int:
    _check_run_file(Path(args.path), "", must_exist=True)
    telemetry = RolloutTelemetry()
    follower = _follower(args, args.path, telemetry)
    main_file = follower.files.main
    _read_with_progress(follower)
    follower.finish()
    if follower.rows == 0:
        rejected = sum(telemetry.snapshot().rejected.values())
        why = f"all {rejected} rows were rejected" if rejected else "it is empty"
        print(f"rollout-telemetry report: no usable rollout row in {main_file}: {why}", file=sys.stderr)
        return 1
    _print_report(telemetry, follower, args.format)
    return 0


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


def _add_ray_targets(commands: argparse._SubParsersAction[OneLineParser]) -> None:
    targets = commands.add_parser(
        "ray-targets",
        help="print the scrape targets registered by serve_on_ray() on a Ray cluster",
        description=(
            "Connect to a Ray cluster and print the target groups of a namespace's target registry, as "
            "Prometheus's http_sd_configs reads them (JSON), or with --url the URL to give http_sd_configs. "
            "With --start, first create the registry (a detached actor on this node, which outlives the "
            "command) with the endpoint's options, as serve takes them, and print its URL; an existing "
            "registry keeps the options it was created with. Needs rollout-telemetry[ray]."
        ),
    )
    targets.add_argument("--address", required=True, help="the Ray cluster's address (e.g. 10.0.0.1:6379)")
    targets.add_argument("--namespace", required=True, help="the Ray namespace of the run's registry")
    targets.add_argument("--name", default=None, help="the registry actor's name (default: the library's)")
    targets.add_argument("--url", action="store_true", help="print the http_sd_configs URL instead")
    start = targets.add_argument_group("starting the registry")
    start.add_argument(
        "--start", action="store_true", help="create the registry if there is none, then print its URL"
    )
    start.add_argument(
        "--host",
        default=None,
        help="address discovery binds (default: this node's address as Ray reports it)",
    )
    start.add_argument("--port", type=port, default=0, help="port of /targets (default: 0, a free one)")
    start.add_argument(
        "--file-sd", metavar="PATH", default=None, help="also write a file_sd_configs file here"
    )
    _add_security_options(targets)
    _logging_options(targets, argparse.SUPPRESS)


def _ray_targets(args: argparse.Namespace) -> int:
    options = (args.host, args.port, args.file_sd, args.tls_cert, args.tls_key, args.tls_client_ca)
    security = (args.basic_auth_user, args.basic_auth_hash_file, args.basic_auth_hash_env)
    if not args.start and any((*options, *security)):
        msg = "--host, --port, --file-sd and the security flags go with --start (they create the registry)"
        raise ValueError(msg)
    tls, auth = _security(args)
    try:
        from rollout_telemetry import ray as on_ray
    except ImportError as exc:  # the extra is missing: the message names the pip install
        print(f"rollout-telemetry ray-targets: {exc}", file=sys.stderr)
        return 2
    import ray

    name = args.name or on_ray.REGISTRY_NAME
    ray.init(
        address=args.address, namespace=args.namespace, logging_level=logging.WARNING, log_to_driver=False
    )
    # the registry actor does not run in our working directory: it gets the file's absolute path
    file_sd = os.path.abspath(args.file_sd) if args.file_sd else None
    try:
        if args.start:
            on_ray.start_registry(
                namespace=args.namespace,
                name=name,
                host=args.host,
                port=args.port,
                file_sd_path=file_sd,
                tls=tls,
                auth=auth,
            )
        if args.url or args.start:
            print(on_ray.registry_url(namespace=args.namespace, name=name))
        else:
            print(json.dumps(on_ray.target_groups(namespace=args.namespace, name=name), indent=2))
    except ValueError:  # Ray's answer when no actor has the name
        print(
            f"rollout-telemetry ray-targets: no target registry {name!r} in Ray namespace {args.namespace!r}",
            file=sys.stderr,
        )
        return 2
    except ray.exceptions.RayActorError as exc:  # --start: its creation failed (a port taken, say)
        cause = str(exc).strip().splitlines()[-1]  # Ray's message ends with the actor's own error
        print(f"rollout-telemetry ray-targets: the target registry did not start: {cause}", file=sys.stderr)
        return 2
    finally:
        ray.shutdown()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    parser, subcommands = _parser()
    try:
        args, unknown = parser.parse_known_args(argv)
        if unknown:  # the chosen command says what it does not know, with its own --help
            subcommands[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    except SystemExit as exit_:  # argparse has said what is wrong (or printed --help): its status
        return exit_.code if isinstance(exit_.code, int) else 2
    level = logging.DEBUG if args.verbose else getattr(logging, (args.log_level or "info").upper())
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    commands: dict[str, Callable[[argparse.Namespace], int]] = {
        "demo": _demo,
        "serve": _serve,
        "report": _report,
        "gym": _gym,
        "top": _top,
        "hash-password": lambda _: _hash_password(),
        "ray-targets": _ray_targets,
    }
    try:
        return commands[args.command](args)
    except (RolloutTelemetryError, ValueError, OSError, ImportError) as exc:
        print(f"rollout-telemetry {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C where a command has no use for it: stop quietly, as a shell reports it
        return 130
