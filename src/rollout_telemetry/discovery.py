"""Prometheus service discovery for exporters that come and go: a target registry with leases.

Standard library only. Each exporter registers its ``host:port`` with labels and renews the registration
(its *lease*) while it runs. A target leaves the registry when it deregisters, when nothing listens on its
port any more (a refused connection: the process serving it is gone), or, at the latest, when its lease has
not been renewed for ``lease_seconds``. The registry is served as Prometheus HTTP service discovery
(``http_sd_configs``: a JSON list of target groups) and can be written as a ``file_sd_configs`` file,
replaced atomically. ``rollout_telemetry.ray`` runs one of these in a Ray actor.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal

__all__ = [
    "DEFAULT_LEASE_SECONDS",
    "DiscoveryServer",
    "FileSD",
    "Target",
    "TargetRegistry",
    "listening",
]

_log = logging.getLogger("rollout_telemetry.discovery")

DEFAULT_LEASE_SECONDS = 30.0
"""A target whose registration is not renewed for this long leaves discovery, whatever happened to it."""

_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")

TargetGroup = dict[str, Any]
Probe = Callable[[str], bool | None]
"""Given ``host:port``: True if something accepts connections there, False if refused, None if unknown."""


@dataclass(frozen=True, slots=True)
class Target:
    """One scrape target: its ``host:port``, its labels and its scheme."""

    address: str
    labels: tuple[tuple[str, str], ...] = ()
    scheme: Literal["http", "https"] = "http"

    @classmethod
    def of(cls, address: str, labels: Mapping[str, str] | None = None, scheme: str = "http") -> Target:
        """Build a target; labels are kept sorted so equal targets compare equal.

        Raises:
            ValueError: the address is not ``host:port``, a label name is reserved, or the scheme unknown.
        """
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            msg = f"a target address is host:port, got {address!r}"
            raise ValueError(msg)
        if scheme not in ("http", "https"):
            msg = f"scheme must be http or https, got {scheme!r}"
            raise ValueError(msg)
        for name in labels or {}:
            if name.startswith("__") or not _LABEL_NAME.fullmatch(name):
                msg = f"invalid target label name {name!r}"
                raise ValueError(msg)
        pairs = tuple(sorted((str(k), str(v)) for k, v in (labels or {}).items()))
        return cls(address, pairs, "https" if scheme == "https" else "http")

    def group(self) -> TargetGroup:
        """The Prometheus target group of this target alone."""
        labels = dict(self.labels)
        if self.scheme == "https":
            labels["__scheme__"] = "https"
        return {"targets": [self.address], "labels": labels}


@dataclass(slots=True)
class _Entry:
    target: Target
    renewed: float
    generation: int


class TargetRegistry:
    """The targets currently registered, each with a lease; safe to use from many threads.

    Args:
        lease_seconds: how long a registration lasts without renewal.
        clock: a monotonic clock (tests pass a fake one).
    """

    def __init__(
        self, *, lease_seconds: float = DEFAULT_LEASE_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if lease_seconds <= 0:
            msg = f"lease_seconds must be positive, got {lease_seconds}"
            raise ValueError(msg)
        self.lease_seconds = lease_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        self._generation = 0

    def register(self, target: Target) -> float:
        """Add a target or renew its lease; return the lease in seconds.

        A registration for an address already held by another target (a new process on a reused port)
        replaces it.
        """
        with self._lock:
            entry = self._entries.get(target.address)
            if entry is not None and entry.target == target:
                entry.renewed = self._clock()
            else:
                self._generation += 1
                self._entries[target.address] = _Entry(target, self._clock(), self._generation)
        return self.lease_seconds

    def deregister(self, address: str) -> bool:
        """Remove a target; return whether it was registered."""
        with self._lock:
            return self._entries.pop(address, None) is not None

    def targets(self) -> list[Target]:
        """The registered targets, sorted by address."""
        with self._lock:
            return [self._entries[address].target for address in sorted(self._entries)]

    def target_groups(self) -> list[TargetGroup]:
        """The registered targets as Prometheus target groups (``http_sd`` and ``file_sd`` format)."""
        return [target.group() for target in self.targets()]

    def expire(self) -> list[str]:
        """Remove targets whose lease has run out; return their addresses."""
        now = self._clock()
        with self._lock:
            gone = [a for a, e in self._entries.items() if now - e.renewed > self.lease_seconds]
            for address in gone:
                del self._entries[address]
        return sorted(gone)

    def prune(self, probe: Probe, *, workers: int = 8) -> list[str]:
        """Expire leases, then remove targets the probe finds refusing connections; return what left.

        A target registered again while it was being probed (a new process on the same port) is kept.
        """
        gone = self.expire()
        with self._lock:
            probed = [(a, e.generation) for a, e in self._entries.items()]
        if not probed:
            return gone
        with ThreadPoolExecutor(max_workers=min(workers, len(probed))) as pool:
            answers = list(pool.map(probe, [address for address, _ in probed]))
        with self._lock:
            for (address, generation), answer in zip(probed, answers, strict=True):
                entry = self._entries.get(address)
                if answer is False and entry is not None and entry.generation == generation:
                    del self._entries[address]
                    gone.append(address)
        return sorted(gone)


def listening(address: str, *, timeout: float = 1.0) -> bool | None:
    """Whether something accepts TCP connections at ``host:port``: False only if refused, None if unknown.

    Only a refused connection is taken as "gone": a timeout (a busy or unreachable node) proves nothing,
    and such a target is left to its lease.
    """
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return True
    except ConnectionRefusedError:
        return False
    except OSError:
        return None


class FileSD:
    """Writes target groups to a ``file_sd_configs`` file atomically (a rename), only when they change."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._written: str | None = None
        self._lock = threading.Lock()

    def write(self, groups: list[TargetGroup]) -> bool:
        """Write the groups unless the file already holds them; return whether it was written."""
        text = json.dumps(groups, indent=1, sort_keys=True) + "\n"
        with self._lock:
            if text == self._written:
                return False
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, temporary = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as file:
                    file.write(text)
                    file.flush()
                    os.fsync(file.fileno())
                os.chmod(temporary, 0o644)
                os.replace(temporary, self.path)  # Prometheus never sees a half-written file
            except BaseException:
                Path(temporary).unlink(missing_ok=True)
                raise
            self._written = text
            return True


class _Handler(BaseHTTPRequestHandler):
    server: _SDHTTPServer
    timeout = 5.0

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] == "/targets":
            body = json.dumps(self.server.registry.target_groups()).encode()
            self._send(200, "application/json", body)
        elif self.path == "/healthz":
            self._send(200, "text/plain; charset=utf-8", b"ok\n")
        else:
            self._send(404, "text/plain; charset=utf-8", b"not found: try /targets\n")

    def _send(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        _log.debug("%s " + format, self.address_string(), *args)


class _SDHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], registry: TargetRegistry) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.registry = registry
        super().__init__(address, _Handler)


class DiscoveryServer:
    """Serves a registry as Prometheus HTTP service discovery: ``GET /targets`` (and ``/healthz``)."""

    def __init__(self, registry: TargetRegistry, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self._server = _SDHTTPServer((host, port), registry)
        self.host = host
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="rollout-telemetry-sd",
            daemon=True,
        )
        self._thread.start()

    @property
    def url(self) -> str:
        """The URL to give ``http_sd_configs``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/targets"

    def stop(self) -> None:
        """Stop serving and release the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
