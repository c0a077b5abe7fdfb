"""Make the docs' pictures from a real NeMo Gym run: the HTML report and the live page, in headless Chromium.

    .venv/bin/python -m docs.screenshots   # needs scripts/setup-dev: NeMo Gym's venv and chromium

Runs tests/gym's collection (NeMo Gym 0.7.0's servers with this project's test environment, the fake model on
its troubled plan: some first tries fail, some rollouts are masked) under ``rollout-telemetry gym --html``,
photographs the live page at ``/`` while Gym runs (``docs/images/gym-live.png``) and the HTML report written
at the end (``docs/images/gym-report.png``): the pictures are what the code draws, by the same path a user's
browser takes. A development tool: nothing in the ``rollout_telemetry`` package imports it.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from docs.browser import chromium, photograph
from tests.gym.harness import TEST_AGENT, TEST_TASKS, TROUBLED, FakeModel, GymServers, Watch, gym_venv
from tests.support import samples

__all__ = ["IMAGES", "LIVE", "REPORT", "main"]

IMAGES = Path(__file__).parent / "images"
REPORT = IMAGES / "gym-report.png"
LIVE = IMAGES / "gym-live.png"


def _completed(watch: Watch) -> float:
    """Rollouts counted in the latest scrape of the watched run."""
    if not watch.scrapes:
        return 0.0
    counted = samples(watch.scrapes[-1][2])
    return sum(
        v for (name, _), v in counted.items() if name in ("rollout_completed_total", "rollout_failed_total")
    )


def main() -> int:
    """Run the collection and write both pictures; the exit status is Gym's watched run's."""
    IMAGES.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        workdir, html = Path(folder) / "gym", Path(folder) / "report.html"
        workdir.mkdir()
        with FakeModel(workdir / "model.log") as model, GymServers(gym_venv(), workdir, model) as gym:
            model.plan(TROUBLED, delay=0.5)
            # The output named as a user would, in the work directory: the page's title is the path given.
            command = gym.eval_command(
                TEST_AGENT, TEST_TASKS, Path("rollouts.jsonl"), repeats=4, concurrency=2
            )
            watch = Watch(command, workdir, gym.environ(), flags=("--html", str(html))).start()
            with chromium() as browser:
                deadline = time.monotonic() + 300
                while _completed(watch) < 14 and time.monotonic() < deadline:  # of 24: past the middle
                    time.sleep(0.2)
                photograph(browser, watch.url.removesuffix("/metrics") + "/", LIVE)
                status = watch.wait()
                if status:
                    print(watch.stderr.decode(errors="replace")[-3000:], file=sys.stderr)
                    return status
                photograph(browser, html.as_uri(), REPORT)
    for picture in (LIVE, REPORT):
        print(f"wrote {picture}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
