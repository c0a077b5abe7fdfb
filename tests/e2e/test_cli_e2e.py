"""The command line as a newcomer meets it, each as a real process: --version, Ctrl-C, serve PATH."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rollout_telemetry._sources.follow import RunFiles
from tests.e2e.processes import Exporter
from tests.support import wait_until

COMMAND = [sys.executable, "-m", "rollout_telemetry"]


def test_version_prints_the_installed_version() -> None:
    """--version prints the program and the installed distribution's version, exit 0."""
    from importlib.metadata import version

    result = subprocess.run([*COMMAND, "--version"], capture_output=True, text=True, timeout=30, check=False)
    assert (result.returncode, result.stdout, result.stderr) == (
        0,
        f"rollout-telemetry {version('rollout-telemetry')}\n",
        "",
    )


def _holds_open(pid: int, path: Path) -> bool:
    """Whether process ``pid`` has ``path`` open (it is reading it)."""
    try:
        return any(os.readlink(f"/proc/{pid}/fd/{fd}") == str(path) for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return False


@pytest.mark.parametrize("terminal", [False, True], ids=["piped", "terminal"])
def test_ctrl_c_in_report_exits_130_quietly(tmp_path: Path, terminal: bool) -> None:
    """Ctrl-C while report reads a large run, piped or on a terminal (reading in a thread under a progress
    bar): exit 130, no KeyboardInterrupt traceback, nothing on stdout."""
    main = tmp_path / "run.jsonl"
    with main.open("w") as rows:
        for task in range(1_000):
            row = {
                "reward": 1.0,
                "_ng_environment_server": "a",
                "_ng_task_index": task,
                "_ng_rollout_index": 0,
            }
            rows.write(json.dumps(row) + "\n")
        # A terabyte that takes no room on disk (a hole, read as zeros): report is still reading it, however
        # fast or loaded the machine, when the signal comes.
        rows.truncate(1 << 40)
    env = {
        k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")
    }
    # A step run in the background of a script inherits SIGINT ignored, and so would report: it gets Python's
    # handler here, which exec resets to the default.
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        process = subprocess.Popen(
            [*COMMAND, "report", str(main), "--format", "json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**env, "FORCE_COLOR": "1"} if terminal else env,
        )
    finally:
        signal.signal(signal.SIGINT, inherited)
    try:
        wait_until(
            lambda: _holds_open(process.pid, main) or process.poll() is not None, timeout=30, what="reading"
        )
        assert process.poll() is None, "report ended before the signal, with nothing read"
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert (process.returncode, out) == (130, b"")
    assert b"Traceback" not in err
    assert b"KeyboardInterrupt" not in err
    assert terminal or err == b""  # on a terminal, the progress bar's last frame may be there


def test_serve_takes_the_path_as_report_does(tmp_path: Path) -> None:
    """serve PATH follows the run as serve --follow PATH does; its rows naming no agent are the file's."""
    main = tmp_path / "rollouts.jsonl"
    main.write_text(json.dumps({"reward": 1.0}) + "\n")
    with Exporter(["serve", str(main), "--poll-interval", "0.05"], tmp_path / "serve.log") as exporter:
        agent = RunFiles.from_main(main).name
        wait_until(
            lambda: f'rollout_completed_total{{agent="{agent}"' in exporter.scrape(),
            timeout=10,
            what="the row",
        )
    assert exporter.process is not None
    assert exporter.process.returncode == 0
    log = (tmp_path / "serve.log").read_text()
    assert "1 rows of" in log
    assert "shown as 'rollouts'; --agent NAME names them" in log
