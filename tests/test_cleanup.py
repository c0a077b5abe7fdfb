"""Cleanups (``rollout.cleanup()``, ``telemetry.cleanup(agent)``): their duration, failures and unresolved."""

from __future__ import annotations

import asyncio

import pytest

from rollout_telemetry import RolloutTelemetry, failure_kinds
from tests.support import FakeClock, exposition, sample_names, value


def _figures(telemetry: RolloutTelemetry, agent: str = "a") -> tuple[float, float, float]:
    """(unresolved, durations observed, their sum) of ``agent``."""
    text = exposition(telemetry.registry)
    return (
        value(text, "rollout_cleanups_unresolved", agent=agent),
        value(text, "rollout_cleanup_duration_seconds_count", agent=agent),
        value(text, "rollout_cleanup_duration_seconds_sum", agent=agent),
    )


def test_no_cleanup_no_cleanup_series(telemetry: RolloutTelemetry) -> None:
    """A run that never starts a cleanup publishes none of the cleanup families."""
    with telemetry.rollout("a") as rollout:
        rollout.complete({"reward": 1.0})
    assert not {name for name in sample_names(exposition(telemetry.registry)) if "cleanup" in name}


def test_a_cleanup_after_the_outcome_is_timed_and_resolved(clock: FakeClock) -> None:
    """In progress it is unresolved and has no duration yet; finished, its duration is observed, 0 left."""
    telemetry = RolloutTelemetry(clock=clock)
    with telemetry.rollout("a") as rollout:
        rollout.complete({"reward": 1.0})
        with rollout.cleanup():
            clock.advance(1.5)
            text = exposition(telemetry.registry)
            assert value(text, "rollout_cleanups_unresolved", agent="a") == 1
            assert "rollout_cleanup_duration_seconds_count" not in sample_names(text)
            assert value(text, "rollout_in_flight", agent="a", state="terminal") == 1
    assert _figures(telemetry) == (0, 1, 1.5)
    assert (
        value(exposition(telemetry.registry), "rollout_cleanup_duration_seconds_bucket", agent="a", le="2.5")
        == 1
    )
    assert "rollout_cleanups_failed_total" not in sample_names(exposition(telemetry.registry))


def test_a_raising_cleanup_is_failed_unresolved_and_re_raised(clock: FakeClock) -> None:
    """The exception's kind is counted, the cleanup stays unresolved, its duration observed; it re-raises."""
    telemetry = RolloutTelemetry(clock=clock)

    def release_session() -> None:
        with telemetry.cleanup("a"):
            clock.advance(2.0)
            raise ConnectionError("environment gone")

    with pytest.raises(ConnectionError):
        release_session()
    text = exposition(telemetry.registry)
    assert (
        value(
            text, "rollout_cleanups_failed_total", agent="a", failure_kind=failure_kinds.TRANSPORT_PEER_DROP
        )
        == 1
    )
    assert _figures(telemetry) == (1, 1, 2.0)
    assert telemetry.snapshot().rejected == {}


def test_fail_counts_its_kind_and_open_cleanups_stay_unresolved(clock: FakeClock) -> None:
    """fail(kind) counts that kind; a cleanup never exited stays unresolved after its rollout's block."""
    telemetry = RolloutTelemetry(clock=clock)
    with telemetry.rollout("a") as rollout:
        with rollout.cleanup() as cleanup:
            cleanup.fail(failure_kinds.SESSION_LOST)
        rollout.cleanup().__enter__()  # left open when the block exits
        rollout.fail(failure_kinds.SESSION_LOST)
    with telemetry.cleanup("a"):
        pass
    text = exposition(telemetry.registry)
    assert (
        value(text, "rollout_cleanups_failed_total", agent="a", failure_kind=failure_kinds.SESSION_LOST) == 1
    )
    assert _figures(telemetry) == (2, 2, 0.0)


def test_async_cleanups_are_counted_exactly(telemetry: RolloutTelemetry) -> None:
    """100 concurrent async cleanups, every tenth failing: 10 failed and unresolved, 100 durations."""

    async def one(i: int) -> None:
        async with telemetry.rollout("a") as rollout:
            rollout.complete({"reward": 1.0})
            async with rollout.cleanup() as cleanup:
                await asyncio.sleep(0)
                if i % 10 == 0:
                    cleanup.fail("env_reset_failed")

    async def main() -> None:
        await asyncio.gather(*(one(i) for i in range(100)))

    asyncio.run(main())
    text = exposition(telemetry.registry)
    assert value(text, "rollout_cleanups_failed_total", agent="a", failure_kind="env_reset_failed") == 10
    assert _figures(telemetry)[:2] == (10, 100)


def test_cleanup_misuse_is_a_counted_rejection(telemetry: RolloutTelemetry) -> None:
    """fail() outside the block and entering twice are rejected; nothing is counted twice."""
    cleanup = telemetry.cleanup("a")
    cleanup.fail("session_lost")
    with cleanup:
        cleanup.__enter__()
        cleanup.fail(42)  # type: ignore[arg-type]
    assert telemetry.snapshot().rejected == {
        "outcome_outside_block": 1,
        "cleanup_reentered": 1,
        "invalid_failure_kind": 1,
    }
    text = exposition(telemetry.registry)
    assert value(text, "rollout_cleanups_failed_total", agent="a", failure_kind="unspecified") == 1
    assert _figures(telemetry)[:2] == (1, 1)


def test_a_cleanup_of_an_invalid_agent_is_rejected_and_counts_nothing(telemetry: RolloutTelemetry) -> None:
    """An agent name that is not a non-empty string: one rejection, no cleanup series."""
    with telemetry.cleanup(""):
        pass
    assert telemetry.snapshot().rejected == {"invalid_agent": 1}
    assert not {name for name in sample_names(exposition(telemetry.registry)) if "cleanup" in name}
