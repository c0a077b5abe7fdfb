"""What a target of service discovery may be: a ``host:port`` with a scheme and a few labels, on a host the
registry's host rule accepts.

What a registration may say is bounded, because Prometheus scrapes what the registry lists with its own
credentials and attaches the target's labels to every series it scrapes there:

- a target's host must pass the registry's host rule (on Ray: ``NodeAddresses``, the cluster's own nodes);
- its labels may not be Prometheus's own (``job``, ``instance``, ``__*``) nor those of the exporter's series
  (``RESERVED_LABELS``), and there are at most ``MAX_TARGET_LABELS`` of them.

The registry that holds the targets is ``target_registry``.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from rollout_telemetry._contract.labels import MAX_LABEL_LENGTH, label_value
from rollout_telemetry._contract.shown import shown
from rollout_telemetry._views.series import CATALOGUE
from rollout_telemetry.errors import TargetRefused

__all__ = ["RESERVED_LABELS", "NodeAddresses", "Target", "TargetGroup"]

_log = logging.getLogger("rollout_telemetry.discovery")

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
_NODES_MAX_AGE = 60.0  # a known node address is looked up again after this long: a node may have left

_MAX_ADDRESS = 300  # characters of host:port: a DNS name is at most 253
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")

TargetGroup = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Target:
    """One scrape target: its ``host:port``, its labels and its scheme."""

    address: str
    labels: tuple[tuple[str, str], ...] = ()
    scheme: Literal["http", "https"] = "http"

    @classmethod
    def of(cls, address: str, labels: Mapping[str, str] | None = None, scheme: str = "http") -> Target:
        """Build a target; its address in one spelling and its labels sorted, so equal targets compare equal.

        Label values are cut to ``MAX_LABEL_LENGTH`` characters, as every label of the package is.

        Raises:
            TargetRefused: the address is not ``host:port`` (a port from 1 to 65535), the scheme is unknown,
                a label name is invalid or there are more than ``MAX_TARGET_LABELS`` labels (``malformed``),
                or a label name is reserved (``reserved_label``: see ``RESERVED_LABELS``).
        """
        host, _, port = address.rpartition(":") if isinstance(address, str) else ("", "", "")
        if (
            not host.strip("[]")
            or not (port.isascii() and port.isdigit())
            or not 0 < int(port) <= 65535
            or len(address) > _MAX_ADDRESS
        ):
            raise TargetRefused("malformed", f"a target address is host:port, got {shown(address, 100)}")
        # One spelling per target, so that no alias ([10.0.0.1]:9464, 10.0.0.1:09464, FD00:0::2) is a second
        # target of the same exporter, scraped and summed twice.
        key = _host_key(host)
        address = f"[{key}]:{int(port)}" if ":" in key else f"{key}:{int(port)}"
        if scheme not in ("http", "https"):
            raise TargetRefused("malformed", f"scheme must be http or https, got {shown(scheme, 20)}")
        if not isinstance(labels, Mapping | None) or len(labels or {}) > MAX_TARGET_LABELS:
            msg = f"a target's labels are a mapping of at most {MAX_TARGET_LABELS} names to values"
            raise TargetRefused("malformed", msg)
        for name in labels or {}:
            if not isinstance(name, str) or len(name) > MAX_LABEL_LENGTH or not _LABEL_NAME.fullmatch(name):
                raise TargetRefused("malformed", f"invalid target label name {shown(name, 100)}")
            if name.startswith("__") or name in RESERVED_LABELS:
                msg = (
                    f"target label {shown(name, 100)} is reserved (Prometheus's job, instance and __* "
                    "labels, and the labels of the exporter's own series)"
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
