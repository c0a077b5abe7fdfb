"""Per-task figures of a run whose rewards say solved or not: pass@k and the tasks never and always solved.

A reward solves its task when it is 1 (every reward 0 or 1) or at least a threshold the user gives. pass@k is
the chance that k rewards drawn without replacement from a task's rewards hold a solution, estimated without
bias from a task's n rewards of which c solve (Chen et al. 2021, "Evaluating Large Language Models Trained on
Code": 1 - C(n-c, k) / C(n, k)), averaged over the tasks with at least k rewards.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["per_task", "solutions", "solving_threshold"]


def solving_threshold(rewards: Iterable[float], threshold: float | None) -> float | None:
    """The reward from which a rollout solves its task: ``threshold`` when the user gave one, else 1 when
    every reward is 0 or 1; ``None`` when the rewards do not say solved or not."""
    if threshold is not None:
        return threshold
    return 1.0 if all(reward in (0.0, 1.0) for reward in rewards) else None


def solutions(rewards: Iterable[float], threshold: float) -> int:
    """How many of a task's ``rewards`` solve it (at least ``threshold``, from ``solving_threshold``)."""
    return sum(reward >= threshold for reward in rewards)


def pass_at_k(n: int, c: int, k: int) -> float:
    """1 - C(n-c, k) / C(n, k): of ``n`` rewards, ``c`` solving, the chance that ``k`` of them hold one."""
    if n - c < k:  # every draw of k holds a solution
        return 1.0
    # C(n-c, k) / C(n, k) = prod over i in (n-c, n] of (1 - k / i): no huge numbers (Chen et al.'s form)
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def per_task(
    by_task: Mapping[int, Sequence[float]], untasked: int, threshold: float | None
) -> dict[str, Any] | None:
    """pass@k for k from 1 to the most rewards of a task, and the shares of tasks never and always solved;
    ``None`` without a task, or when no threshold is given and a reward is neither 0 nor 1.

    Args:
        by_task: each task's rewards.
        untasked: rewards without a task (in no figure here).
        threshold: the reward from which a task is solved; ``None``: every reward must be 0 or 1.
    """
    if not by_task:
        return None
    threshold = solving_threshold((reward for rewards in by_task.values() for reward in rewards), threshold)
    if threshold is None:
        return None
    solved = [(len(rewards), solutions(rewards, threshold)) for rewards in by_task.values()]
    tasks = len(solved)
    passes = []
    for k in range(1, max(n for n, _ in solved) + 1):
        counted = [pass_at_k(n, c, k) for n, c in solved if n >= k]
        passes.append({"k": k, "value": round(math.fsum(counted) / len(counted), 4), "tasks": len(counted)})
    return {
        "threshold": threshold,
        "tasks": tasks,
        "rewards_without_task": untasked,
        "pass_at_k": passes,
        "never_solved": round(sum(c == 0 for _, c in solved) / tasks, 4),
        "always_solved": round(sum(c == n for n, c in solved) / tasks, 4),
    }
