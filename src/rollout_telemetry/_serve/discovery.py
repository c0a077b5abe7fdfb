"""Prometheus service discovery for exporters that come and go: a target registry with leases.

Each exporter registers its ``host:port`` with labels and renews the registration (its *lease*) while it runs.
A target leaves the registry when it deregisters, when nothing listens on its port any more (a refused
connection: the process serving it is gone), or, at the latest, when its lease has not been renewed for
``lease_seconds``. The registry is served as Prometheus HTTP service discovery (``http_sd_configs``: a JSON
list of target groups) on the package's hardened HTTP stack, with the same TLS and basic-auth options as
``/metrics``, and can be written as a ``file_sd_configs`` file, replaced atomically.
``rollout_telemetry.ray`` runs one of these in a Ray actor.

What a registration may say is bounded, because Prometheus scrapes what the registry lists with its own
credentials and attaches the target's labels to every series it scrapes there:

- a target's host must pass the registry's host rule (on Ray: ``NodeAddresses``, the cluster's own nodes);
- its labels may not be Prometheus's own (``job``, ``instance``, ``__*``) nor those of the exporter's series
  (``RESERVED_LABELS``);
- a target is replaced or removed only by the registrant that registered it (until its lease runs out);
- the registry holds at most ``max_targets`` (``MAX_TARGETS``) targets.

A refusal raises ``TargetRefused`` (a ``ValueError`` naming the rule) to the caller, is counted by reason
(``TargetRegistry.refusals()``) and logged (at the first, second, fourth... of each reason: a flood of
refusals cannot flood the log). The ``/targets`` document is rendered once per change of the registry, not
per request.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import os
import re
import socket
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from rollout_telemetry._contract.labels import MAX_LABEL_LENGTH, label_value
from rollout_telemetry._serve.http import HttpServer
from rollout_telemetry._serve.messages import Request, Response
from rollout_telemetry._serve.serving import Gate, bind, screen
from rollout_telemetry._serve.workers import Workers
from rollout_telemetry._views.series import CATALOGUE
from rollout_telemetry.errors import ConfigError, RefusalReason, TargetRefused

if TYPE_CHECKING:
    from rollout_telemetry._serve.auth import BasicAuth
    from rollout_telemetry._serve.server import TLSConfig

__all__ = [
    "DEFAULT_LEASE_SECONDS",
    "MAX_TARGETS",
    "MAX_TARGET_LABELS",
    "RESERVED_LABELS",
    "DiscoveryServer",
    "FileSD",
    "NodeAddresses",
    "RefusalReason",
    "Target",
    "TargetRefused",
    "TargetRegistry",
    "listening",
]

_log = logging.getLogger("rollout_telemetry.discovery")

DEFAULT_LEASE_SECONDS = 30.0
"""A target whose registration is not renewed for this long leaves discovery, whatever happened to it."""
MAX_TARGETS = 10_000
"""Targets a registry holds at most; a registration for a new address beyond them is refused (``full``).

