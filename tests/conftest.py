"""Fixtures: a fake clock and a telemetry instance on it."""

from __future__ import annotations

import pytest

from rollout_telemetry import RolloutTelemetry
from tests.support import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    """A clock that moves only when the test says so."""
    return FakeClock()


@pytest.fixture
def telemetry(clock: FakeClock) -> RolloutTelemetry:
    """A telemetry instance with its own registry, on the fake clock."""
    return RolloutTelemetry(run="test-run", clock=clock)
