"""The clustered interval's coverage on simulated runs where tasks repeat: about 95%, where intervals that
take the repeats as independent rewards cover far less."""

from __future__ import annotations

import random

from rollout_telemetry._views.intervals import interval

RUNS = 2000
TASKS = 30
REPEATS = 8


def test_clustered_intervals_cover_the_true_mean_95_times_in_100() -> None:
    """2,000 runs of 30 tasks drawn with solve rates uniform in [0.05, 0.95] (true mean 0.5), 8 repeats each:
    the task-clustered 95% interval holds 0.5 in 95% +- 2% of the runs; Wilson's over the 240 rewards taken
    as independent (the interval before) in less than 85%."""
    rng = random.Random(62)
    clustered = independent = 0
    for _ in range(RUNS):
        rewards: list[float] = []
        tasks: list[int] = []
        for task in range(TASKS):
            rate = rng.uniform(0.05, 0.95)
            rewards += [float(rng.random() < rate) for _ in range(REPEATS)]
            tasks += [task] * REPEATS
        by_task, alone = interval(rewards, tasks), interval(rewards)
        assert by_task is not None
        assert alone is not None
        clustered += by_task.low <= 0.5 <= by_task.high
        independent += alone.low <= 0.5 <= alone.high
    print(f"coverage of {RUNS} runs: clustered {clustered / RUNS:.1%}, independent {independent / RUNS:.1%}")
    assert 0.93 <= clustered / RUNS <= 0.97
    assert independent / RUNS < 0.85
