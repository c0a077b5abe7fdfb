"""The end-of-run report of a run's files: what became of each rollout, what the rows said, and Gym's keys.

Two kinds of count sit side by side, and the report keeps them apart:

- **rollouts** are identities (agent, task, rollout index): each counted once, by the disposition of its
  newest attempt; with materialized inputs, ``expected = measured + masked + unscored + failed + omitted +
  unknown``;
- **events** are rows: every success and every failure row read (a failed attempt later retried is still one
  failure event). The mean rewards, the masked share and the failure kinds are computed from events, as NeMo
  Gym's progress keys are.

With materialized inputs the rollouts of each task also form a **group**, classified once every member has
an outcome (valid, degraded, uniform, insufficient, no_valid; see ``groups``); groups still waiting for a
member are ``open``. Only groups of more than one member are shown: a task with one rollout (an ordinary
evaluation) compares nothing, and would read as ``insufficient``.

The events also give the share of rows whose model response was truncated, and the mean input and output
tokens per response that carried usage.

The **training signal** of each agent (see docs/training-signal.md): completed groups whose baseline held
lost members (contaminated, by state), the groups' members by disposition, uniform groups by where their
reward lies, truncations by cause, and the health checks of the rollouts that carried a trajectory.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from rollout_telemetry._contract.failure_where import UNKNOWN
from rollout_telemetry._contract.group_state import GROUP_STATES
from rollout_telemetry._contract.health import HEALTH_CHECKS
from rollout_telemetry._contract.outcome import Disposition
from rollout_telemetry._store.coverage import CoverageSnapshot
from rollout_telemetry._store.groups import AgentGroups, GroupsSnapshot
from rollout_telemetry._store.snapshot import AccountSnapshot, AgentSnapshot
from rollout_telemetry._views.escaping import terminal_text
from rollout_telemetry._views.intervals import Interval, RewardSamples, interval_text
from rollout_telemetry._views.per_task import per_task
from rollout_telemetry._views.progress import coverage_metrics, expected_rollouts, progress_metrics

if TYPE_CHECKING:
    from rich.table import Table
    from rich.text import Text

__all__ = ["build_report", "render_table", "unmasked_mean"]

_ROLLOUT_COLUMNS = (
    "expected", "measured", "masked", "unscored", "failed", "retryable", "omitted", "unknown", "retried",
    "unidentified",
)  # fmt: skip
_EVENT_COLUMNS = ("measured", "masked", "unscored", "failed", "omitted")


def build_report(
    account: AccountSnapshot,
    coverage: CoverageSnapshot,
    groups: GroupsSnapshot | None = None,
    *,
    top: int = 3,
    samples: RewardSamples | None = None,
    threshold: float | None = None,
) -> dict[str, Any]:
    """The report as plain data (what ``--format json`` prints).

    Per agent, ``rollouts`` holds identity counts and ``events`` row counts (with ``samples``, the rewards
    read, the mean rewards' 95% intervals clustered by task: ``mean_reward_ci95``,
    ``mean_reward_unmasked_ci95``; and ``per_task``, pass@k and the tasks never and always solved, where
    every reward is 0 or 1 or a ``threshold`` says which solve);
    ``gym_coverage`` holds NeMo Gym's end-of-run ``coverage/...`` keys and ``gym_progress`` its
    ``progress/<agent>/...`` keys for the run; ``groups`` holds, per agent with groups, the completed groups
    by state and the ``open`` ones.
    """
    agents: list[dict[str, Any]] = []
    names = sorted({a.agent for a in account.agents} | {c.agent for c in coverage.agents})
    for name in names:
        events = account.agent(name)
        covered = coverage.agent(name)
        kinds: Counter[str] = Counter()
        if events is not None:
            for disposition in Disposition:
                for kind, count in events.by_kind(disposition).items():
                    kinds[f"{disposition.value}:{kind}"] += count
        rollouts: dict[str, int | None] = {
            "expected": covered.expected if covered else None,
            **{d.value: covered.rollouts[d] if covered else 0 for d in Disposition},
            "retryable": covered.retryable if covered else 0,
            "unknown": covered.unknown if covered else None,
            "retried": covered.retried if covered else 0,
            "unidentified": covered.unidentified if covered else 0,
        }
        agents.append(
            {
                "agent": name,
                "rollouts": rollouts,
                "events": {
                    **{d: events.count(Disposition(d)) if events else 0 for d in _EVENT_COLUMNS},
                    "mean_reward": events.mean_reward if events else None,
                    "mean_reward_unmasked": unmasked_mean(events),
                    **_intervals(samples, name, threshold),
                    "masked_share": (events.masked_ratio if events else None) or 0.0,
                    "truncated_share": _truncated_share(events),
                    "mean_input_tokens": _mean_tokens(events, 0),
                    "mean_output_tokens": _mean_tokens(events, 1),
                    # Most frequent first, ties by name: the same report whatever order the rows came in.
                    "top_failure_kinds": dict(sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))[:top]),
                },
            }
        )
    progress = progress_metrics(account, elapsed_seconds=0.0, expected=expected_rollouts(coverage))
    progress.pop("progress/total/rollouts_per_min")  # a rate of the live run, not of its files
    delivered = _by_delivery(account)
    return {
        "agents": agents,
        "gym_coverage": coverage_metrics(coverage),
        "gym_progress": progress,
        "rows_without_identity": sum(a.unidentified for a in coverage.agents),
        "rejected": dict(account.rejected),
        "groups": {
            agent.agent: {**compared, "open": agent.open}
            for agent in (groups.agents if groups is not None else ())
            if sum((compared := _compared(agent)).values())
        },
        "training_signal": _training_signal(account, groups),
        # Only when a failure said whether Gym sent its request: a run of NeMo Gym 0.7.0 has no such key.
        **({"failures_by_delivery": delivered} if delivered else {}),
    }


def _by_delivery(account: AccountSnapshot) -> dict[str, dict[str, int]]:
    """Per agent whose failures said whether their request was sent, its failures by delivery (``not_sent``
    apart from ``possibly_delivered`` and ``delivered``; ``unknown`` those that did not say)."""
    found: dict[str, dict[str, int]] = {}
    for events in account.agents:
        stages = events.recovery.stages if events.recovery is not None else {}
        counts: Counter[str] = Counter()
        for (_, delivery), count in stages.items():
            counts[delivery] += count
        if set(counts) - {UNKNOWN}:
            found[events.agent] = dict(sorted(counts.items()))
    return found


def _intervals(samples: RewardSamples | None, agent: str, threshold: float | None) -> dict[str, Any]:
    """The mean rewards' 95% intervals of ``agent`` (``None`` where fewer than two tasks) and its per-task
    figures, or nothing."""
    if samples is None:
        return {}
    every, measured = samples.intervals(agent)
    rewards, measured_rewards = samples.counts(agent)
    return {
        "rewards": rewards,
        "measured_rewards": measured_rewards,
        "mean_reward_ci95": _shown(every),
        "mean_reward_unmasked_ci95": _shown(measured),
        "per_task": per_task(*samples.by_task(agent), threshold),
    }


def _shown(found: Interval | None) -> dict[str, Any] | None:
    if found is None:
        return None
    return {
        "low": round(found.low, 4),
        "high": round(found.high, 4),
        "method": found.method,
        "clusters": found.clusters,
    }


def _compared(groups: AgentGroups) -> dict[str, int]:
    """Completed groups by state, those of one member left out: a task with one rollout compares nothing."""
    return {state: groups.states[state] - groups.singles.get(state, 0) for state in GROUP_STATES}


def _truncated_share(events: AgentSnapshot | None) -> float | None:
    """Truncated model responses per row read (``None`` before the first row)."""
    if events is None or not (rows := events.completed + events.failed + events.omitted):
        return None
    return round(sum(events.truncated.values()) / rows, 4)


def _mean_tokens(events: AgentSnapshot | None, which: int) -> float | None:
    """Mean tokens of one type (0 input, 1 output) per model response that carried usage."""
    if events is None or events.tokens is None or not events._usage_responses:
        return None
    return round(events.tokens[which] / events._usage_responses, 1)


_CHECK_COLUMNS = ("hollow", "runaway", "zero tokens")
"""The table's short names of ``HEALTH_CHECKS``, in their order."""
_SIGNAL_COLUMNS = (
    "contaminated", "members lost", "too hard", "too easy", "truncated by cause", *_CHECK_COLUMNS,
    "unhealthy tasks",
)  # fmt: skip


