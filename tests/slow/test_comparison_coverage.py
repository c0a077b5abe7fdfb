"""The paired comparison's coverage on simulated pairs of runs: about 95% where the runs do not differ."""

from __future__ import annotations

import math
import random

from rollout_telemetry._views.comparison import compare_agent
from rollout_telemetry._views.intervals import Z95

RUNS = 2000
TASKS = 30
REPEATS = 8


def test_the_paired_interval_covers_a_null_difference_95_times_in_100() -> None:
    """2,000 pairs of runs on the same 30 tasks (solve rates uniform in [0.05, 0.95], the same in A and B: a
    true difference of 0), 8 repeats each: the paired, task-clustered 95% interval of B - A holds 0 in 95% +-
    2% of them; the unpaired interval over the 240 rewards of each run as independent is printed beside it,
    wider: the spread between tasks, which pairing cancels, is in it."""
    rng = random.Random(623)
    paired = unpaired = 0
    paired_width = unpaired_width = 0.0
    for _ in range(RUNS):
        rates = [rng.uniform(0.05, 0.95) for _ in range(TASKS)]
        run_a = {
            task: [float(rng.random() < rate) for _ in range(REPEATS)] for task, rate in enumerate(rates)
        }
        run_b = {
            task: [float(rng.random() < rate) for _ in range(REPEATS)] for task, rate in enumerate(rates)
        }
        ci = compare_agent("agent", run_a, run_b, None)["difference_ci95"]
        paired += ci["low"] <= 0.0 <= ci["high"]
        paired_width += (ci["high"] - ci["low"]) / 2 / RUNS
        # Unpaired and unclustered: two proportions of TASKS * REPEATS independent rewards each.
        n = TASKS * REPEATS
        mean_a = sum(map(sum, run_a.values())) / n
        mean_b = sum(map(sum, run_b.values())) / n
        half = Z95 * math.sqrt(mean_a * (1 - mean_a) / n + mean_b * (1 - mean_b) / n)
        unpaired += abs(mean_b - mean_a) <= half
        unpaired_width += half / RUNS
    print(
        f"coverage of 0 in {RUNS} pairs of runs: paired {paired / RUNS:.1%} (mean half-width "
        f"{paired_width:.3f}), unpaired {unpaired / RUNS:.1%} (mean half-width {unpaired_width:.3f})"
    )
    assert 0.93 <= paired / RUNS <= 0.97
    assert unpaired_width > paired_width  # the tasks' spread, which pairing cancels, widens it
