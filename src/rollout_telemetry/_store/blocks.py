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
A block grows only as far as its task's rows have paid for: at most ``_SLOTS_PER_PLACEMENT`` slots per
member placed in it, plus ``_MAX_TYPICAL``. A rollout index beyond that (a caller numbering rollouts
sparsely, or a row meant to cost memory) gets a slot of its own, found through a dict: memory follows the
identities seen, never the size of an index.
Only touched under the lock of the store that owns it.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Mapping
from typing import Any

from rollout_telemetry._contract.identity import MAX_ROLLOUT_INDEX

__all__ = ["Blocks"]

_DENSE_SLACK = 4096
"""Task indices up to 4x the tasks seen, plus this, are found by array; larger ones by dict."""
_MAX_TYPICAL = 64
"""A new task's block is as large as the agent's largest so far, up to this many slots."""
_SLOTS_PER_PLACEMENT = 4
"""A task's block may grow to this many slots per member placed in it (plus ``_MAX_TYPICAL``)."""


class Blocks:
    """One agent's tasks: per member the ``member`` columns, per task the ``task`` columns (zero at first).

    Args:
        member: column name -> ``array`` type code, one value per member slot.
        task: column name -> ``array`` type code, one value per task.
    """

    __slots__ = (
        "_cap",
        "_dense",
        "_far",
        "_placed",
        "_sparse",
        "_start",
        "_typical",
        "member",
        "task",
        "tasks",
    )

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
        self._placed = array("L")  # task number -> members placed in it (each call of slot())
        self._far: dict[int, dict[int, int]] = {}  # task number -> rollout index -> slot, beyond its block
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
        self._placed.append(0)
        for column in self.task.values():
            column.append(0)
        return number

    def _allocate(self, size: int) -> int:
        start = len(next(iter(self.member.values())))
        for column in self.member.values():
            column.frombytes(bytes(column.itemsize * size))
        return start

    def slot(self, number: int, rollout: int) -> int:
        """The slot of a member of a task (by number), growing the task's block when it does not fit and
        its members have paid for the growth, else giving the member a slot of its own."""
        self._placed[number] += 1
        cap = self._cap[number]
        start = self._start[number]
        if rollout < cap:
            return start + rollout
        far = self._far.get(number)
        if far is not None and (slot := far.get(rollout)) is not None:
            return slot
        size = min(max(2 * cap, rollout + 1), MAX_ROLLOUT_INDEX + 1)
        if size > _SLOTS_PER_PLACEMENT * self._placed[number] + _MAX_TYPICAL:
            slot = self._allocate(1)
            self._far.setdefault(number, {})[rollout] = slot
            return slot
        moved = self._allocate(size)
        for column in self.member.values():
            column[moved : moved + cap] = column[start : start + cap]
            column[start : start + cap] = array(column.typecode, bytes(column.itemsize * cap))
        if far is not None:  # members of its own slot that the block now covers move into it
            for index in [index for index in far if index < size]:
                self._move(far.pop(index), moved + index)
            if not far:
                del self._far[number]
        self._start[number] = moved
        self._cap[number] = size
        self._typical = max(self._typical, min(size, _MAX_TYPICAL))
        return moved + rollout

    def _move(self, source: int, target: int) -> None:
        for column in self.member.values():
            column[target] = column[source]
            column[source] = 0

    def find(self, task: int, rollout: int) -> int:
        """The slot of a member, or -1 when it has none."""
        number = self.number(task)
        if number < 0:
            return -1
        if rollout < self._cap[number]:
            return self._start[number] + rollout
        far = self._far.get(number)
        return -1 if far is None else far.get(rollout, -1)

    def block(self, number: int) -> Iterable[int]:
        """The slots of a task's members (by task number), in rollout-index order; unused ones among them."""
        start = self._start[number]
        dense = range(start, start + self._cap[number])
        far = self._far.get(number)
        if far is None:
            return dense
        return [*dense, *(far[index] for index in sorted(far))]
