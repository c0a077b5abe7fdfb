"""A simulated rollout collection: several agents, some masked, failed and omitted rollouts, real time.

It drives the lifecycle API exactly as a collector would, so the exporter it feeds shows everything a real
run shows: counts by failure kind, rewards (negative ones too), durations and in-flight work.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rollout_telemetry import failure_kinds
from rollout_telemetry.telemetry import RolloutTelemetry

__all__ = ["DemoConfig", "run_demo", "summary_lines"]

_MASK_KINDS = (failure_kinds.JUDGE_FAILED, failure_kinds.JUDGE_UNPARSEABLE, failure_kinds.VERIFIER_ERROR)
_FAIL_KINDS = (
    failure_kinds.SESSION_LOST,
    failure_kinds.TRANSPORT_TIMEOUT,
    failure_kinds.PROVIDER_OOM_KILLED,
    failure_kinds.ENVIRONMENT_SERVER_FAILED,
)
_OMIT_KINDS = (failure_kinds.CANCELLED, failure_kinds.COHORT_INCOMPLETE)


@dataclass(frozen=True, slots=True)
class DemoConfig:
    """What the simulated run looks like."""

    agents: Sequence[str] = ("math_agent", "code_agent", "browser_agent")
    rate: float = 20.0
    """Rollouts started per second, over all agents."""
    duration: float = 0.0
    """Seconds to run; 0 runs until interrupted."""
    masked: float = 0.1
    failed: float = 0.05
    omitted: float = 0.02
    seed: int | None = None
    negative_rewards: bool = True
    max_rollout_seconds: float = 2.0
    concurrency: int = 256
    stalled: float = 0.01
    """Share of rollouts that hang at verification for longer than ``stall_after``."""
    stall_after: float = 5.0

    def __post_init__(self) -> None:
        for name in ("masked", "failed", "omitted", "stalled"):
            share = getattr(self, name)
            if not 0.0 <= share <= 1.0:
                msg = f"--{name} must be a share between 0 and 1, got {share}"
                raise ValueError(msg)
        if self.masked + self.failed + self.omitted > 1.0:
            msg = "--masked + --failed + --omitted must not exceed 1"
            raise ValueError(msg)
        if self.stall_after <= 0:
            msg = f"--stall-after must be a positive number of seconds, got {self.stall_after}"
            raise ValueError(msg)
        if self.rate <= 0 or not self.agents:
            msg = "--rate must be positive and at least one agent given"
            raise ValueError(msg)


async def _one_rollout(
    telemetry: RolloutTelemetry, config: DemoConfig, rng: random.Random, agent: str, task: int
) -> None:
    draw = rng.random()
    seconds = rng.uniform(0.01, config.max_rollout_seconds)
    low = -1.0 if config.negative_rewards else 0.0
    reward = round(rng.uniform(low, 1.0), 3)
    stalls = rng.random() < config.stalled
    async with telemetry.rollout(agent, task_index=task, rollout_index=0, attempt=0) as rollout:
        await asyncio.sleep(0.7 * seconds)  # the agent's turn (a new rollout is at stage "agent")
        rollout.stage("verification")
        # A hung judge: in flight past stall_after, so the stall series, /rollouts and the alert show it.
        await asyncio.sleep(config.stall_after + 2.0 if stalls else 0.3 * seconds)
        if draw < config.failed:
            rollout.fail(rng.choice(_FAIL_KINDS), reason=f"simulated failure after {seconds:.2f}s")
        elif draw < config.failed + config.omitted:
            rollout.omit(rng.choice(_OMIT_KINDS), reason="simulated omission")
        elif draw < config.failed + config.omitted + config.masked:
            rollout.complete({"reward": 0.0, "mask_sample": True, "failure_kind": rng.choice(_MASK_KINDS)})
        else:
            rollout.complete({"reward": reward})


async def run_demo(
    telemetry: RolloutTelemetry,
    config: DemoConfig,
    *,
    on_tick: Callable[[], None] | None = None,
    tick_seconds: float = 5.0,
) -> int:
    """Run the simulated collection; return how many rollouts were started."""
    rng = random.Random(config.seed)
    telemetry.declare(*config.agents)  # counters exist from 0, so increase() sees every rollout
    loop = asyncio.get_running_loop()
    start = loop.time()
    next_tick = start + tick_seconds
    interval = 1.0 / config.rate
    limit = asyncio.Semaphore(config.concurrency)
    tasks: set[asyncio.Task[None]] = set()
    started = 0

    async def guarded(agent: str, task: int) -> None:
        async with limit:
            await _one_rollout(telemetry, config, rng, agent, task)

    while config.duration <= 0 or loop.time() - start < config.duration:
        agent = config.agents[started % len(config.agents)]
        task = asyncio.create_task(guarded(agent, started // len(config.agents)))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        started += 1
        if on_tick is not None and loop.time() >= next_tick:
            on_tick()
            next_tick += tick_seconds
        # Pace against the schedule, not the last sleep, so the rate holds on a busy machine.
        await asyncio.sleep(max(start + started * interval - loop.time(), 0.0))
    if tasks:
        await asyncio.gather(*tasks)
    return started


def summary_lines(telemetry: RolloutTelemetry) -> list[str]:
    """One line per agent: completed, mean and unmasked reward, masked share, failed, omitted, in flight."""
    lines = []
    for agent in telemetry.snapshot().agents:
        mean = agent.mean_reward
        unmasked = agent.mean_reward_unmasked
        ratio = agent.masked_ratio
        lines.append(
            f"{agent.agent:<16} completed={agent.completed:<6} "
            f"reward={'-' if mean is None else f'{mean:+.3f}'} "
            f"unmasked={'-' if unmasked is None else f'{unmasked:+.3f}'} "
            f"masked={0.0 if ratio is None else 100 * ratio:.1f}% "
            f"failed={agent.failed} omitted={agent.omitted} in_flight={agent.in_flight}"
        )
    return lines
