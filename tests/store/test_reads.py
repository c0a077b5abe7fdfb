"""Reads under a store's lock: a read of many parts holds the lock in turns, and each part is read whole."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from rollout_telemetry import RolloutTelemetry
from rollout_telemetry._store import account as account_module
from rollout_telemetry._store import in_flight as in_flight_module
from rollout_telemetry._store.reads import TURN_SECONDS, in_turns, read_in_turns
from tests.support import FakeClock


class _CountingLock:
    """A lock that records the parts read in each hold (``turns``) and how long each lasted on ``clock``."""

    def __init__(self, clock: FakeClock) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self.held = False
        self.turns: list[list[int]] = []
        self.holds: list[float] = []
        self._since = 0.0

    def __enter__(self) -> None:
        self._lock.acquire()
        self.held = True
        self.turns.append([])
        self._since = self._clock()

    def __exit__(self, *_: object) -> None:
        self.holds.append(self._clock() - self._since)
        self.held = False
        self._lock.release()

    def reader(self, seconds: float) -> Callable[[int], int]:
        """A read of a part that takes ``seconds`` on the clock, noting the part in the current hold."""

        def read(part: int) -> int:
            assert self.held
            self.turns[-1].append(part)
            self._clock.advance(seconds)
            return part * 2

        return read


def test_every_part_is_read_once_in_order_in_short_turns(clock: FakeClock) -> None:
    """200 parts of 0.3 turn each: all read, in order, each under the lock, in 50 turns of 4 parts (a turn
    ends with the part that reaches TURN_SECONDS), so a hold lasts a turn and at most one part; a part
    longer than a turn is a turn of its own."""
    lock = _CountingLock(clock)
    read = lock.reader(0.3 * TURN_SECONDS)
    assert read_in_turns(lock, range(200), read, clock=clock) == [part * 2 for part in range(200)]  # type: ignore[arg-type]
    assert lock.turns == [list(range(first, first + 4)) for first in range(0, 200, 4)]
    assert lock.holds == pytest.approx([1.2 * TURN_SECONDS] * 50)
    slow = _CountingLock(clock)
    assert read_in_turns(slow, range(3), slow.reader(2 * TURN_SECONDS), clock=clock) == [0, 2, 4]  # type: ignore[arg-type]
    assert slow.turns == [[0], [1], [2]]


def test_nothing_to_read_takes_no_turn(clock: FakeClock) -> None:
    """No parts: no result and the lock never taken."""
    lock = _CountingLock(clock)
    assert read_in_turns(lock, [], lambda part: part, clock=clock) == []  # type: ignore[arg-type]
    assert lock.holds == []


def test_a_recorder_records_between_the_turns_of_a_snapshot(monkeypatch: pytest.MonkeyPatch) -> None:
    """With turns of one agent each, a record() of an agent read later in the same snapshot is seen by it,
    and one of an agent read earlier is not: the snapshot takes each agent whole, the lock between them."""
    telemetry = RolloutTelemetry(runtime_metrics=False)
    for agent in ("a", "b"):
        telemetry.record(agent, {"reward": 1.0})

    def between_each(lock: threading.Lock, parts: list[Any], read: Callable[[Any], Any]) -> list[Any]:
        results: list[Any] = []
        for index, part in enumerate(parts):
            results += read_in_turns(lock, [part], read)
            if index == 0:  # after "a" is read, before "b": both recorded once more, no lock held
                telemetry.record("a", {"reward": 1.0})
                telemetry.record("b", {"reward": 1.0})
        return results

    monkeypatch.setattr(account_module, "read_in_turns", between_each)
    assert {agent.agent: agent.completed for agent in telemetry.snapshot().agents} == {"a": 1, "b": 2}
    monkeypatch.undo()
    assert {agent.agent: agent.completed for agent in telemetry.snapshot().agents} == {"a": 2, "b": 2}


def test_the_listing_in_flight_reads_each_agent_whole_the_lock_between(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With turns of one agent each, a rollout of an agent read later in the same listing begun between the
    turns is listed, one of an agent read earlier is not: ``/rollouts`` takes the lock an agent at a time, as
    a snapshot does, so a recorder never waits for every agent's slots."""
    telemetry = RolloutTelemetry(runtime_metrics=False, stall_after=None)  # the listing reads alone
    with (
        telemetry.rollout("a", task_index=0, rollout_index=0),
        telemetry.rollout("b", task_index=0, rollout_index=0),
    ):
        later: list[Any] = []

        def between_each(lock: threading.Lock, parts: list[Any], read: Callable[[Any], Any]) -> list[Any]:
            results: list[Any] = []
            for index, part in enumerate(parts):
                results += read_in_turns(lock, [part], read)
                if index == 0:  # after "a" is read, before "b": one more of each begins, no lock held
                    for agent in ("a", "b"):
                        later.append(telemetry.rollout(agent, task_index=1, rollout_index=0))
                        later[-1].__enter__()
            return results

        monkeypatch.setattr(in_flight_module, "read_in_turns", between_each)
        listed = telemetry.rollouts_in_flight()["rollouts"]
        assert sorted((row["agent"], row["task_index"]) for row in listed) == [("a", 0), ("b", 0), ("b", 1)]  # type: ignore[attr-defined]
        monkeypatch.undo()
        listed = telemetry.rollouts_in_flight()["rollouts"]
        everything = [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
        assert sorted((row["agent"], row["task_index"]) for row in listed) == everything  # type: ignore[attr-defined]
        for context in later:
            context.__exit__(None, None, None)


def test_work_on_parts_hands_the_interpreter_over_once_a_turn(clock: FakeClock) -> None:
    """200 parts whose work takes 0.3 turn each: every part given, in order, the interpreter handed over
    after every fourth (the one whose work reaches TURN_SECONDS), never before the work on a part is done;
    a part whose work is longer than a turn is followed by a hand-over of its own; no parts, no hand-over."""
    handed: list[int] = []
    done: list[int] = []
    for part in in_turns(range(200), clock=clock, hand=lambda: handed.append(len(done))):
        clock.advance(0.3 * TURN_SECONDS)
        done.append(part)
    assert done == list(range(200))
    assert handed == list(range(4, 201, 4))
    handed.clear()
    done.clear()
    for part in in_turns(range(3), clock=clock, hand=lambda: handed.append(len(done))):
        clock.advance(2 * TURN_SECONDS)
        done.append(part)
    assert handed == [1, 2, 3]
    assert list(in_turns([], clock=clock, hand=lambda: handed.append(-1))) == []
    assert -1 not in handed
