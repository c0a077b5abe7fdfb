"""The demo's loop keeps the scenario's time on the wall clock: a rollout lasts what it was drawn, however
busy the machine (real time: the e2e tier)."""

from __future__ import annotations

import asyncio
import time

import pytest

from rollout_telemetry._cli.scenario_clock import ScenarioLoop


def _hog() -> int:
    """Work that holds the loop (tens of milliseconds on any machine), as a busy machine's late wake does."""
    return sum(i * i for i in range(300_000))


async def _timed_sleeps(loop: asyncio.AbstractEventLoop, seconds: float, count: int) -> list[float]:
    durations = []
    for _ in range(count):
        began = loop.time()
        await asyncio.sleep(seconds)
        durations.append(loop.time() - began)
    return durations


@pytest.mark.parametrize("make", [ScenarioLoop, asyncio.new_event_loop], ids=["scenario", "wall"])
def test_a_sleep_lasts_its_own_time_while_other_work_holds_the_loop(
    make: type[asyncio.AbstractEventLoop],
) -> None:
    """Beside a task that holds the loop between its sleeps, each 10 ms sleep lasts exactly 10 ms on the
    scenario's loop, where a loop on the wall clock stretches it."""
    loop = make()

    async def main() -> list[float]:
        sleeper = asyncio.create_task(_timed_sleeps(loop, 0.01, 5))
        while not sleeper.done():
            _hog()
            await asyncio.sleep(0)
        return await sleeper

    try:
        durations = loop.run_until_complete(main())
    finally:
        loop.close()
    if isinstance(loop, ScenarioLoop):
        assert durations == pytest.approx([0.01] * 5, abs=1e-9)
    else:  # the control: the same work stretches sleeps on the wall clock
        assert max(durations) > 0.012


@pytest.mark.parametrize("late", [0.0, 0.03], ids=["at-once", "machine-late"])
def test_what_the_scenario_blocks_counts_in_its_time(late: float) -> None:
    """block() holds the loop and moves the scenario's time by as much: a timer due meanwhile runs late by
    the rest of the block, as the loop_lag scenario's lag sampler must see; and at that time still when the
    machine gets to the loop only after the next timer's time has passed on the wall clock."""
    loop = ScenarioLoop()
    fired: list[float] = []

    async def main() -> None:
        start = loop.time()
        loop.call_at(start + 0.01, lambda: fired.append(loop.time() - start))
        loop.block(0.05)
        time.sleep(late)  # the machine withholds the loop: no scenario time (a late wake)
        await asyncio.sleep(0.02)

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    assert fired == [pytest.approx(0.05, abs=1e-9)]
