"""The account: O(1) recording, consistent snapshots, cardinality caps, in-flight tracking."""

from __future__ import annotations

import threading

import pytest

from rollout_telemetry.account import Account
from rollout_telemetry.failure_kinds import OTHER
from rollout_telemetry.outcome import Disposition
from tests.support import FakeClock


def test_counts_per_disposition_and_kind(clock: FakeClock) -> None:
    """Each add_* lands in its disposition; missing kinds become 'unspecified'."""
    account = Account(clock=clock)
    account.add_completed("a", 1.0, False, None)
    account.add_completed("a", 0.5, True, None)
    account.add_completed("a", None, False, "verifier_error")
    account.add_absent("a", Disposition.FAILED, "session_lost")
    account.add_absent("a", Disposition.OMITTED, None)
    agent = account.snapshot().agent("a")
    assert agent is not None
    assert (agent.measured, agent.masked, agent.unscored, agent.failed, agent.omitted) == (1, 1, 1, 1, 1)
    assert agent.kinds == {
        (Disposition.MASKED, "unspecified"): 1,
        (Disposition.UNSCORED, "verifier_error"): 1,
        (Disposition.FAILED, "session_lost"): 1,
        (Disposition.OMITTED, "unspecified"): 1,
    }
    assert agent.completed == 3
    assert agent.rewarded == 2
    assert agent.reward_sum == 1.5


def test_snapshot_is_a_copy(clock: FakeClock) -> None:
    """Recording after a snapshot does not change it."""
    account = Account(clock=clock)
    account.add_absent("a", Disposition.FAILED, "session_lost")
    snap = account.snapshot()
    account.add_absent("a", Disposition.FAILED, "session_lost")
    agent = snap.agent("a")
    assert agent is not None
    assert agent.failed == 1
    assert agent.kinds == {(Disposition.FAILED, "session_lost"): 1}


def test_agent_cap_folds_into_other(clock: FakeClock) -> None:
    """Beyond max_agents, new agents count under '_other' and the overflow is counted."""
    account = Account(clock=clock, max_agents=2)
    for name in ("a", "b", "c", "d", "c"):
        account.add_completed(name, 1.0, False, None)
    snap = account.snapshot()
    assert sorted(a.agent for a in snap.agents) == ["_other", "a", "b"]
    other = snap.agent(OTHER)
    assert other is not None
    assert other.measured == 3
    assert snap.overflow == {"agent": 3}


def test_kind_cap_per_agent(clock: FakeClock) -> None:
    """Beyond max_kinds_per_agent, new kinds count under '_other'; totals still add up."""
    account = Account(clock=clock, max_kinds_per_agent=3)
    for i in range(10):
        account.add_absent("a", Disposition.FAILED, f"ns:kind_{i}")
    agent = account.snapshot().agent("a")
    assert agent is not None
    assert agent.failed == 10
    assert sum(agent.kinds.values()) == 10
    assert agent.by_kind(Disposition.FAILED)[OTHER] == 7
    assert len(agent.kinds) == 4


def test_caps_must_be_positive(clock: FakeClock) -> None:
    """A cap below 1 is a configuration error."""
    with pytest.raises(ValueError, match="at least 1"):
        Account(clock=clock, max_agents=0)


def test_in_flight_and_oldest_age(clock: FakeClock) -> None:
    """begin() marks work in flight; finish() takes it out and counts the outcome in one step."""
    account = Account(clock=clock)
    first = account.begin("a")
    clock.advance(5)
    second = account.begin("a")
    clock.advance(2)
    agent = account.snapshot().agent("a")
    assert agent is not None
    assert agent.in_flight == 2
    assert agent.oldest_in_flight_start == 1000.0
    assert account.finish(first, Disposition.MEASURED, 1.0, None) == 7.0
    agent = account.snapshot().agent("a")
    assert agent is not None
    assert agent.in_flight == 1
    assert agent.oldest_in_flight_start == 1005.0
    assert agent.measured == 1
    account.finish(second, Disposition.FAILED, None, "session_lost")
    agent = account.snapshot().agent("a")
    assert agent is not None
    assert agent.in_flight == 0
    assert agent.oldest_in_flight_start is None
    assert agent.duration_count == 2
    assert agent.duration_sum == 9.0


def test_snapshots_are_consistent_under_concurrent_recording(clock: FakeClock) -> None:
    """While 8 threads record, every snapshot holds completed >= masked and exact totals at the end."""
    account = Account(clock=clock)
    per_thread = 5000
    stop = threading.Event()
    violations: list[str] = []

    def writer(index: int) -> None:
        for i in range(per_thread):
            account.add_completed("a", 1.0, i % 3 == 0, "judge_failed")
            account.add_absent("a", Disposition.FAILED, "session_lost")

    def reader() -> None:
        while not stop.is_set():
            agent = account.snapshot().agent("a")
            if agent is None:
                continue
            if agent.completed < agent.masked or agent.completed != agent.measured + agent.masked:
                violations.append(f"{agent}")
            if sum(agent.kinds.values()) != agent.masked + agent.failed:
                violations.append(f"kinds {agent.kinds}")

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
    watcher = threading.Thread(target=reader)
    watcher.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    watcher.join()
    assert violations == []
    agent = account.snapshot().agent("a")
    assert agent is not None
    assert agent.completed == 8 * per_thread
    assert agent.failed == 8 * per_thread
    assert agent.masked == 8 * len(range(0, per_thread, 3))