def _signal_cells(row: dict[str, Any]) -> list[str]:
    """One agent's training signal as table cells ("-" where it has none of that kind)."""
    members = row.get("group_members")
    uniform = row.get("groups_uniform", {})
    health = row.get("health", {})
    truncated = ", ".join(f"{cause} ({count})" for cause, count in row.get("truncated", {}).items())
    return [
        _number(sum(row["groups_contaminated"].values()) if "groups_contaminated" in row else None),
        _number(sum(members.values()) - members["measured"] if members else None),
        _number(uniform.get("lowest")),
        _number(uniform.get("highest")),
        truncated or "-",
        *(_number(health.get(check)) for check in HEALTH_CHECKS),
        _number(row.get("tasks_unhealthy")),
    ]


def _add_row(table: Table, *cells: str | Text) -> None:
    """Add a row of ``cells`` to ``table``, each string as text (``terminal_text``): a name from the run such
    as ``[/x]`` or ``[link=...]`` is shown as it is, never read as rich markup."""
    table.add_row(*(terminal_text(cell) if isinstance(cell, str) else cell for cell in cells))


def _section(name: str, what: str) -> Text:
    """A section's row in an agent's table: its ``name`` in bold, then what it counts."""
    from rich.text import Text

    return Text.assemble((name, "bold"), f" ({what})" if what else "")


