"""Hostile input through every recording surface: the documented outcome, a valid exposition, no loss."""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest

from rollout_telemetry import RolloutTelemetry
from rollout_telemetry._contract.labels import MAX_LABEL_LENGTH, label_value
from rollout_telemetry.errors import OutcomeError
from tests.support import FakeClock, exposition, samples, value

HOSTILE_TEXT = [
    "x" * 1_000_000,
    "new\nline",
    'quo"te',
    "back\\slash",
    "{brace}",
    "a=b",
    "nul\x00byte",
    "emoji 🙂🔥",
    "rtl \u202e\u200f mark",
    "lone \ud800 surrogate",
    " ",
    "\t\r",
    "\x7f\x01 control",
    'all of them: "\n\\{}=\x00🙂\u202e',
]

BAD_REWARDS: list[tuple[Any, str]] = [
    (math.nan, "invalid_reward"),
    (math.inf, "invalid_reward"),
    (-math.inf, "invalid_reward"),
    ("1.0", "invalid_reward"),
    ([1.0], "invalid_reward"),
    ({"value": 1}, "invalid_reward"),
    # Beyond MAX_REWARD (1e9): one such reward would poison the sums for good.
    (1e308, "invalid_reward"),
    (-1e10, "invalid_reward"),
    (10**400, "invalid_reward"),  # float() overflows: still a counted rejection of the field
    (Fraction(10**400, 3), "invalid_reward"),
    (Decimal("1e400"), "invalid_reward"),
]
GOOD_REWARDS: list[tuple[Any, float | None]] = [
    (None, None),  # unscored
    (1e9, 1e9),
    (-1e9, -1e9),
    (5e-324, 5e-324),
    (True, 1.0),
    (False, 0.0),
    (7, 7.0),
]
BAD_MASKS = ["true", "false", 1, 0, 1.0, [], "yes"]
INVALID_AGENTS: list[Any] = ["", None, 3, b"bytes", ["list"]]


@pytest.fixture
def loaded(clock: FakeClock) -> RolloutTelemetry:
    """Telemetry with a baseline agent whose counts must never move."""
    telemetry = RolloutTelemetry(run="hostile", clock=clock)
    telemetry.record("baseline", {"reward": 0.5})
    telemetry.record("baseline", {"reward": 0.0, "mask_sample": True, "failure_kind": "judge_failed"})
    telemetry.record_failure("baseline", "session_lost")
    return telemetry


def _baseline_untouched(telemetry: RolloutTelemetry) -> str:
    text = exposition(telemetry.registry)
    assert value(text, "rollout_completed_total", agent="baseline") == 2
    assert value(text, "rollout_reward_positive_total", agent="baseline") == 0.5
    assert value(text, "rollout_masked_total", agent="baseline") == 1
    assert value(text, "rollout_failed_total", agent="baseline") == 1
    return text


def _valid(text: str) -> None:
    samples(text)  # prometheus_client's parser accepts it; promtool sees all of it in the e2e test below


@pytest.mark.parametrize(("reward", "reason"), BAD_REWARDS)
def test_bad_rewards_are_rejected(loaded: RolloutTelemetry, reward: Any, reason: str) -> None:
    """NaN, infinities, strings and containers: counted rejection, or a clear error when strict."""
    loaded.record("math", {"reward": reward})
    assert loaded.snapshot().rejected == {reason: 1}
    assert loaded.snapshot().agent("math") is None
    _valid(_baseline_untouched(loaded))
    with pytest.raises(OutcomeError, match=r"^reward: "):
        RolloutTelemetry(strict=True).record("math", {"reward": reward})


@pytest.mark.parametrize(("reward", "counted"), GOOD_REWARDS)
def test_extreme_but_valid_rewards_are_counted(
    loaded: RolloutTelemetry, reward: Any, counted: float | None
) -> None:
    """The largest and tiny floats, booleans and ints are counted exactly; None is unscored."""
    loaded.record("math", {"reward": reward})
    agent = loaded.snapshot().agent("math")
    assert agent is not None
    assert agent.completed == 1
    if counted is None:
        assert agent.unscored == 1
    else:
        assert agent.reward_sum == counted
    _valid(_baseline_untouched(loaded))


