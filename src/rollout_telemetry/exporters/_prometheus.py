"""The Prometheus exposition: prometheus_client ``Collector``s that read one snapshot per scrape.

Nothing is written on the recording path; each scrape takes one consistent snapshot and formats the families
of the catalogue (``rollout_telemetry._views.series``) from it. Families with no samples are left out, so a
healthy run publishes only the always-present set. ``describe()`` returns every family a collector can
produce, as prometheus_client's contract asks: registering a collector twice fails, and ``?name[]=`` filtering
finds the families.

Served by the package's own endpoint, the same collectors write their families as text themselves
(``render``, through ``_exposition.encode``): the bytes prometheus_client would write from ``collect()``,
without an object per series, and the account's collector keeps each agent's lines while its snapshot is
unchanged, so a scrape's cost follows what changed. Through a registry, ``collect()`` yields families whose
samples are made as prometheus_client reads them (``_Samples``), so none outlives its line.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar, overload

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Exemplar, Sample

from rollout_telemetry._contract.outcome import Disposition
from rollout_telemetry._store.coverage import CoverageSnapshot
from rollout_telemetry._store.groups import GroupsSnapshot
from rollout_telemetry._store.reads import in_turns
from rollout_telemetry._store.runtime_observations import RuntimeSnapshot
from rollout_telemetry._store.snapshot import AccountSnapshot, AgentSnapshot
from rollout_telemetry._views.family import Family
from rollout_telemetry._views.run_series import (
    COVERAGE_FAMILIES,
    GROUP_FAMILIES,
    RUNTIME_COUNTERS,
    RUNTIME_HISTOGRAMS,
    SPAN_FAMILIES,
)
from rollout_telemetry._views.series import FAMILIES, HISTOGRAM_VIEWS
from rollout_telemetry.exporters._exposition import Format, Layout, Rendered, rendering

__all__ = [
    "AccountCollector",
    "CoverageCollector",
    "GroupsCollector",
    "RuntimeCollector",
    "SpanStatsCollector",
]

S = TypeVar("S")

HistogramSeries = tuple[
    tuple[str, ...], list[tuple[str, float]], float | None, Mapping[int, tuple[str, str, float]]
]
"""One series of a histogram: its labels, cumulative ``(le, count)`` buckets, sum (``None``: not published),
and latest trace (trace id, span id, value) by bucket index."""

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
        self._const = const
        self._names = tuple(const)
        self._values = tuple(const.values())
        self._layouts: dict[Format, tuple[Layout, ...]] = {}

    def _empty(self, family: Family[Any]) -> CounterMetricFamily | GaugeMetricFamily | HistogramMetricFamily:
        return _TYPES[family.type](family.name, family.help, labels=[*self._names, *family.labels])

    def _described(self) -> Iterator[Family[Any]]:
        yield from self._families
        yield from self._histogram_families()

    def describe(self) -> Iterable[Metric]:
        """Every family this collector can publish, without samples."""
        return [self._empty(family) for family in self._described()]

    def collect(self) -> Iterator[Metric]:
        """Yield the families of one snapshot; families with no samples are left out.

        Asked by ``_exposition.encode`` (the package's endpoint), yield them as one ``Rendered`` text.
        """
        fmt = rendering()
        if fmt is not None:
            yield Rendered(self.render(fmt))
            return
        parts = functools.partial(self._parts, self._read())
        for index, family in enumerate(self._described()):
            # Whether it has samples, without making them: a family of most runs has none (failures, say).
            if any(self._has_samples(index, part) for part in in_turns(parts())):
                samples = _Samples(functools.partial(self._samples, index), parts)
                metric = self._empty(family)
                metric.samples = samples  # type: ignore[assignment] # a Sequence: prometheus_client iterates it
                yield metric

    def render(self, fmt: Format) -> list[bytes]:
        """The families of one snapshot written in ``fmt``, in pieces: joined, the bytes prometheus_client
        writes from ``collect()``, without its objects."""
        layouts = self._layouts_of(fmt)
        return _joined(layouts, self._rows(fmt, len(layouts), functools.partial(self._write, layouts)))

    def _parts(self, snap: S) -> Iterator[S]:
        """``snap`` in the parts whose samples are made apart, in order (``render`` keeps what was made from a
        part while it is the same), each made as it is asked for."""
        yield snap

    def _rows(
        self, fmt: Format, families: int, write: Callable[[int, S], bytes]
    ) -> Sequence[Sequence[Written]]:
        """Each family's lines from one snapshot, made by ``write(index, part)``, as rows of families
        (``_written``), a row for each of its ``_parts``; ``fmt`` names the format, for a collector that
        keeps the rows of unchanged parts between scrapes."""
        return [self._written(part, families, write) for part in self._parts(self._read())]

    def _layouts_of(self, fmt: Format) -> tuple[Layout, ...]:
        layouts = self._layouts.get(fmt)
        if layouts is None:
            layouts = self._layouts[fmt] = tuple(Layout(f, self._const, fmt) for f in self._described())
        return layouts

    def _written(
        self,
        snap: S,
        families: int,
        write: Callable[[int, S], bytes],
        before: Sequence[Written] = (),
        only: Iterable[int] | None = None,
    ) -> Sequence[Written]:
        """Each family's samples from ``snap`` and what ``write`` makes of them, in the order of
        ``_described``.

        A family whose samples equal those in ``before`` keeps what was made from there (``before`` itself is
        returned if every family did); with ``only``, just those families are read again.
        """
        written: list[Written] | None = None
        for index in range(families) if only is None else only:
            key = self._key(index, snap)
            if index < len(before) and before[index][0] == key:
                continue
            if written is None:
                written = list(before) if before else [_NOTHING] * families
            written[index] = (key, write(index, snap))
        return before if written is None else written

    def _key(self, index: int, snap: S) -> object:
        """What the samples of the family at ``index`` are made from, as one flat tuple of strings and
        numbers (none of which the garbage collector tracks), so unchanged samples are seen as such."""
        if index >= len(self._families):  # the histograms, last
            return _flat(
                (labels, total, *(count for _, count in buckets), exemplars)
                for labels, buckets, total, exemplars in self._histogram(index - len(self._families), snap)
            )
        family = self._families[index]
        return _flat(family.sample(snap)), self._exemplars(family, snap)

    def _write(self, layouts: Sequence[Layout], index: int, snap: S) -> bytes:
        """The lines of the family at ``index`` (UTF-8)."""
        layout = layouts[index]
        if index >= len(self._families):
            series = self._histogram(index - len(self._families), snap)
            return "".join([layout.histogram(*one) for one in series]).encode()
        family = self._families[index]
        return layout.lines(family.sample(snap), self._exemplars(family, snap)).encode()

    def _has_samples(self, index: int, snap: S) -> bool:
        """Whether the family at ``index`` has a sample in ``snap``."""
        if index >= len(self._families):
            rows: Iterable[object] = self._histogram(index - len(self._families), snap)
        else:
            rows = self._families[index].sample(snap)
        return next(iter(rows), None) is not None

    def _samples(self, index: int, snap: S) -> tuple[Sample, ...]:
        """The samples of the family at ``index``, as prometheus_client's families make them."""
        values = self._values
        if index >= len(self._families):
            histogram = self._empty(self._histogram_families()[index - len(self._families)])
            assert isinstance(histogram, HistogramMetricFamily)
            for labels, counts, total, exemplars in self._histogram(index - len(self._families), snap):
                buckets: list[Any] = counts
                for bucket, (trace_id, span_id, observed) in exemplars.items():
                    buckets[bucket] = (*buckets[bucket], _exemplar((trace_id, span_id), observed))
                histogram.add_metric([*values, *labels], buckets, total)
            return tuple(histogram.samples)
        family = self._families[index]
        metric: Any = self._empty(family)  # a counter or a gauge: add_metric(labels, value)
        exemplar = self._exemplars(family, snap)
        for labels, value in family.sample(snap):
            metric.add_metric([*values, *labels], value)
            if exemplar is not None:
                ids = exemplar.get(labels)
                if ids is not None:  # the OpenMetrics exposition shows it; the classic one leaves it out
                    metric.samples[-1] = metric.samples[-1]._replace(exemplar=_exemplar(ids, 1.0))
        return tuple(metric.samples)

    def _exemplars(self, family: Family[S], snap: S) -> Mapping[tuple[str, ...], tuple[str, str]] | None:
        return None

    def _histogram_families(self) -> Sequence[Family[Any]]:
        """The histogram families, written after the others; none unless a collector has some."""
        return ()

    def _histogram(self, index: int, snap: S) -> Iterator[HistogramSeries]:
        """Each series of the ``index``-th histogram family in ``snap``."""
        raise NotImplementedError


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
        self._kept: dict[Format, dict[str, Any]] = {}
        self._timely = tuple(index for index, family in enumerate(FAMILIES) if family.timely)

    def _histogram_families(self) -> Sequence[Family[Any]]:
        return _ACCOUNT_HISTOGRAMS

    def _histogram(self, index: int, snap: AccountSnapshot) -> Iterator[HistogramSeries]:
        view = HISTOGRAM_VIEWS[index]
        for agent in snap.agents:
            if view.has(agent):
                yield (agent.agent,), view.buckets(agent), view.total(agent), view.exemplars(agent)

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
            for (d, kind), ids in agent._exemplars.items()
            if d is disposition
        }

    def _parts(self, snap: AccountSnapshot) -> Iterator[AccountSnapshot]:
        """The account's own families (rejections, overflow), then each agent alone."""
        yield AccountSnapshot((), snap.rejected, snap.overflow, snap.taken_at)
        for agent in snap.agents:
            yield AccountSnapshot((agent,), taken_at=snap.taken_at)

    def _rows(
        self, fmt: Format, families: int, write: Callable[[int, AccountSnapshot], bytes]
    ) -> Sequence[Sequence[Written]]:
        """A row per agent, each kept while the agent is the same, after a row of the account's own families.

        The account hands out the same ``AgentSnapshot`` while an agent's counts are unchanged: its row is
        kept whole, but for a family whose samples depend on the time (``Family.timely``), read again. A
        changed agent's families are read again, and only those whose samples changed are written again; so a
        scrape's cost, and what it allocates, follows what changed.
        """
        parts = self._parts(self._read())
        rows_kept: dict[str, tuple[AgentSnapshot, Sequence[Written]]] = self._kept.setdefault(fmt, {})
        rows = [self._written(next(parts), families, write)]
        for one in in_turns(parts):  # many changed agents: the interpreter handed over between turns
            agent = one.agents[0]
            entry = rows_kept.get(agent.agent)
            if entry is None or entry[0] is not agent:
                written = self._written(one, families, write, entry[1] if entry is not None else ())
            else:
                written = self._written(one, families, write, entry[1], only=self._timely)
            if entry is None or entry[0] is not agent or written is not entry[1]:
                # An agent unchanged keeps its entry: nothing new lives.
                rows_kept[agent.agent] = (agent, written)
            rows.append(written)
        return rows


