"""``rollout-telemetry top``: the command behind the live terminal view of exporters or of a run's files.

What it shows is modelled in ``top_model``, drawn by ``top_screen`` and read by ``top_sources``.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from rollout_telemetry._cli import options
from rollout_telemetry._cli.args import OneLineParser, at_least, readable_file

__all__ = ["NAME", "add_parser", "run"]

NAME = "top"


def add_parser(commands: argparse._SubParsersAction[OneLineParser]) -> None:
    top = commands.add_parser(
        NAME,
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
    options.add_run_files(top)
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
    options.add_logging_options(top, argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    """Show the exporters (or the run's files) until q or Ctrl-C."""
    from rollout_telemetry._cli.top_sources import (
        ClientSecurity,
        ExporterSource,
        FollowSource,
        Poller,
        Source,
    )
    from rollout_telemetry._cli.top_terminal import run_top
    from rollout_telemetry._facade.telemetry import RolloutTelemetry
    from rollout_telemetry._sources.file_kind import check_main_file

    sources: list[Source] = []
    if args.follow:
        if args.urls:
            msg = "give exporter URLs or --follow PATH, not both"
            raise ValueError(msg)
        check_main_file(Path(args.follow), "--follow ")
        options.check_run_file(Path(args.follow), "--follow ")
        telemetry = RolloutTelemetry()
        follower = options.run_follower(args, args.follow, telemetry)
        sources.append(FollowSource(follower, telemetry))
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
