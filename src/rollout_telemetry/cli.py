"""The ``rollout-telemetry`` command line: ``demo`` (a simulated run) and the tools around the exporter."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from types import FrameType

from rollout_telemetry.coverage import DEFAULT_MAX_ATTEMPTS, Coverage
from rollout_telemetry.demo import DemoConfig, run_demo, summary_lines
from rollout_telemetry.exporters.prometheus import CoverageCollector
from rollout_telemetry.follow import RunFiles, RunFollower
from rollout_telemetry.report import build_report, render_table
from rollout_telemetry.server import BasicAuth, MetricsServer, ServeError, TLSConfig, hash_password
from rollout_telemetry.telemetry import RolloutTelemetry

__all__ = ["main"]

_log = logging.getLogger("rollout_telemetry.cli")


def _share(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        msg = f"must be a share between 0 and 1, got {text}"
        raise argparse.ArgumentTypeError(msg)
    return value


def _add_serve_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("endpoint")
    group.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    group.add_argument(
        "--port", type=int, default=9464, help="port for /metrics (default: 9464; 0 picks one)"
    )
    group.add_argument(
        "--port-range",
        type=int,
        default=1,
        metavar="N",
        help="take the first free port of PORT..PORT+N-1 (one per process on a node; default: 1)",
    )
    group.add_argument("--run", default=None, help="run name, added as a 'run' label on every series")
    security = parser.add_argument_group("security (see the README's Security section)")
    security.add_argument("--tls-cert", metavar="FILE", help="serve HTTPS with this certificate (PEM)")
    security.add_argument("--tls-key", metavar="FILE", help="the certificate's private key (PEM)")
    security.add_argument("--tls-client-ca", metavar="FILE", help="require client certificates from this CA")
    security.add_argument("--basic-auth-user", metavar="NAME", help="require HTTP basic auth as this user")
    security.add_argument(
        "--basic-auth-hash-file", metavar="FILE", help="file holding the password hash (from hash-password)"
    )
    security.add_argument(
        "--basic-auth-hash-env", metavar="VAR", help="environment variable holding the password hash"
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rollout-telemetry",
        description=(
            "Live progress telemetry for RL rollout collection: masked, failed and omitted rollouts "
            "as Prometheus metrics and OpenTelemetry spans."
        ),
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    demo = commands.add_parser(
        "demo",
        help="run a simulated rollout collection and serve its /metrics",
        description=(
            "Simulate a rollout collection (several agents, a share of masked, failed and omitted "
            "rollouts, rewards in [-1, 1]) through the lifecycle API, serve /metrics, and print one "
            "summary line per agent every few seconds. Stops after --duration seconds, or on Ctrl-C/SIGTERM."
        ),
    )
    _add_serve_options(demo)
    demo.add_argument(
        "--agents", default="math_agent,code_agent,browser_agent", help="comma-separated agents"
    )
    demo.add_argument("--rate", type=float, default=20.0, help="rollouts started per second (default: 20)")
    demo.add_argument("--duration", type=float, default=0.0, help="seconds to run; 0 = until stopped")
    demo.add_argument("--masked", type=_share, default=0.1, help="share of masked rollouts (default: 0.1)")
    demo.add_argument("--failed", type=_share, default=0.05, help="share of failed rollouts (default: 0.05)")
    demo.add_argument(
        "--omitted", type=_share, default=0.02, help="share of omitted rollouts (default: 0.02)"
    )
    demo.add_argument("--seed", type=int, default=None, help="random seed, for a repeatable run")
    demo.add_argument(
        "--no-negative-rewards", action="store_true", help="draw rewards from [0, 1] instead of [-1, 1]"
    )
    demo.add_argument(
        "--max-rollout-seconds", type=float, default=2.0, help="longest simulated rollout (default: 2)"
    )
    demo.add_argument("--summary-interval", type=float, default=5.0, help="seconds between summaries")
    demo.add_argument(
        "--otlp-endpoint",
        default=None,
        help="also send spans and metrics over OTLP/HTTP to this base URL (e.g. http://127.0.0.1:4318); "
        "needs rollout-telemetry[otel]",
    )
    demo.add_argument(
        "--linger", type=float, default=0.0, help="keep serving this many seconds after the run"
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
        "--poll-interval", type=float, default=0.5, help="seconds between reads of the files (default: 0.5)"
    )
    _add_serve_options(serve)

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
    commands.add_parser(
        "hash-password",
        help="hash a password for --basic-auth-hash-file / --basic-auth-hash-env",
        description="Read a password from standard input (or a prompt) and print its scrypt hash.",
    )
    _add_ray_targets(commands)
    demo.add_argument(
        "--warmup",
        type=float,
        default=0.0,
        help="serve the agents at zero for this many seconds before the first rollout",
    )
    return parser


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
        return _attempts(text)
    except argparse.ArgumentTypeError:
        return DEFAULT_MAX_ATTEMPTS


def _add_run_files(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--failures", default=None, help="the failures sidecar (default: <stem>_failures.jsonl)"
    )
    parser.add_argument(
        "--inputs", default=None, help="the materialized inputs (default: <stem>_materialized_inputs.jsonl)"
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
        type=_attempts,
        default=None,
        metavar="N",
        help="attempts NeMo Gym makes per rollout, which tells retryable failures from final ones "
        "(default: $NEMO_GYM_MAX_ROLLOUT_ATTEMPTS, else 3)",
    )


def _follower(args: argparse.Namespace, path: str, telemetry: RolloutTelemetry) -> RunFollower:
    files = RunFiles.from_main(path, failures=args.failures, inputs=args.inputs)
    max_attempts = args.max_attempts or _default_max_attempts()
    coverage = Coverage(telemetry.names, max_attempts=max_attempts)
    return RunFollower(telemetry, files, coverage, default_agent=args.agent)


def _security(args: argparse.Namespace) -> tuple[TLSConfig | None, BasicAuth | None]:
    tls = None
    if args.tls_cert or args.tls_key or args.tls_client_ca:
        if not (args.tls_cert and args.tls_key):
            msg = "--tls-cert and --tls-key go together"
            raise ServeError(msg)
        tls = TLSConfig(args.tls_cert, args.tls_key, args.tls_client_ca)
    auth = None
    if args.basic_auth_user:
        if args.basic_auth_hash_file:
            auth = BasicAuth.from_file(args.basic_auth_user, args.basic_auth_hash_file)
        elif args.basic_auth_hash_env:
            auth = BasicAuth.from_env(args.basic_auth_user, args.basic_auth_hash_env)
        else:
            msg = "--basic-auth-user needs --basic-auth-hash-file or --basic-auth-hash-env"
            raise ServeError(msg)
    elif args.basic_auth_hash_file or args.basic_auth_hash_env:
        msg = "a password hash needs --basic-auth-user"
        raise ServeError(msg)
    return tls, auth


def _serve_endpoint(telemetry: RolloutTelemetry, args: argparse.Namespace) -> MetricsServer:
    tls, auth = _security(args)
    return telemetry.serve(port=args.port, host=args.host, port_range=args.port_range, tls=tls, auth=auth)


def _hash_password() -> int:
    if sys.stdin.isatty():
        import getpass

        password = getpass.getpass("password: ")
    else:
        password = sys.stdin.readline().rstrip("\n")
    if not password:
        print("rollout-telemetry: empty password", file=sys.stderr)
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
    )
    shutdown_otel: Callable[[], None] | None = None
    if args.otlp_endpoint:
        from rollout_telemetry.exporters.otel import instrument_meter, otlp_providers

        otlp = otlp_providers(args.otlp_endpoint, export_interval_millis=2000)
        telemetry = RolloutTelemetry(run=args.run, tracer_provider=otlp.tracer_provider)
        instrument_meter(telemetry, otlp.meter_provider)
        telemetry.registry.register(otlp.span_stats.collector(telemetry.const_labels))
        shutdown_otel = otlp.shutdown
    else:
        telemetry = RolloutTelemetry(run=args.run)
    server = _serve_endpoint(telemetry, args)
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


def _serve(args: argparse.Namespace) -> int:
    telemetry = RolloutTelemetry(run=args.run)
    follower = _follower(args, args.follow, telemetry)
    files = follower.files
    telemetry.registry.register(CoverageCollector(follower.coverage, telemetry.const_labels))
    follower.poll()  # what is already there, before the first scrape can see partial counts
    server = _serve_endpoint(telemetry, args)
    print(f"serving {server.url} following {files.main}", flush=True)
    stopped = threading.Event()
    _install_sigterm(stopped.set)
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


def _report(args: argparse.Namespace) -> int:
    telemetry = RolloutTelemetry()
    follower = _follower(args, args.path, telemetry)
    main_file = follower.files.main
    if main_file.is_dir():
        print(f"rollout-telemetry: {main_file} is a directory: give the run's <stem>.jsonl", file=sys.stderr)
        return 2
    if not main_file.is_file():
        print(f"rollout-telemetry: {main_file} does not exist", file=sys.stderr)
        return 2
    follower.poll()
    follower.finish()
    if follower.rows == 0:
        rejected = sum(telemetry.snapshot().rejected.values())
        why = f"all {rejected} rows were rejected" if rejected else "it is empty"
        print(f"rollout-telemetry: no usable rollout row in {main_file}: {why}", file=sys.stderr)
        return 1
    report = build_report(telemetry.snapshot(), follower.coverage.snapshot())
    if args.format == "json":
        print(json.dumps(report, indent=2, sort_keys=False))
    else:
        from rich.console import Console

        console = Console()
        if not console.is_terminal:
            console = Console(width=200)  # piped: a wide table rather than squeezed columns
        console.print(render_table(report))
    return 0


def _add_ray_targets(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    targets = commands.add_parser(
        "ray-targets",
        help="print the scrape targets registered by serve_on_ray() on a Ray cluster",
        description=(
            "Connect to a Ray cluster and print the target groups of a namespace's target registry, as "
            "Prometheus's http_sd_configs reads them (JSON), or with --url the URL to give http_sd_configs. "
            "Needs rollout-telemetry[ray]."
        ),
    )
    targets.add_argument("--address", required=True, help="the Ray cluster's address (e.g. 10.0.0.1:6379)")
    targets.add_argument("--namespace", required=True, help="the Ray namespace of the run's registry")
    targets.add_argument("--name", default=None, help="the registry actor's name (default: the library's)")
    targets.add_argument("--url", action="store_true", help="print the http_sd_configs URL instead")


def _ray_targets(args: argparse.Namespace) -> int:
    try:
        from rollout_telemetry import ray as on_ray
    except ImportError as exc:  # the extra is missing: the message names the pip install
        print(f"rollout-telemetry: {exc}", file=sys.stderr)
        return 2
    import ray

    name = args.name or on_ray.REGISTRY_NAME
    ray.init(
        address=args.address, namespace=args.namespace, logging_level=logging.WARNING, log_to_driver=False
    )
    try:
        if args.url:
            print(on_ray.registry_url(namespace=args.namespace, name=name))
        else:
            print(json.dumps(on_ray.target_groups(namespace=args.namespace, name=name), indent=2))
    except ValueError:  # Ray's answer when no actor has the name
        print(
            f"rollout-telemetry: no target registry {name!r} in Ray namespace {args.namespace!r}",
            file=sys.stderr,
        )
        return 2
    finally:
        ray.shutdown()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    commands: dict[str, Callable[[argparse.Namespace], int]] = {
        "demo": _demo,
        "serve": _serve,
        "report": _report,
        "hash-password": lambda _: _hash_password(),
        "ray-targets": _ray_targets,
    }
    try:
        return commands[args.command](args)
    except (ServeError, ValueError, OSError) as exc:  # ServeError is a RuntimeError: named on its own
        print(f"rollout-telemetry: {exc}", file=sys.stderr)
        return 2