class _Samples(Sequence[Sample]):
    """A family's samples, made part by part as they are read, in turns (``in_turns``).

    prometheus_client writes each sample as it iterates them and keeps only the line, so each is made,
    written and dropped in turn: a scrape through a registry leaves nothing behind for the garbage collector
    to walk (samples kept between scrapes would pile up in its youngest generation, and collecting them holds
    every thread), and a recorder waits a turn at most while a large family is written. Read again, they
    are made again, from the same snapshot. The figures: docs/performance.md, "A scrape beside a trainer's
    heap".
    """

    __slots__ = ("_make", "_parts")

    def __init__(self, make: Callable[[Any], tuple[Sample, ...]], parts: Callable[[], Iterable[Any]]) -> None:
        self._make = make
        self._parts = parts

    def __iter__(self) -> Iterator[Sample]:
        return in_turns(itertools.chain.from_iterable(map(self._make, self._parts())))

    def __bool__(self) -> bool:
        return any(map(self._make, self._parts()))

    def __len__(self) -> int:
        return sum(len(self._make(part)) for part in self._parts())

    @overload
    def __getitem__(self, index: int) -> Sample: ...
    @overload
    def __getitem__(self, index: slice) -> list[Sample]: ...
    def __getitem__(self, index: int | slice) -> Sample | list[Sample]:
        return list(self)[index]

    def __reversed__(self) -> Iterator[Sample]:
        return reversed(list(self))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment] # as a list's

    def __repr__(self) -> str:
        return repr(list(self))


