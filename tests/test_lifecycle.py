"""The lifecycle API: outcomes, exceptions, a block left without an outcome, in-flight work and its age."""

from __future__ import annotations

import asyncio
import logging

import pytest

from rollout_telemetry import AgentSnapshot, Disposition, LifecycleSnapshot, RolloutTelemetry
from tests.support import FakeClock, exposition, sample_names, value


def _agent(telemetry: RolloutTelemetry, name: str = "a") -> AgentSnapshot:
    agent = telemetry.snapshot().agent(name)
    assert agent is not None
    return agent


def _lifecycle(agent: AgentSnapshot) -> LifecycleSnapshot:
    assert agent.lifecycle is not None
    return agent.lifecycle


@pytest.mark.parametrize(
    ("response", "disposition"),
    [
        ({"reward": 1.0}, Disposition.MEASURED),
        ({"reward": 0.0, "mask_sample": True, "failure_kind": "judge_failed"}, Disposition.MASKED),
        ({"reward": None}, Disposition.UNSCORED),
    ],
)
def test_complete_records_the_disposition_and_duration(
    telemetry: RolloutTelemetry, clock: FakeClock, response: dict[str, object], disposition: Disposition
) -> None:
    """complete() counts the outcome once and the duration from enter to outcome."""
    with telemetry.rollout("a", task_index=1, rollout_index=0) as rollout:
        clock.advance(3.0)
        rollout.complete(response)
    agent = _agent(telemetry)
    assert agent.count(disposition) == 1
    assert (_lifecycle(agent).durations.count, _lifecycle(agent).durations.total) == (1, 3.0)
    assert agent.in_flight == 0


def test_explicit_fail_and_omit(telemetry: RolloutTelemetry) -> None:
    """fail() and omit() record their kinds."""
    with telemetry.rollout("a") as rollout:
        rollout.fail("session_lost", reason="reset timed out after 30s")
    with telemetry.rollout("a") as rollout:
        rollout.omit("cancelled")
    agent = _agent(telemetry)
    assert agent.by_kind(Disposition.FAILED) == {"session_lost": 1}
    assert agent.by_kind(Disposition.OMITTED) == {"cancelled": 1}


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (RuntimeError("boom"), "agent_run_error"),
        (TimeoutError(), "agent_timeout"),
        (ConnectionResetError(), "transport_peer_drop"),
    ],
)
def test_exception_escaping_records_a_failure_and_reraises(
    telemetry: RolloutTelemetry, error: Exception, kind: str
) -> None:
    """An exception escaping the block is a failure of the mapped kind, and it propagates."""
    with pytest.raises(type(error)), telemetry.rollout("a"):
        raise error
    assert _agent(telemetry).by_kind(Disposition.FAILED) == {kind: 1}


def test_exception_after_complete_is_not_counted_twice(telemetry: RolloutTelemetry) -> None:
    """A rollout that completed and then raised stays completed."""

    def collect() -> None:
        with telemetry.rollout("a") as rollout:
            rollout.complete({"reward": 1.0})
            raise ValueError("later")

    with pytest.raises(ValueError, match="later"):
        collect()
    agent = _agent(telemetry)
    assert (agent.measured, agent.failed) == (1, 0)


def test_block_left_without_an_outcome(telemetry: RolloutTelemetry) -> None:
    """Leaving without complete/fail/omit is a failure of kind rollout_telemetry:no_outcome."""
    with telemetry.rollout("a"):
        pass
    assert _agent(telemetry).by_kind(Disposition.FAILED) == {"rollout_telemetry:no_outcome": 1}


def test_second_outcome_is_ignored(telemetry: RolloutTelemetry, caplog: pytest.LogCaptureFixture) -> None:
    """A rollout is never counted twice: the second outcome is logged and ignored."""
    with caplog.at_level(logging.WARNING), telemetry.rollout("a") as rollout:
        rollout.complete({"reward": 1.0})
        rollout.fail("session_lost")
    agent = _agent(telemetry)
    assert (agent.measured, agent.failed) == (1, 0)
    assert any("already has an outcome" in r.getMessage() for r in caplog.records)


def test_second_outcome_raises_in_strict_mode(clock: FakeClock) -> None:
    """strict=True turns a second outcome into an error."""
    telemetry = RolloutTelemetry(strict=True, clock=clock)

    def collect() -> None:
        with telemetry.rollout("a") as rollout:
            rollout.complete({"reward": 1.0})
            rollout.omit("cancelled")

    with pytest.raises(RuntimeError, match="already has an outcome"):
        collect()
    assert _agent(telemetry).measured == 1


def test_invalid_response_counts_a_rejection_and_a_failure(telemetry: RolloutTelemetry) -> None:
    """A bad verify response is rejected, and the rollout is still counted once, as protocol_violation."""
    with telemetry.rollout("a") as rollout:
        rollout.complete({"reward": float("nan")})
    agent = _agent(telemetry)
    assert agent.by_kind(Disposition.FAILED) == {"protocol_violation": 1}
    assert telemetry.snapshot().rejected == {"invalid_reward": 1}