def _signal_table(signal: dict[str, Any]) -> Any:
    from rich.table import Table

    table = Table(
        title="Training signal by agent: groups whose baseline held lost members, uniform groups at either "
        "end of the reward range, truncations by cause, health checks of the rollouts with a trajectory",
        title_justify="left",
    )
    table.add_column("agent", no_wrap=True)
    for column in _SIGNAL_COLUMNS:
        table.add_column(column, justify="right")
    for agent, row in signal.items():
        _add_row(table, agent, *_signal_cells(row))
    return table


def _training_signal(account: AccountSnapshot, groups: GroupsSnapshot | None) -> dict[str, Any]:
    """Per agent with anything to say: the same counts as the training-signal families, for the whole run."""
    signal: dict[str, Any] = {}
    for events in account.agents:
        grouped = groups.agent(events.agent) if groups is not None else None
        row: dict[str, Any] = {}
        if grouped is not None:
            row["groups_contaminated"] = dict(grouped.contaminated)
            row["group_members"] = {d.value: count for d, count in grouped.members.items()}
            row["groups_uniform"] = dict(grouped.uniform)
            row["tasks_unhealthy"] = grouped.unhealthy
        if events.truncated:
            row["truncated"] = dict(events.truncated)
        if events._evaluated:
            row["health"] = {
                "evaluated": events._evaluated,
                **{check: events._findings.get(check, 0) for check in HEALTH_CHECKS},
            }
        if row:
            signal[events.agent] = row
    return signal


def unmasked_mean(events: AgentSnapshot | None) -> float | None:
    """The unmasked mean reward as the report shows it: with nothing masked, failed or omitted, the mean
    itself (Gym publishes no key then); ``None`` before the first measured reward."""
    if events is None:
        return None
    return events.mean_reward_unmasked if events._troubled else events.mean_reward


def _percent(share: float | None) -> str:
    return "-" if share is None else f"{100 * share:.1f}"


def _number(value: object, pattern: str = "{:d}") -> str:
    if value is None:
        return "-"
    return pattern.format(value)


_WIDE = 110
"""Columns the two tables need; a narrower terminal gets the same figures agent by agent, as lines."""


