"""``rollout-telemetry ray-targets``: the scrape targets ``serve_on_ray()`` registered on a Ray cluster.

Ray is imported when the command runs, never when the command line loads (it needs rollout-telemetry[ray]).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from rollout_telemetry._cli import options
from rollout_telemetry._cli.args import OneLineParser, port

__all__ = ["NAME", "add_parser", "run"]

NAME = "ray-targets"


def add_parser(commands: argparse._SubParsersAction[OneLineParser]) -> None:
    targets = commands.add_parser(
        NAME,
        help="print the scrape targets registered by serve_on_ray() on a Ray cluster",
        description=(
            "Connect to a Ray cluster and print the target groups of a namespace's target registry, as "
            "Prometheus's http_sd_configs reads them (JSON), or with --url the URL to give http_sd_configs. "
            "With --start, first create the registry (a detached actor on this node, which outlives the "
            "command) with the endpoint's options, as serve takes them, and print its URL; an existing "
            "registry keeps the options it was created with. Needs rollout-telemetry[ray]."
        ),
    )
    targets.add_argument(
        "--address", metavar="ADDRESS", required=True, help="the Ray cluster's address (e.g. 10.0.0.1:6379)"
    )
    targets.add_argument(
        "--namespace", metavar="NAME", required=True, help="the Ray namespace of the run's registry"
    )
    targets.add_argument(
        "--name", metavar="NAME", default=None, help="the registry actor's name (default: the library's)"
    )
    targets.add_argument("--url", action="store_true", help="print the http_sd_configs URL instead")
    start = targets.add_argument_group("starting the registry")
    start.add_argument(
        "--start", action="store_true", help="create the registry if there is none, then print its URL"
    )
    start.add_argument(
        "--host",
        metavar="ADDRESS",
        default=None,
        help="address discovery binds (default: this node's address as Ray reports it)",
    )
    start.add_argument("--port", type=port, default=0, help="port of /targets (default: 0, a free one)")
    start.add_argument(
        "--file-sd",
        metavar="FILE",
        default=None,
        help="also write a file_sd_configs file here (default: none, no file)",
    )
    options.add_security_options(targets)
    options.add_logging_options(targets, argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    """Print the registry's target groups (or its URL), creating it with ``--start``; 2 if there is none."""
    registry_options = (args.host, args.port, args.file_sd, args.tls_cert, args.tls_key, args.tls_client_ca)
    security = (args.basic_auth_user, args.basic_auth_hash_file, args.basic_auth_hash_env)
    if not args.start and any((*registry_options, *security)):
        msg = "--host, --port, --file-sd and the security flags go with --start (they create the registry)"
        raise ValueError(msg)
    tls, auth = options.endpoint_security(args)
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