def _flat(samples: Iterable[tuple[Any, ...]]) -> tuple[object, ...]:
    """Samples as one flat tuple: each one's label values, then its values (a family's samples all have as
    many labels and values), a negative zero followed by a mark: it equals 0.0 but is written ``-0.0``."""
    flat: list[object] = []
    for labels, *values in samples:
        flat += labels
        for value in values:
            flat.append(value)
            if value == 0 and type(value) is float and math.copysign(1.0, value) < 0:
                flat.append(_NEGATIVE_ZERO)
    return tuple(flat)


_NEGATIVE_ZERO = object()


Written = tuple[object, bytes]
"""A family's samples from one snapshot (or part of one), as ``_key`` makes them, and its lines (UTF-8)."""
_NOTHING: Any = ((), b"")  # a family without samples: no lines; replaced before it is read


def _joined(layouts: Sequence[Layout], rows: Sequence[Sequence[Written]]) -> list[bytes]:
    """The families in order, each its header and the lines of every row, as pieces to join; a family
    without lines is left out."""
    out: list[bytes] = []
    for index, layout in enumerate(layouts):
        lines = [row[index][1] for row in rows if row[index][1]]
        if lines:
            out.append(layout.header)
            out += lines
    return out


_EXEMPLARY = {"rollout_failed_total": Disposition.FAILED, "rollout_masked_total": Disposition.MASKED}
"""The counters whose samples carry the trace of their latest occurrence as an exemplar."""


