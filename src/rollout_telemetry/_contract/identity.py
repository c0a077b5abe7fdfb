"""A rollout's identity (task index, rollout index, attempt): its one check and the one precedence rule.

Every entry point checks an identity here before anything is counted; the coverage account and the groups
decide which of two outcomes of one identity stands with ``rank`` and ``supersedes``.
"""

from __future__ import annotations

from rollout_telemetry._contract.shown import shown
from rollout_telemetry.errors import ConfigError, OutcomeError

__all__ = [
    "MAX_ATTEMPT",
    "MAX_ROLLOUT_INDEX",
    "MAX_TASK_INDEX",
    "Member",
    "check_attempt",
    "check_identity",
    "check_task_size",
    "member",
    "rank",
    "supersedes",
]

MAX_TASK_INDEX = 2**62
"""The largest task index accepted."""
MAX_ROLLOUT_INDEX = 2**16 - 2
"""The largest rollout index accepted: a task has at most 65,535 rollouts."""
MAX_ATTEMPT = 2**16 - 2
"""The largest attempt index accepted (NeMo Gym stops at NEMO_GYM_MAX_ROLLOUT_ATTEMPTS, 3 by default)."""


Member = tuple[int, int, "int | None"]
"""(task index, rollout index, attempt or ``None``): which member of which group an outcome is."""


def member(task_index: object, rollout_index: object, attempt: object = None) -> Member:
    """The one check of a rollout's identity and attempt, before anything is counted: the indices integers
    from 0 to ``MAX_TASK_INDEX`` and ``MAX_ROLLOUT_INDEX``, the attempt ``None`` (not given) or an integer
    from 0 to ``MAX_ATTEMPT``.

    Returns ``(task_index, rollout_index, attempt)``.

    Raises:
        OutcomeError: ``invalid_attempt``, else ``invalid_task_index`` or ``invalid_rollout_index``, naming
            the value.
    """
    if (
        type(task_index) is int
        and type(rollout_index) is int
        and 0 <= task_index <= MAX_TASK_INDEX
        and 0 <= rollout_index <= MAX_ROLLOUT_INDEX
        and (attempt is None or (type(attempt) is int and 0 <= attempt <= MAX_ATTEMPT))
    ):
        return task_index, rollout_index, attempt
    raise _refusal(task_index, rollout_index, attempt)


def _refusal(task_index: object, rollout_index: object, attempt: object) -> OutcomeError:
    # Which part of an identity ``member`` refused, and why: the attempt first, then the task index.
    if attempt is not None and (type(attempt) is not int or not 0 <= attempt <= MAX_ATTEMPT):
        msg = f"must be an integer from 0 to {MAX_ATTEMPT}, got {shown(attempt, 40)}"
        return OutcomeError("attempt", msg)
    if type(task_index) is not int or not 0 <= task_index <= MAX_TASK_INDEX:
        msg = f"must be an integer from 0 to {MAX_TASK_INDEX}, got {shown(task_index, 40)}"
        return OutcomeError("task_index", msg)
    msg = f"must be an integer from 0 to {MAX_ROLLOUT_INDEX}, got {shown(rollout_index, 40)}"
    return OutcomeError("rollout_index", msg)


def check_identity(task_index: object, rollout_index: object) -> tuple[int, int]:
    """An identity without an attempt, checked by ``member``; returns ``(task_index, rollout_index)``.

    Raises:
        OutcomeError: ``invalid_task_index`` or ``invalid_rollout_index``.
    """
    task, rollout, _ = member(task_index, rollout_index)
    return task, rollout


def check_attempt(attempt: object) -> None:
    """An attempt index alone, checked by ``member``.

    Raises:
        OutcomeError: ``invalid_attempt``.
    """
    member(0, 0, attempt)


def rank(attempt: int | None, reached_output: bool) -> int:
    """An outcome's rank among the attempts of its identity, as one int (see ``supersedes``).

    ``attempt`` ``None`` (not given) ranks below attempt 0; at the same attempt an outcome that reached the
    output (measured, masked, unscored) ranks above one that did not (failed, omitted).
    """
    return (0 if attempt is None else attempt + 1) << 1 | reached_output


def supersedes(new: int, current: int) -> bool:
    """Whether an outcome of rank ``new`` replaces the one of rank ``current`` for its identity: the one
    precedence rule of the coverage account and of the groups.

    A higher attempt wins; at the same attempt an outcome that reached the output wins over one that did not;
    between two of the same rank the later one wins (two successes of one attempt are a duplicate, which the
    coverage account refuses before asking).
    """
    return new >= current


def check_task_size(size: object, name: str = "group_size") -> None:
    """Refuse a task's number of rollouts (a group size) that is not an integer from 1 to 65,535.

    Raises:
        ConfigError: naming ``name``.
    """
    if type(size) is not int or not 1 <= size <= MAX_ROLLOUT_INDEX + 1:
        msg = f"{name} must be an integer from 1 to {MAX_ROLLOUT_INDEX + 1}, got {shown(size, 60)}"
        raise ConfigError(msg)
