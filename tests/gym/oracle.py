"""Gym's own accounts of a run, against which the exporter is checked: the files, its keys, its aggregate.

Everything here reads what NeMo Gym wrote with ``json`` alone and restates NeMo Gym 0.7.0's formulas, so it
is independent of the code under test: (i) the counts in the files (``expected_from_files``), (ii) Gym's own
progress step metrics and end-of-run keys, captured in its process by ``launcher.py`` (``GymRun``), (iii) its
``_aggregate_metrics.json``. Used by ``tests/gym`` on live runs and by ``tests/sources/test_gym_files.py`` on
the files of such runs kept in ``tests/fixtures/gym-0.7.0``.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support import samples


def _jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@dataclass(frozen=True)
class GymRun:
    """One collection's files (``<stem>.jsonl`` and its sidecars) and Gym's captured metrics."""

    output: Path
    capture: Path | None = None

    @property
    def stem(self) -> str:
        return self.output.name.removesuffix(".jsonl")

    def rows(self) -> list[dict[str, Any]]:
        """The main output's rows."""
        return _jsonl(self.output)

    def failures(self) -> list[dict[str, Any]]:
        """The failures sidecar's rows."""
        return _jsonl(self.output.with_name(f"{self.stem}_failures.jsonl"))

    def inputs(self) -> list[dict[str, Any]]:
        """The materialized inputs' rows."""
        return _jsonl(self.output.with_name(f"{self.stem}_materialized_inputs.jsonl"))

    def aggregate(self) -> list[dict[str, Any]]:
        """``<stem>_aggregate_metrics.json``: one entry per environment server."""
        data: list[dict[str, Any]] = json.loads(
            self.output.with_name(f"{self.stem}_aggregate_metrics.json").read_text()
        )
        return data

    def gym_metrics(self) -> list[tuple[int | None, dict[str, Any]]]:
        """Every metrics dict Gym handed its exporters, with its step (``None`` for end-of-run keys)."""
        assert self.capture is not None
        return [(entry["step"], entry["metrics"]) for entry in _jsonl(self.capture)]

    def last_progress(self) -> dict[str, float]:
        """Gym's last progress step metrics, without the rate (``progress/total/rollouts_per_min``)."""
        steps = [metrics for step, metrics in self.gym_metrics() if step is not None]
        assert steps, "Gym exported no progress step"
        return {k: v for k, v in steps[-1].items() if k != "progress/total/rollouts_per_min"}

    def gym_coverage(self) -> dict[str, int]:
        """Gym's end-of-run ``coverage/...`` keys."""
        found = [m for step, m in self.gym_metrics() if step is None and "coverage/expected" in m]
        assert found, "Gym exported no coverage keys"
        return {k: int(v) for k, v in found[-1].items()}


@dataclass(frozen=True)
class Expected:
    """What the exporter must show for one agent, computed from Gym's files with ``json`` alone."""

    completed: int
    measured: int
    masked: int
    failed_by_class: dict[str, int]
    reward_sum: float
    unmasked_reward_sum: float
    input_tokens: int
    output_tokens: int
    expected: int
    unknown: int

    @property
    def failed(self) -> int:
        return sum(self.failed_by_class.values())


def expected_from_files(run: GymRun) -> dict[str, Expected]:
    """Per agent (``agent_ref.name``, which every row Gym 0.7.0 writes carries): the counts to expect."""
    rows, failures, inputs = run.rows(), run.failures(), run.inputs()
    agents = {row["agent_ref"]["name"] for row in [*rows, *failures, *inputs]}
    result = {}
    for agent in sorted(agents):
        mine = [r for r in rows if r["agent_ref"]["name"] == agent]
        failed = [r for r in failures if r["agent_ref"]["name"] == agent]
        materialized = [r for r in inputs if r["agent_ref"]["name"] == agent]
        assert all("reward" not in r for r in failed), "these environments' failure rows carry no reward"
        masked = [r for r in mine if r.get("mask_sample") is True]
        unmasked = [r for r in mine if r.get("mask_sample") is not True]
        done = {(r["_ng_task_index"], r["_ng_rollout_index"]) for r in [*mine, *failed]}
        result[agent] = Expected(
            completed=len(mine),
            measured=len(unmasked),
            masked=len(masked),
            failed_by_class=dict(Counter(r["_ng_failure_class"] for r in failed)),
            reward_sum=sum(float(r["reward"]) for r in mine),
            unmasked_reward_sum=sum(float(r["reward"]) for r in unmasked),
            input_tokens=sum(int(r["response"]["usage"]["input_tokens"]) for r in mine),
            output_tokens=sum(int(r["response"]["usage"]["output_tokens"]) for r in mine),
            expected=len(materialized),
            unknown=len({(r["_ng_task_index"], r["_ng_rollout_index"]) for r in materialized} - done),
        )
    return result


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def by_agent(values: Samples, name: str, agent: str, **labels: str) -> float:
    """The sum of a family's samples for one agent (over the labels not given)."""
    return sum(
        value
        for (sample, pairs), value in values.items()
        if sample == name and dict(pairs).get("agent") == agent and labels.items() <= dict(pairs).items()
    )


