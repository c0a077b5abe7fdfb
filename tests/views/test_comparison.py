"""The paired comparison of two runs: its interval against a second computation written here."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from rollout_telemetry._views.comparison import compare_agent, paired_interval

# Student's t quantiles of 0.975 from published tables (scipy.stats.t.ppf(0.975, df)).
T975 = {5: 2.570581835636314, 11: 2.200985160082949, 29: 2.045229642132703}


@pytest.mark.parametrize("tasks", [6, 12, 30])
def test_the_paired_interval_is_the_t_interval_of_the_per_task_differences(tasks: int) -> None:
    """Two runs' rewards by task (4 repeats, 0/1): the interval's centre, bounds and detectable difference
    equal (1e-9) a computation from the per-task mean differences with statistics.stdev and a tabled t."""
    rng = random.Random(tasks)
    run_a = {task: [float(rng.random() < 0.4) for _ in range(4)] for task in range(tasks)}
    run_b = {task: [float(rng.random() < 0.6) for _ in range(3)] for task in range(tasks)}
    run_b[tasks + 5] = [1.0]  # a task of B only: in no pair
    row = compare_agent("agent", run_a, run_b, None)
    differences = [statistics.fmean(run_b[t]) - statistics.fmean(run_a[t]) for t in range(tasks)]
    centre = statistics.fmean(differences)
    error = statistics.stdev(differences) / math.sqrt(tasks)
    ci = row["difference_ci95"]
    assert row["tasks"] == tasks
    assert row["tasks_only_b"] == 1
    assert ci["mean"] == pytest.approx(centre, abs=1e-9)
    assert ci["low"] == pytest.approx(centre - T975[tasks - 1] * error, abs=1e-9)
    assert ci["high"] == pytest.approx(centre + T975[tasks - 1] * error, abs=1e-9)
    assert ci["detectable_difference"] == pytest.approx(
        (T975[tasks - 1] + 0.8416212335729143) * error, abs=1e-9
    )


def test_flipped_tasks_are_those_solved_by_half_their_rollouts_in_one_run_only() -> None:
    """With 0/1 rewards a task is solved when at least half its rollouts solve it; with a threshold, when at
    least half its rewards reach it; rewards in between without a threshold give no flips."""
    run_a = {1: [1.0, 0.0], 2: [0.0, 0.0, 1.0], 3: [1.0, 1.0]}
    run_b = {1: [0.0, 0.0], 2: [1.0, 1.0, 0.0], 3: [1.0, 0.0]}
    flipped = compare_agent("agent", run_a, run_b, None)["flipped"]
    assert flipped == {"threshold": 1.0, "solved_in_b_only": [2], "solved_in_a_only": [1]}
    graded_a, graded_b = {1: [0.2, 0.9], 2: [0.1, 0.3]}, {1: [0.2, 0.1], 2: [0.6, 0.7]}
    assert compare_agent("agent", graded_a, graded_b, None)["flipped"] is None
    flipped = compare_agent("agent", graded_a, graded_b, 0.5)["flipped"]
    assert flipped == {"threshold": 0.5, "solved_in_b_only": [2], "solved_in_a_only": [1]}


def test_fewer_than_two_shared_tasks_give_no_interval() -> None:
    """One task in common says nothing of the spread between tasks: no interval."""
    assert paired_interval([0.5]) is None
    assert compare_agent("agent", {1: [1.0]}, {1: [0.0], 2: [1.0]}, None)["difference_ci95"] is None
