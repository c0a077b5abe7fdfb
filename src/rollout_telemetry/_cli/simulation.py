"""A simulated rollout collection: several agents, some masked, failed and omitted rollouts, real time.

It drives the lifecycle API exactly as a collector would, so the exporter it feeds shows everything a real
run shows: counts by failure kind, rewards (negative ones too), durations and in-flight work, token usage
and truncated answers (each rollout completes with a Responses API ``response`` and its trajectory), and
groups: each task is ``group_size`` rollouts, and a share of tasks is easy (every member scores 1: a uniform
group).

A ``scenario`` makes the reward fall after ``drop_after`` seconds for one cause, so each reward-drop alert
can be seen firing:

- ``healthy``: nothing changes (rewards are spread evenly over their range along each agent's rollouts, so
  a window of a few of them has the run's mean);
- ``infrastructure``: 20 more points of rollouts fail, and 40% of the unmasked ones score 0 (an environment
  that errors without masking);
- ``truncation``: half of the answers hit max_output_tokens and score 0;
- ``policy``: every reward is multiplied by 0.4, nothing else changes.

The run declares its expected work as NeMo Gym materializes its inputs: with a duration, every rollout of
the run before the first starts; without one, each task's rollouts as the task starts. So the coverage row
of the dashboard fills: what became of each rollout, failed ones retried (a failed attempt is retried up to
NeMo Gym's 3 attempts), and the rollouts still to come as ``unknown``. Stopped (Ctrl-C, SIGTERM), the demo
abandons the rollouts in flight, as NeMo Gym leaves them: counted nowhere, so they stay ``unknown``.

The training-signal scenarios change what a trainer learns from, not (or not only) the reward:

- ``contaminated``: 25% of the rollouts fail terminally (not retried), member by member: valid members
  beside failed ones;
- ``too_hard``: 80% of the tasks score the lowest reward on every member;
- ``too_easy``: 80% of the tasks score the highest reward on every member;
- ``hollow``: 30% of the rollouts' trajectories have a turn with no message or tool call (none before);
- ``length_drift``: answers may get three times longer (under ``max_output_tokens``: about twice as long
  on average).

The recovery and runtime scenarios break the collection itself:

- ``retries_exhausted``: 15% of the rollouts fail on every attempt (a task whose sandbox image is gone) and
  run out of NeMo Gym's 3 attempts;
- ``loop_lag``: the collector's event loop is blocked for 0.3 s about every second (post-processing that
  does not await), so every rollout on it waits;
- ``cleanup_leak``: 30% of the environment sessions fail to be released (a leaking sandbox pool), so the
  unresolved cleanups grow;
- ``slow_rollouts``: rollouts take three times longer (a slow model server), so most pass ``slow_after``.

Each rollout goes through the stages a NeMo Gym rollout does: ``admission`` briefly, then ``agent`` (with
heartbeats during the agent's turn) and ``verification``; after its outcome it releases its environment
session in a cleanup (1% of releases fail by default). A rollout in flight longer than ``slow_after`` (by
default 0.8 times ``max_rollout_seconds``) is ``slow``.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from rollout_telemetry import failure_kinds
from rollout_telemetry._cli.scenarios import (
    Scenario,
)
from rollout_telemetry._facade.telemetry import RolloutTelemetry
from rollout_telemetry._recording.lifecycle import RolloutContext
from rollout_telemetry._store.coverage import DEFAULT_MAX_ATTEMPTS
from rollout_telemetry.errors import ConfigError

__all__ = ["DemoConfig", "run_demo", "summary_lines"]


_MASK_KINDS = (failure_kinds.JUDGE_FAILED, failure_kinds.JUDGE_UNPARSEABLE, failure_kinds.VERIFIER_ERROR)
_FAIL_KINDS = (
    failure_kinds.SESSION_LOST,
    failure_kinds.TRANSPORT_TIMEOUT,
    failure_kinds.PROVIDER_OOM_KILLED,
    failure_kinds.ENVIRONMENT_SERVER_FAILED,
)
_OMIT_KINDS = (failure_kinds.CANCELLED, failure_kinds.COHORT_INCOMPLETE)
_DELIVERY = {failure_kinds.TRANSPORT_TIMEOUT: "possibly_delivered", failure_kinds.SESSION_LOST: "delivered"}
"""Whether a failed rollout's request reached its environment, by failure kind (the rest: not sent)."""
SLOW_SHARE = 0.8
"""The demo's default ``slow_after``, as a share of the longest rollout."""


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
    group_size: int = 4
    """Rollouts per task (a GRPO group)."""
    uniform: float = 0.1
    """Share of easy tasks: every member scores 1.0, a uniform group."""
    truncated: float = 0.03
    """Share of completed rollouts whose answer hits ``max_output_tokens`` and scores 0."""
    max_output_tokens: int = 2048
    scenario: Scenario | None = None
    """A reward-drop cause switched on after ``drop_after`` seconds; ``None`` (or healthy) changes nothing."""
    drop_after: float = 30.0
    slow_after: float | None = None
    """Seconds in flight after which a rollout is ``slow``; ``None``: ``SLOW_SHARE`` of
    ``max_rollout_seconds``, so the longest rollouts of a healthy run are slow, and few are."""
    leaked: float = 0.01
    """Share of rollouts whose environment session fails to be released (its cleanup fails)."""

    @property
    def slow_seconds(self) -> float:
        """The ``slow_after`` the run's telemetry is given."""
        return SLOW_SHARE * self.max_rollout_seconds if self.slow_after is None else self.slow_after

    @property
    def lowest_reward(self) -> float:
        """The lowest reward a rollout of the run scores (the highest is 1)."""
        return -0.2 if self.negative_rewards else 0.0

    def __post_init__(self) -> None:
        for name in ("masked", "failed", "omitted", "stalled", "uniform", "truncated", "leaked"):
            share = getattr(self, name)
            if not 0.0 <= share <= 1.0:
                msg = f"--{name} must be a share between 0 and 1, got {share}"
                raise ConfigError(msg)
        if self.masked + self.failed + self.omitted > 1.0:
            msg = "--masked + --failed + --omitted must not exceed 1"
            raise ConfigError(msg)
        if self.stall_after <= 0:
            msg = f"--stall-after must be a positive number of seconds, got {self.stall_after}"
            raise ConfigError(msg)
        if self.rate <= 0 or not self.agents:
            msg = "--rate must be positive and at least one agent given"
            raise ConfigError(msg)
        if self.group_size < 1:
            msg = f"--group-size must be at least 1, got {self.group_size}"
            raise ConfigError(msg)


