"""The options several commands share, and what reads them: an endpoint, its security, logging, a run's files.

Every input is checked here before a command starts anything (a server, a follower, a child process).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from stat import S_ISDIR, S_ISREG
from typing import TYPE_CHECKING

from rollout_telemetry._cli.args import at_least_one, port, readable_file
from rollout_telemetry.errors import ConfigError

if TYPE_CHECKING:  # what the options make is imported when it is made: --help and a wrong flag need none
    from rollout_telemetry._facade.telemetry import RolloutTelemetry
    from rollout_telemetry._serve.credentials import BasicAuth
    from rollout_telemetry._serve.metrics_server import MetricsServer
    from rollout_telemetry._serve.tls import TLSConfig
    from rollout_telemetry._sources.follow import Observer, RunFollower

__all__ = [
    "add_logging_options",
    "add_run_files",
    "add_security_options",
    "add_serve_options",
    "check_run_file",
    "endpoint_security",
    "run_follower",
    "say_unnamed",
    "serve_endpoint",
]


def add_serve_options(parser: argparse.ArgumentParser) -> None:
    """The endpoint's flags (address, port, run label) and security flags, read by ``serve_endpoint()``."""
    group = parser.add_argument_group("endpoint")
    group.add_argument(
        "--host", metavar="ADDRESS", default="127.0.0.1", help="address to bind (default: 127.0.0.1)"
    )
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
    group.add_argument(
        "--run",
        metavar="NAME",
        default=None,
        help="run name, added as a 'run' label on every series (default: none, no such label)",
    )
    group.add_argument(
        "--no-page",
        action="store_true",
        help="serve no live page at / (the run's pictures, updated every few seconds): /metrics only",
    )
    add_security_options(parser)


def add_security_options(parser: argparse.ArgumentParser) -> None:
    """The TLS and basic-auth flags of an endpoint, read by ``endpoint_security()``."""
    security = parser.add_argument_group("security (see docs/guides/security.md)")
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


def add_logging_options(parser: argparse.ArgumentParser, default: object) -> None:
    """``--log-level``; ``default`` is None on the top parser, ``argparse.SUPPRESS`` on a command.

    On the command and on every subcommand, so `rollout-telemetry serve --log-level debug ...` works as well.
    ``-v`` is the older spelling, parsed only to be refused with the one that replaced it (``main``).
    """
    parser.add_argument("-v", "--verbose", action="store_true", default=default, help=argparse.SUPPRESS)
    parser.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        default=default,
        help="the least severe log messages shown (default: info)",
    )


def add_run_files(parser: argparse.ArgumentParser, *, sidecars: bool = True) -> None:
    """The flags that say how to read a run's files, read by ``run_follower()``."""
    if sidecars:
        parser.add_argument(
            "--failures",
            metavar="FILE",
            default=None,
            help="the failures sidecar (default: <stem>_failures.jsonl beside PATH)",
        )
        parser.add_argument(
            "--inputs",
            metavar="FILE",
            default=None,
            help="the materialized inputs (default: <stem>_materialized_inputs.jsonl beside PATH)",
        )
    parser.add_argument(
        "--agent",
        default=None,
        metavar="NAME",
        help="the agent of rows that name none (no agent_ref.name or _ng_environment_server) and that the "
        "materialized inputs cannot tell (default: the inputs' one agent, else <stem>, said in one line)",
    )
    parser.add_argument(
        "--max-attempts",
        type=at_least_one,
        default=None,
        metavar="N",
        help="attempts NeMo Gym makes per rollout, which tells retryable failures from final ones "
        "(default: $NEMO_GYM_MAX_ROLLOUT_ATTEMPTS, else 3)",
    )


