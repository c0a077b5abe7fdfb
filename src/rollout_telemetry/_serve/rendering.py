"""The bodies ``/metrics`` and ``/rollouts`` answer with, made on a worker thread: the exposition (whole,
restricted to some sample names, gzipped) and the listing of the rollouts in flight, encoded once for any
``limit``."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from rollout_telemetry._recording.stalls import MAX_ROLLOUTS_LIMIT
from rollout_telemetry.exporters._exposition import encode

__all__ = ["Families", "Listing", "encode_body"]

_SUFFIXES = {
    "counter": ("_total", "_created"),
    "summary": ("_sum", "_count", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "gaugehistogram": ("_bucket", "_gcount", "_gsum"),
    "info": ("_info",),
}
"""The names a family's samples can have beside the family's own, by type, as prometheus_client names them."""


def _sample_names(family: Metric) -> Iterator[str]:
    yield family.name
    for suffix in _SUFFIXES.get(family.type, ()):
        yield family.name + suffix


class Families(Collector):
    """Metric families collected once, restricted to some sample names, for an encoder to read."""

    def __init__(self, families: list[Metric], names: frozenset[str]) -> None:
        self._families = families
        self._names = names

    def collect(self) -> Iterator[Metric]:
        """prometheus_client's name filter: a family keeps the samples with one of the names, if any. A family
        none of whose sample names is asked for is passed over unread (its samples may be made as read)."""
        for family in self._families:
            if self._names.isdisjoint(_sample_names(family)):
                continue
            samples = [sample for sample in family.samples if sample.name in self._names]
            if samples:
                kept = Metric(family.name, family.documentation, family.type, family.unit)
                kept.samples = samples
                yield kept


GZIP_LEVEL = 1
"""zlib's fastest level: compressing is CPU the training process gives at every scrape, and the fastest level
takes a small part of the default's (9) for a slightly larger body (docs/performance.md, "The endpoint
scraped from another process")."""


def encode_body(collector: Collector, accept: str, gzipped: bool) -> tuple[bytes, str]:
    """The exposition of what ``collector`` collects (on a worker thread): prometheus_client's bytes, the
    package's own collectors writing theirs without an object per series (``exporters._exposition``)."""
    body, content_type = encode(collector, accept)
    return (gzip.compress(body, GZIP_LEVEL) if gzipped else body), content_type


@dataclass(frozen=True, slots=True)
class Listing:
    """The longest listing of rollouts in flight (``listing``), encoded once: its opening and each rollout's
    JSON, so a response for any ``limit`` is a join of bytes already made."""

    listing: Mapping[str, object]
    opening: bytes
    records: list[bytes]

    @classmethod
    def of(cls, rollouts: Callable[[int], Mapping[str, object]]) -> Listing:
        """The listing now (on the read thread)."""
        listing = rollouts(MAX_ROLLOUTS_LIMIT)
        head = {key: value for key, value in listing.items() if key != "rollouts"}
        records = listing.get("rollouts", [])
        assert isinstance(records, list)
        opening = json.dumps(head, separators=(",", ":"))[:-1] + ("," if head else "") + '"rollouts":['
        encoded = [json.dumps(record, separators=(",", ":")).encode() for record in records]
        return cls(listing, opening.encode(), encoded)
