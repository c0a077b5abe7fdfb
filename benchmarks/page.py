"""The HTML report of a million rollouts, and the live page's history at 500 agents.

1. Writes a run of ``--rollouts`` rows (default 1,000,000) in NeMo Gym's shape, small rows (reward, mask,
   failure kind, identity: the page's size depends on the points drawn, not on the rows' payloads) over
   ``--agents`` agents (default 8), with a masked share and failures that change along the run; runs
   ``rollout-telemetry report RUN --format html`` as a process; prints the file's size and how long
   headless Chromium takes to load and render it (navigation start to the load event, and to the first
   paint after it), the median of ``--loads`` loads. Goals: under 2 MB, rendered in under 2 s. Then the
   same for a tenth of the rollouts over 500 agents (the report draws every agent's charts).
2. Fills a live page's story (``RunStory``, as the endpoint's sampler does) with 500 agents all changing at
   every instant, over three times the instants it keeps, and measures the memory its points hold
   (tracemalloc, the allocations made by the story's module) against ``memory_bound``; then renders the
   live page's content of those 500 agents (the worst ten charted) and prints its size and time.

    .venv/bin/python -m benchmarks.page [--rollouts 1000000] [--agents 8] [--loads 5]

``record()`` is untouched by the page (its sampler reads snapshots on a thread of its own); the figure that
shows it is ``benchmarks/record_against.py --rev <the commit before the page> --instructions``.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from docs.browser import chromium
from rollout_telemetry._facade.telemetry import RolloutTelemetry
from rollout_telemetry._store.coverage import CoverageSnapshot
from rollout_telemetry._views import story as story_module
from rollout_telemetry._views.page import Page
from rollout_telemetry._views.run_report import build_report
from rollout_telemetry._views.story import MOST_INSTANTS, RunStory


def write_run(path: Path, rollouts: int, agents: int) -> int:
    """A run's main file: per agent, masked rows and failures whose share rises and falls along the run."""
    with path.open("w", encoding="utf-8") as out:
        for i in range(rollouts):
            agent = i % agents
            phase = (i * 4 // rollouts) % 2  # a trouble in the second and fourth quarters
            row: dict[str, object] = {
                "_ng_environment_server": f"agent_{agent}",
                "_ng_task_index": i // agents // 4,
                "_ng_rollout_index": i // agents % 4,
            }
            if phase and i % 11 == 0:
                row |= {"reward": 0.0, "mask_sample": True, "failure_kind": "judge_unavailable"}
            else:
                row |= {"reward": float((i * 7 + agent) % 10 < 6 + agent % 3), "mask_sample": False}
            out.write(json.dumps(row, separators=(",", ":")) + "\n")
    return path.stat().st_size


def report_page(rollouts: int, agents: int, loads: int, *, goals: bool = True) -> None:
    with tempfile.TemporaryDirectory() as folder:
        run, page = Path(folder) / "run.jsonl", Path(folder) / "run.html"
        size = write_run(run, rollouts, agents)
        started = time.perf_counter()
        html = subprocess.run(
            [sys.executable, "-m", "rollout_telemetry", "report", str(run), "--format", "html"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        took = time.perf_counter() - started
        page.write_text(html, encoding="utf-8")
        print(f"run of {rollouts:,} rollouts over {agents} agents: {size / 1e6:.0f} MB of JSON Lines")
        goal = " (goal < 2 MB)" if goals else ""
        print(f"  report --format html: {took:.1f} s; the page: {len(html.encode()) / 1e6:.2f} MB{goal}")
        loaded, painted = [], []
        with chromium() as browser:
            for _ in range(loads):
                tab = browser.new_page(viewport={"width": 1280, "height": 900})
                tab.goto(page.as_uri(), wait_until="load")
                # Navigation start to the load event; then to a frame painted after it (two animation
                # frames: the layout and paint of what the load left to do).
                tab.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
                timing = tab.evaluate(
                    "() => { const n = performance.getEntriesByType('navigation')[0];"
                    " return [n.loadEventEnd, performance.now()]; }"
                )
                loaded.append(timing[0] / 1000)
                painted.append(timing[1] / 1000)
                tab.close()
        load, paint = statistics.median(loaded), statistics.median(painted)
        goal = "; goal < 2 s" if goals else ""
        print(f"  Chromium: loaded in {load:.2f} s, rendered in {paint:.2f} s (median of {loads}{goal})")


def live_history(agents: int) -> None:
    telemetry = RolloutTelemetry(runtime_metrics=False, max_agents=agents * 2)
    story = RunStory(telemetry.snapshot, "seconds")
    names = [f"agent_{i:03d}" for i in range(agents)]
    for name in names:
        telemetry.record(name, {"reward": 1.0})
    tracemalloc.start()
    try:
        for step in range(MOST_INSTANTS * 3):
            for index, name in enumerate(names):
                masked = (step + index) % 9 == 0
                telemetry.record(
                    name, {"reward": float(step % 2), "mask_sample": masked, "failure_kind": "judge_failed"}
                )
            story.tick()
        only = [tracemalloc.Filter(True, story_module.__file__)]
        held = sum(trace.size for trace in tracemalloc.take_snapshot().filter_traces(only).traces)
    finally:
        tracemalloc.stop()
    bound = story.memory_bound(agents)
    snapshot = telemetry.snapshot()
    most = max(len(story.points(snapshot, name)) for name in names)
    print(f"live page history, {agents} agents changing at each of {MOST_INSTANTS * 3} instants:")
    print(
        f"  {most} points per agent at most (bound {MOST_INSTANTS} kept + the current one); "
        f"{held / 1e6:.2f} MB held, bound {bound / 1e6:.2f} MB ({held / bound:.2f} of it)"
    )
    started = time.perf_counter()
    report = build_report(snapshot, CoverageSnapshot(agents=()))
    page = Page(report, functools.partial(story.points, snapshot), title="live", x_axis="seconds")
    main = page.main(frozenset())
    took = time.perf_counter() - started
    size = len(main.encode()) / 1e6
    print(f"  one update of the live page (?part=main), ten charted: {size:.2f} MB in {took * 1000:.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=1_000_000)
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--loads", type=int, default=5)
    args = parser.parse_args()
    report_page(args.rollouts, args.agents, args.loads)
    report_page(args.rollouts // 10, 500, args.loads, goals=False)  # every agent's charts in the file
    live_history(500)


if __name__ == "__main__":
    main()
