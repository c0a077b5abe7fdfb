"""``rollout-telemetry monitoring``: the Prometheus configuration, alert rules and Grafana dashboard, written
for a user without the repository.

The rules and the dashboard are the package's own files (``rollout_telemetry/_monitoring``, generated from
``dashboards/`` in the repository); the configuration scrapes the endpoints given and loads the rules.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

from rollout_telemetry._cli import options
from rollout_telemetry._cli.args import OneLineParser, url
from rollout_telemetry._files import read_prefix, write_whole
from rollout_telemetry.errors import ConfigError

__all__ = ["FILES", "JOB", "NAME", "add_parser", "prometheus_config", "run"]

NAME = "monitoring"
JOB = "rollout-telemetry"
"""The scrape job of the endpoints: the alert rules read ``up{job="rollout-telemetry"}``."""
CONFIG = "prometheus.yml"
FILES = {"rules.yml": "the alert and recording rules", "rollout-progress.json": "the Grafana dashboard"}
"""The package's monitoring files, written beside the configuration, and what each is."""
DEFAULT_SCRAPE = "http://127.0.0.1:9464/metrics"


def add_parser(commands: argparse._SubParsersAction[OneLineParser]) -> None:
    monitoring = commands.add_parser(
        NAME,
        help="write a Prometheus configuration, the alert rules and the Grafana dashboard to a folder",
        description=(
            "Write DIR/prometheus.yml (scraping the endpoints given, loading the rules), DIR/rules.yml (the "
            "alert and recording rules) and DIR/rollout-progress.json (the Grafana dashboard, to import as "
            "it is), then print the command that runs Prometheus on them."
        ),
    )
    monitoring.add_argument(
        "dir", metavar="DIR", help="the folder to write to (made if missing; followed if a link)"
    )
    monitoring.add_argument(
        "--scrape",
        metavar="URL",
        type=url,
        action="append",
        help=f"an endpoint's /metrics URL, once per collector process (default: {DEFAULT_SCRAPE})",
    )
    monitoring.add_argument(
        "--ca-file", metavar="FILE", help="the CA that signed the endpoints' certificate (https:// URLs)"
    )
    monitoring.add_argument(
        "--user", metavar="NAME", help="the basic-auth user Prometheus scrapes the endpoints as"
    )
    monitoring.add_argument("--password-file", metavar="FILE", help="a file holding that user's password")
    monitoring.add_argument(
        "--force",
        action="store_true",
        help="overwrite files that exist and differ (never a link, a pipe or a folder: those are refused)",
    )
    options.add_logging_options(monitoring, argparse.SUPPRESS)


def prometheus_config(
    scrape: Sequence[str],
    *,
    ca_file: str | None = None,
    user: str | None = None,
    password_file: str | None = None,
) -> str:
    """The text of a Prometheus configuration scraping the ``/metrics`` URLs in ``scrape`` as job ``JOB``
    every 15 s and loading ``rules.yml`` beside it.

    Raises:
        ConfigError: the URLs differ in scheme or path (one job has one of each), one has a user, a query or a
            fragment, only one of ``user`` and ``password_file`` is given, or a value holds a character a
            configuration cannot (``_yaml_text``).
    """
    parts = [urlsplit(_yaml_text("--scrape", address)) for address in scrape]
    for address, part in zip(scrape, parts, strict=True):
        if part.username is not None or part.query or part.fragment:
            msg = f"give --scrape URLs without a user, query or fragment (--user for basic auth): {address}"
            raise ConfigError(msg)
    schemes = {part.scheme for part in parts}
    paths = {part.path or "/metrics" for part in parts}
    if len(schemes) != 1 or len(paths) != 1:
        msg = "give every --scrape URL with the same scheme and path: one scrape job has one of each"
        raise ConfigError(msg)
    if (user is None) != (password_file is None):
        msg = "--user and --password-file go together"
        raise ConfigError(msg)
    lines = [
        "# Prometheus scraping rollout-telemetry endpoints, with the alert and recording rules beside it",
        "# (written by `rollout-telemetry monitoring`).",
        "global:",
        "  scrape_interval: 15s",
        "  evaluation_interval: 15s",
        "",
        "rule_files:",
        "  - rules.yml",
        "",
        "scrape_configs:",
        f"  - job_name: {JOB}",
        f"    scheme: {schemes.pop()}",
        f"    metrics_path: {_quoted('--scrape', paths.pop())}",
    ]
    if ca_file is not None:
        lines += ["    tls_config:", f"      ca_file: {_quoted('--ca-file', str(Path(ca_file).resolve()))}"]
    if user is not None and password_file is not None:
        password = _quoted("--password-file", str(Path(password_file).resolve()))
        lines += [
            "    basic_auth:",
            f"      username: {_quoted('--user', user)}",
            f"      password_file: {password}",
        ]
    lines += ["    static_configs:", "      - targets:"]
    lines += [f"          - {_quoted('--scrape', part.netloc.rpartition('@')[2])}" for part in parts]
    return "\n".join(lines) + "\n"


