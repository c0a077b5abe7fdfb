"""``rollout-telemetry hash-password``: the scrypt hash for ``--basic-auth-hash-file`` or ``-env``."""

from __future__ import annotations

import argparse
import sys

from rollout_telemetry._cli import options
from rollout_telemetry._cli.args import OneLineParser

__all__ = ["NAME", "add_parser", "run"]

NAME = "hash-password"


def add_parser(commands: argparse._SubParsersAction[OneLineParser]) -> None:
    hash_command = commands.add_parser(
        NAME,
        help="hash a password for --basic-auth-hash-file / --basic-auth-hash-env",
        description="Read a password from standard input (or a prompt) and print its scrypt hash.",
    )
    options.add_logging_options(hash_command, argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    """Read the password (a prompt on a terminal, else stdin's first line) and print its hash; 2 if empty."""
    from rollout_telemetry._serve.credentials import hash_password

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
