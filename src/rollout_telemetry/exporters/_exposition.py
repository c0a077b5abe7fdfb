"""The text and OpenMetrics expositions written straight from a snapshot, without prometheus_client's objects.

prometheus_client's encoders read ``Metric`` objects holding one ``Sample`` (a tuple and a labels dict) per
series; all of them are alive until their family is written, so a scrape of 50,000 series leaves about
100,000 tracked objects to the garbage collector, which promotes them and, on a process with millions of
objects of its own (a trainer), soon pays for a full collection that stops every thread (docs/performance.md,
"A scrape beside a trainer's heap"). Strings
are not tracked: a ``Layout`` writes a family's samples as lines of text, and a catalogue collector hands a
rendered text to ``encode`` (the endpoint's encoder) in place of its families.

The bytes are the ones prometheus_client's encoders write from the same collector
(``tests/exporters/test_exposition`` checks it over random accounts): the same label order (sorted by name),
escaping, float formatting (its own ``floatToGoString``), headers and exemplars.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextvars import ContextVar
from typing import Literal, cast

from prometheus_client import utils
from prometheus_client.exposition import choose_encoder, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import exposition as openmetrics_exposition
from prometheus_client.registry import Collector

from rollout_telemetry._views.family import Family, Sample

__all__ = ["Format", "Layout", "Rendered", "encode", "rendering"]

Format = Literal["text", "openmetrics"]
Exemplars = Mapping[tuple[str, ...], tuple[str, str]]
"""The (trace id, span id) of a family's samples, by their labels (after the constant ones)."""

_EOF = b"# EOF\n"
floatToGoString = cast("Callable[[float], str]", utils.floatToGoString)  # prometheus_client's, typed
_SAFE = frozenset(("underscores", "allow-utf-8"))  # escapings that leave our (legacy) names as they are


def _escape(value: str) -> str:
    """A label value (or an OpenMetrics HELP text) escaped as prometheus_client escapes it."""
    if "\\" in value or "\n" in value or '"' in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value


class Layout:
    """How one family's samples are written in one format, after the collector's constant labels.

    Args:
        family: the catalogue family.
        const: the constant labels (names and values) every sample of the collector carries first.
        fmt: ``text`` (Prometheus 0.0.4) or ``openmetrics``.
    """

    __slots__ = ("_bucket", "_const", "_exemplary", "_plain", "header", "name")

    def __init__(self, family: Family[object], const: Mapping[str, str], fmt: Format) -> None:
        openmetrics_format = fmt == "openmetrics"
        # prometheus_client's counter family is named without _total; its samples and the text format
        # put the suffix back.
        name = family.name.removesuffix("_total") if family.type == "counter" else family.name
        self.name = name + "_total" if family.type == "counter" else name
        shown = name if openmetrics_format or family.type != "counter" else self.name
        help_text = (
            _escape(family.help)
            if openmetrics_format
            else family.help.replace("\\", r"\\").replace("\n", r"\n")
        )
        self.header = f"# HELP {shown} {help_text}\n# TYPE {shown} {family.type}\n".encode()
        self._exemplary = openmetrics_format
        self._const = tuple(const.values())
        names = (*const, *family.labels)
        self._plain = _labels_in_order(names)
        self._bucket = _labels_in_order((*names, "le"))

    def lines(self, samples: Iterable[Sample], exemplars: Exemplars | None) -> str:
        """The lines of ``samples``; with ``exemplars`` (OpenMetrics only) a sample's latest trace follows."""
        const, labelled, name = self._const, self._plain, self.name
        show = exemplars if self._exemplary else None
        out: list[str] = []
        for labels, value in samples:
            line = f"{name}{labelled((*const, *labels))} {floatToGoString(value)}"
            ids = show.get(labels) if show else None
            out.append(f"{line}{_exemplar(ids, 1.0)}\n" if ids is not None else line + "\n")
        return "".join(out)

    def histogram(
        self,
        labels: tuple[str, ...],
        buckets: Iterable[tuple[str, float]],
        total: float | None,
        exemplars: Mapping[int, tuple[str, str, float]],
    ) -> str:
        """One series of a histogram: its cumulative ``(le, count)`` buckets, then ``_count`` and ``_sum``
        unless ``total`` is ``None`` (as prometheus_client leaves both out: ``series.monotonic_sum``)."""
        values = (*self._const, *labels)
        bucket, name = self._bucket, self.name
        out: list[str] = []
        count = 0.0
        for index, (bound, count) in enumerate(buckets):
            line = f"{name}_bucket{bucket((*values, bound))} {floatToGoString(count)}"
            trace = exemplars.get(index) if self._exemplary else None
            out.append(f"{line}{_exemplar(trace[:2], trace[2])}\n" if trace is not None else line + "\n")
        if total is None:
            return "".join(out)
        plain = self._plain(values)
        out.append(f"{name}_count{plain} {floatToGoString(count)}\n")
        out.append(f"{name}_sum{plain} {floatToGoString(total)}\n")
        return "".join(out)


