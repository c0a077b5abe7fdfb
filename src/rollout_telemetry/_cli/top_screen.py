"""The screen of ``rollout-telemetry top``: a live terminal view of exporters, or of a run's files.

The screen is a pure function, :func:`render`, of a :class:`~rollout_telemetry._cli.top_model.TopView` and
the terminal's size, so it is tested without a terminal (``top_terminal`` shows it in one); everything it
shows is also spelled out in text (``DOWN``, ``!``, ``stalled``), so it reads the same without colour (rich
honours ``NO_COLOR``) and fits 80 columns by 24 lines.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from rich.console import Group
from rich.text import Text

from rollout_telemetry._cli.top_model import (
    HISTORY_SECONDS,
    AgentRow,
    InFlightRollout,
    SourceView,
    TopView,
    top_kind,
    windowed_means,
)
from rollout_telemetry._views.escaping import visible

__all__ = ["render"]

_SPARK_UNICODE = "▁▂▃▄▅▆▇█"
_SPARK_ASCII = "_.-~=+*#"
_SPARK_MIN_SPAN = 0.1
# Columns of the agent table: name, minimum width, how far each round of spare width may grow it.
_FIXED = {"r/min": 5, "mean": 5, "unmsk": 5, "mask%": 5, "infl": 4, "oldest": 6}
_GROWING = {"agent": 11, "failed": 9, "omitted": 9, "trend": 7}
_ROUNDS = (
    {"agent": 14, "failed": 12, "omitted": 12, "trend": 30},
    {"failed": 24, "omitted": 24, "agent": 24, "trend": 60},
)
_AGENT_MOST = 40
"""The agent column grows to its longest name, up to this many characters."""
_ORDER = ("agent", "r/min", "mean", "unmsk", "mask%", "failed", "omitted", "infl", "oldest", "trend")
_RIGHT = {"r/min", "mean", "unmsk", "mask%", "infl", "oldest"}
# The in-flight list: heading, width, right-aligned; then the trace id (or the source) in what is left.
_IN_FLIGHT = (
    ("agent", 14, False),
    ("task", 6, True),
    ("roll", 4, True),
    ("att", 3, True),
    ("stage", 12, False),
    ("age", 7, True),
    ("beat", 5, True),  # seconds since its last heartbeat, stage change or start
    ("state", 9, False),
)


def _widths(width: int, longest_agent: int = 0) -> dict[str, int]:
    """Each column's width in a terminal ``width`` wide: the agent column first takes what its longest name
    needs (up to ``_AGENT_MOST``), so a name is cut only when the terminal is too narrow; then the rounds."""
    widths = {**_FIXED, **_GROWING}
    spare = width - 1 - sum(widths.values()) - (len(widths) - 1)  # the last column is left free
    grow = max(0, min(spare, min(longest_agent, _AGENT_MOST) - widths["agent"]))
    widths["agent"] += grow
    spare -= grow
    for caps in _ROUNDS:
        for column, cap in caps.items():
            grow = max(0, min(spare, cap - widths[column]))
            widths[column] += grow
            spare -= grow
    return widths


def _fit(text: str, width: int, *, right: bool = False, ellipsis: str = "~") -> str:
    """A cell ``width`` wide: ``text`` (a name from the run, say) with its control characters made visible, so
    no escape sequence reaches the terminal, cut with ``ellipsis`` or padded."""
    text = visible(text)
    if len(text) > width:
        text = text[: max(width - 1, 0)] + ellipsis if width > 1 else text[:width]
    return text.rjust(width) if right else text.ljust(width)


def _count(value: float) -> str:
    if value < 10_000:
        return f"{value:.0f}"
    if value < 10_000_000:
        return f"{value / 1000:.0f}k"
    return f"{value / 1_000_000:.0f}M"


def _rate(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}" if value < 100 else _count(value)


def _reward(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:+.2f}" if abs(value) < 10 else f"{value:+.0f}"


def _share(value: float | None) -> str:
    if value is None:
        return "-"
    percent = 100 * value
    return f"{percent:.0f}%" if percent >= 99.95 else f"{percent:.1f}%"


def age(seconds: float) -> str:
    """A short age: ``42s``, ``3m05``, ``2h10``, ``3d``."""
    whole = int(seconds)
    if whole < 60:
        return f"{seconds:.0f}s" if seconds >= 10 else f"{seconds:.1f}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}"
    if whole < 86400:
        return f"{whole // 3600}h{whole // 60 % 60:02d}"
    return f"{whole // 86400}d"


def _failures(by_kind: Mapping[str, float], labels: Mapping[str, str]) -> str:
    total = sum(by_kind.values())
    kind = top_kind(by_kind)
    if kind is None:
        return _count(total)
    return f"{_count(total)} {labels[kind]}"


def shortened(kind: str, room: int, ellipsis: str) -> str:
    """``kind`` in ``room`` characters: whole if it fits, else its first word cut to its initial
    (``provider_oom_killed``: ``p.oom_killed``), the words that tell a family's kinds apart, then cut with
    ``ellipsis``."""
    if len(kind) <= room:
        return kind
    first, _, rest = kind.partition("_")
    text = f"{first[0]}.{rest}" if rest else kind
    if len(text) <= room:
        return text
    return text[: max(room - len(ellipsis), 0)] + ellipsis if room > len(ellipsis) else text[:room]


def kind_labels(kinds: Iterable[str], room: int, ellipsis: str) -> dict[str, str]:
    """Each of ``kinds`` as the screen shows it in ``room`` characters (``shortened``), no two alike: kinds
    that still read the same are numbered (the legend names them)."""
    labels = {kind: shortened(visible(kind), room, ellipsis) for kind in sorted(set(kinds))}
    alike: dict[str, list[str]] = {}
    for kind, label in labels.items():
        alike.setdefault(label, []).append(kind)
    for label, same in alike.items():
        if len(same) > 1:
            for number, kind in enumerate(same, 1):
                tag = str(number)
                labels[kind] = label[: max(room - len(tag) - len(ellipsis), 1)] + ellipsis + tag
    return labels


def _legend(labels: Mapping[str, str], width: int) -> list[Text]:
    """Lines naming each kind shown shortened (``kind_labels``), as many as they need in ``width``."""
    entries = [f"{label} = {visible(kind)}" for kind, label in labels.items() if label != kind]
    lines: list[Text] = []
    line = "kinds:"
    for entry in entries:
        if len(line) + 2 + len(entry) > width - 1 and line != "kinds:":
            lines.append(Text(line, style="dim", no_wrap=True, overflow="crop"))
            line = "      "
        line += f"  {entry}"
    if entries:
        lines.append(Text(line, style="dim", no_wrap=True, overflow="crop"))
    return lines


def _screen_kinds(view: TopView, widths: Mapping[str, int], ellipsis: str) -> dict[str, str]:
    """The labels of the top failed and omitted kinds of every agent shown, in the room the narrowest cell
    leaves them (its column's width less its count and a space)."""
    kinds, room = [], max(widths["failed"], widths["omitted"])
    for source in view.sources:
        for row in source.agents:
            for column in ("failed", "omitted"):
                by_kind = getattr(row.totals, column)
                if (kind := top_kind(by_kind)) is not None:
                    kinds.append(kind)
                    room = min(room, widths[column] - 1 - len(_count(sum(by_kind.values()))))
    return kind_labels(kinds, max(room, 1), ellipsis)


def sparkline(values: Sequence[float | None], *, unicode: bool = True) -> str:
    """One character per value, scaled from the lowest value to the highest; blank for none.

    The scale spans at least :data:`_SPARK_MIN_SPAN`, so a steady reward draws a level line, not noise.
    """
    ramp = _SPARK_UNICODE if unicode else _SPARK_ASCII
    known = [v for v in values if v is not None]
    if not known:
        return " " * len(values)
    low, high = min(known), max(known)
    if high - low < _SPARK_MIN_SPAN:
        middle = (high + low) / 2
        low, high = middle - _SPARK_MIN_SPAN / 2, middle + _SPARK_MIN_SPAN / 2
    step = (high - low) / len(ramp)
    chars = []
    for value in values:
        if value is None:
            chars.append(" ")
        else:
            chars.append(ramp[min(int((value - low) / step), len(ramp) - 1)])
    return "".join(chars)


def _agent_line(
    row: AgentRow,
    widths: dict[str, int],
    now: float,
    unicode: bool,
    *,
    labels: Mapping[str, str],
    ended: bool,
) -> Text:
    totals = row.totals
    ellipsis = "…" if unicode else "~"
    stalled = (totals.stalled or 0) > 0
    oldest = "-" if totals.oldest_age is None else age(totals.oldest_age) + ("!" if stalled else "")
    trend = windowed_means(row.trend, now=now, span=HISTORY_SECONDS, buckets=widths["trend"])
    cells = {
        "agent": totals.agent,
        "r/min": "-" if ended else _rate(row.per_minute),  # a run that ended has no rate
        "mean": _reward(totals.mean_reward),
        "unmsk": _reward(totals.unmasked_reward),
        "mask%": _share(totals.masked_ratio),
        "failed": _failures(totals.failed, labels),
        "omitted": _failures(totals.omitted, labels),
        "infl": "-" if totals.in_flight is None else _count(totals.in_flight),
        "oldest": oldest,
        "trend": sparkline(trend, unicode=unicode),
    }
    line = Text(no_wrap=True, overflow="crop")
    for index, column in enumerate(_ORDER):
        if index:
            line.append(" ")
        text = _fit(cells[column], widths[column], right=column in _RIGHT, ellipsis=ellipsis)
        style = ""
        if column == "oldest" and stalled:
            style = "bold red"
        elif column in ("failed", "omitted") and cells[column] != "0":
            style = "yellow"
        elif column == "trend":
            style = "cyan"
        line.append(text, style=style)
    return line


def _header(widths: dict[str, int]) -> Text:
    cells = [_fit(c, widths[c], right=c in _RIGHT) for c in _ORDER]
    return Text(" ".join(cells), style="bold", no_wrap=True, overflow="crop")


def _source_line(source: SourceView, width: int) -> Text:
    line = Text(no_wrap=True, overflow="crop")

    def whole(text: str, style: str = "") -> bool:  # a figure shown whole or not at all, never cut
        if line.cell_len + len(text) > width - 1:
            return False
        line.append(text, style=style)
        return True

    label = visible(source.label)  # what the source and its readings say is text, its controls visible
    if source.waiting:
        line.append(label, style="bold")
        line.append("  connecting…", style="dim")
        return line
    if not source.up:
        line.append(label, style="bold")
        line.append("  DOWN", style="bold red")
        line.append(f"  {visible(str(source.error))}")
        if source.down_for is not None:
            line.append(f"  (last read {age(source.down_for)} ago)", style="dim")
        return line
    line.append(label, style="bold")
    line.append("  ended" if source.ended else "  up", style="bold" if source.ended else "green")
    in_flight = [a.totals.in_flight for a in source.agents if a.totals.in_flight is not None]
    stalled = sum(a.totals.stalled or 0 for a in source.agents)
    line.append(f"  {len(source.agents)} agent{'' if len(source.agents) == 1 else 's'}")
    if not source.agents:
        line.append(f": {visible(source.note or 'no rollout recorded yet')}", style="yellow")
    elif source.note:
        line.append(f"  {visible(source.note)}", style="yellow")
    if in_flight:
        line.append(f"  {_count(sum(in_flight))} in flight")
    if stalled:  # before what the line may crop: a stall is what to see first
        bound = "" if source.stall_after_seconds is None else f" (over {age(source.stall_after_seconds)})"
        line.append(f"  {_count(stalled)} stalled{bound}", style="bold red")
    if (progress := source.progress) is not None:
        done, expected = progress
        shown = whole(f"  done {_count(done)}/{_count(expected)}")
        rate = source.per_minute
        if shown and done < expected and rate:
            whole(f"  ETA {age((expected - done) / rate * 60)}")
    if not source.tracks_in_flight and source.agents:
        whole("  in flight: unknown from files", style="dim")
    return line


def _in_flight_line(rollout: InFlightRollout, width: int, with_source: bool, unicode: bool) -> Text:
    def number(value: int | None) -> str:
        return "-" if value is None else str(value)

    ellipsis = "…" if unicode else "~"
    values = (
        rollout.agent,
        number(rollout.task_index),
        number(rollout.rollout_index),
        number(rollout.attempt),
        rollout.stage,
        age(rollout.age_seconds) + ("!" if rollout.stalled else " "),
        "-" if rollout.heartbeat_age_seconds is None else age(rollout.heartbeat_age_seconds),
        rollout.state,
    )
    cells = [
        _fit(value, size, right=right, ellipsis=ellipsis)
        for value, (_, size, right) in zip(values, _IN_FLIGHT, strict=True)
    ]
    tail = rollout.source if with_source else (rollout.trace_id or "")
    line = Text(" ".join(cells), no_wrap=True, overflow="crop", style="bold red" if rollout.stalled else "")
    line.append(" " + _fit(tail, max(width - 1 - line.cell_len - 1, 0), ellipsis=ellipsis), style="dim")
    return line


def render(view: TopView, *, width: int = 80, height: int = 24, unicode: bool = True) -> Group:
    """The screen for ``view`` in a terminal of ``width`` x ``height``: a pure function, for tests.

    From the top: a title, the column header, each source (its state line, then one line per agent),
    and in the lines left, the oldest rollouts in flight over every source that lists them.
    """
    widths = _widths(width, max((len(a.agent) for s in view.sources for a in s.agents), default=0))
    plural = "s" if len(view.sources) != 1 else ""
    title = Text(no_wrap=True, overflow="crop")
    title.append("rollout-telemetry top", style="bold")
    title.append(
        f"  {len(view.sources)} source{plural}, every {view.interval:g}s, "
        f"trend over {HISTORY_SECONDS / 60:.0f}m, q quits",
        style="dim",
    )
    lines: list[Text] = [title, _header(widths)]
    labels = _screen_kinds(view, widths, "…" if unicode else "~")
    for source in view.sources:
        lines.append(_source_line(source, width))
        lines.extend(
            _agent_line(row, widths, view.now, unicode, labels=labels, ended=source.ended)
            for row in source.agents
        )
    legend = _legend(labels, width)  # under the agents, kept whatever the agents leave out
    if len(lines) + len(legend) > height:
        hidden = len(lines) + len(legend) - height + 1
        lines = [
            *lines[: height - 1 - len(legend)],
            Text(f"… {hidden} more lines: a taller terminal shows them"),
        ]
    lines += legend
    room = height - len(lines) - 2
    if view.has_in_flight_lists and room > 0:
        with_source = sum(1 for s in view.sources if s.in_flight is not None) > 1
        stall_bounds = {s.stall_after_seconds for s in view.sources if s.up and s.stall_after_seconds}
        note = f", ! = stalled past {age(min(stall_bounds))}" if stall_bounds else ", ! = stalled"
        lines.append(Text(f"oldest in flight{note}", style="bold", no_wrap=True, overflow="crop"))
        heading = [_fit(name, size, right=right) for name, size, right in _IN_FLIGHT]
        heading.append("source" if with_source else "trace")
        lines.append(Text(" ".join(heading), style="dim", no_wrap=True, overflow="crop"))
        rollouts = view.oldest_in_flight(room)
        for rollout in rollouts:
            lines.append(_in_flight_line(rollout, width, with_source, unicode))
        if not rollouts:
            lines.append(Text("  none", style="dim"))
    return Group(*lines)