One per serving process: ten thousand rollout workers. At the cap, with the three labels ``serve_on_ray``
gives, ``/targets`` is about 1.6 MB, rendered once per change in about 20 ms."""
RESERVED_LABELS = frozenset(
    {
        "job",  # Prometheus's own target labels: a target may not choose its job or its instance
        "instance",
        "run",  # the exporter's constant label (RolloutTelemetry(run=...))
        "le",  # histogram buckets and summary quantiles
        "quantile",
        # the labels of the exporter's series: as a target label, one would rename them to exported_<name>
        *(label for family in CATALOGUE for label in family.labels),
    }
)
"""Label names a target may not carry; every name starting with ``__`` is refused too."""
MAX_TARGET_LABELS = 16
"""Labels a target may carry (``serve_on_ray`` sets three); with ``MAX_TARGETS`` they bound the registry."""
DISCOVERY_THREADS = 2
"""Worker threads of a discovery endpoint: they render ``/targets`` (once per change) and check passwords."""
_NODES_MAX_AGE = 60.0  # a known node address is looked up again after this long: a node may have left

_MAX_ADDRESS = 300  # characters of host:port: a DNS name is at most 253
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

        Label values are cut to ``MAX_LABEL_LENGTH`` characters, as every label of the package is.

        Raises:
            TargetRefused: the address is not ``host:port``, the scheme is unknown, a label name is invalid or
                there are more than ``MAX_TARGET_LABELS`` labels (``malformed``), or a label name is reserved
                (``reserved_label``: see ``RESERVED_LABELS``).
        """
        host, _, port = address.rpartition(":") if isinstance(address, str) else ("", "", "")
        if not host or not port.isdigit() or int(port) > 65535 or len(address) > _MAX_ADDRESS:
            raise TargetRefused("malformed", f"a target address is host:port, got {address!r:.100}")
        if scheme not in ("http", "https"):
            raise TargetRefused("malformed", f"scheme must be http or https, got {scheme!r:.20}")
        if not isinstance(labels, Mapping | None) or len(labels or {}) > MAX_TARGET_LABELS:
            msg = f"a target's labels are a mapping of at most {MAX_TARGET_LABELS} names to values"
            raise TargetRefused("malformed", msg)
        for name in labels or {}:
            if not isinstance(name, str) or len(name) > MAX_LABEL_LENGTH or not _LABEL_NAME.fullmatch(name):
                raise TargetRefused("malformed", f"invalid target label name {name!r:.100}")
            if name.startswith("__") or name in RESERVED_LABELS:
                msg = (
                    f"target label {name!r} is reserved (Prometheus's job, instance and __* labels, and the "
                    "labels of the exporter's own series)"
                )
                raise TargetRefused("reserved_label", msg)
        pairs = tuple(sorted((name, label_value(str(value))) for name, value in (labels or {}).items()))
        return cls(address, pairs, "https" if scheme == "https" else "http")

    @property
    def host(self) -> str:
        """The host of the address, without the brackets of an IPv6 address."""
        return self.address.rpartition(":")[0].strip("[]")

    def group(self) -> TargetGroup:
        """The Prometheus target group of this target alone."""
        labels = dict(self.labels)
        if self.scheme == "https":
            labels["__scheme__"] = "https"
        return {"targets": [self.address], "labels": labels}


def _host_key(host: str) -> str:
    """One spelling per address: ``fd00:0::2`` and ``[fd00::2]`` are the same host; names are lower-cased."""
    try:
        return ipaddress.ip_address(host.strip("[]")).compressed
    except ValueError:
        return host.strip("[]").lower()


