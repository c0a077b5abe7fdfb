"""Charts drawn on the server as inline SVG, for the HTML report and the live page (``_views.page``).

SVG made here rather than a JavaScript chart library: the report is one file that opens anywhere with
nothing to load, the live page updates by swapping the same markup, a test reads the numbers in the markup,
and there is no vendored script to keep up to date (docs/guides/pages.md says more). Colours are classes the
page's style sheet gives (``_views.page``), the Okabe-Ito palette, which readers with any common colour-vision
deficiency tell apart; lines also differ in dash, so no series is told by its colour alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

__all__ = ["Line", "Segment", "bar", "line_chart"]

_WIDTH, _HEIGHT = 640, 200
_LEFT, _RIGHT, _TOP, _BOTTOM = 56, 12, 10, 36


@dataclass(frozen=True, slots=True)
class Line:
    """One series of a line chart: its name (the legend's), its points, and the class that styles it."""

    name: str
    points: Sequence[tuple[float, float]]
    css: str


@dataclass(frozen=True, slots=True)
class Segment:
    """One part of a stacked bar: its name, its count, and the class that colours it."""

    name: str
    count: int
    css: str


def nice_ticks(low: float, high: float, most: int = 6) -> list[float]:
    """Round values from at or below ``low`` to at or above ``high``, at most about ``most`` of them, a step
    of 1, 2 or 5 times a power of ten."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return [0.0, 1.0]
    if high <= low:
        low, high = low - 0.5, high + 0.5
    raw = (high - low) / max(1, most - 1)
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1.0, 2.0, 5.0, 10.0) if m * power >= raw)
    first = math.floor(low / step + 1e-9) * step
    ticks = [first]
    while ticks[-1] < high - 1e-9 * step:
        ticks.append(first + len(ticks) * step)
    return [round(tick, 12) for tick in ticks]


def _label(value: float) -> str:
    """A tick's label: whole numbers with thousands separators, else three significant figures."""
    if value == int(value) and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:.3g}"


def _y_range(ys: Sequence[float], span: tuple[float, float] | None) -> tuple[float, float]:
    """The y-axis' range: the data's, widened to ``span`` where given."""
    if span is None:
        return min(ys), max(ys)
    return min(span[0], *ys), max(span[1], *ys)


def line_chart(
    lines: Sequence[Line],
    *,
    x_label: str,
    y_label: str,
    title: str,
    counts: bool = False,
    y_span: tuple[float, float] | None = None,
) -> str:
    """An SVG line chart of ``lines`` with both axes labelled (units in the labels) and a legend.

    A NaN y breaks its line (no value there yet); an empty chart says so in its middle. The y-axis spans
    ``y_span`` (the quantity's honest range: a move of 5% of it looks like 5%) and the data; with ``counts``
    it runs from 0 to at least 1 (a count of 0 drawn on its axis, never below it). The x-axis starts at 0.
    """
    xs = [x for line in lines for x, y in line.points if math.isfinite(y)]
    ys = [y for line in lines for _, y in line.points if math.isfinite(y)]
    parts = [
        f'<svg class="chart" viewBox="0 0 {_WIDTH} {_HEIGHT}" role="img" aria-label="{escape(title)}">',
        f"<title>{escape(title)}</title>",
    ]
    plot_w, plot_h = _WIDTH - _LEFT - _RIGHT, _HEIGHT - _TOP - _BOTTOM
    if not xs:
        middle = f'x="{_WIDTH / 2}" y="{_HEIGHT / 2}" text-anchor="middle"'
        parts.append(f'<text class="empty" {middle}>no data yet</text></svg>')
        return "".join(parts)
    low, high = _y_range(ys, (0.0, 1.0) if counts else y_span)
    x_ticks, y_ticks = nice_ticks(min(0.0, *xs), max(xs)), nice_ticks(low, high)
    x0, x1, y0, y1 = x_ticks[0], x_ticks[-1], y_ticks[0], y_ticks[-1]

    def px(x: float) -> float:
        return _LEFT + (x - x0) / ((x1 - x0) or 1.0) * plot_w

    def py(y: float) -> float:
        return _TOP + plot_h - (y - y0) / ((y1 - y0) or 1.0) * plot_h

    for tick in y_ticks:
        y = py(tick)
        parts.append(f'<line class="grid" x1="{_LEFT}" x2="{_WIDTH - _RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>')
        parts.append(
            f'<text class="tick" x="{_LEFT - 4}" y="{y + 4:.1f}" text-anchor="end">{_label(tick)}</text>'
        )
    for tick in x_ticks:
        x = px(tick)
        at = f'x="{x:.1f}" y="{_TOP + plot_h + 14}" text-anchor="middle"'
        parts.append(f'<text class="tick" {at}>{_label(tick)}</text>')
    parts.append(
        f'<line class="axis" x1="{_LEFT}" x2="{_WIDTH - _RIGHT}" y1="{_TOP + plot_h}" y2="{_TOP + plot_h}"/>'
        f'<line class="axis" x1="{_LEFT}" x2="{_LEFT}" y1="{_TOP}" y2="{_TOP + plot_h}"/>'
        f'<text class="axis-label" x="{_LEFT + plot_w / 2}" y="{_HEIGHT - 4}" text-anchor="middle">'
        f"{escape(x_label)}</text>"
        f'<text class="axis-label" transform="translate(12 {_TOP + plot_h / 2}) rotate(-90)" '
        f'text-anchor="middle">{escape(y_label)}</text>'
    )
    for line in lines:
        runs: list[list[str]] = [[]]
        for x, y in line.points:
            if not math.isfinite(y):
                if runs[-1]:
                    runs.append([])
                continue
            pixel = f"{px(x):.0f},{py(y):.0f}"  # whole pixels, each once: the file stays small
            if not runs[-1] or runs[-1][-1] != pixel:
                runs[-1].append(pixel)
        for run in runs:
            if len(run) == 1:  # one point: a dot, or it would not show
                cx, cy = run[0].split(",")
                parts.append(f'<circle class="{line.css}" cx="{cx}" cy="{cy}" r="2.5"/>')
            elif run:
                parts.append(f'<polyline class="{line.css}" points="{" ".join(run)}"/>')
    parts.append("</svg>")
    legend = "".join(f'<span class="key {line.css}">{escape(line.name)}</span>' for line in lines)
    return f"<figure>{''.join(parts)}<figcaption>{legend}</figcaption></figure>"


def bar(segments: Sequence[Segment], total: int) -> str:
    """A horizontal stacked bar of ``segments`` out of ``total`` (widths in percent), with a legend naming
    each segment's count; a segment of 0 has no width and stays in the legend.

    SVG rather than boxes sized by ``style=`` attributes: the page's policy allows no inline style but its
    own style sheet, and a rectangle's width is geometry, not style.
    """
    whole = max(total, sum(segment.count for segment in segments), 1)
    cells, x = [], 0.0
    for segment in segments:
        if segment.count:
            width = 100 * segment.count / whole
            cells.append(
                f'<rect class="{segment.css}" x="{x:.3f}" y="0" width="{width:.3f}" height="1">'
                f"<title>{escape(segment.name)}: {segment.count:,}</title></rect>"
            )
            x += width
    legend = "".join(
        f'<span class="key {segment.css}">{escape(segment.name)} '
        f'<b data-count="{escape(segment.name)}">{segment.count:,}</b></span>'
        for segment in segments
    )
    return (
        f'<svg class="bar" viewBox="0 0 100 1" preserveAspectRatio="none" role="img">{"".join(cells)}</svg>'
        f'<div class="legend">{legend}</div>'
    )
