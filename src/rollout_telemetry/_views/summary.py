"""A run's result per agent for a paper or a pull request: the mean rewards with their 95% intervals and the
counts they rest on, as Markdown (a table and what its denominators are) or CSV (a row per agent).

Made from the report's data (``build_report`` with the rewards read), so its figures are ``--format json``'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rollout_telemetry._views.escaping import csv_text, markdown_text
from rollout_telemetry._views.intervals import BOOTSTRAP, BOOTSTRAP_MOST, NORMAL, RESAMPLES, WILSON

__all__ = ["render_csv", "render_markdown"]

_COUNTS = ("expected", "measured", "masked", "unscored", "failed", "omitted", "unknown")
_METHODS = {
    WILSON: "Wilson score interval (every reward 0 or 1: the mean is a proportion)",
    BOOTSTRAP: f"percentile bootstrap ({RESAMPLES:,} resamples, seeded: the same on every run)",
    NORMAL: f"normal approximation, mean +- 1.96 s / sqrt(n) (more than {BOOTSTRAP_MOST:,} rewards)",
}


def _mean(value: float | None, ci: dict[str, Any] | None) -> str:
    if value is None:
        return "-"
    if ci is None:
        return f"{value:.3f}"
    return f"{value:.3f} [{ci['low']:.3f}, {ci['high']:.3f}]"


def _count(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def render_markdown(report: dict[str, Any], heading: str | None = None) -> str:
    """The per-agent table in Markdown, then what each column counts and which intervals were used."""
    lines = [] if heading is None else [f"### {markdown_text(heading)}", ""]
    lines += [
        "| agent | mean reward [95% CI] | reward_unmasked [95% CI] | "
        + " | ".join(_COUNTS)
        + " | rewards | measured rewards |",
        "|---|---|---|" + "---:|" * (len(_COUNTS) + 2),
    ]
    methods: set[str] = set()
    for row in report["agents"]:
        counts, events = row["rollouts"], row["events"]
        every, measured = events.get("mean_reward_ci95"), events.get("mean_reward_unmasked_ci95")
        methods |= {ci["method"] for ci in (every, measured) if ci is not None}
        cells = [
            markdown_text(row["agent"]),
            _mean(events["mean_reward"], every),
            _mean(events["mean_reward_unmasked"], measured),
            *(_count(counts[column]) for column in _COUNTS),
            _count(events.get("rewards")),
            _count(events.get("measured_rewards")),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "- *mean reward*: over every row with a reward (*rewards*: measured and masked rows, a masked reward "
        "counted as NeMo Gym reports it); *reward_unmasked*: over the measured rows alone (*measured "
        "rewards*). Failed, omitted and unscored rows and unknown rollouts have no reward and are in "
        "neither; a retried rollout's every row with a reward counts.",
        "- *expected* to *unknown*: the run's expected rollouts (its inputs), each by the outcome of its "
        "newest attempt; *unknown*: no outcome written.",
    ]
    if methods:
        used = "; ".join(_METHODS[method] for method in (WILSON, BOOTSTRAP, NORMAL) if method in methods)
        lines.append(f"- 95% confidence intervals of the means: {used}. Fewer than two rewards: none.")
    return "\n".join(lines)


def render_csv(reports: Sequence[dict[str, Any]]) -> str:
    """A row per agent of each report: its file, the counts, and each mean with its interval and method (text
    quoted and neutralised for spreadsheets, numbers bare)."""
    means = ("mean_reward", "mean_reward_unmasked")
    rows: list[list[object]] = [
        [
            "file",
            "agent",
            *_COUNTS,
            "rewards",
            "measured_rewards",
            *(f"{mean}{part}" for mean in means for part in ("", "_ci95_low", "_ci95_high", "_ci95_method")),
        ]
    ]
    for report in reports:
        for row in report["agents"]:
            counts, events = row["rollouts"], row["events"]
            cells: list[object] = [report.get("file"), row["agent"]]
            cells += [counts[column] for column in _COUNTS]
            cells += [events.get("rewards"), events.get("measured_rewards")]
            for mean in means:
                ci = events.get(f"{mean}_ci95")
                cells.append(events[mean])
                cells += [None, None, None] if ci is None else [ci["low"], ci["high"], ci["method"]]
            rows.append(cells)
    return csv_text(rows)
