"""Rollout states, heartbeats, cancel(), the collector's phases and admission wait (the lifecycle API)."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

from rollout_telemetry import AgentSnapshot, Disposition, LifecycleSnapshot, RolloutTelemetry, failure_kinds
from rollout_telemetry.errors import ConfigError
from tests.support import FakeClock, exposition, samples, traced, value

_STATES = ("active", "slow", "retrying", "stalled", "cancelled", "terminal")


def _in_flight(telemetry: RolloutTelemetry, agent: str = "a") -> dict[tuple[str, str], float]:
    """rollout_in_flight of ``agent`` by (stage, state), as scraped."""
    found = {}
    for (name, labels), number in samples(exposition(telemetry.registry)).items():
        by_name = dict(labels)
        if name == "rollout_in_flight" and by_name["agent"] == agent:
            found[(by_name["stage"], by_name["state"])] = number
    return found


def _lifecycle(agent: AgentSnapshot | None) -> LifecycleSnapshot:
    """What the lifecycle API counted of ``agent``, which used it."""
    assert agent is not None
    assert agent.lifecycle is not None
    return agent.lifecycle


def _listing(telemetry: RolloutTelemetry) -> dict[str, object]:
    """/rollouts as JSON, decoded again."""
    decoded = json.loads(json.dumps(telemetry.rollouts_in_flight()))
    assert isinstance(decoded, dict)
    return decoded


def _by_task(listing: dict[str, object], field: str) -> dict[int, object]:
    rollouts = listing["rollouts"]
    assert isinstance(rollouts, list)
    return {rollout["task_index"]: rollout[field] for rollout in rollouts}


def test_a_healthy_run_publishes_the_active_state_only(telemetry: RolloutTelemetry) -> None:
    """Blocks that complete publish one rollout_in_flight series per stage, state active, as before."""
    for stage in ("agent", "verification"):
        with telemetry.rollout("a", task_index=0, rollout_index=0) as rollout:
            rollout.stage(stage)
            rollout.complete({"reward": 1.0})
    assert _in_flight(telemetry) == {("agent", "active"): 0, ("verification", "active"): 0}


def test_each_state_by_its_precedence(clock: FakeClock) -> None:
    """terminal > cancelled > stalled > slow > retrying > active, each counted once, by stage."""
    telemetry = RolloutTelemetry(clock=clock, stall_after=100.0, slow_after=10.0)
    stalled = telemetry.rollout("a", task_index=0, rollout_index=0).__enter__()
    clock.advance(101.0)
    assert _lifecycle(telemetry.snapshot().agent("a")).stalls == {"agent": 1}
    slow = telemetry.rollout(
        "a", task_index=1, rollout_index=0, attempt=1
    ).__enter__()  # a retry, and slow: slow wins
    clock.advance(11.0)
    retrying = telemetry.rollout("a", task_index=2, rollout_index=0, attempt=1).__enter__()
    active = telemetry.rollout("a", task_index=3, rollout_index=0, attempt=0).__enter__()
    cancelled = telemetry.rollout("a", task_index=4, rollout_index=0).__enter__()
    cancelled.cancel()
    terminal = telemetry.rollout("a", task_index=5, rollout_index=0).__enter__()
    terminal.stage("cleanup")
    terminal.complete({"reward": 1.0})
    assert _in_flight(telemetry) == {
        ("agent", "active"): 1,
        ("agent", "slow"): 1,
        ("agent", "retrying"): 1,
        ("agent", "stalled"): 1,
        ("agent", "cancelled"): 1,
        ("agent", "terminal"): 0,
        ("cleanup", "active"): 0,
        ("cleanup", "slow"): 0,
        ("cleanup", "retrying"): 0,
        ("cleanup", "stalled"): 0,
        ("cleanup", "cancelled"): 0,
        ("cleanup", "terminal"): 1,
    }
    states = _by_task(_listing(telemetry), "state")
    assert states == {0: "stalled", 1: "slow", 2: "retrying", 3: "active", 4: "cancelled", 5: "terminal"}
    for context in (stalled, slow, retrying, active, cancelled, terminal):
        context.__exit__(None, None, None)
    # Every state seen stays published, at 0.
    assert set(_in_flight(telemetry).values()) == {0}
    assert {state for _, state in _in_flight(telemetry)} == set(_STATES)


def test_a_terminal_rollout_keeps_its_slot_until_its_block_exits(telemetry: RolloutTelemetry) -> None:
    """Its outcome is counted at once; it is not in flight but still resident and listed until it exits."""
    with telemetry.rollout("a", task_index=7, rollout_index=0) as rollout:
        rollout.complete({"reward": 1.0})
        agent = telemetry.snapshot().agent("a")
        assert agent is not None
        assert (agent.measured, agent.in_flight, _lifecycle(agent).oldest_start) == (1, 0, None)
        assert _lifecycle(agent).phases == {"offered": 0, "resident": 1, "active": 0}
        assert _in_flight(telemetry) == {("agent", "active"): 0, ("agent", "terminal"): 1}
        listing = _listing(telemetry)
        assert listing["in_flight"] == 0
        assert _by_task(listing, "state") == {7: "terminal"}
    agent = telemetry.snapshot().agent("a")
    assert agent is not None
    assert (agent.measured, _lifecycle(agent).phases["resident"]) == (1, 0)
    assert _in_flight(telemetry) == {("agent", "active"): 0, ("agent", "terminal"): 0}
    assert _listing(telemetry)["rollouts"] == []


def test_a_cancelled_rollout_left_without_an_outcome_fails_as_cancelled(telemetry: RolloutTelemetry) -> None:
    """cancel() then leaving the block records failure kind cancelled, never no_outcome; an outcome wins."""
    with telemetry.rollout("a") as rollout:
        rollout.cancel(reason="drained")
    with telemetry.rollout("a") as rollout:
        rollout.cancel()
        rollout.complete({"reward": 1.0})
    agent = telemetry.snapshot().agent("a")
    assert agent is not None
    assert agent.by_kind(Disposition.FAILED) == {failure_kinds.CANCELLED: 1}
    assert agent.measured == 1
    assert telemetry.snapshot().rejected == {}


def test_cancel_outside_the_block_or_after_an_outcome_is_a_counted_rejection(
    telemetry: RolloutTelemetry,
) -> None:
    """cancel() before entering or after the outcome is rejected and changes no count."""
    telemetry.rollout("a").cancel()
    with telemetry.rollout("a") as rollout:
        rollout.complete({"reward": 1.0})
        rollout.cancel()
    assert telemetry.snapshot().rejected == {"outcome_outside_block": 1, "duplicate_outcome": 1}
    agent = telemetry.snapshot().agent("a")
    assert agent is not None
    assert (agent.measured, agent.failed) == (1, 0)


def test_heartbeat_age_follows_heartbeats_and_stage_changes(clock: FakeClock) -> None:
    """Heartbeat age is the time since the start, the last heartbeat() or the last stage change."""
    telemetry = RolloutTelemetry(clock=clock)
    first = telemetry.rollout("a", task_index=0, rollout_index=0).__enter__()
    second = telemetry.rollout("a", task_index=1, rollout_index=0).__enter__()
    third = telemetry.rollout("a", task_index=2, rollout_index=0).__enter__()
    clock.advance(30.0)
    second.heartbeat()
    third.stage("verification")
    clock.advance(4.0)
    listing = _listing(telemetry)
    assert _by_task(listing, "heartbeat_age_seconds") == {0: 34.0, 1: 4.0, 2: 4.0}
    assert _by_task(listing, "age_seconds") == {0: 34.0, 1: 34.0, 2: 34.0}
    for context in (first, second, third):
        context.__exit__(None, None, None)
    first.heartbeat()  # after the block: ignored, nothing rejected
    assert telemetry.snapshot().rejected == {}


def test_slow_after_by_agent_and_its_checks(clock: FakeClock) -> None:
    """slow_after_by_agent overrides slow_after (off by default); a bound that is not positive is refused."""
    telemetry = RolloutTelemetry(clock=clock, slow_after_by_agent={"b": 5.0})
    a = telemetry.rollout("a").__enter__()
    b = telemetry.rollout("b").__enter__()
    clock.advance(100.0)  # under the default stall_after
    assert _in_flight(telemetry, "a") == {("agent", "active"): 1}
    assert _in_flight(telemetry, "b") == {("agent", "active"): 0, ("agent", "slow"): 1}
    a.__exit__(None, None, None)
    b.__exit__(None, None, None)
    with pytest.raises(ConfigError, match="slow_after must be a positive"):
        RolloutTelemetry(slow_after=0.0)


def test_the_collectors_phases(telemetry: RolloutTelemetry) -> None:
    """offered (offered, not entered), resident (entered, not exited), active (in flight past admission)."""
    telemetry.record("plain", {"reward": 1.0})
    waiting = [telemetry.offer("a") for _ in range(3)]
    made_to_enter = telemetry.rollout("a")  # offered as it is entered: not before
    admitting = waiting.pop().__enter__()
    admitting.stage("admission")
    running = waiting.pop().__enter__()
    cancelled = telemetry.rollout("a").__enter__()
    cancelled.cancel()
    done = telemetry.rollout("a").__enter__()
    done.complete({"reward": 1.0})
    text = exposition(telemetry.registry)
    phases = {phase: value(text, "rollout_collector_rollouts", agent="a", phase=phase) for phase in
              ("offered", "resident", "active")}  # fmt: skip
    assert phases == {"offered": 1, "resident": 4, "active": 1}
    assert value(text, "rollout_collector_offered_total", agent="a") == 5  # offered or entered so far
    with pytest.raises(AssertionError):  # an agent that never used the lifecycle has no phases
        value(text, "rollout_collector_rollouts", agent="plain", phase="offered")
    for context in (admitting, running, cancelled, done):
        context.__exit__(None, None, None)
    waiting.pop().__enter__().__exit__(None, None, None)
    made_to_enter.__enter__().__exit__(None, None, None)
    agent = telemetry.snapshot().agent("a")
    assert agent is not None
    assert _lifecycle(agent).phases == {"offered": 0, "resident": 0, "active": 0}
    assert value(exposition(telemetry.registry), "rollout_collector_offered_total", agent="a") == 6


def test_admission_wait_is_offered_to_entered_plus_time_at_admission(clock: FakeClock) -> None:
    """One observation per rollout when its block exits: 3 s offered plus 2 s at stage admission."""
    telemetry = RolloutTelemetry(clock=clock)
    context = telemetry.offer("a")
    assert "rollout_admission_wait_seconds_count" not in {
        n for n, _ in samples(exposition(telemetry.registry))
    }
    clock.advance(3.0)
    with context as rollout:
        rollout.stage("admission")
        clock.advance(2.0)
        rollout.stage("agent")
        clock.advance(10.0)
        rollout.stage("admission")  # back at admission: that time counts too
        clock.advance(0.5)
        rollout.complete({"reward": 1.0})
    text = exposition(telemetry.registry)
    assert value(text, "rollout_admission_wait_seconds_count", agent="a") == 1
    assert value(text, "rollout_admission_wait_seconds_sum", agent="a") == 5.5
    assert value(text, "rollout_admission_wait_seconds_bucket", agent="a", le="5.0") == 0
    assert value(text, "rollout_admission_wait_seconds_bucket", agent="a", le="10.0") == 1


def test_a_context_of_rollout_is_admitted_as_it_is_entered(clock: FakeClock) -> None:
    """rollout()'s context is offered and admitted as its block is entered: until then it counts nowhere, and
    its admission wait is its time at stage admission only."""
    telemetry = RolloutTelemetry(clock=clock)
    context = telemetry.rollout("a")
    clock.advance(3.0)
    assert telemetry.snapshot().agent("a") is None  # nothing counted yet: not even the agent
    with context as rollout:
        rollout.stage("admission")
        clock.advance(2.0)
        rollout.stage("agent")
        rollout.complete({"reward": 1.0})
    text = exposition(telemetry.registry)
    assert value(text, "rollout_collector_offered_total", agent="a") == 1
    assert value(text, "rollout_admission_wait_seconds_count", agent="a") == 1
    assert value(text, "rollout_admission_wait_seconds_sum", agent="a") == 2.0


def test_two_hundred_async_rollouts_leave_nothing_resident(telemetry: RolloutTelemetry) -> None:
    """200 concurrent async blocks: all resident while they run, none after, each counted once."""
    release = asyncio.Event()
    resident: list[int] = []

    async def one(i: int) -> None:
        async with telemetry.rollout("a", task_index=i, rollout_index=0, attempt=i % 2) as rollout:
            rollout.heartbeat()
            await release.wait()
            if i % 10 == 0:
                rollout.cancel()
            else:
                rollout.complete({"reward": 1.0})

    async def main() -> None:
        tasks = [asyncio.create_task(one(i)) for i in range(200)]
        await asyncio.sleep(0)
        agent = telemetry.snapshot().agent("a")
        assert agent is not None
        resident.append(_lifecycle(agent).phases["resident"])
        release.set()
        await asyncio.gather(*tasks)

    asyncio.run(main())
    agent = telemetry.snapshot().agent("a")
    assert agent is not None
    assert resident == [200]
    assert _lifecycle(agent).phases == {"offered": 0, "resident": 0, "active": 0}
    assert (agent.measured, agent.by_kind(Disposition.FAILED)) == (180, {failure_kinds.CANCELLED: 20})
    assert value(exposition(telemetry.registry), "rollout_admission_wait_seconds_count", agent="a") == 200


def test_a_raising_redact_hook_at_exit_still_frees_the_slot(clock: FakeClock) -> None:
    """redact_reason raising as a cancelled rollout's failure is recorded: counted, slot freed, span ended."""

    def redact(reason: str) -> str:
        raise ValueError("redaction service down")

    telemetry, exporter = traced(clock, redact_reason=redact)
    with telemetry.rollout("a") as rollout:
        rollout.cancel(reason="drained")
    agent = telemetry.snapshot().agent("a")
    assert agent is not None
    assert agent.by_kind(Disposition.FAILED) == {failure_kinds.CANCELLED: 1}
    assert _lifecycle(agent).phases["resident"] == 0
    assert telemetry.rollouts_in_flight()["rollouts"] == []
    assert telemetry.snapshot().rejected == {"internal_error": 1}
    assert len(exporter.get_finished_spans()) == 1


