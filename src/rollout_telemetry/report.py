"""The end-of-run report: per-agent coverage, rewards, masked share and top failure kinds, plus Gym's keys."""

from __future__ import annotations

from collections import Counter
from typing import Any

from rollout_telemetry.coverage import CoverageSnapshot, coverage_metrics
from rollout_telemetry.outcome import Disposition
from rollout_telemetry.snapshot import AccountSnapshot, AgentSnapshot

__all__ = ["build_report", "render_table"]


def build_report(account: AccountSnapshot, coverage: CoverageSnapshot, *, top: int = 3) -> dict[str, Any]:
    """The report as plain data (what ``--format json`` prints)."""
    agents: list[dict[str, Any]] = []
    names = sorted({a.agent for a in account.agents} | {c.agent for c in coverage.agents})
    for name in names:
        events = account.agent(name)
        covered = coverage.agent(name)
        kinds: Counter[str] = Counter()
        if events is not None:
            for disposition, counts in events.kinds.items():
                for kind, count in counts.items():
                    kinds[f"{disposition.value}:{kind}"] += count
        ratio = events.masked_ratio if events is not None else None
        agents.append(
            {
                "agent": name,
                "expected": covered.expected if covered else None,
                **{d.value: covered.rollouts[d] if covered else 0 for d in Disposition},
                "unknown": covered.unknown if covered else None,
                "retried": covered.retried if covered else 0,
                "mean_reward": events.mean_reward if events else None,
                "mean_reward_unmasked": _unmasked(events),
                "masked_share": ratio or 0.0,
                "top_failure_kinds": dict(kinds.most_common(top)),
            }
        )
    return {
        "agents": agents,
        "gym": coverage_metrics(coverage),
        "rejected": dict(account.rejected),
    }


def _unmasked(events: AgentSnapshot | None) -> float | None:
    # With nothing masked, failed or omitted the unmasked mean is the mean (Gym publishes no key then).
    if events is None:
        return None
    return events.mean_reward_unmasked if events.troubled else events.mean_reward


def _number(value: object, pattern: str = "{:d}") -> str:
    if value is None:
        return "-"
    return pattern.format(value)


def render_table(report: dict[str, Any]) -> Any:
    """A rich renderable of the report: the per-agent table, then the Gym keys."""
    from rich.console import Group
    from rich.table import Table

    table = Table(title="Rollout coverage by agent", title_justify="left")
    columns = [
        "agent", "expected", "measured", "masked", "unscored", "failed", "omitted", "unknown", "retried",
    ]  # fmt: skip
    for column in columns:
        table.add_column(column, justify="left" if column == "agent" else "right", no_wrap=True)
    for column in ("reward", "unmasked", "masked %", "top failure kinds"):
        table.add_column(column, justify="left" if column == "top failure kinds" else "right")
    for row in report["agents"]:
        kinds = ", ".join(f"{kind} ({count})" for kind, count in row["top_failure_kinds"].items())
        table.add_row(
            row["agent"],
            *(_number(row[c]) for c in columns[1:]),
            _number(row["mean_reward"], "{:+.4f}"),
            _number(row["mean_reward_unmasked"], "{:+.4f}"),
            f"{100 * row['masked_share']:.1f}",
            kinds or "-",
        )
    keys = Table(title="Gym coverage keys", title_justify="left")
    keys.add_column("key")
    keys.add_column("value", justify="right")
    for key, value in report["gym"].items():
        keys.add_row(key, str(value))
    parts: list[Any] = [table]
    if report["gym"]:
        parts.append(keys)
    if report["rejected"]:
        rejected = ", ".join(f"{reason}: {count}" for reason, count in sorted(report["rejected"].items()))
        parts.append(f"rejected rows: {rejected}")
    return Group(*parts)