_GOLDEN = (5**0.5 - 1) / 2
"""The golden ratio's fractional part: its multiples modulo 1 spread over [0, 1) as evenly as any can."""


@dataclass(frozen=True, slots=True)
class _Phase:
    """The shares and scoring of one phase of the run: before the scenario's cause, or after."""

    failed: float
    truncated: float
    zeroed: float  # share of unmasked rollouts that score 0 anyway (infrastructure leaking into scores)
    scale: float  # every reward multiplied by this (the policy getting worse)
    easy: float  # share of tasks whose members all score the highest reward
    hard: float = 0.0  # share of tasks whose members all score the lowest reward
    hollow: float = 0.0  # share of rollouts with a hollow turn (every completed rollout has a trajectory)
    length: float = 1.0  # answers this many times longer
    broken: float = 0.0  # share of rollouts that fail on every attempt
    terminal: float = 0.0  # share of rollouts that fail terminally, on their first attempt (never retried)
    blocking: float = 0.0  # seconds the event loop is blocked, every second
    leaked: float = 0.0  # share of rollouts whose session release fails
    slowdown: float = 1.0  # rollouts take this many times longer (under stall_after)


def _phases(config: DemoConfig) -> tuple[_Phase, _Phase]:
    before = _Phase(config.failed, config.truncated, 0.0, 1.0, config.uniform, leaked=config.leaked)
    room = 1.0 - config.masked - config.omitted  # failures beyond it would crowd out the other shares
    after = {
        "infrastructure": replace(before, failed=min(config.failed + 0.2, room), zeroed=0.4),
        "truncation": replace(before, truncated=0.5),
        "policy": replace(before, scale=0.4),
        "contaminated": replace(before, terminal=0.25),
        "too_hard": replace(before, easy=0.0, hard=0.8),
        "too_easy": replace(before, easy=0.8),
        "hollow": replace(before, hollow=0.3),
        "length_drift": replace(before, length=3.0),
        "retries_exhausted": replace(before, broken=0.15),
        "loop_lag": replace(before, blocking=0.3),
        "cleanup_leak": replace(before, leaked=0.3),
        "slow_rollouts": replace(before, slowdown=3.0),
    }.get(config.scenario or "healthy", before)
    return before, after