def test_invalid_agent_is_rejected_without_raising(telemetry: RolloutTelemetry) -> None:
    """A rollout for an invalid agent is counted as rejected and the block still runs."""
    ran = False
    with telemetry.rollout(None) as rollout:  # type: ignore[arg-type]
        ran = True
        rollout.complete({"reward": 1.0})
    assert ran
    assert telemetry.snapshot().rejected == {"invalid_agent": 1}
    assert telemetry.snapshot().agents == ()


def test_stalled_age_grows_with_the_clock(telemetry: RolloutTelemetry, clock: FakeClock) -> None:
    """The oldest in-flight age follows the injected clock and returns to 0 when idle."""
    first = telemetry.rollout("a").__enter__()
    clock.advance(10)
    second = telemetry.rollout("a").__enter__()
    clock.advance(5)
    text = exposition(telemetry.registry)
    assert value(text, "rollout_in_flight", agent="a", state="active") == 2
    assert value(text, "rollout_oldest_in_flight_age_seconds", agent="a") == 15
    clock.advance(100)
    assert value(exposition(telemetry.registry), "rollout_oldest_in_flight_age_seconds", agent="a") == 115
    first.complete({"reward": 1.0})
    assert value(exposition(telemetry.registry), "rollout_oldest_in_flight_age_seconds", agent="a") == 105
    second.fail("session_lost")
    text = exposition(telemetry.registry)
    assert value(text, "rollout_in_flight", agent="a", state="active") == 0
    assert value(text, "rollout_oldest_in_flight_age_seconds", agent="a") == 0
    assert value(text, "rollout_duration_seconds_count", agent="a") == 2
    assert value(text, "rollout_duration_seconds_sum", agent="a") == 115 + 105
    assert value(text, "rollout_duration_seconds_bucket", agent="a", le="120.0") == 2
    assert value(text, "rollout_duration_seconds_bucket", agent="a", le="60.0") == 0


def test_agents_without_the_lifecycle_have_no_lifecycle_series(telemetry: RolloutTelemetry) -> None:
    """Series for in-flight work and durations appear only for agents that used rollout()."""
    telemetry.record("plain", {"reward": 1.0})
    names = sample_names(exposition(telemetry.registry))
    assert not {n for n in names if "in_flight" in n or "duration" in n}
    with telemetry.rollout("traced") as rollout:
        rollout.complete({"reward": 1.0})
    text = exposition(telemetry.registry)
    assert value(text, "rollout_in_flight", agent="traced", state="active") == 0
    with pytest.raises(AssertionError):
        value(text, "rollout_in_flight", agent="plain")


def test_two_hundred_concurrent_async_rollouts(telemetry: RolloutTelemetry) -> None:
    """200 async rollouts in flight at once are counted exactly, and in-flight returns to 0."""
    release = asyncio.Event()
    seen_in_flight: list[int] = []

    async def one(i: int) -> None:
        async with telemetry.rollout("a", task_index=i, rollout_index=0) as rollout:
            await release.wait()
            if i % 10 == 0:
                rollout.fail("session_lost")
            elif i % 10 == 1:
                raise asyncio.CancelledError
            else:
                rollout.complete({"reward": 1.0, "mask_sample": i % 10 == 2})

    async def main() -> None:
        tasks = [asyncio.create_task(one(i)) for i in range(200)]
        await asyncio.sleep(0)
        seen_in_flight.append(_agent(telemetry).in_flight)
        release.set()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(main())
    assert seen_in_flight == [200]
    agent = _agent(telemetry)
    assert agent.in_flight == 0
    assert agent.by_kind(Disposition.FAILED) == {"session_lost": 20, "cancelled": 20}
    assert agent.masked == 20
    assert agent.measured == 140
    assert _lifecycle(agent).durations.count == 200


def test_outcome_outside_the_block_is_a_counted_rejection(telemetry: RolloutTelemetry) -> None:
    """complete() on a rollout context never entered is rejected as outcome_outside_block, not dropped."""
    telemetry.rollout("a").complete({"reward": 1.0})
    waiting = telemetry.offer("a")
    waiting.fail("session_lost")
    assert telemetry.snapshot().rejected == {"outcome_outside_block": 2}
    agent = _agent(telemetry)  # counted nothing; of its two contexts never entered, one is offered
    assert (
        agent.completed + agent.failed + agent.omitted,
        agent.in_flight,
        _lifecycle(agent).phases["offered"],
    ) == (
        0,
        0,
        1,
    )


def test_outcome_outside_the_block_raises_in_strict_mode(clock: FakeClock) -> None:
    """With strict=True an outcome given outside the with block raises and counts nothing."""
    telemetry = RolloutTelemetry(strict=True, clock=clock)
    with pytest.raises(RuntimeError, match="outside its with block"):
        telemetry.offer("a").complete({"reward": 1.0})
    assert _agent(telemetry).completed + _agent(telemetry).failed == 0
    assert telemetry.snapshot().rejected == {}


def test_outcome_after_the_block_is_a_counted_rejection(telemetry: RolloutTelemetry) -> None:
    """An outcome given after the block ended is a duplicate: rejected, the rollout counted once."""
    with telemetry.rollout("a") as rollout:
        pass  # left without an outcome: one failure, rollout_telemetry:no_outcome
    rollout.complete({"reward": 1.0})
    agent = _agent(telemetry)
    assert (agent.measured, agent.failed, agent.in_flight) == (0, 1, 0)
    assert telemetry.snapshot().rejected == {"duplicate_outcome": 1}
