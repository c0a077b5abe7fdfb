"""The target registry of service discovery: the targets registered now, each with a lease and its registrant.

Each exporter registers its ``host:port`` with labels and renews the registration (its *lease*) while it runs.
A target leaves the registry when it deregisters, when nothing listens on its port any more (a refused
connection: the process serving it is gone), or, at the latest, when its lease has not been renewed for
``lease_seconds``. Beyond what a target may be (``targets``):

- a target is replaced or removed only by the registrant that registered it (until its lease runs out);
- the registry holds at most ``max_targets`` (``MAX_TARGETS``) targets.

A refusal raises ``TargetRefused`` (a ``ValueError`` naming the rule) to the caller, is counted by reason
(``TargetRegistry.refusals()``) and logged (at the first, second, fourth... of each reason: a flood of
refusals cannot flood the log). The ``/targets`` document is rendered once per change of the registry, not
per request.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from rollout_telemetry._ray.targets import Target, TargetGroup
from rollout_telemetry.errors import ConfigError, RefusalReason, TargetRefused

__all__ = ["DEFAULT_LEASE_SECONDS", "MAX_TARGETS", "TargetRegistry", "listening"]

_log = logging.getLogger("rollout_telemetry.discovery")

DEFAULT_LEASE_SECONDS = 30.0
"""A target whose registration is not renewed for this long leaves discovery, whatever happened to it."""
MAX_TARGETS = 10_000
"""Targets a registry holds at most; a registration for a new address beyond them is refused (``full``).

One per serving process: ten thousand rollout workers. At the cap ``/targets`` is rendered once per change,
not per request."""

Probe = Callable[[str], bool | None]
"""Given ``host:port``: True if something accepts connections there, False if refused, None if unknown."""


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
        try:
            address = Target.of(address).address  # in the one spelling it was registered under
        except TargetRefused:
            return False  # not an address: nothing registered under it
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