class NodeAddresses:
    """The host rule of a cluster: a host is accepted if it is the address of one of the cluster's nodes.

    The addresses are read from ``read`` (on Ray, ``ray.nodes()``): again when an unknown host is offered (a
    node may have joined), at most once per ``refresh_seconds`` however many unknown hosts arrive, and when
    the addresses read are older than a minute (a node may have left). Thread-safe.

    Args:
        read: the nodes' addresses now.
        refresh_seconds: the least time between two reads.
        clock: a monotonic clock (tests pass a fake one).
    """

    def __init__(
        self,
        read: Callable[[], Iterable[str]],
        *,
        refresh_seconds: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read = read
        self._refresh_seconds = refresh_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._known: frozenset[str] = frozenset()
        self._read_at: float | None = None

    def __call__(self, host: str) -> bool:
        """Whether ``host`` is the address of a node of the cluster."""
        key = _host_key(host)
        with self._lock:
            now = self._clock()
            fresh = self._read_at is not None and now - self._read_at < _NODES_MAX_AGE
            if key in self._known and fresh:
                return True
            if self._read_at is None or now - self._read_at >= self._refresh_seconds:
                self._read_at = now
                try:
                    self._known = frozenset(_host_key(address) for address in self._read())
                except Exception:  # the cluster did not answer: keep what was known, ask again later
                    _log.warning("reading the cluster's node addresses failed", exc_info=True)
            return key in self._known


@dataclass(slots=True)
class _Entry:
    target: Target
    registrant: str
    renewed: float
    generation: int


class TargetRegistry:
    """The targets currently registered, each with a lease and its registrant; safe to use from many threads.

    Args:
        lease_seconds: how long a registration lasts without renewal.
        clock: a monotonic clock (tests pass a fake one).
        hosts: the host rule: a target whose host it refuses is refused (``foreign_address``); None accepts
            any host (a registry in one process, or tests).
        max_targets: targets held at most (``full`` beyond them).
    """

    def __init__(
        self,
        *,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        hosts: Callable[[str], bool] | None = None,
        max_targets: int = MAX_TARGETS,
    ) -> None:
        if lease_seconds <= 0:
            msg = f"lease_seconds must be positive, got {lease_seconds}"
            raise ConfigError(msg)
        if max_targets < 1:
            msg = f"max_targets must be at least 1, got {max_targets}"
            raise ConfigError(msg)
        self.lease_seconds = lease_seconds
        self.max_targets = max_targets
        self._clock = clock
        self._hosts = hosts
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        self._generation = 0  # moves with every change of what /targets lists
        self._refusals: Counter[RefusalReason] = Counter()
        self._rendering = threading.Lock()
        self._document: tuple[int, bytes] | None = None  # the generation rendered, and its rendering

    def offer(
        self, address: str, labels: Mapping[str, str], scheme: str = "http", *, registrant: str = ""
    ) -> float:
        """Build a target from its parts and register it (``register``); a malformed one is refused and
        counted like any other refusal.

        Raises:
            TargetRefused: see ``Target.of`` and ``register``.
        """
        try:
            target = Target.of(address, labels, scheme)
        except TargetRefused as refused:
            self._count(refused, registrant)
            raise
        return self.register(target, registrant=registrant)

    def register(self, target: Target, *, registrant: str = "") -> float:
        """Add a target or renew its lease; return the lease in seconds.

        Args:
            registrant: who registers (the Ray registry passes the caller's actor or worker id). Only the
                same registrant may replace the target (a new label set) or remove it, until its lease runs
                out; then the address is free for anyone (a new process on a reused port).

        Raises:
            TargetRefused: the host is not one the host rule accepts (``foreign_address``), the address is
                held by another registrant (``held``), or the registry is full (``full``).
        """
        if self._hosts is not None and not self._hosts(target.host):
            msg = f"{target.address}: {target.host} is not an address of a node of the cluster"
            raise self._count(TargetRefused("foreign_address", msg), registrant)
        refused = None
        with self._lock:
            now = self._clock()
            entry = self._entries.get(target.address)
            if entry is not None and self._held_by_another(entry, registrant, now):
                refused = self._held(target.address)
            elif entry is not None and entry.target == target:
                entry.registrant, entry.renewed = registrant, now
            elif entry is None and len(self._entries) >= self.max_targets and not self._expire(now):
                msg = (
                    f"the target registry is full ({self.max_targets} targets); {target.address} was not "
                    "registered"
                )
                refused = TargetRefused("full", msg)
            else:
                self._generation += 1
                self._entries[target.address] = _Entry(target, registrant, now, self._generation)
        if refused is not None:
            raise self._count(refused, registrant)
        return self.lease_seconds

    def deregister(self, address: str, *, registrant: str = "") -> bool:
        """Remove a target; return whether it was registered.

        Raises:
            TargetRefused: another registrant holds the address (``held``).
        """
        with self._lock:
            entry = self._entries.get(address)
            if entry is None:
                return False
            if self._held_by_another(entry, registrant, self._clock()):
                refused = self._held(address)
            else:
                del self._entries[address]
                self._generation += 1
                return entry.registrant == registrant  # another's lapsed registration was not "there"
        raise self._count(refused, registrant)

    def _held_by_another(self, entry: _Entry, registrant: str, now: float) -> bool:
        return entry.registrant != registrant and now - entry.renewed <= self.lease_seconds

    @staticmethod
    def _held(address: str) -> TargetRefused:
        msg = (
            f"{address} is registered by another registrant; it is free once that process's port closes "
            "or its lease runs out"
        )
        return TargetRefused("held", msg)

    def _count(self, refused: TargetRefused, registrant: str) -> TargetRefused:
        """Count a refusal and log it at its 1st, 2nd, 4th, 8th... occurrence of its reason."""
        with self._lock:
            self._refusals[refused.reason] += 1
            count = self._refusals[refused.reason]
        if count & (count - 1) == 0:
            _log.warning(
                "refused a target from %s: %s (%d refused as %s so far)",
                registrant or "an anonymous registrant",
                refused,
                count,
                refused.reason,
            )
        return refused

    def refusals(self) -> dict[RefusalReason, int]:
        """Refusals so far, by reason."""
        with self._lock:
            return dict(self._refusals)

    @property
    def generation(self) -> int:
        """A number that moves with every change of the targets or their labels (a renewal leaves it)."""
        return self._generation

    def targets(self) -> list[Target]:
        """The registered targets, sorted by address."""
        with self._lock:
            return [self._entries[address].target for address in sorted(self._entries)]

    def target_groups(self) -> list[TargetGroup]:
        """The registered targets as Prometheus target groups (``http_sd`` and ``file_sd`` format)."""
        return [target.group() for target in self.targets()]

    def rendered(self) -> bytes | None:
        """The ``/targets`` document if it is rendered for the registry as it is now, else None (cheap)."""
        document = self._document
        return document[1] if document is not None and document[0] == self._generation else None

    def document(self) -> bytes:
        """The target groups as the JSON of ``GET /targets``, rendered once per change of the registry.

        Readers that ask while it is rendered wait for that rendering rather than make another.
        """
        with self._rendering:
            body = self.rendered()
            if body is not None:
                return body
            with self._lock:
                generation = self._generation
                targets = [self._entries[address].target for address in sorted(self._entries)]
            body = json.dumps([target.group() for target in targets], separators=(",", ":")).encode()
            self._document = (generation, body)
            return body

    def expire(self) -> list[str]:
        """Remove targets whose lease has run out; return their addresses."""
        with self._lock:
            return self._expire(self._clock())

    def _expire(self, now: float) -> list[str]:
        gone = sorted(a for a, e in self._entries.items() if now - e.renewed > self.lease_seconds)
        for address in gone:
            del self._entries[address]
        if gone:
            self._generation += 1
        return gone

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
                    self._generation += 1
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


class _Endpoint:
    """What discovery answers: ``/targets`` (behind auth, if any), ``/healthz``, 404 and 405 otherwise."""

    def __init__(self, registry: TargetRegistry, gate: Gate | None, workers: Workers) -> None:
        self._registry = registry
        self._gate = gate
        self._workers = workers
        self._rendering: asyncio.Future[bytes] | None = None

    async def __call__(self, request: Request) -> Response:
        refusal = await screen(request, paths=("/targets",), gate=self._gate)
        if refusal is not None:
            return refusal
        return Response(200, (("Content-Type", "application/json"),), await self._document())

    async def _document(self) -> bytes:
        """The current rendering, on the event loop; a stale one is rendered on a worker, once for all."""
        body = self._registry.rendered()
        if body is not None:
            return body
        if self._rendering is None:
            rendering = self._workers.run(self._registry.document)
            rendering.add_done_callback(self._rendered)
            self._rendering = rendering
        return await asyncio.shield(self._rendering)

    def _rendered(self, rendering: asyncio.Future[bytes]) -> None:
        if self._rendering is rendering:
            self._rendering = None


class DiscoveryServer:
    """Serves a registry as Prometheus HTTP service discovery: ``GET /targets`` (and ``/healthz``).

    On the same stack as ``/metrics`` (``_serve.http``): one event-loop thread holds every connection under
    its deadlines and the connection cap, ``threads`` worker threads render ``/targets``, and passwords are
    checked on threads of their own (``serving.Gate``). ``tls`` and ``auth`` are those of
    ``RolloutTelemetry.serve``; ``/healthz`` stays open.

    Raises:
        ServeError: the address cannot be bound.
        ConfigError: a TLS file cannot be loaded.
    """

    def __init__(
        self,
        registry: TargetRegistry,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        tls: TLSConfig | None = None,
        auth: BasicAuth | None = None,
        threads: int = DISCOVERY_THREADS,
    ) -> None:
        context = tls.context() if tls is not None else None
        listener = bind(host, port, 1, what="service discovery")
        self.host = host
        self.port: int = listener.getsockname()[1]
        self._tls = tls
        self._workers = Workers(threads)
        self._gate = Gate(auth) if auth is not None else None
        self._http = HttpServer(listener, _Endpoint(registry, self._gate, self._workers), tls=context)

    @property
    def url(self) -> str:
        """The URL to give ``http_sd_configs``."""
        scheme = "https" if self._tls is not None else "http"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{scheme}://{host}:{self.port}/targets"

    def stop(self) -> None:
        """Stop serving and release the port."""
        self._http.stop()
        self._workers.close()
        if self._gate is not None:
            self._gate.close()