@pytest.mark.parametrize("mask", BAD_MASKS, ids=repr)
def test_mask_sample_must_be_a_bool(loaded: RolloutTelemetry, mask: Any) -> None:
    """mask_sample as a string or number is ambiguous: rejected, or a clear error when strict."""
    loaded.record("math", {"reward": 1.0, "mask_sample": mask})
    assert loaded.snapshot().rejected == {"invalid_mask_sample": 1}
    _valid(_baseline_untouched(loaded))
    with pytest.raises(OutcomeError, match=r"^mask_sample: "):
        RolloutTelemetry(strict=True).record("math", {"reward": 1.0, "mask_sample": mask})


@pytest.mark.parametrize("text", HOSTILE_TEXT, ids=lambda t: repr(t[:20]))
def test_hostile_failure_kinds_become_safe_labels(loaded: RolloutTelemetry, text: str) -> None:
    """A hostile kind is counted under its normalised label; the exposition stays valid."""
    loaded.record("math", {"reward": 0.0, "mask_sample": True, "failure_kind": text})
    loaded.record_failure("math", text)
    loaded.record_omission("math", text)
    exposed = _baseline_untouched(loaded)
    label = label_value(text)
    assert len(label) <= MAX_LABEL_LENGTH
    for name in ("rollout_masked_total", "rollout_failed_total", "rollout_omitted_total"):
        assert value(exposed, name, agent="math", failure_kind=label) == 1
    _valid(exposed)


@pytest.mark.parametrize("text", HOSTILE_TEXT, ids=lambda t: repr(t[:20]))
def test_hostile_agent_names_become_safe_labels(loaded: RolloutTelemetry, text: str) -> None:
    """A hostile agent name is counted under its normalised label, on every recording path."""
    loaded.record(text, {"reward": 1.0})
    loaded.record_failure(text, "session_lost")
    with loaded.rollout(text) as rollout:
        rollout.complete({"reward": 0.0})
    exposed = _baseline_untouched(loaded)
    label = label_value(text)
    assert value(exposed, "rollout_completed_total", agent=label) == 2
    assert value(exposed, "rollout_failed_total", agent=label) == 1
    _valid(exposed)


@pytest.mark.parametrize("agent", INVALID_AGENTS, ids=repr)
def test_invalid_agents_are_rejected(loaded: RolloutTelemetry, agent: Any) -> None:
    """Empty, missing or non-string agents are rejected on every path, never raised."""
    loaded.record(agent, {"reward": 1.0})
    loaded.record_failure(agent, "session_lost")
    loaded.record_omission(agent, "cancelled")
    with loaded.rollout(agent) as rollout:
        rollout.complete({"reward": 1.0})
    assert loaded.snapshot().rejected == {"invalid_agent": 4}
    _valid(_baseline_untouched(loaded))


def test_secret_looking_reasons_never_reach_metrics(loaded: RolloutTelemetry) -> None:
    """failure_reason, from every path, never appears in /metrics."""
    secret = "Authorization: Bearer sk-live-4f9a8b7c6d5e secret=hunter2"
    loaded.record("math", {"reward": 0.0, "mask_sample": True, "failure_reason": secret})
    loaded.record_failure("math", "session_lost", reason=secret)
    loaded.record_omission("math", "cancelled", reason=secret)
    with loaded.rollout("math") as rollout:
        rollout.fail("session_lost", reason=secret)
    with pytest.raises(RuntimeError), loaded.rollout("math"):
        raise RuntimeError(secret)
    text = exposition(loaded.registry)
    for fragment in ("sk-live", "hunter2", "Bearer"):
        assert fragment not in text
    _valid(text)


def test_everything_at_once_stays_valid(loaded: RolloutTelemetry) -> None:
    """All hostile kinds and agents in one exposition: valid, and every hostile series present."""
    for text in HOSTILE_TEXT:
        loaded.record_failure(text, text)
    exposed = _baseline_untouched(loaded)
    _valid(exposed)
    failed = [labels for (name, labels) in samples(exposed) if name == "rollout_failed_total"]
    assert len(failed) == 1 + len({label_value(t) for t in HOSTILE_TEXT})
