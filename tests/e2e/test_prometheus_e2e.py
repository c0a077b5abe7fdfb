"""The Prometheus exposition passes promtool's check, hostile label values included."""

from __future__ import annotations

from rollout_telemetry import RolloutTelemetry
from tests.support import (
    exposition,
    promtool_check_metrics,
)


def test_promtool_accepts_the_exposition(telemetry: RolloutTelemetry) -> None:
    """``promtool check metrics`` reports nothing, even with hostile label values."""
    telemetry.record("math", {"reward": 1.0})
    telemetry.record("math", {"reward": 0.0, "mask_sample": True, "failure_kind": 'quo"te\nnew\\line {x=y}'})
    telemetry.record_failure('agent "with" quotes\n', "session_lost")
    with telemetry.rollout("code") as rollout:
        rollout.complete({"reward": 0.5})
    telemetry.record("math", {"reward": "bad"})
    result = promtool_check_metrics(exposition(telemetry.registry))
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert result.stderr == ""