def _quoted(option: str, value: str) -> str:
    """``value`` (given as ``option``) as a YAML double-quoted scalar (JSON's string syntax, which YAML
    reads), characters kept: every value written into the configuration is checked by ``_yaml_text`` here."""
    return json.dumps(_yaml_text(option, value), ensure_ascii=False)


def _yaml_text(option: str, value: str) -> str:
    """``value``, given as ``option``, if a configuration can hold it as it is: no control character, no lone
    surrogate, no non-character.

    YAML refuses DEL, the C1 controls and U+FFFE/U+FFFF in a file (promtool: "control characters are not
    allowed") and reads NEL (U+0085) as a line break, folded into a space; the C0 controls it would read back
    escaped, but no user name, host, path or file name means one, and ``urlsplit`` drops a tab or a newline
    from a URL unsaid. A lone surrogate is a byte of the command line that is not UTF-8.

    Raises:
        ConfigError: one line naming ``option`` and the first such character, as ``U+XXXX``.
    """
    for char in value:
        code = ord(char)
        if code < 0x20 or 0x7F <= code <= 0x9F:
            what = "the control character"
        elif 0xD800 <= code <= 0xDFFF:
            what = "a byte that is not UTF-8, the lone surrogate"
        elif 0xFDD0 <= code <= 0xFDEF or code & 0xFFFE == 0xFFFE:
            what = "the non-character"
        else:
            continue
        msg = f"{option}: contains {what} U+{code:04X}; a Prometheus configuration cannot hold it as it is"
        raise ConfigError(msg)
    return value


def run(args: argparse.Namespace) -> int:
    """Write the three files (an existing one that differs only with ``--force``) and say how to run them."""
    folder = Path(args.dir)
    texts = {
        CONFIG: prometheus_config(
            args.scrape or [DEFAULT_SCRAPE],
            ca_file=args.ca_file,
            user=args.user,
            password_file=args.password_file,
        )
    }
    from importlib import resources

    packaged = resources.files("rollout_telemetry") / "_monitoring"
    texts |= {name: (packaged / name).read_text(encoding="utf-8") for name in FILES}
    written = {name: text.encode("utf-8") for name, text in texts.items()}
    try:
        folder.mkdir(parents=True, exist_ok=True)
        # Every name is looked at before any is written: a link, a pipe or a folder refuses them all.
        clashes = [
            folder / name
            for name, data in written.items()
            if read_prefix(folder / name, len(data) + 1) not in (None, data)
        ]
        if clashes and not args.force:
            msg = f"{clashes[0]} exists and differs: --force to overwrite it"
            raise ConfigError(msg)
        for name, data in written.items():
            write_whole(folder / name, data)
    except OSError as exc:
        msg = f"cannot write to {folder}: {exc.strerror or exc}"
        raise ConfigError(msg) from None
    config = folder / CONFIG
    print(f"wrote {config} (scraping {', '.join(args.scrape or [DEFAULT_SCRAPE])})")
    for name, what in FILES.items():
        print(f"wrote {folder / name} ({what})")
    print(
        "run Prometheus on them (Debian: apt-get install prometheus):\n"
        f"  prometheus --config.file={config} --storage.tsdb.path={folder / 'data'} "
        "--web.listen-address=127.0.0.1:9090 --enable-feature=exemplar-storage\n"
        f"and import {folder / 'rollout-progress.json'} in Grafana (Dashboards > New > Import)",
        file=sys.stdout,
    )
    return 0