def _by_agent_tables(report: dict[str, Any]) -> list[Any]:
    """Every per-agent figure of the wide tables, an agent at a time as (figure, value) rows: readable in any
    terminal narrower than the tables (80 columns, say)."""
    from rich.table import Table

    tables = []
    signal = report.get("training_signal", {})
    for row in report["agents"]:
        counts, seen = row["rollouts"], row["events"]
        table = Table(
            title=terminal_text(row["agent"], "table.title"), title_justify="left", show_header=False
        )
        table.add_column("figure")
        table.add_column("value", justify="right")
        _add_row(table, _section("rollouts", "identities, newest attempt"), "")
        for column in _ROLLOUT_COLUMNS:
            _add_row(table, f"  {column}", _number(counts[column]))
        _add_row(table, _section("events", "every row read"), "")
        for column in _EVENT_COLUMNS:
            _add_row(table, f"  {column}", _number(seen[column]))
        kinds = ", ".join(f"{kind} ({count})" for kind, count in seen["top_failure_kinds"].items())
        for label, value in (
            ("mean reward", _number(seen["mean_reward"], "{:+.4f}")),
            ("mean reward unmasked", _number(seen["mean_reward_unmasked"], "{:+.4f}")),
            *(
                (f"  {label} 95% CI", interval_text(seen.get(key)))
                for label, key in (("reward", "mean_reward_ci95"), ("unmasked", "mean_reward_unmasked_ci95"))
                if key in seen
            ),
            ("masked %", f"{100 * seen['masked_share']:.1f}"),
            ("truncated %", _percent(seen["truncated_share"])),
            ("mean tokens in", _number(seen["mean_input_tokens"], "{:.1f}")),
            ("mean tokens out", _number(seen["mean_output_tokens"], "{:.1f}")),
            ("top failure kinds", kinds or "-"),
        ):
            _add_row(table, f"  {label}", value)
        if (groups := report.get("groups", {}).get(row["agent"])) is not None:
            _add_row(table, _section("groups", "tasks of several rollouts"), "")
            for column in (*GROUP_STATES, "open"):
                _add_row(table, f"  {column}", _number(groups[column]))
        if row["agent"] in signal:
            _add_row(table, _section("training signal", ""), "")
            for label, value in zip(_SIGNAL_COLUMNS, _signal_cells(signal[row["agent"]]), strict=True):
                _add_row(table, f"  {label}", value)
        tables.append(table)
    return tables


def render_table(report: dict[str, Any], width: int = _WIDE) -> Any:
    """A rich renderable of the report: the rollouts, events, groups and training-signal tables, then Gym's
    keys.

    Narrower than the tables need (``width``), the same figures an agent at a time, as (figure, value) rows.
    """
    from rich.console import Group
    from rich.table import Table

    rollouts = Table(
        title="Rollouts by agent: distinct identities, each by the disposition of its newest attempt",
        title_justify="left",
    )
    # The agent's name is never cut; in a narrow terminal the number columns' headings wrap instead.
    agent_width = min(max((len(row["agent"]) for row in report["agents"]), default=5), 40)
    rollouts.add_column("agent", no_wrap=True, min_width=agent_width)
    for column in _ROLLOUT_COLUMNS:
        rollouts.add_column(column, justify="right")
    events = Table(
        title="Events by agent: every row read (a retried failure is still one failed event)",
        title_justify="left",
    )
    events.add_column("agent", no_wrap=True, min_width=agent_width)
    for column in (*_EVENT_COLUMNS, "reward", "unmasked", "masked %", "trunc %", "tokens in", "out"):
        events.add_column(column, justify="right")
    events.add_column("top failure kinds")
    for row in report["agents"]:
        counts, seen = row["rollouts"], row["events"]
        _add_row(rollouts, row["agent"], *(_number(counts[c]) for c in _ROLLOUT_COLUMNS))
        kinds = ", ".join(f"{kind} ({count})" for kind, count in seen["top_failure_kinds"].items())
        _add_row(
            events,
            row["agent"],
            *(_number(seen[c]) for c in _EVENT_COLUMNS),
            _number(seen["mean_reward"], "{:+.4f}"),
            _number(seen["mean_reward_unmasked"], "{:+.4f}"),
            f"{100 * seen['masked_share']:.1f}",
            _percent(seen["truncated_share"]),
            _number(seen["mean_input_tokens"], "{:.1f}"),
            _number(seen["mean_output_tokens"], "{:.1f}"),
            kinds or "-",
        )
    if width < _WIDE:  # every per-agent figure an agent at a time; then Gym's keys, as wide
        parts: list[Any] = _by_agent_tables(report)
    else:
        parts = [rollouts, events, *_intervals_table(report), *_wide_tables(report)]
    parts += _keys_and_notes(report)
    return Group(*parts)


