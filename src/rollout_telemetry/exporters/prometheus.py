"""The Prometheus exposition: a prometheus_client ``Collector`` that reads an account snapshot at scrape time.

Nothing is written on the recording path; each scrape takes one consistent snapshot and formats the
families of ``rollout_telemetry.series`` from it. Families with no samples are left out, so a healthy run
publishes only the always-present set.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from rollout_telemetry.account import AccountSnapshot
from rollout_telemetry.series import DURATION_HISTOGRAM, FAMILIES, duration_buckets

__all__ = ["AccountCollector"]

_TYPES: dict[str, type[CounterMetricFamily] | type[GaugeMetricFamily]] = {
    "counter": CounterMetricFamily,
    "gauge": GaugeMetricFamily,
}


class AccountCollector(Collector):
    """Builds every ``rollout_*`` metric family from one snapshot per scrape.

    Args:
        read_snapshot: returns a fresh, consistent account snapshot.
        const_labels: labels added to every series (for example ``run``).
    """

    def __init__(
        self,
        read_snapshot: Callable[[], AccountSnapshot],
        const_labels: Mapping[str, str] | None = None,
    ) -> None:
        self._read = read_snapshot
        const = dict(const_labels or {})
        self._names = tuple(const)
        self._values = tuple(const.values())

    def describe(self) -> Iterable[Metric]:
        """Nothing up front: which families exist depends on what has happened."""
        return ()

    def collect(self) -> Iterator[Metric]:
        """Yield the families of one snapshot; families with no samples are left out."""
        snap = self._read()
        names, values = self._names, self._values
        for family in FAMILIES:
            metric = _TYPES[family.type](family.name, family.help, labels=[*names, *family.labels])
            for labels, value in family.sample(snap):
                metric.add_metric([*values, *labels], value)
            if metric.samples:
                yield metric
        histogram = HistogramMetricFamily(
            DURATION_HISTOGRAM.name, DURATION_HISTOGRAM.help, labels=[*names, *DURATION_HISTOGRAM.labels]
        )
        for agent in snap.agents:
            if agent.lifecycle:
                histogram.add_metric([*values, agent.agent], duration_buckets(agent), agent.duration_sum)
        if histogram.samples:
            yield histogram
