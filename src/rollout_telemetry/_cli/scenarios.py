"""The demo's scenarios by name: what ``--scenario`` offers, without the simulation that runs them."""

from __future__ import annotations

from typing import Literal

__all__ = ["SCENARIOS", "Scenario"]

Scenario = Literal[
    "healthy", "infrastructure", "truncation", "policy", "contaminated", "too_hard", "too_easy", "hollow",
    "length_drift", "retries_exhausted", "loop_lag", "cleanup_leak", "slow_rollouts",
]  # fmt: skip
DROP_SCENARIOS: tuple[Scenario, ...] = ("healthy", "infrastructure", "truncation", "policy")
"""The scenarios of a reward drop, one per cause."""
SIGNAL_SCENARIOS: tuple[Scenario, ...] = ("contaminated", "too_hard", "too_easy", "hollow", "length_drift")
"""The scenarios of an unsound training signal."""
RECOVERY_SCENARIOS: tuple[Scenario, ...] = ("retries_exhausted", "loop_lag", "cleanup_leak", "slow_rollouts")
"""The scenarios of a collection that does not recover, or a collector that stalls its own rollouts."""
SCENARIOS: tuple[Scenario, ...] = DROP_SCENARIOS + SIGNAL_SCENARIOS + RECOVERY_SCENARIOS
