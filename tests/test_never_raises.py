"""Property: random sequences of valid and invalid calls through every recording path never raise, and
every valid one is counted exactly."""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rollout_telemetry import Disposition, RolloutTelemetry, VerifyResponse
from tests.support import FakeClock, examples

AGENTS = st.sampled_from(["math", "code", "browser"])
BAD_AGENTS = st.sampled_from(["", None, 3, b"x", ("t",), ["unhashable"], 10**5000])
KINDS = st.one_of(st.none(), st.sampled_from(["session_lost", "judge_failed", "ns:odd_kind", "free text!"]))
BAD_KINDS = st.sampled_from([3, 1.5, ["x"], {"k": 1}, b"bytes"])
REWARDS = st.one_of(st.none(), st.floats(-1e6, 1e6, allow_nan=False), st.booleans(), st.integers(-5, 5))
BAD_REWARDS = st.sampled_from([math.nan, math.inf, -math.inf, "0.5", [1], {"r": 1}, object(), 10**5000])
BAD_MASKS = st.sampled_from(["true", 1, 0.0, [], "no"])
REASONS = st.one_of(st.none(), st.text(max_size=30))
BAD_REASONS = st.sampled_from([3, b"x", ["r"]])


@st.composite
def calls(draw: st.DrawFn) -> tuple[str, bool, tuple[Any, ...]]:
    """One call: (path, valid, arguments)."""
    paths = ["record", "record_model", "failure", "omission", "rollout", "rollout_offered", "rollout_fail"]
    path = draw(st.sampled_from(paths))
    valid = draw(st.booleans())
    agent: Any = draw(AGENTS)
    if path in ("record", "record_model", "rollout", "rollout_offered"):
        response: dict[str, Any] = {
            "reward": draw(REWARDS),
            "mask_sample": draw(st.booleans()),
            "failure_kind": draw(KINDS),
            "failure_reason": draw(REASONS),
        }
        if not valid:
            which = draw(
                st.sampled_from(["agent", "reward", "mask_sample", "failure_kind", "failure_reason"])
            )
            if which == "agent":
                agent = draw(BAD_AGENTS)
            elif which == "reward":
                response["reward"] = draw(BAD_REWARDS)
            elif which == "mask_sample":
                response["mask_sample"] = draw(BAD_MASKS)
            elif which == "failure_kind":
                response["failure_kind"] = draw(BAD_KINDS)
            else:
                response["failure_reason"] = draw(BAD_REASONS)
        return path, valid, (agent, response)
    kind: Any = draw(KINDS)
    reason: Any = draw(REASONS)
    if not valid:
        which = draw(st.sampled_from(["agent", "failure_kind", "failure_reason"]))
        if which == "agent":
            agent = draw(BAD_AGENTS)
        elif which == "failure_kind":
            kind = draw(BAD_KINDS)
        else:
            reason = draw(BAD_REASONS)
    return path, valid, (agent, kind, reason)


def _expected(path: str, args: tuple[Any, ...]) -> Disposition:
    if path in ("failure", "rollout_fail"):
        return Disposition.FAILED
    if path == "omission":
        return Disposition.OMITTED
    response = args[1]
    if response["mask_sample"]:
        return Disposition.MASKED
    return Disposition.UNSCORED if response["reward"] is None else Disposition.MEASURED


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sequence=st.lists(calls(), max_size=40))
def test_no_call_raises_and_valid_calls_are_counted_exactly(
    sequence: list[tuple[str, bool, tuple[Any, ...]]],
) -> None:
    """Default mode: nothing raises; the counts are exactly those of the valid calls."""
    telemetry = RolloutTelemetry(clock=FakeClock())
    want: Counter[tuple[str, Disposition]] = Counter()

    async def run_async(agent: Any, response: dict[str, Any]) -> None:
        async with telemetry.rollout(agent) as rollout:
            rollout.complete(response)

    def run_offered(agent: Any, response: dict[str, Any]) -> None:
        offered = telemetry.offer(agent)
        with offered as rollout:
            rollout.complete(response)

    def record_model(agent: Any, response: dict[str, Any]) -> None:
        try:
            model: object = VerifyResponse.model_validate(response)
        except ValueError:
            model = response  # invalid as a model too: hand the raw dict over
        telemetry.record(agent, model)

    def rollout_fail(agent: Any, kind: Any, reason: Any) -> None:
        with telemetry.rollout(agent) as rollout:
            rollout.fail(kind, reason=reason)

    paths: dict[str, Callable[..., None]] = {
        "record": telemetry.record,
        "record_model": record_model,
        "failure": lambda agent, kind, reason: telemetry.record_failure(agent, kind, reason=reason),
        "omission": lambda agent, kind, reason: telemetry.record_omission(agent, kind, reason=reason),
        "rollout": lambda agent, response: asyncio.run(run_async(agent, response)),
        "rollout_offered": run_offered,
        "rollout_fail": rollout_fail,
    }
    for path, valid, args in sequence:
        paths[path](*args)
        if valid:
            want[(args[0], _expected(path, args))] += 1

    got: Counter[tuple[str, Disposition]] = Counter()
    for agent in telemetry.snapshot().agents:
        for disposition in Disposition:
            if agent.count(disposition):
                got[(agent.agent, disposition)] = agent.count(disposition)
    # An invalid lifecycle call with a valid agent still counts its rollout once, as a failure (a
    # protocol violation, or a failure of no kind); every other invalid call counts nothing.
    for path, valid, args in sequence:
        if not valid and path.startswith("rollout") and isinstance(args[0], str) and args[0]:
            want[(args[0], Disposition.FAILED)] += 1
    assert got == want
    assert all(
        agent.lifecycle is None or agent.lifecycle.phases.get("offered", 0) == 0
        for agent in telemetry.snapshot().agents
    )
    rejected = sum(telemetry.snapshot().rejected.values())
    assert rejected == sum(1 for _, valid, _ in sequence if not valid)