def _intervals_table(report: dict[str, Any]) -> list[Any]:
    """The mean rewards' 95% intervals an agent a row, when the rewards were read (nothing otherwise)."""
    from rich.table import Table

    if not any("mean_reward_ci95" in row["events"] for row in report["agents"]):
        return []
    table = Table(
        title="Mean rewards' 95% intervals (clustered by task where a task has several rewards)",
        title_justify="left",
    )
    table.add_column("agent", no_wrap=True)
    table.add_column("reward [95% CI]")
    table.add_column("unmasked [95% CI]")
    for row in report["agents"]:
        seen = row["events"]
        _add_row(
            table,
            row["agent"],
            interval_text(seen.get("mean_reward_ci95")),
            interval_text(seen.get("mean_reward_unmasked_ci95")),
        )
    return [table]


def _wide_tables(report: dict[str, Any]) -> list[Any]:
    """The groups and training-signal tables, an agent a row."""
    from rich.table import Table

    parts: list[Any] = []
    if report.get("groups"):
        by_state = Table(
            title="Groups by agent: the rollouts of a task of several, classified once each has an outcome",
            title_justify="left",
        )
        by_state.add_column("agent", no_wrap=True)
        for column in (*GROUP_STATES, "open"):
            by_state.add_column(column, justify="right", no_wrap=True)
        for agent, counts in report["groups"].items():
            _add_row(by_state, agent, *(_number(counts[c]) for c in (*GROUP_STATES, "open")))
        parts.append(by_state)
    if report.get("training_signal"):
        parts.append(_signal_table(report["training_signal"]))
    return parts


def _keys_and_notes(report: dict[str, Any]) -> list[Any]:
    """NeMo Gym's keys as (key, value) tables, the rows without identity and the rejected rows."""
    from rich.table import Table

    parts: list[Any] = []
    for title, section in (("Gym coverage keys", "gym_coverage"), ("Gym progress keys", "gym_progress")):
        if report[section]:
            keys = Table(title=title, title_justify="left")
            keys.add_column("key")
            keys.add_column("value", justify="right")
            for key, value in report[section].items():
                _add_row(keys, key, str(value))
            parts.append(keys)
    if report["rows_without_identity"]:
        parts.append(
            terminal_text(
                f"rows without an identity (counted, matched to nothing): {report['rows_without_identity']}"
            )
        )
    if delivered := report.get("failures_by_delivery"):
        by_agent = "; ".join(
            f"{agent}: " + ", ".join(f"{delivery} {count}" for delivery, count in counts.items())
            for agent, counts in delivered.items()
        )
        parts.append(terminal_text(f"failures by delivery (not_sent: the request never left): {by_agent}"))
    if report["rejected"]:
        rejected = ", ".join(f"{reason}: {count}" for reason, count in sorted(report["rejected"].items()))
        parts.append(terminal_text(f"rejected rows: {rejected}"))
    return parts + _notable_lines(report.get("notable") or {})


def _notable_lines(notable: dict[str, list[dict[str, Any]]]) -> list[Any]:
    """The rollouts worth opening, a line each (any terminal's width): where it is, then what it is."""
    parts: list[Any] = []
    for category, rollouts in notable.items():
        if not rollouts:
            continue
        parts.append(terminal_text(f"{category.replace('_', ' ')} (file:line, agent, task/rollout/attempt):"))
        for rollout in rollouts:
            facts = [
                f"  {rollout['file']}:{rollout['line']}",
                str(rollout["agent"]),
                f"{_number(rollout['task_index'])}/{_number(rollout['rollout_index'])}/{rollout['attempt']}",
                str(rollout["disposition"]),
            ]
            facts += [f"kind {rollout['failure_kind']}"] if rollout["failure_kind"] is not None else []
            facts += [f"stage {rollout['stage']}"] if rollout["stage"] is not None else []
            facts += [f"{rollout['duration_s']:.3f} s"] if rollout["duration_s"] is not None else []
            facts += [f"{rollout['output_tokens']} output tokens"] if rollout["output_tokens"] else []
            facts += [f"reason {rollout['failure_reason']}"] if rollout.get("failure_reason") else []
            parts.append(terminal_text(", ".join(facts)))
    return parts
