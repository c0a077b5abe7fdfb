"""The Prometheus exposition: prometheus_client ``Collector``s that read one snapshot per scrape.

Nothing is written on the recording path; each scrape takes one consistent snapshot and formats the
families of the catalogue (``rollout_telemetry.series``) from it. Families with no samples are left out, so
a healthy run publishes only the always-present set. ``describe()`` returns every family a collector can
produce, as prometheus_client's contract asks: registering a collector twice fails, and ``?name[]=``
filtering finds the families.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Exemplar

from rollout_telemetry._contract.outcome import Disposition
from rollout_telemetry._store.coverage import Coverage, CoverageSnapshot
from rollout_telemetry._store.groups import GroupsSnapshot
from rollout_telemetry._store.snapshot import AccountSnapshot
from rollout_telemetry._views.family import Family
from rollout_telemetry._views.run_series import COVERAGE_FAMILIES, GROUP_FAMILIES, SPAN_FAMILIES
from rollout_telemetry._views.series import FAMILIES, HISTOGRAM_VIEWS

__all__ = ["AccountCollector", "CoverageCollector", "GroupsCollector", "SpanStatsCollector"]

S = TypeVar("S")

_TYPES: dict[str, type[CounterMetricFamily] | type[GaugeMetricFamily] | type[HistogramMetricFamily]] = {
    "counter": CounterMetricFamily,
    "gauge": GaugeMetricFamily,
    "histogram": HistogramMetricFamily,
}


class _CatalogueCollector(Collector, Generic[S]):
    """Formats catalogue families from one snapshot per scrape."""

    def __init__(
        self,
        read_snapshot: Callable[[], S],
        families: Sequence[Family[S]],
        const_labels: Mapping[str, str] | None,
    ) -> None:
        self._read = read_snapshot
        self._families = tuple(families)
        const = dict(const_labels or {})
        self._names = tuple(const)
        self._values = tuple(const.values())

    def _empty(self, family: Family[Any]) -> CounterMetricFamily | GaugeMetricFamily | HistogramMetricFamily:
        return _TYPES[family.type](family.name, family.help, labels=[*self._names, *family.labels])

    def _described(self) -> Iterator[Family[Any]]:
        yield from self._families

    def describe(self) -> Iterable[Metric]:
        """Every family this collector can publish, without samples."""
        return [self._empty(family) for family in self._described()]

    def collect(self) -> Iterator[Metric]:
        """Yield the families of one snapshot; families with no samples are left out."""
        snap = self._read()
        values = self._values
        for family in self._families:
            metric: Any = self._empty(family)  # a counter or a gauge: add_metric(labels, value)
            exemplar = self._exemplars(family, snap)
            for labels, value in family.sample(snap):
                metric.add_metric([*values, *labels], value)
                if exemplar is not None:
                    ids = exemplar.get(labels)
                    if ids is not None:  # the OpenMetrics exposition shows it; the classic one leaves it out
                        metric.samples[-1] = metric.samples[-1]._replace(exemplar=_exemplar(ids, 1.0))
            if metric.samples:
                yield metric
        yield from self._more(snap)

    def _exemplars(self, family: Family[S], snap: S) -> Mapping[tuple[str, ...], tuple[str, str]] | None:
        return None

    def _more(self, snap: S) -> Iterator[Metric]:
        return iter(())


class AccountCollector(_CatalogueCollector[AccountSnapshot]):
    """Builds every ``rollout_*`` family of the account, and its histograms, from one snapshot.

    Args:
        read_snapshot: returns a fresh, consistent account snapshot.
        const_labels: labels added to every series (for example ``run``).
    """

    def __init__(
        self, read_snapshot: Callable[[], AccountSnapshot], const_labels: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(read_snapshot, FAMILIES, const_labels)

    def _described(self) -> Iterator[Family[Any]]:
        yield from FAMILIES
        for view in HISTOGRAM_VIEWS:
            yield view.family

    def _exemplars(
        self, family: Family[AccountSnapshot], snap: AccountSnapshot
    ) -> Mapping[tuple[str, ...], tuple[str, str]] | None:
        # The trace of the latest failed or masked rollout of each (agent, kind) that had a span.
        disposition = _EXEMPLARY.get(family.name)
        if disposition is None:
            return None
        return {
            (agent.agent, kind): ids
            for agent in snap.agents
            for (d, kind), ids in agent.exemplars.items()
            if d is disposition
        }

    def _more(self, snap: AccountSnapshot) -> Iterator[Metric]:
        for view in HISTOGRAM_VIEWS:
            histogram = self._empty(view.family)
            assert isinstance(histogram, HistogramMetricFamily)
            for agent in snap.agents:
                if view.has(agent):
                    buckets: list[Any] = view.buckets(agent)
                    for index, (trace_id, span_id, observed) in view.exemplars(agent).items():
                        buckets[index] = (*buckets[index], _exemplar((trace_id, span_id), observed))
                    histogram.add_metric([*self._values, agent.agent], buckets, view.total(agent))
            if histogram.samples:
                yield histogram


_EXEMPLARY = {"rollout_failed_total": Disposition.FAILED, "rollout_masked_total": Disposition.MASKED}
"""The counters whose samples carry the trace of their latest occurrence as an exemplar."""


def _exemplar(ids: tuple[str, str], value: float) -> Exemplar:
    return Exemplar({"trace_id": ids[0], "span_id": ids[1]}, value)


class CoverageCollector(_CatalogueCollector[CoverageSnapshot]):
    """Publishes the run coverage account: ``rollout_run_rollouts``, ``rollout_run_expected``, retries."""

    def __init__(self, coverage: Coverage, const_labels: Mapping[str, str] | None = None) -> None:
        super().__init__(coverage.snapshot, COVERAGE_FAMILIES, const_labels)


class GroupsCollector(_CatalogueCollector[GroupsSnapshot]):
    """Publishes ``rollout_groups_total{state}`` from one groups snapshot per scrape."""

    def __init__(
        self, read_snapshot: Callable[[], GroupsSnapshot], const_labels: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(read_snapshot, GROUP_FAMILIES, const_labels)


class SpanStatsCollector(_CatalogueCollector[Mapping[str, int]]):
    """Publishes ``rollout_telemetry_spans_total{result}`` from a function returning the counts by result."""

    def __init__(
        self, read_counts: Callable[[], Mapping[str, int]], const_labels: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(read_counts, SPAN_FAMILIES, const_labels)