def test_identity_is_never_a_label_of_the_new_families(clock: FakeClock) -> None:
    """The states, phases, admission wait and cleanups carry agent, stage, state, phase, kind and le only."""
    telemetry = RolloutTelemetry(run="r", clock=clock, slow_after=1.0)
    with telemetry.rollout("a", task_index=3, rollout_index=1, attempt=2) as rollout:
        clock.advance(2.0)
        exposition(telemetry.registry)  # a scrape sees it slow and retrying
        with rollout.cleanup() as cleanup:
            cleanup.fail("session_lost")
        rollout.complete({"reward": 1.0})
    names = {"run", "agent", "stage", "state", "phase", "failure_kind", "le"}
    new = ("rollout_in_flight", "rollout_collector", "rollout_admission", "rollout_cleanup")
    found = [(n, labels) for n, labels in samples(exposition(telemetry.registry)) if n.startswith(new)]
    assert len(found) > 10
    assert all({key for key, _ in labels} <= names for _, labels in found)


def test_admission_waits_are_counted_exactly_past_many_rollouts(clock: FakeClock) -> None:
    """2,500 rollouts, waits of 0 to 4 s, read once at the end: each counted once, in its bucket."""
    telemetry = RolloutTelemetry(clock=clock)
    waits = [(i % 5) * 1.0 for i in range(2500)]
    for wait in waits:
        context = telemetry.offer("a")
        clock.advance(wait)
        with context as rollout:
            rollout.complete({"reward": 1.0})
    text = exposition(telemetry.registry)
    assert value(text, "rollout_admission_wait_seconds_count", agent="a") == 2500
    assert value(text, "rollout_admission_wait_seconds_sum", agent="a") == sum(waits)
    for bound in ("0.01", "1.0", "2.5", "5.0"):
        expected = sum(1 for wait in waits if wait <= float(bound))
        assert value(text, "rollout_admission_wait_seconds_bucket", agent="a", le=bound) == expected


