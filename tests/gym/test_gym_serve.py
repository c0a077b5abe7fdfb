"""NeMo Gym collecting with servers of its own under the watch: ``gym eval run`` without ``--no-serve`` starts
its servers and its Ray cluster itself, so ending the watch must end all of them.

A module of its own (not tests/gym/test_gym_run.py's servers): its Gym starts and ends with the test, and
runs on another worker than that module's.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from rollout_telemetry._sources.gym_process import GRACE
from tests.gym.harness import (
    RAY_STARTS,
    TEST_AGENT,
    FakeModel,
    Watch,
    descendants,
    gym_environ,
    prepare_workdir,
    processes_in,
    ray_did_not_start,
)
from tests.gym.test_gym_run import _wait_for_outcomes
from tests.support import alive, free_port, own_ray_folder, wait_until

# Gym's servers and its Ray start within the run: about a minute idle, several beside a second CI job
# (GYM_START, for every start when its Ray did not start); the rest takes a minute or two more.
GYM_START = 600.0
# Alone: Ray waits 30 s for its node to start (a constant of its own), and beside the suite's other Ray and
# Gym starts on a machine a second CI job shares, this Gym's Ray timed out three times in a row.
pytestmark = [pytest.mark.timeout(GYM_START + 300), pytest.mark.alone]


def test_no_process_of_a_serving_gym_outlives_its_watch(
    venv: Path, gym_model: FakeModel, tmp_path: Path
) -> None:
    """The watch of a Gym that serves its own environment, ended mid-run by SIGKILL (no handler of its own
    runs: its guard stops Gym's group): Gym, its servers and every process of its Ray cluster (the daemons
    that end reparented to PID 1 among them) end too. A hang-up is passed on by the same code as for a Gym
    without servers (tests/gym/test_gym_run.py)."""
    gym_model.plan({}, delay=0.2)
    deadline = time.monotonic() + GYM_START
    for attempt in range(1, RAY_STARTS + 1):
        workdir = tmp_path / f"attempt-{attempt}"
        workdir.mkdir()
        prepare_workdir(workdir, venv)
        with own_ray_folder() as ray_folder, contextlib.ExitStack() as cleanup:
            command = [
                str(venv / "bin" / "gym"), "eval", "run",
                "--resources-server", "rt_weather", "--model-type", "openai_model", "--model", "fake",
                "--model-url", gym_model.url, "--model-api-key", "dummy",
                # Serving, Gym runs a split of the environment's datasets, never an --input of the user's.
                "--agent", TEST_AGENT, "--split", "validation", "--output", str(workdir / "rollouts.jsonl"),
                "--num-repeats", "16", "--concurrency", "2",
                "+skip_venv_if_present=true", f"++head_server.port={free_port()}",
            ]  # fmt: skip
            cleanup.callback(_kill_all, ray_folder)  # a failed test leaves nothing running either
            watch = Watch(command, workdir, gym_environ(venv, ray_folder)).start()
            assert watch.process is not None
            cleanup.callback(_end, watch)
            # Wide: Gym's module's servers took 200 s to start beside a busy neighbour, this Gym starts its
            # own. Again if its Ray did not start (as tests/gym/harness.py's servers): a new Ray may.
            try:
                _wait_for_outcomes(
                    watch, 2, timeout=max(deadline - time.monotonic(), 60.0), stop=ray_did_not_start
                )
            except AssertionError as exc:
                if attempt < RAY_STARTS and ray_did_not_start(watch.output_tail(200)):
                    print(f"the serving Gym's Ray did not start, starting again: {exc}", file=sys.stderr)
                    continue
                raise
            _no_process_outlives(watch, ray_folder)
            return


def _no_process_outlives(watch: Watch, ray_folder: str) -> None:
    """SIGKILL the watch of a serving Gym mid-run; every process it started (Gym's Ray's daemons too) ends."""
    assert watch.process is not None
    started = set(descendants(watch.process.pid)) | set(processes_in(ray_folder))
    started.discard(watch.process.pid)
    commands = {pid: _command(pid) for pid in started}
    assert any("raylet" in line for line in commands.values()), commands  # Gym started its own Ray
    assert sum("app.py" in line for line in commands.values()) >= 3, commands  # and its servers
    watch.process.send_signal(signal.SIGKILL)
    watch.wait(timeout=60)
    # After SIGKILL the guard gives Gym GRACE seconds to end on SIGTERM before it kills Gym's group; Ray's
    # daemons then end on their own once their parent is gone.
    wait_until(
        lambda: not processes_in(ray_folder) and not any(alive(pid) for pid in started),
        timeout=GRACE + 60,
        what="every process of the serving Gym to end",
    )


def _end(watch: Watch) -> None:
    """Stop a watch still running (a first attempt given up on, a failed test)."""
    if watch.process is not None and watch.process.poll() is None:
        watch.process.kill()
        watch.process.wait(timeout=60)


def _command(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    return ""


def _kill_all(ray_folder: str) -> None:
    for pid in processes_in(ray_folder):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
