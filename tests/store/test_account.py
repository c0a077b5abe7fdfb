"""The account: O(1) recording, consistent snapshots, cardinality caps, in-flight tracking."""

from __future__ import annotations

import gc
import math
import threading

import pytest

from rollout_telemetry._contract.outcome import Disposition, absent, classify
from rollout_telemetry._store.account import Account
from rollout_telemetry._store.names import Names
from rollout_telemetry._store.snapshot import AgentSnapshot, LifecycleSnapshot
from rollout_telemetry.failure_kinds import OTHER
from tests.support import FakeClock

FAILED, OMITTED = Disposition.FAILED, Disposition.OMITTED


def _account(clock: FakeClock, *, max_agents: int = 256, max_kinds_per_agent: int = 64) -> Account:
    return Account(names=Names(max_agents=max_agents, max_kinds_per_agent=max_kinds_per_agent), clock=clock)


def _lifecycle(agent: AgentSnapshot | None) -> LifecycleSnapshot:
    assert agent is not None
    assert agent.lifecycle is not None
    return agent.lifecycle


def test_counts_per_disposition_and_kind(clock: FakeClock) -> None:
    """Each classified outcome lands in its disposition; missing kinds become 'unspecified'."""
    account = _account(clock)
    account.count("a", classify({"reward": 1.0, "mask_sample": False, "failure_kind": None}))
    account.count("a", classify({"reward": 0.5, "mask_sample": True, "failure_kind": None}))
    account.count("a", classify({"reward": None, "mask_sample": False, "failure_kind": "verifier_error"}))
    account.count("a", absent(FAILED, "session_lost"))
    account.count("a", absent(OMITTED, None))
    agent = account.snapshot().agent("a")
    assert agent is not None
    assert (agent.measured, agent.masked, agent.unscored, agent.failed, agent.omitted) == (1, 1, 1, 1, 1)
    assert agent._kinds == {
        Disposition.MASKED: {"unspecified": 1},
        Disposition.UNSCORED: {"verifier_error": 1},
        Disposition.FAILED: {"session_lost": 1},
        Disposition.OMITTED: {"unspecified": 1},
    }
    assert agent.completed == 3
    assert agent.rewarded == 2
    assert agent.reward_sum == 1.5


def test_snapshot_is_a_copy(clock: FakeClock) -> None:
    """Recording after a snapshot does not change it."""
    account = _account(clock)
    account.count("a", absent(FAILED, "session_lost"))
    snap = account.snapshot()
    account.count("a", absent(FAILED, "session_lost"))
    agent = snap.agent("a")
    assert agent is not None
    assert agent.failed == 1
    assert agent.by_kind(Disposition.FAILED) == {"session_lost": 1}


def test_agent_cap_folds_into_other(clock: FakeClock) -> None:
    """Beyond max_agents, new agents count under '_other' and the overflow is counted."""
    account = _account(clock, max_agents=2)
    for name in ("a", "b", "c", "d", "c"):
        account.count(name, classify({"reward": 1.0, "mask_sample": False, "failure_kind": None}))
    snap = account.snapshot()
    assert sorted(a.agent for a in snap.agents) == ["_other", "a", "b"]
    other = snap.agent(OTHER)
    assert other is not None
    assert other.measured == 3
    assert snap.overflow == {"agent": 3}


def test_kind_cap_per_agent(clock: FakeClock) -> None:
    """Beyond max_kinds_per_agent, new kinds count under '_other'; totals still add up."""
    account = _account(clock, max_kinds_per_agent=3)
    for i in range(10):
        account.count("a", absent(FAILED, f"ns:kind_{i}"))
    agent = account.snapshot().agent("a")
    assert agent is not None
    assert agent.failed == 10
    assert sum(agent.by_kind(Disposition.FAILED).values()) == 10
    assert agent.by_kind(Disposition.FAILED)[OTHER] == 7
    assert len(agent.by_kind(Disposition.FAILED)) == 4


def test_caps_must_be_positive(clock: FakeClock) -> None:
    """A cap below 1 is a configuration error."""
    with pytest.raises(ValueError, match="at least 1"):
        Names(max_agents=0)


def test_in_flight_and_oldest_age(clock: FakeClock) -> None:
    """begin() marks work in flight; count() with its handle ends the flight and counts, in one step."""
    account = _account(clock)
    first = account.begin("a", clock())
    clock.advance(5)
    second = account.begin("a", clock())
    clock.advance(2)
    agent = account.snapshot().agent("a")
    assert agent is not None
    assert agent.in_flight == 2
    assert _lifecycle(agent).oldest_start == 1000.0
    account.count("a", classify({"reward": 1.0}), first)
    agent = account.snapshot().agent("a")
    assert agent is not None
    assert agent.in_flight == 1
    assert _lifecycle(agent).oldest_start == 1005.0
    assert agent.measured == 1
    account.count("a", absent(FAILED, "session_lost"), second)
    agent = account.snapshot().agent("a")
    assert agent is not None
    assert agent.in_flight == 0
    assert _lifecycle(agent).oldest_start is None
    assert (_lifecycle(agent).durations.count, _lifecycle(agent).durations.total) == (2, 9.0)