def test_contexts_offered_and_not_entered_yet_are_offered(telemetry: RolloutTelemetry) -> None:
    """An agent whose rollouts all wait to be entered already shows them offered, and nothing in flight."""
    waiting = [telemetry.offer("a") for _ in range(3)]
    text = exposition(telemetry.registry)
    assert value(text, "rollout_collector_rollouts", agent="a", phase="offered") == 3
    assert value(text, "rollout_collector_rollouts", agent="a", phase="resident") == 0
    assert value(text, "rollout_in_flight", agent="a", state="active") == 0
    for context in waiting:
        with context as rollout:
            rollout.complete({"reward": 1.0})
    assert (
        value(exposition(telemetry.registry), "rollout_collector_rollouts", agent="a", phase="offered") == 0
    )


def test_threads_and_a_scraper_lose_and_invent_nothing() -> None:
    """8 threads of 500 blocks each, scraped all along: every block counted once, nothing left resident."""
    telemetry = RolloutTelemetry(slow_after=1e-9)  # every rollout slow when scraped: states change all along
    stop = threading.Event()
    seen_stages: set[str] = set()

    made: list[int] = []

    def scrape() -> None:
        while not stop.is_set():
            agent = telemetry.snapshot().agent("a")
            if agent is not None:
                seen_stages.update(stage for stage, _ in _lifecycle(agent).in_flight_by_state)
                made.append(_lifecycle(agent).made)

    def work(worker: int) -> None:
        for i in range(500):
            make = telemetry.offer if i % 2 else telemetry.rollout  # offered ahead, or as it is entered
            with make("a", task_index=worker, rollout_index=i, attempt=i % 2) as rollout:
                rollout.stage("admission" if i % 3 == 0 else "verification")
                rollout.heartbeat()
                if i % 7 == 0:
                    rollout.cancel()
                else:
                    rollout.complete({"reward": 1.0})

    scraper = threading.Thread(target=scrape)
    scraper.start()
    workers = [threading.Thread(target=work, args=(w,)) for w in range(8)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join(timeout=60)
    stop.set()
    scraper.join(timeout=60)
    agent = telemetry.snapshot().agent("a")
    assert agent is not None
    cancelled = 8 * sum(1 for i in range(500) if i % 7 == 0)
    assert (agent.measured, agent.by_kind(Disposition.FAILED)) == (4000 - cancelled, {"cancelled": cancelled})
    assert _lifecycle(agent).phases == {"offered": 0, "resident": 0, "active": 0}
    waits = _lifecycle(agent).admission_wait
    assert waits is not None
    assert waits.count == 4000
    assert seen_stages <= {"agent", "admission", "verification"}
    # The contexts made, read while they move from offered to resident to exited: never down, 4000 at last.
    assert made == sorted(made)
    assert _lifecycle(agent).made == 4000


def test_an_offer_gone_without_its_block_is_withdrawn(telemetry: RolloutTelemetry) -> None:
    """An offered context dropped without entering its block is no longer offered; the counter of offers
    keeps it (it never goes down)."""
    kept, dropped = telemetry.offer("a"), telemetry.offer("a")
    text = exposition(telemetry.registry)
    assert value(text, "rollout_collector_rollouts", agent="a", phase="offered") == 2
    del dropped
    text = exposition(telemetry.registry)
    assert value(text, "rollout_collector_rollouts", agent="a", phase="offered") == 1
    assert value(text, "rollout_collector_offered_total", agent="a") == 2
    with kept as rollout:
        rollout.complete({"reward": 1.0})
    agent = telemetry.snapshot().agent("a")
    assert agent is not None
    lifecycle = _lifecycle(agent)
    assert (lifecycle.phases["offered"], lifecycle.withdrawn, lifecycle.made, agent.measured) == (0, 1, 2, 1)


def test_offers_cancelled_while_they_wait_for_a_slot_are_withdrawn(telemetry: RolloutTelemetry) -> None:
    """Rollouts offered and cancelled while they wait on the collector's semaphore leave nothing offered: the
    guide's pattern, drained."""

    async def bounded(slots: asyncio.Semaphore, inside: asyncio.Event, release: asyncio.Event) -> None:
        rollout = telemetry.offer("a")
        async with slots, rollout:
            inside.set()
            await release.wait()
            rollout.complete({"reward": 1.0})

    async def main() -> None:
        slots, inside, release = asyncio.Semaphore(1), asyncio.Event(), asyncio.Event()
        tasks = [asyncio.create_task(bounded(slots, inside, release)) for _ in range(4)]
        await inside.wait()  # the first holds the slot; the others made their offers in the same turn
        assert _lifecycle(telemetry.snapshot().agent("a")).phases["offered"] == 3
        for task in tasks[1:]:
            task.cancel()
        release.set()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(main())
    agent = telemetry.snapshot().agent("a")
    assert agent is not None
    lifecycle = _lifecycle(agent)
    assert (lifecycle.phases["offered"], lifecycle.withdrawn, lifecycle.made, agent.measured) == (0, 3, 4, 1)
