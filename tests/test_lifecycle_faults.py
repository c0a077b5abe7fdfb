"""A rollout block whose telemetry raises (strict=True), an agent over the cap, a stale handle: nothing is
left in flight, offered or counted twice."""

from __future__ import annotations

import logging

import pytest

from rollout_telemetry import Disposition, RolloutTelemetry
from rollout_telemetry._recording import stalls as stalls_module
from rollout_telemetry.errors import ConfigError, OutcomeError
from tests.support import FakeClock, exposition, samples, value


def _phases(telemetry: RolloutTelemetry, agent: str = "a") -> dict[str, int]:
    snapshot = telemetry.snapshot().agent(agent)
    assert snapshot is not None
    assert snapshot.lifecycle is not None
    return dict(snapshot.lifecycle.phases)


def _boom(reason: str) -> str:
    raise RuntimeError("redact hook down")


def test_a_strict_error_at_the_blocks_exit_still_frees_its_slot(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """strict=True raises a hook's error from the block's exit (its log line's reason); the rollout is counted
    once, and nothing stays resident or terminal."""
    telemetry = RolloutTelemetry(clock=clock, strict=True, redact_reason=_boom, rollout_log=True)
    with (
        caplog.at_level(logging.INFO, logger="rollout_telemetry.rollouts"),
        pytest.raises(RuntimeError, match="redact hook down"),
        telemetry.rollout("a"),
    ):
        pass  # no outcome: a failure, with a reason, at the exit
    assert _phases(telemetry) == {"offered": 0, "resident": 0, "active": 0}
    text = exposition(telemetry.registry)
    assert value(text, "rollout_failed_total", agent="a", failure_kind="rollout_telemetry:no_outcome") == 1
    assert all(v == 0 for (name, _), v in samples(text).items() if name == "rollout_in_flight")


@pytest.mark.parametrize("made_by", ["offer", "rollout"])
def test_a_strict_error_on_entering_leaves_nothing_in_flight_or_offered(
    clock: FakeClock, made_by: str
) -> None:
    """A bad identity under strict=True raises from entering the block: the block never runs, and its rollout
    is neither offered, nor resident, nor counted."""
    telemetry = RolloutTelemetry(clock=clock, strict=True)
    make = getattr(telemetry, made_by)
    with pytest.raises(OutcomeError), make("a", task_index=-1, rollout_index=0, attempt=0):
        pytest.fail("the block ran")  # pragma: no cover
    assert _phases(telemetry) == {"offered": 0, "resident": 0, "active": 0}
    assert telemetry.snapshot().agent("a").completed == 0  # type: ignore[union-attr]


def test_a_folded_agents_rollout_is_one_overflow(clock: FakeClock) -> None:
    """An agent over max_agents, through the lifecycle, counts one label overflow per rollout, as record()
    does."""
    telemetry = RolloutTelemetry(clock=clock, max_agents=1)
    telemetry.record("first", {"reward": 1.0})
    for _ in range(3):
        with telemetry.rollout("second") as rollout:
            rollout.complete({"reward": 1.0})
    assert telemetry.snapshot().overflow == {"agent": 3}


def test_a_failure_names_a_stage_only_when_the_rollout_said_one(clock: FakeClock) -> None:
    """fail() without stage= publishes no failure stage unless stage() set one; then it is that one."""
    telemetry = RolloutTelemetry(clock=clock)
    with telemetry.rollout("a") as rollout:
        rollout.fail("session_lost")
    assert "rollout_failure_stages_total" not in exposition(telemetry.registry)
    with telemetry.rollout("a") as rollout:
        rollout.stage("verification")
        rollout.fail("judge_failed")
    text = exposition(telemetry.registry)
    assert (
        value(text, "rollout_failure_stages_total", agent="a", stage="verification", delivery="unknown") == 1
    )


def test_the_log_line_counts_the_admission_wait_so_far(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A rollout failing while at stage admission logs its wait until then: offered to entered, plus the
    time at admission."""
    telemetry = RolloutTelemetry(clock=clock, rollout_log=True)
    block = telemetry.offer("a")
    clock.advance(1.0)
    with caplog.at_level(logging.INFO, logger="rollout_telemetry.rollouts"), block as rollout:
        rollout.stage("admission")
        clock.advance(5.0)
        rollout.fail("admission_timeout")
    (line,) = [r for r in caplog.records if r.name == "rollout_telemetry.rollouts"]
    assert line.rollout["admission_wait_seconds"] == 6.0  # type: ignore[attr-defined]
    assert line.rollout["stage"] == "admission"  # type: ignore[attr-defined]


def test_a_handle_whose_slot_was_taken_again_writes_nothing(clock: FakeClock) -> None:
    """A heartbeat or stage through the handle of a rollout whose block exited (another thread, late) does
    not touch the rollout that took its slot since."""
    telemetry = RolloutTelemetry(clock=clock)
    account = telemetry._account  # the internal part: a handle outlives its block only here
    old = account.begin("a", clock())
    account.release(old)
    clock.advance(10.0)
    new = account.begin("a", clock())
    assert new[1] is old[1]  # the same slot, taken again
    clock.advance(5.0)
    account.heartbeat(old, clock())
    account.set_stage(old, "verification", clock())
    account.cancel(old, "late")
    listing = telemetry.rollouts_in_flight()["rollouts"]
    assert isinstance(listing, list)
    (record,) = listing
    assert (record["stage"], record["state"], record["heartbeat_age_seconds"]) == ("agent", "active", 5.0)


def _no_thread(stalls: object, interval: float) -> None:
    raise RuntimeError("can't start new thread")


def test_a_stall_watcher_that_cannot_start_loses_no_rollout(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The watcher thread failing to start on an agent's first context is counted; the rollout it came with
    is counted as ever, and the offer is made."""
    monkeypatch.setattr(stalls_module._WATCHER, "watch", _no_thread)
    telemetry = RolloutTelemetry(clock=clock)
    with caplog.at_level(logging.ERROR, logger="rollout_telemetry"), telemetry.rollout("a") as rollout:
        rollout.complete({"reward": 1.0})
    offered = telemetry.offer("b")
    snapshot = telemetry.snapshot()
    assert snapshot.agent("a").measured == 1  # type: ignore[union-attr]
    assert snapshot.agent("b").lifecycle.phases["offered"] == 1  # type: ignore[union-attr]
    assert snapshot.rejected == {"internal_error": 1}  # once: the watcher is started once per telemetry
    del offered


def test_with_strict_a_stall_watcher_that_cannot_start_raises_before_the_offer(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """strict=True raises the watcher's error from offer(), before anything is offered."""
    monkeypatch.setattr(stalls_module._WATCHER, "watch", _no_thread)
    telemetry = RolloutTelemetry(clock=clock, strict=True)
    with pytest.raises(RuntimeError, match="can't start new thread"):
        telemetry.offer("a")
    assert _phases(telemetry) == {"offered": 0, "resident": 0, "active": 0}
    assert telemetry.snapshot().agent("a").lifecycle.made == 0  # type: ignore[union-attr]


class _Unprintable(Exception):
    """An exception of the caller's whose message cannot be read."""

    def __str__(self) -> str:
        raise RuntimeError("no message")


def test_an_unprintable_exception_leaving_the_block_is_still_one_failure(clock: FakeClock) -> None:
    """The caller's exception escapes the block as it was (the block used to raise the RuntimeError of its
    ``__str__`` instead, leaving the rollout in flight); the rollout is one failure, nothing in flight."""
    telemetry = RolloutTelemetry(clock=clock)
    with pytest.raises(_Unprintable), telemetry.rollout("a"):
        raise _Unprintable
    agent = telemetry.snapshot().agent("a")
    assert agent is not None
    assert (agent.failed, agent.by_kind(Disposition.FAILED)) == (1, {"agent_run_error": 1})
    assert _phases(telemetry) == {"offered": 0, "resident": 0, "active": 0}


@pytest.mark.parametrize("made_by", ["offer", "rollout"])
@pytest.mark.parametrize(
    ("identity", "reason"),
    [
        ({"task_index": "task-17", "rollout_index": 0}, "invalid_task_index"),
        ({"rollout_index": "0"}, "invalid_task_index"),
        ({"rollout_index": 0}, "invalid_task_index"),
        ({"task_index": 10**5000, "rollout_index": 0}, "invalid_task_index"),
        ({"task_index": 0, "rollout_index": 10**5000}, "invalid_rollout_index"),
        ({"task_index": 0, "rollout_index": 0, "attempt": 10**5000}, "invalid_attempt"),
        ({"task_index": 0, "rollout_index": 0, "attempt": True}, "invalid_attempt"),
    ],
)
def test_a_refused_identity_is_counted_and_never_carried_on(
    clock: FakeClock, made_by: str, identity: dict[str, object], reason: str
) -> None:
    """A string, a 5,000-digit integer or a rollout index without its task never raises into the block: it
    is one counted rejection, the rollout runs ungrouped, and the listing of rollouts in flight (what
    /rollouts and the page show) carries no part of the refused identity."""
    telemetry = RolloutTelemetry(clock=clock)
    with getattr(telemetry, made_by)("a", **identity) as rollout:
        assert (rollout.task_index, rollout.rollout_index, rollout.attempt) == (None, None, None)
        listing = telemetry.rollouts_in_flight()["rollouts"]
        assert isinstance(listing, list)
        (listed,) = listing
        assert (listed["task_index"], listed["rollout_index"], listed["attempt"]) == (None, None, None)
        rollout.complete({"reward": 1.0})
    assert telemetry.snapshot().rejected == {reason: 1}
    assert telemetry.snapshot().agent("a").measured == 1  # type: ignore[union-attr]


def test_expect_refuses_a_bad_identity_before_declaring_any() -> None:
    """expect() with a 5,000-digit task index raises its own one-line ConfigError naming the pair, and
    declares nothing."""
    telemetry = RolloutTelemetry()
    with pytest.raises(ConfigError, match=r"^identities\[1\]: task_index: .* got an integer of 16,610 bits$"):
        telemetry.expect("a", identities=[(0, 0), (10**5000, 0)])
    with pytest.raises(
        ConfigError, match=r"^max_attempts must be an integer from 1 to 65535, got an integer"
    ):
        telemetry.expect(max_attempts=10**5000)
    with pytest.raises(ConfigError, match=r"^tasks must be an integer from 0 to \d+, got an integer"):
        telemetry.expect("a", tasks=10**5000)
    assert telemetry.snapshot().agents == ()
