"""Identities in flat typed arrays: the members of one agent's tasks, with no Python object per rollout.

The coverage account and the groups keep something about every rollout identity (agent, task index, rollout
index) of a run: a million of them is an ordinary NeMo Gym run. As one object and one dict entry each they
cost hundreds of bytes apiece; here a member is one slot in a few ``array`` columns (a packed int, a line
number, a reward: 4 to 12 bytes), and a task is a block of consecutive slots, one per rollout index, found
through the task's number. NeMo Gym's indices are dense (tasks 0..T-1, rollouts 0..R-1), so the task number
is found in an array indexed by task index; a task index far beyond the tasks seen (from a caller that
numbers its tasks sparsely) is found in a dict instead, so no array grows with the size of an index.

A block is allocated at the size the agent's tasks have had so far, and moves to the end of the columns,
larger, when a rollout index does not fit: its old slots are left unused (a task grows at most a few times).
Only touched under the lock of the store that owns it.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Mapping
from typing import Any, cast

from rollout_telemetry.errors import OutcomeError

__all__ = [
    "MAX_ATTEMPT",
    "MAX_ROLLOUT_INDEX",
    "MAX_TASK_INDEX",
    "Blocks",
    "Member",
    "check_attempt",
    "check_identity",
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


def check_identity(task_index: object, rollout_index: object) -> tuple[int, int]:
    """The one check of an identity, before anything is counted: two integers >= 0, within the bounds.

    Returns the identity, ``(task_index, rollout_index)``.

    Raises:
        OutcomeError: ``invalid_task_index`` or ``invalid_rollout_index``, naming the value.
    """
    if (
        type(task_index) is not int
        or type(rollout_index) is not int
        or not 0 <= task_index <= MAX_TASK_INDEX
        or not 0 <= rollout_index <= MAX_ROLLOUT_INDEX
    ):
        if type(task_index) is not int or not 0 <= task_index <= MAX_TASK_INDEX:
            msg = f"must be an integer from 0 to {MAX_TASK_INDEX}, got {task_index!r:.40}"
            raise OutcomeError("task_index", msg)
        msg = f"must be an integer from 0 to {MAX_ROLLOUT_INDEX}, got {rollout_index!r:.40}"
        raise OutcomeError("rollout_index", msg)
    return task_index, rollout_index


def check_attempt(attempt: object) -> None:
    """The check of an attempt index: ``None`` (not given) or an integer from 0 to ``MAX_ATTEMPT``.

    Raises:
        OutcomeError: ``invalid_attempt``.
    """
    if attempt is not None and (type(attempt) is not int or not 0 <= attempt <= MAX_ATTEMPT):
        raise OutcomeError("attempt", f"must be an integer from 0 to {MAX_ATTEMPT}, got {attempt!r:.40}")


Member = tuple[int, int, "int | None"]
"""(task index, rollout index, attempt or ``None``): which member of which group an outcome is."""


def member(task_index: object, rollout_index: object, attempt: object = None) -> Member:
    """A rollout's identity and attempt, checked (``check_identity``, ``check_attempt``).

    Raises:
        OutcomeError: ``invalid_task_index``, ``invalid_rollout_index`` or ``invalid_attempt``.
    """
    if attempt is not None:
        check_attempt(attempt)
    task, rollout = check_identity(task_index, rollout_index)
    return task, rollout, cast("int | None", attempt)


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


_DENSE_SLACK = 4096
"""Task indices up to 4x the tasks seen, plus this, are found by array; larger ones by dict."""
_MAX_TYPICAL = 64
"""A new task's block is as large as the agent's largest so far, up to this many slots."""


class Blocks:
    """One agent's tasks: per member the ``member`` columns, per task the ``task`` columns (zero at first).

    Args:
        member: column name -> ``array`` type code, one value per member slot.
        task: column name -> ``array`` type code, one value per task.
    """

    __slots__ = ("_cap", "_dense", "_sparse", "_start", "_typical", "member", "task", "tasks")

    def __init__(self, member: Mapping[str, str], task: Mapping[str, str]) -> None:
        # array[Any]: integer and float columns side by side ("Q", "L", "d", ...)
        self.member: dict[str, array[Any]] = {name: array(code) for name, code in member.items()}
        self.task: dict[str, array[Any]] = {name: array(code) for name, code in task.items()}
        self.tasks = 0
        """Tasks allocated so far; task numbers are 0 .. tasks - 1."""
        self._dense = array("L")  # task index -> task number + 1 (0: none)
        self._sparse: dict[int, int] = {}  # task index -> task number, for indices beyond the dense part
        self._start = array("L")  # task number -> its block's first slot
        self._cap = array("H")  # task number -> its block's size
        self._typical = 1

    def number(self, task: int) -> int:
        """The number of a task (by its index), or -1 when it has none yet."""
        if task < len(self._dense):
            return self._dense[task] - 1
        return self._sparse.get(task, -1)

    def add_task(self, task: int) -> int:
        """The number of a task, allocating its block (and its task columns) if it is new."""
        number = self.number(task)
        if number >= 0:
            return number
        number = self.tasks
        self.tasks += 1
        if task < 4 * self.tasks + _DENSE_SLACK:
            if task >= len(self._dense):
                self._dense.frombytes(bytes(self._dense.itemsize * (task + 1 - len(self._dense))))  # 0: none
            self._dense[task] = number + 1
        else:
            self._sparse[task] = number
        self._start.append(self._allocate(self._typical))
        self._cap.append(self._typical)
        for column in self.task.values():
            column.append(0)
        return number

    def _allocate(self, size: int) -> int:
        start = len(next(iter(self.member.values())))
        for column in self.member.values():
            column.frombytes(bytes(column.itemsize * size))
        return start

    def slot(self, number: int, rollout: int) -> int:
        """The slot of a member of a task (by number), growing the task's block when it does not fit."""
        cap = self._cap[number]
        start = self._start[number]
        if rollout < cap:
            return start + rollout
        size = min(max(2 * cap, rollout + 1), MAX_ROLLOUT_INDEX + 1)
        moved = self._allocate(size)
        for column in self.member.values():
            column[moved : moved + cap] = column[start : start + cap]
            column[start : start + cap] = array(column.typecode, bytes(column.itemsize * cap))
        self._start[number] = moved
        self._cap[number] = size
        self._typical = max(self._typical, min(size, _MAX_TYPICAL))
        return moved + rollout

    def find(self, task: int, rollout: int) -> int:
        """The slot of a member, or -1 when its task has none or the index is beyond its block."""
        number = self.number(task)
        if number < 0 or rollout >= self._cap[number]:
            return -1
        return self._start[number] + rollout

    def block(self, number: int) -> range:
        """The slots of a task's block (by task number), in rollout-index order."""
        start = self._start[number]
        return range(start, start + self._cap[number])

    def task_numbers(self) -> Iterator[tuple[int, int]]:
        """Every (task index, task number)."""
        for task, number in enumerate(self._dense):
            if number:
                yield task, number - 1
        yield from self._sparse.items()
