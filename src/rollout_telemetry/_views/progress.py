"""The Gym-compatible views: NeMo Gym's ``progress/...`` and ``coverage/...`` keys, computed from a snapshot.

The dict can go straight to ``wandb.log`` or MLflow. A healthy run (nothing masked, failed or omitted)
yields exactly the keys it would without this library; the extra keys appear only once something happens.
"""

from __future__ import annotations

from collections.abc import Mapping

from rollout_telemetry._contract.outcome import REACHED_OUTPUT, Disposition
from rollout_telemetry._store.coverage import CoverageSnapshot
from rollout_telemetry._store.snapshot import AccountSnapshot, finished

__all__ = ["coverage_metrics", "expected_rollouts", "progress_metrics"]


def _pct(numerator: float, denominator: int) -> float:
    return round(100 * numerator / denominator, 2)


def progress_metrics(
    snapshot: AccountSnapshot,
    *,
    elapsed_seconds: float,
    expected: Mapping[str, int] | None = None,
) -> dict[str, float]:
    """Return the ``progress/<agent>/...`` keys and ``progress/total/rollouts_per_min``, as NeMo Gym 0.7.0.

    - ``reward``: round(100 x mean, 2) over every rollout that carries a reward, masked ones and failure
      records that carry one included (a follower leaves out the no-result failure classes' rewards);
    - ``reward_lower_bound``: round(100 x sum of rewards / (rewarded + still expected), 2), with ``expected``;
    - ``masked_pct``: round(100 x masked / (masked + measured), 2), only once something is masked: an
      unscored rollout (no reward) and a failure record are in neither part;
    - ``reward_unmasked``: round(100 x mean over measured rollouts, 2), only once something is masked,
      failed or omitted (and something is measured);
    - ``failed``, ``omitted``: integer counts, only when above 0;
    - ``progress/total/rollouts_per_min``: rollouts finished (completed, failed or omitted) per minute.

    Args:
        snapshot: the account snapshot to read.
        elapsed_seconds: time since the telemetry started, for the rollout rate.
        expected: rollouts expected per agent in total; gives ``reward_lower_bound``.
    """
    keys: dict[str, float] = {}
    total = 0
    for agent in snapshot.agents:
        prefix = f"progress/{agent.agent}/"
        done = finished(agent.completed, agent.failed, agent.omitted)
        total += done
        # Percentages as NeMo Gym writes them: round(100 * sum / count, 2), from the sums themselves.
        if agent.rewarded:
            keys[prefix + "reward"] = _pct(agent.reward_sum, agent.rewarded)
        if expected is not None and agent.agent in expected:
            denominator = agent.rewarded + max(expected[agent.agent] - done, 0)
            if denominator > 0:
                keys[prefix + "reward_lower_bound"] = _pct(agent.reward_sum, denominator)
        if agent.masked_ratio is not None:
            keys[prefix + "masked_pct"] = _pct(agent.masked, agent._masked_denominator)
        if agent.mean_reward_unmasked is not None:
            keys[prefix + "reward_unmasked"] = _pct(agent._measured_sum, agent.measured)
        if agent.failed:
            keys[prefix + "failed"] = agent.failed
        if agent.omitted:
            keys[prefix + "omitted"] = agent.omitted
    minutes = elapsed_seconds / 60.0
    keys["progress/total/rollouts_per_min"] = total / minutes if minutes > 0 else 0.0
    return keys


def expected_rollouts(snapshot: CoverageSnapshot) -> dict[str, int]:
    """The rollouts expected of each agent in the run's coverage (none until expected work is known): the
    ``expected`` that ``reward_lower_bound`` divides by."""
    return {agent.agent: agent.expected for agent in snapshot.agents if agent.expected is not None}


def coverage_metrics(snapshot: CoverageSnapshot) -> dict[str, int]:
    """NeMo Gym 0.7.0's end-of-run ``coverage/...`` keys, as its collection computes them.

    - ``coverage/expected``: the rollouts of the materialized inputs; ``coverage/scored``: the distinct
      rollouts with a row in the main output; ``coverage/missing``: expected - scored. Only when the
      expected rollouts are known (Gym counts the materialized inputs file, which a run always writes).
    - ``coverage/measured_rollouts``, ``masked_rollouts``, ``measured_tasks`` and ``fully_masked_tasks``
      (Gym's reward profile) only when something is masked.
    """
    keys: dict[str, int] = {}
    total = dict.fromkeys(Disposition, 0)
    for agent in snapshot.agents:
        for disposition, count in agent.rollouts.items():
            total[disposition] += count
    if snapshot.expected_known:
        expected = sum(a.expected or 0 for a in snapshot.agents) - snapshot.unexpected
        scored = sum(total[d] for d in REACHED_OUTPUT)
        keys["coverage/expected"] = expected
        keys["coverage/scored"] = scored
        keys["coverage/missing"] = expected - scored
    if total[Disposition.MASKED]:
        keys["coverage/measured_rollouts"] = total[Disposition.MEASURED]
        keys["coverage/masked_rollouts"] = total[Disposition.MASKED]
        keys["coverage/measured_tasks"] = sum(a.measured_tasks for a in snapshot.agents)
        keys["coverage/fully_masked_tasks"] = sum(a.fully_masked_tasks for a in snapshot.agents)
    return keys