class _RecordingWhileRead:
    """What began a rollout: reading its attempt (which applying the states' rules does) records an outcome
    from another thread, and notes whether that recording got through while the reader was still reading."""

    task_index, rollout_index, span_ids = 0, 0, None

    def __init__(self, account: Account) -> None:
        self._account = account
        self.through: list[bool] = []
        self.recorders: list[threading.Thread] = []
        self.done = False

    @property
    def attempt(self) -> int:
        if self.done:
            return 0
        recorder = threading.Thread(target=self._account.count, args=("b", absent(FAILED, "session_lost")))
        recorder.start()
        self.recorders.append(recorder)
        recorder.join(timeout=5)
        self.through.append(not recorder.is_alive())
        return 0

    def stalled(self, age: float, stage: str) -> None:
        """Not found stalled here."""


def test_the_rules_of_rollouts_in_flight_hold_no_recording_up(clock: FakeClock) -> None:
    """A snapshot and the listing of rollouts in flight copy the slots under the lock and apply the states'
    rules after it: a recording made meanwhile is not held up, and both read the state as it was copied."""
    account = _account(clock)
    flight = _RecordingWhileRead(account)
    account.begin("a", clock(), flight)
    agent = account.snapshot().agent("a")
    total, records = account.in_flight(10)
    flight.done = True
    for recorder in flight.recorders:  # a recording held up by the lock ends once the reader lets go of it
        recorder.join()
    assert len(flight.through) >= 2
    assert all(flight.through)
    assert agent is not None
    assert agent.in_flight == 1
    assert _lifecycle(agent).in_flight_by_state == {("agent", "active"): 1}
    assert (total, [record.state for record in records]) == (1, ["active"])
    after = account.snapshot().agent("b")
    assert after is not None
    assert after.failed == len(flight.recorders)


def test_snapshots_are_consistent_under_concurrent_recording(clock: FakeClock) -> None:
    """While 8 threads record, every snapshot holds completed >= masked and exact totals at the end."""
    account = _account(clock)
    per_thread = 5000
    stop = threading.Event()
    violations: list[str] = []

    def writer(index: int) -> None:
        for i in range(per_thread):
            account.count(
                "a", classify({"reward": 1.0, "mask_sample": i % 3 == 0, "failure_kind": "judge_failed"})
            )
            account.count("a", absent(FAILED, "session_lost"))

    def reader() -> None:
        while not stop.is_set():
            agent = account.snapshot().agent("a")
            if agent is None:
                continue
            if agent.completed < agent.masked or agent.completed != agent.measured + agent.masked:
                violations.append(f"{agent}")
            if sum(sum(counts.values()) for counts in agent._kinds.values()) != agent.masked + agent.failed:
                violations.append(f"kinds {agent._kinds}")

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


def test_rewards_split_by_sign_zero_and_none(clock: FakeClock) -> None:
    """Positive rewards add to one sum, negative magnitudes to the other; 0, -0.0 and None change neither."""
    account = _account(clock)
    for reward in (0.5, -0.25, 0.0, -0.0, None, 2.0, -1.0):
        account.count("a", classify({"reward": reward}))
    account.count("a", classify({"reward": -0.5, "mask_sample": True}))
    account.count("a", absent(FAILED, "session_lost", reward=0.75))
    agent = account.snapshot().agent("a")
    assert agent is not None
    assert (agent.measured, agent.unscored, agent.masked, agent.failed) == (6, 1, 1, 1)
    assert agent._reward_positive == 0.5 + 2.0 + 0.75
    assert agent._reward_negative == 0.25 + 1.0 + 0.5
    assert agent.rewarded == 6 + 1 + 1


def test_an_unchecked_nan_reward_changes_no_sum(clock: FakeClock) -> None:
    """A hand-built outcome with a NaN reward (the checks skipped) is counted and leaves the sums finite."""
    account = _account(clock)
    account.count("a", classify({"reward": -0.5}))
    account.count("a", (Disposition.MEASURED, math.nan, None, None, None))
    agent = account.snapshot().agent("a")
    assert agent is not None
    assert agent.measured == 2
    assert (agent._reward_positive, agent._reward_negative) == (0.0, 0.5)


def test_a_kept_copy_holds_its_numbers_where_the_collector_stops_tracking_them(clock: FakeClock) -> None:
    """What a snapshot copies of an agent and keeps until the next one holds the cells' sums and the rollouts
    in flight in tuples of numbers and strings: after one pass of the garbage collector none of them is
    tracked, so replacing them at the next snapshot promotes nothing of theirs (only the copy, its counts by
    kind and its snapshot are tracked)."""
    account = _account(clock)
    account.count("math", classify({"reward": 0.5}))
    account.count("math", absent(Disposition.FAILED, "session_lost"))
    account.begin("math", clock())
    account.snapshot()
    copy = account._derived["math"][0]
    taken = copy.flights
    kept = [
        copy.positive,
        copy.negative,
        copy.unrewarded,
        taken.starts,
        taken.stages,
        taken.flags,
        taken.beats,
    ]
    kept.append(taken.stage_labels)
    assert len(taken.starts) == 1
    gc.collect()
    assert [gc.is_tracked(part) for part in kept] == [False] * len(kept)
