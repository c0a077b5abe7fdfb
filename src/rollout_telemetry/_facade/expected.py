"""What ``RolloutTelemetry.expect()`` checks and reads before it declares anything: its arguments, the
identities of ``tasks=``, and NeMo Gym's materialized inputs (``inputs=``)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from rollout_telemetry._contract.identity import MAX_ATTEMPT, MAX_TASK_INDEX, check_identity, check_task_size
from rollout_telemetry._contract.shown import shown
from rollout_telemetry.errors import ConfigError, OutcomeError, Rejection

__all__ = ["check_work", "identity_pairs", "inputs_of", "task_identities"]


def check_work(  # noqa: PLR0917 - expect()'s arguments, checked before anything is declared
    agents: tuple[object, ...],
    rollouts: object,
    tasks: object,
    rollouts_per_task: object,
    identities: object,
    inputs: object,
    group_size: object,
    max_attempts: object,
) -> None:
    """Refuse what ``expect()`` cannot declare, before it declares anything.

    Raises:
        ConfigError: what is wrong, in a line.
    """
    if not all(isinstance(agent, str) for agent in agents):
        msg = "expect() takes agent names, then the work as keywords (rollouts=N, tasks=N): got "
        msg += shown(agents, 60)
        raise ConfigError(msg)
    if tasks is None and rollouts_per_task != 1:
        msg = "rollouts_per_task is the rollouts of each of tasks=: give tasks too"
        raise ConfigError(msg)
    if group_size is not None:
        check_task_size(group_size)
    if sum(given is not None for given in (rollouts, tasks, identities, inputs)) > 1:
        msg = "give at most one of rollouts, tasks, identities and inputs"
        raise ConfigError(msg)
    if inputs is not None and not isinstance(inputs, str | os.PathLike):
        msg = f"inputs must be the path of a materialized inputs file, got {shown(inputs, 60)}"
        raise ConfigError(msg)
    if inputs is not None and len(agents) > 1:
        msg = "with inputs=, give at most one agent: the one of rows that name none"
        raise ConfigError(msg)
    for name, count in (("rollouts", rollouts), ("tasks", tasks)):
        if count is not None and (type(count) is not int or not 0 <= count <= MAX_TASK_INDEX):
            msg = f"{name} must be an integer from 0 to {MAX_TASK_INDEX}, got {shown(count, 60)}"
            raise ConfigError(msg)
    if tasks is not None:
        check_task_size(rollouts_per_task, "rollouts_per_task")
    if max_attempts is not None and (
        type(max_attempts) is not int or not 1 <= max_attempts <= MAX_ATTEMPT + 1
    ):
        msg = f"max_attempts must be an integer from 1 to {MAX_ATTEMPT + 1}, got {shown(max_attempts, 60)}"
        raise ConfigError(msg)


def identity_pairs(identities: object) -> tuple[tuple[int, int], ...]:
    """``identities`` as a tuple of (task index, rollout index) pairs, each checked (``check_identity``)
    before any is declared.

    Raises:
        ConfigError: ``identities`` is not an iterable of pairs, or a pair is not a valid identity (named by
            its position).
    """
    if isinstance(identities, Iterable) and not isinstance(identities, str | bytes):
        pairs = tuple(identities)
        if all(isinstance(pair, tuple | list) and len(pair) == 2 for pair in pairs):
            for position, (task, rollout) in enumerate(pairs):
                try:
                    check_identity(task, rollout)
                except OutcomeError as exc:
                    msg = f"identities[{position}]: {exc}"
                    raise ConfigError(msg) from None
            return tuple((task, rollout) for task, rollout in pairs)
    msg = f"identities must be (task_index, rollout_index) pairs, got {shown(identities, 60)}"
    raise ConfigError(msg)


def task_identities(tasks: int, rollouts_per_task: int) -> Iterator[tuple[int, int]]:
    """The identities of ``tasks`` tasks of ``rollouts_per_task`` rollouts each (``check_work`` checked),
    one at a time."""
    return ((t, r) for t in range(tasks) for r in range(rollouts_per_task))


def inputs_of(
    path: str | Path, default_agent: str | None, reject: Callable[[Exception, str | None], None]
) -> dict[str, list[tuple[int, int]]]:
    """The identities NeMo Gym's materialized inputs at ``path`` expect, by agent; a row that cannot be read
    is given to ``reject``, naming its line.

    Raises:
        ConfigError: the file cannot be read.
    """
    # Imported when used: recording loads no file source (tests/test_imports.py).
    from rollout_telemetry._sources.inputs import read_inputs

    expected: dict[str, list[tuple[int, int]]] = {}
    for number, row in read_inputs(path, default_agent):
        if isinstance(row, Rejection):
            reject(Rejection(row.reason, f"line {number}: {row}"), str(path))
            continue
        agent, identity = row
        expected.setdefault(agent, []).append(identity)
    return expected
