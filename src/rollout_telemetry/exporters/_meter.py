"""OpenTelemetry metrics from the same account: ``RolloutTelemetry(meter_provider=...)``.

It registers observable (asynchronous) instruments (``instrument_meter``) whose callbacks all read one
snapshot per collection: recording costs nothing extra, every value of a collection agrees with the others,
and the names and appear-only-when rules are those of the Prometheus exposition (counters drop the ``_total``
suffix, as OpenTelemetry names do; a Prometheus exporter downstream adds it back). The API has no observable
histogram, so each histogram (rollout durations, measured rewards) is published as its ``_sum``, ``_count``
and ``_bucket{le}`` counters; spans carry each duration.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping

from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation

from rollout_telemetry._store.groups import GroupsSnapshot
from rollout_telemetry._store.snapshot import AccountSnapshot, AgentSnapshot
from rollout_telemetry._views.family import Family
from rollout_telemetry._views.run_series import GROUP_FAMILIES
from rollout_telemetry._views.series import FAMILIES, HISTOGRAM_VIEWS, Histogram

__all__ = ["instrument_meter"]


class _SharedSnapshot:
    """One account snapshot per collection, shared by the callbacks of every instrument.

    Each instrument gets a position, in the order the instruments are created. The SDK collects a reader by
    calling the callbacks of every asynchronous instrument once, in creation order, while it holds the
    provider's collection lock (``SynchronousMeasurementConsumer.collect``; collections of several readers
    of one provider take turns under that lock). So a callback at a position not after the previous one's
    starts a new collection and takes a new snapshot; every later callback of the collection reuses it. An
    instrument the SDK skips (a duplicate registration, a disabled meter) or a collection cut short by its
    timeout does not change that: positions still only rise within a collection. The test pins this down
    against the SDK: N collections, N snapshots, and identities across instruments hold in each.
    """

    def __init__(self, read: Callable[[], AccountSnapshot]) -> None:
        self._read = read
        self._lock = threading.Lock()
        self._position = -1
        self._snap: AccountSnapshot | None = None

    def at(self, position: int) -> AccountSnapshot:
        """The snapshot of the collection the callback at ``position`` belongs to."""
        with self._lock:
            if self._snap is None or position <= self._position:
                self._snap = self._read()
            self._position = position
            return self._snap


Callback = Callable[[CallbackOptions], Iterable[Observation]]
_Part = Callable[[Histogram, AgentSnapshot], Iterable[tuple[tuple[str, ...], float]]]
"""An agent's samples of one counter of a histogram: (label values after the agent's, value) pairs."""


class _Attributes:
    """Each series' attributes, made once and handed to every collection after.

    A dict of strings is not tracked by the garbage collector, and these live as long as the series: a
    collection makes no attributes of its own, only the ``Observation`` it must give each series (what the
    SDK makes of it per series, and keeps, is the SDK's: see ``instrument_meter``).
    """

    __slots__ = ("_const", "_made", "_names")

    def __init__(self, const: Mapping[str, str], names: tuple[str, ...]) -> None:
        self._const = const
        self._names = names
        self._made: dict[tuple[str, ...], Mapping[str, str]] = {}

    def __call__(self, labels: tuple[str, ...]) -> Mapping[str, str]:
        attributes = self._made.get(labels)
        if attributes is None:
            attributes = self._made[labels] = {**self._const, **dict(zip(self._names, labels, strict=True))}
        return attributes


def _family(
    shared: _SharedSnapshot, position: int, family: Family[AccountSnapshot], const: Mapping[str, str]
) -> Callback:
    attributes = _Attributes(const, family.labels)

    def observe(options: CallbackOptions) -> Iterator[Observation]:
        for labels, value in family.sample(shared.at(position)):
            yield Observation(value, attributes(labels))

    return observe


def _histogram_part(  # noqa: PLR0917 - one call site
    shared: _SharedSnapshot,
    position: int,
    const: Mapping[str, str],
    view: Histogram,
    names: tuple[str, ...],
    part: _Part,
) -> Callback:
    attributes = _Attributes(const, ("agent", *names))

    def observe(options: CallbackOptions) -> Iterator[Observation]:
        for agent in shared.at(position).agents:
            if view.has(agent):
                for labels, value in part(view, agent):
                    yield Observation(value, attributes((agent.agent, *labels)))

    return observe


def _buckets(view: Histogram, agent: AgentSnapshot) -> Iterator[tuple[tuple[str, ...], float]]:
    for bound, count in view.buckets(agent):
        yield (bound,), count


def _total(view: Histogram, agent: AgentSnapshot) -> Iterator[tuple[tuple[str, ...], float]]:
    total = view.total(agent)
    if total is not None:  # not beside negative buckets: it would not be a counter (series.monotonic_sum)
        yield (), total


# The OpenTelemetry API has no asynchronous histogram (only observable counters, up-down counters and
# gauges), so each histogram the account keeps is published as counters, as Prometheus spells it.
_HISTOGRAM_PARTS: tuple[tuple[str, str | None, str, tuple[str, ...], _Part], ...] = (
    ("sum", None, "The sum of the observed values", (), _total),
    ("count", "{rollout}", "The number of observations", (), lambda view, a: (((), view.count(a)),)),
    ("bucket", "{rollout}", "Observations at most the le bound, cumulative as in Prometheus", ("le",),
     _buckets),
)  # fmt: skip
"""(suffix, unit (None: the family's), description, label names after the agent, samples) of each
histogram's counters."""


def instrument_meter(
    meter_provider: MeterProvider,
    snapshot: Callable[[], AccountSnapshot],
    groups: Callable[[], GroupsSnapshot],
    const_labels: Mapping[str, str],
) -> None:
    """Publish the account (read by ``snapshot``) and the groups through observable instruments on
    ``meter_provider``: ``RolloutTelemetry(meter_provider=...)``.

    Every collection reads one snapshot, shared by all the instruments' callbacks; the groups' family reads
    one groups snapshot of its own. The account hands out an unchanged agent's snapshot again, so a
    collection derives only what changed, and each series' attributes are made once (``_Attributes``).

    What the SDK does not allow: a callback must give one ``Observation`` object per series at every
    collection (an observable counter's series that is not observed is gone from that export), and the SDK
    makes of each a ``Measurement``, a copy of its attributes and a data point at every collection, objects
    the garbage collector tracks. Unlike the Prometheus endpoint's text, an OpenTelemetry collection
    therefore leaves several objects per series to the collector whatever the callbacks do.
    """
    meter = meter_provider.get_meter("rollout_telemetry")
    shared = _SharedSnapshot(snapshot)
    const = dict(const_labels)
    for position, family in enumerate(FAMILIES):
        callback = _family(shared, position, family, const)
        create = (
            meter.create_observable_counter if family.type == "counter" else meter.create_observable_gauge
        )
        create(family.otel_name, callbacks=[callback], unit=family.unit, description=family.help)
    position = len(FAMILIES)
    for view in HISTOGRAM_VIEWS:
        for suffix, unit, description, names, part in _HISTOGRAM_PARTS:
            meter.create_observable_counter(
                f"{view.family.name}_{suffix}",
                callbacks=[_histogram_part(shared, position, const, view, names, part)],
                unit=unit or view.family.unit,
                description=f"{description} of {view.family.name}: {view.family.help}",
            )
            position += 1
    for group_family in GROUP_FAMILIES:
        meter.create_observable_counter(
            group_family.otel_name,
            callbacks=[_groups(groups, group_family, const)],
            unit=group_family.unit,
            description=group_family.help,
        )


def _groups(
    groups: Callable[[], GroupsSnapshot], family: Family[GroupsSnapshot], const: Mapping[str, str]
) -> Callback:
    attributes = _Attributes(const, family.labels)

    def observe(options: CallbackOptions) -> Iterator[Observation]:
        for labels, value in family.sample(groups()):
            yield Observation(value, attributes(labels))

    return observe