def _labels_in_order(names: tuple[str, ...]) -> Callable[[tuple[str, ...]], str]:
    """A writer of label sets named ``names``: ``{name="value",...}`` sorted by name, as prometheus_client
    sorts them (a later name repeated replaces an earlier one, as its labels dict does)."""
    last = {name: index for index, name in enumerate(names)}
    pairs = tuple((f'{name}="', last[name]) for name in sorted(last))
    if not pairs:
        return lambda values: ""

    def write(values: tuple[str, ...]) -> str:
        return "{" + ",".join([f'{key}{_escape(values[index])}"' for key, index in pairs]) + "}"

    return write


def _exemplar(ids: tuple[str, ...], value: float) -> str:
    return f' # {{span_id="{_escape(ids[1])}",trace_id="{_escape(ids[0])}"}} {floatToGoString(value)}'


class Rendered(Metric):
    """A collector's families already written in the format being rendered (see ``rendering``), as pieces
    of UTF-8 text: joined once, with the rest, into the response's body."""

    def __init__(self, pieces: list[bytes]) -> None:
        super().__init__("rollout_telemetry_rendered", "", "unknown")
        self.pieces = pieces


_RENDERING: ContextVar[Format | None] = ContextVar("rollout_telemetry_rendering", default=None)


def rendering() -> Format | None:
    """The format ``encode`` is writing on this thread, or ``None``: a catalogue collector asked to collect
    then yields one ``Rendered`` text instead of its families."""
    return _RENDERING.get()


class _Collected(Collector):
    def __init__(self, metrics: list[Metric]) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return iter(self._metrics)


def _fast_format(encoder: Callable[[Collector], bytes]) -> Format | None:
    """Which format an encoder from ``choose_encoder`` writes, if ours can write the same bytes."""
    if encoder is generate_latest:
        return "text"
    if isinstance(encoder, functools.partial) and encoder.keywords.get("escaping") in _SAFE:
        if encoder.func is generate_latest:
            return "text"
        if encoder.func is openmetrics_exposition.generate_latest:
            return "openmetrics"
    return None


def encode(registry: Collector, accept: str) -> tuple[bytes, str]:
    """The exposition of ``registry`` for a request's ``Accept`` header, and its content type.

    The same bytes as prometheus_client's encoder (``choose_encoder``) writes, in the registry's order; the
    catalogue collectors write their own text, every other collector goes through prometheus_client. An
    escaping that would rename our series (``dots``, ``values``) goes through prometheus_client entirely.
    """
    encoder, content_type = choose_encoder(accept)
    fmt = _fast_format(encoder)
    if fmt is None:
        return encoder(registry), content_type
    parts: list[bytes] = []
    others: list[Metric] = []

    def flush() -> None:
        if others:
            text = encoder(_Collected(others))
            parts.append(text.removesuffix(_EOF) if fmt == "openmetrics" else text)
            others.clear()

    token = _RENDERING.set(fmt)
    try:
        for metric in registry.collect():
            if isinstance(metric, Rendered):
                flush()
                parts += metric.pieces
            else:
                others.append(metric)
    finally:
        _RENDERING.reset(token)
    flush()
    if fmt == "openmetrics":
        parts.append(_EOF)
    return b"".join(parts), content_type
