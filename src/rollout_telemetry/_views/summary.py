"""A run's result per agent for a paper or a pull request: the mean rewards with their 95% intervals and the
counts they rest on, as Markdown (a table, what its denominators are, and pass@k where rewards say solved or
not) or CSV (a row per agent).

Made from the report's data (``build_report`` with the rewards read), so its figures are ``--format json``'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rollout_telemetry._views.escaping import csv_text, markdown_text
from rollout_telemetry._views.intervals import CLUSTERED, STUDENT, WILSON

__all__ = ["render_csv", "render_markdown"]

_COUNTS = ("expected", "measured", "masked", "unscored", "failed", "omitted", "unknown")
_METHODS = {
    CLUSTERED: "clustered by task (tasks repeat): the cluster-robust standard error (CR1) with Student's t "
    "on tasks - 1 degrees of freedom, as in Miller, Adding Error Bars to Evals (arXiv 2411.00640)",
    WILSON: "Wilson score interval (every reward 0 or 1, one per task: the mean is a proportion)",
    STUDENT: "t-interval, mean +- t(n - 1) s / sqrt(n) (one reward per task)",
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
    clusters: list[str] = []
    for row in report["agents"]:
        counts, events = row["rollouts"], row["events"]
        every, measured = events.get("mean_reward_ci95"), events.get("mean_reward_unmasked_ci95")
        methods |= {ci["method"] for ci in (every, measured) if ci is not None}
        if every is not None:
            unmasked = "" if measured is None else f" (reward_unmasked: {measured['clusters']:,})"
            clusters.append(f"{markdown_text(row['agent'])} {every['clusters']:,}{unmasked}")
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
        used = "; ".join(_METHODS[method] for method in (CLUSTERED, WILSON, STUDENT) if method in methods)
        lines.append(
            f"- 95% confidence intervals of the means: {used}. Tasks (the clusters: a row without a task is "
            f"one of its own), per agent: {', '.join(clusters)}. Fewer than two tasks: none."
        )
    return "\n".join(lines + _per_task_lines(report))


def _shown_ks(most: int) -> list[int]:
    """The k of pass@k a table shows: 1, 2, 4, ... and the most (every k is in the JSON)."""
    return sorted({*(2**i for i in range(most.bit_length()) if 2**i <= most), most})


def _per_task_lines(report: dict[str, Any]) -> list[str]:
    """pass@k and the tasks never and always solved per agent, as a Markdown table; nothing without them."""
    found = [(row["agent"], shown) for row in report["agents"] if (shown := row["events"].get("per_task"))]
    if not found:
        return []
    ks = _shown_ks(max(len(figures["pass_at_k"]) for _, figures in found))
    lines = [
        "",
        "| agent | tasks | " + " | ".join(f"pass@{k}" for k in ks) + " | never solved | always solved |",
        "|---|" + "---:|" * (len(ks) + 3),
    ]
    thresholds = set()
    for agent, figures in found:
        thresholds.add(figures["threshold"])
        passes = {entry["k"]: entry for entry in figures["pass_at_k"]}
        cells = [markdown_text(agent), f"{figures['tasks']:,}"]
        for k in ks:
            entry = passes.get(k)
            if entry is None:
                cells.append("-")
            elif entry["tasks"] < figures["tasks"]:
                cells.append(f"{entry['value']:.3f} ({entry['tasks']:,} tasks)")
            else:
                cells.append(f"{entry['value']:.3f}")
        cells += [f"{100 * figures['never_solved']:.1f}%", f"{100 * figures['always_solved']:.1f}%"]
        lines.append("| " + " | ".join(cells) + " |")
    solved = " or ".join(f"{threshold:g}" for threshold in sorted(thresholds))
    lines += [
        "",
        f"- A rollout solves its task when its reward is at least {solved}. *pass@k*: the chance that k of a "
        "task's rewards hold a solution, estimated without bias (Chen et al. 2021: 1 - C(n-c, k) / C(n, k)) "
        "and averaged over the tasks with at least k rewards (fewer than all: how many, in parentheses); "
        "pass@1 weighs each task once, where the mean reward weighs each row. Rows without a task are in "
        "none of these figures.",
    ]
    return lines


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
            *(
                f"{mean}{part}"
                for mean in means
                for part in ("", "_ci95_low", "_ci95_high", "_ci95_method", "_ci95_clusters")
            ),
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
                cells += [None] * 4 if ci is None else [ci["low"], ci["high"], ci["method"], ci["clusters"]]
            rows.append(cells)
    return csv_text(rows)