def _response(rng: random.Random, config: DemoConfig, truncated: bool, length: float) -> dict[str, Any]:
    """A Responses API object as NeMo Gym's verify responses carry it: status, usage, incomplete_details."""
    longest = min(int(config.max_output_tokens // 2 * length), config.max_output_tokens)
    output = config.max_output_tokens if truncated else rng.randint(min(100, longest), longest)
    prompt = rng.randint(300, 1500)
    return {
        "status": "incomplete" if truncated else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if truncated else None,
        "usage": {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": rng.randint(0, prompt // 2)},
            "output_tokens": output,
            "output_tokens_details": {"reasoning_tokens": int(output * rng.uniform(0.1, 0.5))},
            "total_tokens": prompt + output,
        },
    }


async def _one_rollout(  # noqa: PLR0917 - one call site
    telemetry: RolloutTelemetry,
    config: DemoConfig,
    rng: random.Random,
    member: tuple[str, int, int, float | None],
    phase: _Phase,
    context: RolloutContext,
    broken: bool,
    write_row: Callable[[dict[str, Any]], None],
) -> bool:
    """One attempt of a rollout, in ``context``; return whether it failed (NeMo Gym would retry it). A
    ``broken`` rollout fails on every attempt. Its row is written to the run's output (``write_row``) once it
    has an outcome."""
    agent, task, index, common = member  # common: the reward every member of an easy or hard task scores
    attempt = context.attempt or 0
    draw = rng.random()
    # A slow model server makes rollouts longer, not hung: they stay under stall_after.
    seconds = rng.uniform(0.01, config.max_rollout_seconds) * phase.slowdown
    seconds = min(seconds, 0.9 * config.stall_after) if phase.slowdown > 1.0 else seconds
    low = config.lowest_reward
    # Spread evenly over [low, 1] along the agent's rollouts (a golden-ratio sequence), not drawn at random: a
    # window of a few rollouts has the run's mean, so an alert on the reward shows the scenario's cause, never
    # a machine too busy to fit many rollouts in a window.
    position = ((task * config.group_size + index) * _GOLDEN) % 1.0
    reward = round((low + (1.0 - low) * position) * phase.scale, 3)
    truncated = rng.random() < phase.truncated
    if common is not None:
        reward = common
    if truncated or rng.random() < phase.zeroed:
        reward = 0.0
    stalls = rng.random() < config.stalled
    leaks = rng.random() < phase.leaked
    async with context as rollout:
        try:
            rollout.stage(failure_kinds.ADMISSION)  # waiting for its environment's session
            await asyncio.sleep(0.05 * seconds)
            rollout.stage(failure_kinds.AGENT)
            for _ in range(2):  # the agent's turn, alive between its model calls
                await asyncio.sleep(0.325 * seconds)
                rollout.heartbeat()
            rollout.stage(failure_kinds.VERIFICATION)
            # A hung judge: in flight past stall_after, so the stall series, /rollouts and the alert show it.
            await asyncio.sleep(config.stall_after + 2.0 if stalls else 0.3 * seconds)
        except asyncio.CancelledError:  # the demo stops: the rollout is left as NeMo Gym leaves it
            rollout.abandon()
            raise
        failed = broken or draw < phase.failed
        if attempt == 0 and rng.random() < phase.terminal:  # a failure the environment says not to retry
            crashed = "simulated: the sandbox crashed"
            rollout.fail(failure_kinds.ENVIRONMENT_SERVER_FAILED, reason=crashed, terminal=True)
            failed = False
        else:
            _outcome(rollout, rng, config, phase, draw, (broken, reward, truncated, seconds))
        write_row({"agent": agent, "task_index": task, "rollout_index": index, "attempt": attempt})
        # Its environment session is released after the outcome (the rollout is terminal meanwhile).
        async with rollout.cleanup() as cleanup:
            await asyncio.sleep(0.02 * config.max_rollout_seconds)
            if leaks:
                cleanup.fail(failure_kinds.SESSION_RELEASE_FAILED)
    return failed


async def _collect(  # noqa: PLR0917 - one call site
    telemetry: RolloutTelemetry,
    config: DemoConfig,
    rng: random.Random,
    member: tuple[str, int, int, float | None],
    phase: _Phase,
    limit: asyncio.Semaphore,
    write_row: Callable[[dict[str, Any]], None],
) -> None:
    """One rollout: offered now, admitted once a slot of the collector's concurrency (``limit``) is free (its
    admission wait), then attempted until an attempt does not fail, as NeMo Gym retries."""
    broken = rng.random() < phase.broken
    agent, task, index, _ = member
    context = telemetry.offer(agent, task_index=task, rollout_index=index, attempt=0)
    async with limit:
        for attempt in range(DEFAULT_MAX_ATTEMPTS):
            if attempt:  # a retry holds the slot: made to be entered at once
                context = telemetry.rollout(agent, task_index=task, rollout_index=index, attempt=attempt)
            if not await _one_rollout(telemetry, config, rng, member, phase, context, broken, write_row):
                break


def _outcome(  # noqa: PLR0917 - one call site
    rollout: RolloutContext,
    rng: random.Random,
    config: DemoConfig,
    phase: _Phase,
    draw: float,
    drawn: tuple[bool, float, bool, float],
) -> None:
    """Record the rollout's outcome: failed (at the stage it is at, or at seed for a broken task), omitted,
    masked or completed with a reward."""
    broken, reward, truncated, seconds = drawn
    if broken:
        rollout.fail(
            failure_kinds.SESSION_LOST,
            reason="simulated: the task's sandbox image is gone",
            stage=failure_kinds.SEED,
            delivery="not_sent",
        )
    elif draw < phase.failed:
        kind = rng.choice(_FAIL_KINDS)
        reason = f"simulated failure after {seconds:.2f}s"
        rollout.fail(kind, reason=reason, delivery=_DELIVERY.get(kind, "not_sent"))
    elif draw < phase.failed + config.omitted:
        rollout.omit(rng.choice(_OMIT_KINDS), reason="simulated omission", terminal=True)
    elif draw < phase.failed + config.omitted + config.masked:
        kind = rng.choice(_MASK_KINDS)
        rollout.complete({"reward": 0.0, "mask_sample": True, "failure_kind": kind})
    else:
        verify: dict[str, Any] = {
            "reward": reward,
            "response": _response(rng, config, truncated, phase.length),
        }
        # The trajectory, as NeMo Gym writes it: one turn, hollow or not (every health panel has data).
        answer = "" if phase.hollow and rng.random() < phase.hollow else "the answer"
        verify["ng_trajectory"] = {"turns": [{"turn_no": 1, "answer": answer}], "model_calls": []}
        rollout.complete(verify)


def _member(number: int, config: DemoConfig) -> tuple[str, int, int]:
    """The ``number``-th rollout of the run: (agent, task index, rollout index). A group's members start one
    after another: agent and task by block, rollout index within it."""
    block, index = divmod(number, config.group_size)
    return config.agents[block % len(config.agents)], block // len(config.agents), index


def _expect(telemetry: RolloutTelemetry, config: DemoConfig, numbers: range) -> None:
    """Declare the rollouts ``numbers`` of the run as expected work (NeMo Gym's materialized inputs)."""
    by_agent: dict[str, list[tuple[int, int]]] = {}
    for number in numbers:
        agent, task, index = _member(number, config)
        by_agent.setdefault(agent, []).append((task, index))
    for agent, identities in by_agent.items():
        telemetry.expect(agent, identities=identities)


def _declare(telemetry: RolloutTelemetry, config: DemoConfig) -> int | None:
    """Declare the run's agents, groups, reward range and (with a duration) its expected work; return how many
    rollouts the run will start (``None``: until stopped)."""
    # Counters exist from 0, so increase() sees every rollout; the rewards' range: their histogram, and
    # uniform groups at either end (easy tasks score the highest).
    telemetry.expect(*config.agents, group_size=config.group_size, reward_range=(config.lowest_reward, 1.0))
    # With a duration, the run's rollouts are known before the first starts; without, task by task.
    planned = math.ceil(config.rate * config.duration) if config.duration > 0 else None
    if planned is not None:
        _expect(telemetry, config, range(planned))
    return planned


class _Output:
    """The run's output: each rollout's row written as NeMo Gym appends it to its results file, in a timed
    output write (``telemetry.output_write()``), then discarded."""

    def __init__(self, telemetry: RolloutTelemetry) -> None:
        self._telemetry = telemetry
        self._sink = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - closed by close()

    def write(self, row: dict[str, Any]) -> None:
        line = json.dumps(row) + "\n"
        with self._telemetry.output_write() as write:
            self._sink.write(line)
            self._sink.flush()
            write.wrote(len(line))

    def close(self) -> None:
        self._sink.close()


async def _block_loop(
    phase: _Phase, after: float, block: Callable[[float], None], rng: random.Random
) -> None:
    """From ``after`` seconds on, block the event loop for ``phase.blocking`` seconds a second on average:
    work on the loop that does not await (``block``), at moments spread at random, as such work comes, so
    that it falls at any point of any other timer's wait."""
    await asyncio.sleep(after)
    while True:
        block(phase.blocking)
        await asyncio.sleep(rng.uniform(0.5, 1.5))


async def run_demo(
    telemetry: RolloutTelemetry,
    config: DemoConfig,
    *,
    on_tick: Callable[[], None] | None = None,
    tick_seconds: float = 5.0,
    block: Callable[[float], None] = time.sleep,
) -> int:
    """Run the simulated collection; return how many rollouts were started (their retries aside). ``block``
    holds the event loop for some seconds (the ``loop_lag`` scenario): on the demo's ``ScenarioLoop``, its
    ``block``, which counts them in the scenario's time."""
    rng = random.Random(config.seed)
    planned = _declare(telemetry, config)
    before, after = _phases(config)
    common: float | None = None
    loop = asyncio.get_running_loop()
    start = loop.time()
    next_tick = start + tick_seconds
    interval = 1.0 / config.rate
    limit = asyncio.Semaphore(config.concurrency)
    tasks: set[asyncio.Task[None]] = set()
    started = 0
    blocker = (
        asyncio.create_task(_block_loop(after, config.drop_after, block, random.Random(rng.random())))
        if after.blocking
        else None
    )
    output = _Output(telemetry)

    try:
        while planned is None or started < planned:
            agent, task_index, index = _member(started, config)
            phase = before if loop.time() - start < config.drop_after else after
            if index == 0:
                draw = rng.random()
                hard = draw < phase.easy + phase.hard
                common = 1.0 if draw < phase.easy else config.lowest_reward if hard else None
                if planned is None:
                    _expect(telemetry, config, range(started, started + config.group_size))
            member = (agent, task_index, index, common)
            task = asyncio.create_task(_collect(telemetry, config, rng, member, phase, limit, output.write))
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
    finally:  # stopped (cancelled): the rollouts in flight are abandoned, as NeMo Gym leaves them
        if blocker is not None:
            blocker.cancel()
        for task in list(tasks):
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        output.close()
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