def _exemplar(ids: tuple[str, str], value: float) -> Exemplar:
    return Exemplar({"trace_id": ids[0], "span_id": ids[1]}, value)


class CoverageCollector(_CatalogueCollector[CoverageSnapshot]):
    """Publishes the run coverage account: ``rollout_run_rollouts``, ``rollout_run_expected``, retries."""

    def __init__(
        self, read_snapshot: Callable[[], CoverageSnapshot], const_labels: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(read_snapshot, COVERAGE_FAMILIES, const_labels)


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


class RuntimeCollector(_CatalogueCollector[RuntimeSnapshot]):
    """Publishes the runtime families (event-loop lag, garbage-collection pauses, output writes) from one
    snapshot."""

    def __init__(
        self, read_snapshot: Callable[[], RuntimeSnapshot], const_labels: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(read_snapshot, RUNTIME_COUNTERS, const_labels)

    def _histogram_families(self) -> Sequence[Family[Any]]:
        return _RUNTIME_HISTOGRAMS

    def _histogram(self, index: int, snap: RuntimeSnapshot) -> Iterator[HistogramSeries]:
        for labels, series in RUNTIME_HISTOGRAMS[index].series(snap):
            yield labels, list(series.buckets), series.total, {}


_ACCOUNT_HISTOGRAMS: tuple[Family[Any], ...] = tuple(view.family for view in HISTOGRAM_VIEWS)
_RUNTIME_HISTOGRAMS: tuple[Family[Any], ...] = tuple(view.family for view in RUNTIME_HISTOGRAMS)