def check_exposition(text: str, run: GymRun) -> None:
    """The served counts are the files' counts, exactly (i)."""
    values: Samples = samples(text)
    for agent, expected in expected_from_files(run).items():
        assert by_agent(values, "rollout_completed_total", agent) == expected.completed, agent
        assert by_agent(values, "rollout_masked_total", agent) == expected.masked, agent
        assert by_agent(values, "rollout_failed_total", agent) == expected.failed, agent
        for failure_class, count in expected.failed_by_class.items():
            assert by_agent(values, "rollout_failed_total", agent, failure_kind=failure_class) == count
        positive = by_agent(values, "rollout_reward_positive_total", agent)
        negative = by_agent(values, "rollout_reward_negative_total", agent)
        assert positive - negative == pytest.approx(expected.reward_sum, abs=1e-9)
        assert by_agent(values, "rollout_tokens_total", agent, type="input") == expected.input_tokens
        assert by_agent(values, "rollout_tokens_total", agent, type="output") == expected.output_tokens
        assert by_agent(values, "rollout_run_expected", agent) == expected.expected
        assert by_agent(values, "rollout_run_rollouts", agent, disposition="unknown") == expected.unknown
        if expected.completed:
            mean = (positive - negative) / by_agent(values, "rollout_rewarded_total", agent)
            assert mean == pytest.approx(expected.reward_sum / expected.completed, abs=1e-12)


def check_report(
    report: dict[str, Any], run: GymRun, *, gym_progress: bool = True, gym_finished: bool = True
) -> None:
    """The report equals the files (i), Gym's own keys (ii) and its aggregate metrics (iii).

    ``gym_progress=False``: Gym's progress steps are not compared (a resumed run's cover its own session's
    rollouts only). ``gym_finished=False``: Gym did not reach its end (killed), so it wrote no end-of-run keys
    and no aggregate metrics.
    """
    expected = expected_from_files(run)
    rows = {row["agent"]: row for row in report["agents"]}
    assert set(rows) == set(expected), "one agent per agent, as Gym names them"
    for agent, figures in expected.items():
        rollouts, events = rows[agent]["rollouts"], rows[agent]["events"]
        assert rollouts["expected"] == figures.expected
        assert rollouts["unknown"] == figures.unknown
        assert events["measured"] == figures.measured
        assert events["masked"] == figures.masked
        assert events["failed"] == figures.failed
    if gym_progress:
        assert report["gym_progress"] == run.last_progress()  # (ii): every key, every value
    if not gym_finished:
        return
    gym_coverage = run.gym_coverage()
    assert {k: report["gym_coverage"][k] for k in gym_coverage} == gym_coverage  # (ii)
    for entry in run.aggregate():  # (iii): one per environment server, named by its agent
        agent = entry["agent_ref"]["name"]
        key_metrics = entry["key_metrics"]
        # Gym's aggregate scores the unmasked rows of the main output.
        assert rows[agent]["events"]["mean_reward_unmasked"] == pytest.approx(key_metrics["mean/reward"])
        for key in (
            "coverage/measured_rollouts",
            "coverage/masked_rollouts",
            "coverage/measured_tasks",
            "coverage/fully_masked_tasks",
        ):
            if key in key_metrics:
                assert report["gym_coverage"][key] == key_metrics[key], key


def gym_progress_of_the_files(run: GymRun, agent: str) -> dict[str, float]:
    """NeMo Gym's progress keys over every row of the files, by its formulas (rollout_collection.py)."""
    rows = [r for r in run.rows() if r["agent_ref"]["name"] == agent]
    failed = [r for r in run.failures() if r["agent_ref"]["name"] == agent]
    masked = [r for r in rows if r.get("mask_sample")]
    unmasked = [r for r in rows if not r.get("mask_sample")]
    keys = {f"progress/{agent}/reward": round(100 * sum(r["reward"] for r in rows) / len(rows), 2)}
    keys[f"progress/{agent}/reward_lower_bound"] = keys[f"progress/{agent}/reward"]
    if masked or failed:
        if masked:
            keys[f"progress/{agent}/masked_pct"] = round(100 * len(masked) / len(rows), 2)
        keys[f"progress/{agent}/reward_unmasked"] = round(
            100 * sum(r["reward"] for r in unmasked) / len(unmasked), 2
        )
    if failed:
        keys[f"progress/{agent}/failed"] = len(failed)
    return keys
