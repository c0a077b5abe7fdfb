"""Reads under a store's lock: a read of many parts holds the lock in turns, and each part is read whole."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from rollout_telemetry import RolloutTelemetry
from rollout_telemetry._store import account as account_module
from rollout_telemetry._store.reads import TURN_SECONDS, read_in_turns


class _CountingLock:
    """A lock that records how long each hold lasted."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.holds: list[float] = []
        self._since = 0.0

    def __enter__(self) -> None:
        self._lock.acquire()
        self._since = time.perf_counter()

    def __exit__(self, *_: object) -> None:
        self.holds.append(time.perf_counter() - self._since)
        self._lock.release()


def test_every_part_is_read_once_in_order_in_short_turns() -> None:
    """200 parts of 0.2 ms each: all read, in order, over many turns none much longer than a turn."""
    lock = _CountingLock()

    def read(part: int) -> int:
        ends = time.perf_counter() + 0.0002
        while time.perf_counter() < ends:
            pass
        return part * 2

    assert read_in_turns(lock, range(200), read) == [part * 2 for part in range(200)]  # type: ignore[arg-type]
    assert len(lock.holds) >= 200 * 0.0002 / TURN_SECONDS / 2
    assert max(lock.holds) < TURN_SECONDS + 0.02  # a turn, one part and the machine's noise


def test_nothing_to_read_takes_no_turn() -> None:
    lock = _CountingLock()
    assert read_in_turns(lock, [], lambda part: part) == []  # type: ignore[arg-type]
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
