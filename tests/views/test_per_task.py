"""Per-task figures: pass@k by Chen et al.'s unbiased estimator, checked against a count over every k-subset
of a task's rewards, and the shares of tasks never and always solved."""

from __future__ import annotations

import itertools
import random
from fractions import Fraction

import pytest

from rollout_telemetry._views.per_task import pass_at_k, per_task


def _brute_pass_at_k(solved: list[bool], k: int) -> Fraction:
    """The share of the k-subsets of a task's rewards that hold a solution, counted one by one."""
    subsets = list(itertools.combinations(range(len(solved)), k))
    return Fraction(sum(any(solved[i] for i in subset) for subset in subsets), len(subsets))


@pytest.mark.parametrize("n", range(1, 9))
def test_pass_at_k_is_the_share_of_k_subsets_holding_a_solution(n: int) -> None:
    """For every n up to 8, c solving and k up to n: the estimator equals the brute-force count (1e-12)."""
    for c in range(n + 1):
        solved = [True] * c + [False] * (n - c)
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(float(_brute_pass_at_k(solved, k)), abs=1e-12)


def test_per_task_averages_over_the_tasks_with_k_rewards_and_counts_the_extremes() -> None:
    """Uneven repeats: pass@k is the mean over the tasks with at least k rewards of the brute-force count,
    each k says how many tasks it is over; never and always solved are shares of every task."""
    rng = random.Random(5)
    by_task = {task: [float(rng.random() < 0.4) for _ in range(rng.randint(1, 6))] for task in range(9)}
    by_task[9] = [0.0] * 6
    by_task[10] = [1.0] * 3
    figures = per_task(by_task, 4, None)
    assert figures is not None
    assert (figures["tasks"], figures["rewards_without_task"], figures["threshold"]) == (11, 4, 1.0)
    most = max(len(rewards) for rewards in by_task.values())
    assert [entry["k"] for entry in figures["pass_at_k"]] == list(range(1, most + 1))
    for entry in figures["pass_at_k"]:
        k = entry["k"]
        counted = [rewards for rewards in by_task.values() if len(rewards) >= k]
        expected = sum(_brute_pass_at_k([r == 1.0 for r in rewards], k) for rewards in counted) / len(counted)
        assert entry["tasks"] == len(counted)
        assert entry["value"] == round(float(expected), 4)
    never = sum(not any(rewards) for rewards in by_task.values())
    always = sum(all(rewards) for rewards in by_task.values())
    assert figures["never_solved"] == round(never / 11, 4)
    assert figures["always_solved"] == round(always / 11, 4)


def test_a_threshold_says_which_rewards_solve_and_without_one_only_0_1_rewards_count() -> None:
    """Rewards in [0, 1]: no figures without a threshold; with 0.5, a reward of 0.5 or more solves."""
    by_task = {0: [0.2, 0.5], 1: [0.1, 0.3], 2: [0.9, 0.7]}
    assert per_task(by_task, 0, None) is None
    assert per_task({}, 3, 0.5) is None
    figures = per_task(by_task, 0, 0.5)
    assert figures is not None
    assert figures["pass_at_k"] == [{"k": 1, "value": 0.5, "tasks": 3}, {"k": 2, "value": 0.6667, "tasks": 3}]
    assert (figures["never_solved"], figures["always_solved"]) == (0.3333, 0.3333)
