"""Hostile input through every recording surface: promtool accepts the exposition after all of it."""

from __future__ import annotations

from rollout_telemetry import RolloutTelemetry
from tests.contract.test_hostile import (
    BAD_MASKS,
    BAD_REWARDS,
    GOOD_REWARDS,
    HOSTILE_TEXT,
    INVALID_AGENTS,
    _baseline_untouched,
    loaded,
)
from tests.support import promtool_check_metrics

__all__ = ["loaded"]  # the fixture, imported for the test below


def test_promtool_accepts_every_hostile_input_in_one_exposition(loaded: RolloutTelemetry) -> None:
    """``promtool check metrics`` accepts the exposition after every hostile input above, on every path."""
    for text in HOSTILE_TEXT:
        loaded.record("math", {"reward": 0.0, "mask_sample": True, "failure_kind": text})
        loaded.record_failure("math", text)
        loaded.record_omission("math", text)
        loaded.record(text, {"reward": 1.0})
        with loaded.rollout(text) as rollout:
            rollout.fail(text, reason=text)
    for reward, _ in [*BAD_REWARDS, *GOOD_REWARDS]:
        loaded.record("rewards", {"reward": reward})
    for mask in BAD_MASKS:
        loaded.record("masks", {"reward": 1.0, "mask_sample": mask})
    for agent in INVALID_AGENTS:
        loaded.record(agent, {"reward": 1.0})
    exposed = _baseline_untouched(loaded)
    result = promtool_check_metrics(exposed)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert result.stderr == ""
