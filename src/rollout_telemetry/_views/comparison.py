"""Two runs compared on the tasks they share: per agent, the difference of mean rewards (B - A) with a paired
95% interval, the tasks that flipped, and the smallest difference the shared tasks could detect.

The tasks are the pairs (Evan Miller, "Adding Error Bars to Evals", arXiv 2411.00640): each run's mean reward
of a task (its repeats averaged: the task is the cluster) is paired with the other run's, and the interval is
the t-interval of the per-task differences, ``mean +- t975(tasks - 1) * sd / sqrt(tasks)``. A task is
*solved* in a run when at least half its rollouts solve it (a reward of 1 where every reward is 0 or 1, or at
least ``--pass-threshold``): the task's solved share at or above 0.5. The smallest detectable difference at
80% power and a two-sided 5% test is ``(t975(tasks - 1) + z0.80) * sd / sqrt(tasks)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from rollout_telemetry._views.escaping import csv_text, markdown_text, terminal_text
from rollout_telemetry._views.intervals import t975
from rollout_telemetry._views.per_task import solutions, solving_threshold

__all__ = [
    "compare_agent",
    "comparison_csv",
    "comparison_html",
    "comparison_markdown",
    "comparison_table",
]

PAIRED = "paired t"
Z80 = 0.8416212335729143
"""The standard normal quantile of 0.80: the power of 80% a detectable difference is computed for."""
SOLVED_SHARE = 0.5
"""A task is solved in a run when at least this share of its rollouts solve it."""
FLIPS_SHOWN = 10
"""Flipped tasks the text and Markdown name (the JSON and CSV name all)."""


def paired_interval(differences: Sequence[float]) -> dict[str, Any] | None:
    """The mean of the per-task ``differences`` with its t-interval on tasks - 1 degrees of freedom and the
    smallest difference detectable at 80% power; ``None`` for fewer than two tasks."""
    tasks = len(differences)
    if tasks < 2:
        return None
    mean = math.fsum(differences) / tasks
    sd = math.sqrt(math.fsum((d - mean) ** 2 for d in differences) / (tasks - 1))
    t = t975(tasks - 1)
    half = t * sd / math.sqrt(tasks)
    return {
        "mean": mean,
        "low": mean - half,
        "high": mean + half,
        "method": PAIRED,
        "tasks": tasks,
        "sd_difference": sd,
        "detectable_difference": (t + Z80) * sd / math.sqrt(tasks),
    }


def _solved(rewards: Sequence[float], threshold: float) -> bool:
    return solutions(rewards, threshold) >= SOLVED_SHARE * len(rewards)


def compare_agent(
    agent: str,
    run_a: Mapping[int, Sequence[float]],
    run_b: Mapping[int, Sequence[float]],
    threshold: float | None,
) -> dict[str, Any]:
    """One agent's comparison of its rewards by task in run A and run B (``SamplesRewards.by_task``'s).

    Args:
        threshold: the reward from which a rollout solves its task; ``None``: flips only when every reward
            is 0 or 1 (a reward of 1 solves).
    """
    shared = sorted(set(run_a) & set(run_b))
    means_a = [math.fsum(run_a[task]) / len(run_a[task]) for task in shared]
    means_b = [math.fsum(run_b[task]) / len(run_b[task]) for task in shared]
    row: dict[str, Any] = {
        "agent": agent,
        "tasks": len(shared),
        "tasks_only_a": len(run_a.keys() - run_b.keys()),
        "tasks_only_b": len(run_b.keys() - run_a.keys()),
        "mean_a": math.fsum(means_a) / len(shared) if shared else None,
        "mean_b": math.fsum(means_b) / len(shared) if shared else None,
        "difference_ci95": paired_interval([b - a for a, b in zip(means_a, means_b, strict=True)]),
        "flipped": None,
    }
    rewards = (reward for task in shared for run in (run_a, run_b) for reward in run[task])
    solves = solving_threshold(rewards, threshold) if shared else None
    if solves is not None:
        states = [(_solved(run_a[task], solves), _solved(run_b[task], solves)) for task in shared]
        row["flipped"] = {
            "threshold": solves,
            "solved_in_b_only": [task for task, (a, b) in zip(shared, states, strict=True) if b and not a],
            "solved_in_a_only": [task for task, (a, b) in zip(shared, states, strict=True) if a and not b],
        }
    return row


def _signed(value: float | None) -> str:
    return "-" if value is None else f"{value:+.3f}"


def _plain(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _interval(ci: Mapping[str, Any] | None) -> str:
    return "-" if ci is None else f"[{ci['low']:+.3f}, {ci['high']:+.3f}]"


def _flips(tasks: Sequence[int]) -> str:
    shown = ", ".join(str(task) for task in tasks[:FLIPS_SHOWN])
    more = len(tasks) - FLIPS_SHOWN
    return f"{len(tasks)}" + (f" ({shown}{f', +{more} more' if more > 0 else ''})" if tasks else "")


def _cells(row: Mapping[str, Any]) -> list[str]:
    """The figures of a row as text: means, difference, interval, detectable difference, flips each way."""
    ci, flipped = row["difference_ci95"], row["flipped"]
    return [
        f"{row['tasks']:,}",
        _plain(row["mean_a"]),
        _plain(row["mean_b"]),
        _signed(None if ci is None else ci["mean"]),
        _interval(ci),
        _plain(None if ci is None else ci["detectable_difference"]),
        "-" if flipped is None else _flips(flipped["solved_in_b_only"]),
        "-" if flipped is None else _flips(flipped["solved_in_a_only"]),
    ]


_HEADER = (
    "agent", "tasks", "mean A", "mean B", "B - A", "95% CI (paired)", "detectable at 80%", "solved in B only",
    "solved in A only",
)  # fmt: skip
_NOTE = (
    "Pairs are the tasks both runs have: each task's mean reward (its repeats averaged) in A and in B. "
    "The interval is the t-interval of the per-task differences on tasks - 1 degrees of freedom; "
    "detectable at 80%: (t975 + z0.80) * sd / sqrt(tasks), the smallest difference these tasks would find "
    "in 80% of runs at a two-sided 5% level. A task is solved when at least half its rollouts solve it."
)


def comparison_table(comparison: Mapping[str, Any]) -> Any:
    """A rich renderable of the comparison: a row per agent, then what the figures are."""
    from rich.console import Group
    from rich.table import Table

    table = Table(
        title=terminal_text(f"B - A: A = {comparison['a']}, B = {comparison['b']}"), title_justify="left"
    )
    for index, column in enumerate(_HEADER):
        table.add_column(column, justify="left" if index == 0 else "right", no_wrap=index == 0)
    for row in comparison["agents"]:
        table.add_row(terminal_text(row["agent"]), *_cells(row))
    parts: list[Any] = [table, terminal_text(_NOTE)]
    if comparison["agents_unpaired"]:
        parts.append(terminal_text("agents in one run only: " + ", ".join(comparison["agents_unpaired"])))
    return Group(*parts)


def comparison_markdown(comparison: Mapping[str, Any]) -> str:
    """The comparison as a Markdown table, then what its figures are."""
    lines = [
        f"B - A: A = {markdown_text(comparison['a'])}, B = {markdown_text(comparison['b'])}",
        "",
        "| " + " | ".join(_HEADER) + " |",
        "|---|" + "---:|" * (len(_HEADER) - 1),
    ]
    lines += [
        "| " + " | ".join([markdown_text(row["agent"]), *map(markdown_text, _cells(row))]) + " |"
        for row in comparison["agents"]
    ]
    lines += ["", _NOTE]
    if comparison["agents_unpaired"]:
        names = ", ".join(markdown_text(name) for name in comparison["agents_unpaired"])
        lines += ["", f"Agents in one run only: {names}."]
    return "\n".join(lines)


_FLIP_KEYS = ("solved_in_b_only", "solved_in_a_only")


def comparison_csv(comparison: Mapping[str, Any]) -> str:
    """The comparison as CSV: a row per agent, numbers bare, the flipped tasks space-separated."""
    header: list[object] = [
        "agent", "tasks", "tasks_only_a", "tasks_only_b", "mean_a", "mean_b", "difference", "ci95_low",
        "ci95_high", "sd_difference", "detectable_difference", "solved_in_b_only", "solved_in_a_only",
    ]  # fmt: skip
    rows: list[list[object]] = [header]
    for row in comparison["agents"]:
        ci, flipped = row["difference_ci95"] or {}, row["flipped"]
        rows.append(
            [
                row["agent"], row["tasks"], row["tasks_only_a"], row["tasks_only_b"], row["mean_a"],
                row["mean_b"], ci.get("mean"), ci.get("low"), ci.get("high"), ci.get("sd_difference"),
                ci.get("detectable_difference"),
                *(
                    (None, None) if flipped is None
                    else (" ".join(map(str, flipped[key])) for key in _FLIP_KEYS)
                ),
            ]
        )  # fmt: skip
    return csv_text(rows)


def comparison_html(comparison: Mapping[str, Any]) -> str:
    """The comparison as a page body: a title, a table a row per agent and what the figures are, escaped."""
    head = "".join(f"<th>{escape(column)}</th>" for column in _HEADER)
    body = "".join(
        f"<tr><td>{escape(row['agent'])}</td>" + "".join(f"<td>{escape(cell)}</td>" for cell in _cells(row))
        + "</tr>"
        for row in comparison["agents"]
    )  # fmt: skip
    unpaired = (
        f'<p class="about">Agents in one run only: {escape(", ".join(comparison["agents_unpaired"]))}</p>'
        if comparison["agents_unpaired"]
        else ""
    )
    return (
        f'<table class="agents"><tr>{head}</tr>{body}</table><p class="about">{escape(_NOTE)}</p>{unpaired}'
    )
