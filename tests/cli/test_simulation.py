"""The simulated collection (``demo``): what its rewards look like in the windows an alert reads."""

from __future__ import annotations

import itertools

from rollout_telemetry import RolloutTelemetry
from rollout_telemetry._cli.simulation import DemoConfig, run_demo
from tests.support import FakeClock
from tests.virtual_loop import run_virtual


def test_a_healthy_runs_reward_is_level_in_windows_of_a_few_rollouts(clock: FakeClock) -> None:
    """Every half second of a healthy run (about 40 rollouts of the agent) has a mean reward within 0.03 of
    the range's middle: the rewards are spread over [-0.2, 1] along the rollouts, not drawn at random (where
    such a window's mean is off by 0.055 in one case of three), so a machine that fits few rollouts in an
    alert's window cannot fake a drop."""
    telemetry = RolloutTelemetry(clock=clock, runtime_metrics=False)
    config = DemoConfig(
        agents=("math",), rate=80, duration=10.0, seed=3, masked=0.0, failed=0.0, omitted=0.0, stalled=0.0,
        uniform=0.0, truncated=0.0, leaked=0.0, max_rollout_seconds=0.05,
    )  # fmt: skip
    sums: list[tuple[float, int]] = []

    def tick() -> None:
        (agent,) = telemetry.snapshot().agents
        sums.append((agent.reward_sum, agent.rewarded))

    run_virtual(run_demo(telemetry, config, on_tick=tick, tick_seconds=0.5), clock)
    windows = [(s1 - s0) / (n1 - n0) for (s0, n0), (s1, n1) in itertools.pairwise(sums)]
    assert len(windows) >= 18
    assert max(abs(mean - 0.4) for mean in windows) < 0.03, windows
