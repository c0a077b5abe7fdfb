"""The lag from NeMo Gym writing a rollout row to that row counting in ``/metrics``, on a real Gym run.

Starts the real NeMo Gym 0.7.0 (its venv from ``scripts/setup-gym``, its servers, the fake policy model of
``tests/gym``) and runs its collection under ``rollout-telemetry gym`` once per poll interval asked for.
Meanwhile one thread stats the output file and its failures sidecar every millisecond and stamps each new
line the moment it is on disk, and another scrapes ``/metrics`` every 10 ms and stamps the moment the count
of rollout outcomes (completed + failed) first reaches each line's number. The lag of row n is the second
stamp minus the first. Prints p50, p90 and the maximum, in ms and as a share of the poll interval (the
follower reads the files once per interval, so the lag is expected between 0 and one interval, plus the
scrape's 10 ms resolution).

    .venv/bin/python benchmarks/gym_lag.py [--poll-interval 0.25 0.05] [--repeats 8]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.gym.harness import TEST_AGENT, TEST_TASKS, FakeModel, GymServers, Watch, gym_venv
from tests.support import samples


class LineStamps:
    """Stamps each complete line appended to the given files, polling their sizes every millisecond."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths = paths
        self.stamps: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> LineStamps:
        self._thread.start()
        return self

    def _run(self) -> None:
        offsets = dict.fromkeys(self.paths, 0)
        while not self._stop.is_set():
            for path in self.paths:
                try:
                    with path.open("rb") as handle:
                        handle.seek(offsets[path])
                        data = handle.read()
                except OSError:
                    continue
                complete = data.rfind(b"\n") + 1
                if complete:
                    now = time.monotonic()
                    self.stamps.extend([now] * data[:complete].count(b"\n"))
                    offsets[path] += complete
            time.sleep(0.001)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


_OUTCOMES = ("rollout_completed_total", "rollout_failed_total")


def _outcomes(text: str) -> float:
    return sum(value for (name, _), value in samples(text).items() if name in _OUTCOMES)


def measure(gym: GymServers, model: FakeModel, workdir: Path, poll: float, repeats: int) -> list[float]:
    """One collection under the watch at this poll interval; the lag of each row, in seconds."""
    model.plan({"humidity": ["fail", "call"], "tonight": ["answer", "call"]}, delay=0.1)
    output = workdir / f"poll-{poll}" / "rollouts.jsonl"
    output.parent.mkdir(parents=True)
    command = gym.eval_command(TEST_AGENT, TEST_TASKS, output, repeats=repeats, concurrency=4)
    with LineStamps([output, output.with_name("rollouts_failures.jsonl")]) as written:
        watch = Watch(command, gym.workdir, gym.environ(), scrape_every=0.01, poll_interval=poll).start()
        status = watch.wait(timeout=600)
        time.sleep(0.05)
    if status != 0:
        sys.exit(f"gym_lag: the watched Gym run failed ({status}): {watch.stderr.decode()[-500:]}")
    seen: list[float] = []
    for stamp, _, text in watch.scrapes:
        count = int(_outcomes(text))
        while len(seen) < count:
            seen.append(stamp)
    rows = min(len(seen), len(written.stamps))
    if rows < len(written.stamps):
        sys.exit(f"gym_lag: {len(written.stamps)} rows written, {len(seen)} seen in the last scrape")
    return [seen[i] - written.stamps[i] for i in range(rows)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--poll-interval", type=float, nargs="+", default=[0.25, 0.05])
    parser.add_argument("--repeats", type=int, default=8, help="rollouts per task (6 tasks; default: 8)")
    args = parser.parse_args()
    venv = gym_venv()
    with tempfile.TemporaryDirectory() as folder:
        workdir = Path(folder)
        with FakeModel(workdir / "model.log") as model, GymServers(venv, workdir, model) as gym:
            print(f"NeMo Gym 0.7.0, {6 * args.repeats} rollouts per run, concurrency 4")
            for poll in args.poll_interval:
                lags = sorted(measure(gym, model, workdir, poll, args.repeats))
                p50, p90, worst = statistics.median(lags), lags[int(0.9 * (len(lags) - 1))], lags[-1]
                print(
                    f"poll {poll * 1000:.0f} ms, {len(lags)} rows: lag p50 {p50 * 1000:.0f} ms "
                    f"({p50 / poll:.2f}x the interval), p90 {p90 * 1000:.0f} ms ({p90 / poll:.2f}x), "
                    f"max {worst * 1000:.0f} ms ({worst / poll:.2f}x)"
                )


if __name__ == "__main__":
    main()