def check_run_file(path: Path, what: str, *, must_exist: bool = False) -> None:
    """A run's file: a regular file of JSON Lines that can be read, or one that does not exist yet (unless
    ``must_exist``).

    Raises:
        ConfigError: a directory, a FIFO, a device, an unreadable file, one that is not JSON Lines
            (``check_json_lines``), or a missing one that must exist.
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
    from rollout_telemetry._sources.file_kind import check_json_lines

    check_json_lines(path, what)


def _default_max_attempts() -> int:
    # NeMo Gym's own setting and fallback: NEMO_GYM_MAX_ROLLOUT_ATTEMPTS, else (or if invalid) 3.
    text = os.environ.get("NEMO_GYM_MAX_ROLLOUT_ATTEMPTS", "")
    try:
        return at_least_one(text)
    except argparse.ArgumentTypeError:
        from rollout_telemetry._store.coverage import DEFAULT_MAX_ATTEMPTS

        return DEFAULT_MAX_ATTEMPTS


def run_follower(
    args: argparse.Namespace,
    path: str | Path,
    telemetry: RolloutTelemetry,
    *,
    skip_existing: bool = False,
    spans: bool = False,
    announce: bool = True,
    observe: Observer | None = None,
) -> RunFollower:
    """A follower of the run whose main file is ``path``, as the ``add_run_files()`` flags say; with ``spans``
    each rollout it counts is also a span; ``announce``: a main file that does not exist yet is said once."""
    from rollout_telemetry._sources.follow import RunFiles

    failures, inputs = getattr(args, "failures", None), getattr(args, "inputs", None)
    files = RunFiles.from_main(path, failures=failures, inputs=inputs)
    max_attempts = args.max_attempts or _default_max_attempts()
    agent = args.agent or files.name  # rows nothing names are the file's (say_unnamed says so)
    return telemetry._run_follower(
        files,
        max_attempts=max_attempts,
        default_agent=agent,
        skip_existing=skip_existing,
        spans=spans,
        announce=announce,
        observe=observe,
    )


def say_unnamed(args: argparse.Namespace, follower: RunFollower) -> None:
    """Say on stderr, in one line, that rows named no agent and took the file's name, and how to name them."""
    note = None if args.agent else follower.unnamed_note()
    if note:
        print(f"rollout-telemetry {args.command}: {note}", file=sys.stderr)


def say_gym_differences(args: argparse.Namespace, follower: RunFollower) -> None:
    """At the end of a run, say on stderr, a line each, where NeMo Gym's own count of it (its next release's
    ``<stem>_coverage.json``) differs from the follower's, or why that file is ignored; nothing without it."""
    for line in follower.gym_differences():
        print(f"rollout-telemetry {args.command}: {line}", file=sys.stderr)


def endpoint_security(args: argparse.Namespace) -> tuple[TLSConfig | None, BasicAuth | None]:
    """The TLS and basic auth the ``add_security_options()`` flags ask for, their files loaded.

    Raises:
        ConfigError: flags that do not go together, or a file that cannot be used.
    """
    from rollout_telemetry._serve.credentials import BasicAuth
    from rollout_telemetry._serve.tls import TLSConfig, server_context

    tls = None
    if args.tls_client_ca and not (args.tls_cert and args.tls_key):
        msg = "--tls-client-ca needs --tls-cert and --tls-key (the server's own certificate and key)"
        raise ConfigError(msg)
    if bool(args.tls_cert) != bool(args.tls_key):
        msg = "--tls-cert and --tls-key go together: give both"
        raise ConfigError(msg)
    if args.tls_cert:
        tls = TLSConfig(args.tls_cert, args.tls_key, args.tls_client_ca)
        server_context(tls)  # load the files now: a wrong one is named before anything starts
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


def serve_endpoint(
    telemetry: RolloutTelemetry,
    args: argparse.Namespace,
    security: tuple[TLSConfig | None, BasicAuth | None],
) -> MetricsServer:
    """Serve ``telemetry`` where the ``add_serve_options()`` flags say, secured by ``security``."""
    tls, auth = security
    return telemetry.serve(
        port=args.port, host=args.host, port_range=args.port_range, tls=tls, auth=auth, page=not args.no_page
    )
