"""The test tiers, and fixtures: a fake clock and a telemetry instance on it.

A test's tier is the folder it lives in, given to it as a marker, one tier a test:

- ``unit`` (``tests/``): in-process, on the injected clock; no sleeping to wait for something, no wall-clock
  assertion (tests/test_tiers.py checks both).
- ``e2e`` (``tests/e2e/``): real processes: the exporter, Prometheus, promtool, Pushgateway, Ray.
- ``gym`` (``tests/gym/``): the real NeMo Gym 0.7.0 beside the exporter.
- ``slow`` (``tests/slow/``): soak, attacks and latencies that only a real server under load shows.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rollout_telemetry import RolloutTelemetry
from tests.support import FakeClock

TESTS = Path(__file__).parent
TIERS = {"e2e": "e2e", "gym": "gym", "slow": "slow"}
"""The folder under tests/ that holds each tier but ``unit`` (tests/ itself)."""
ALL_TIERS = ("unit", *TIERS.values())


def tier_of(path: Path) -> str:
    """The tier of the test module at ``path``: its folder's, ``unit`` directly under tests/."""
    relative = path.resolve().relative_to(TESTS.resolve())
    return TIERS.get(relative.parts[0], "unit") if len(relative.parts) > 1 else "unit"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its folder's tier (a tier marker written by hand is an error), and put the longest
    tiers first, so parallel workers start the tests that mostly wait before the many short ones."""
    for item in items:
        tier = tier_of(item.path)
        written = [mark.name for mark in item.iter_markers() if mark.name in ALL_TIERS]
        if written:
            msg = f"{item.nodeid}: the tier is the folder ({tier}); remove @pytest.mark.{written[0]}"
            raise pytest.UsageError(msg)
        item.add_marker(tier)
    order = {"gym": 0, "slow": 1, "e2e": 2, "unit": 3}
    items.sort(key=lambda item: order[tier_of(item.path)])


@pytest.fixture(autouse=True)
def _plain_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sees the environment of a plain run: xdist's workers set COLUMNS and LINES (80x24), which
    a piped command reads as the terminal's size."""
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)


@pytest.fixture
def clock() -> FakeClock:
    """A clock that moves only when the test says so."""
    return FakeClock()


@pytest.fixture
def telemetry(clock: FakeClock) -> RolloutTelemetry:
    """A telemetry instance with its own registry, on the fake clock."""
    return RolloutTelemetry(run="test-run", clock=clock)
