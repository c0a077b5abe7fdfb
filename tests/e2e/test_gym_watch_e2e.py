"""``rollout-telemetry gym`` watching a real child: signals passed on to it once, its exit status passed on.

The command line's reading and its one-line errors are in tests/sources/test_gym_watch.py.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rollout_telemetry._sources.gym_process import PASSED_ON
from tests.support import alive, stop_process, wait_until

PYTHON = sys.executable

FAKE_GYM = textwrap.dedent(
    """
    import json, signal, sys, time
    out = sys.argv[sys.argv.index("--output") + 1]
    got = []
    def on_signal(signum, frame):
        got.append(signum)
    for name in ("SIGHUP", "SIGINT", "SIGQUIT", "SIGTERM", "SIGUSR1", "SIGUSR2"):
        signal.signal(getattr(signal, name), on_signal)
    print("the fake Gym's own output", flush=True)
    time.sleep(0.5)  # Gym starts before it writes: its output does not exist for a while
    with open(out, "w") as f:
        f.write(json.dumps({"reward": 1.0, "agent_ref": {"name": "a"}, "_ng_task_index": 0,
                            "_ng_rollout_index": 0}) + "\\n")
    open(out + ".ready", "w").close()  # the handlers are installed: the test may signal now
    deadline = time.monotonic() + 30
    while not got and time.monotonic() < deadline:
        time.sleep(0.01)
    # Not a synchronisation: the window in which a second signal would show. The watch would pass one on
    # within milliseconds of the first (from the same handler, or the SIGTERM its exit sends a child still
    # running); 0.3 s is a hundred times that.
    time.sleep(0.3)
    open(out + ".signals", "w").write(json.dumps(got))
    sys.exit(7)
    """
)


@pytest.mark.parametrize("signum", PASSED_ON, ids=[s.name for s in PASSED_ON])
def test_a_signal_is_passed_on_once_and_the_status_is_the_childs(
    tmp_path: Path, signum: signal.Signals
) -> None:
    """Ctrl-C, or any signal that would have ended the watch (SIGHUP, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2),
    reaches the child exactly once; the report follows, the exit status is the child's (7), and a line says
    how it ended. Standard output is the JSON report alone (Gym's own output goes to stderr), and the output
    Gym has not created yet is awaited without a word."""
    script = tmp_path / "fake_gym.py"
    script.write_text(FAKE_GYM)
    output = tmp_path / "out.jsonl"
    argv = ["gym", "--port", "0", "--format", "json", "--", PYTHON, str(script), "--output", str(output)]
    watch = subprocess.Popen(
        [PYTHON, "-m", "rollout_telemetry", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
    )
    try:
        # The watch forwards from its handlers, installed before it starts the child, to the child it knows
        # once the start returns: well before a Python child has started up and installed its own handlers,
        # which it says with the ready file.
        ready = tmp_path / "out.jsonl.ready"
        wait_until(ready.exists, timeout=30, what="the fake Gym to install its signal handlers")
        watch.send_signal(signum)
        stdout, stderr = watch.communicate(timeout=20)
    finally:
        stop_process(watch, timeout=15)
    assert watch.returncode == 7, stderr.decode()
    assert (tmp_path / "out.jsonl.signals").read_text() == f"[{int(signum)}]"
    assert "agents" in json.loads(stdout)
    said = stderr.decode()
    assert f"rollout-telemetry gym: Gym exited with status 7 after {signum.name} was passed on to it" in said
    assert "the fake Gym's own output" in said
    assert "does not exist yet" not in said


# A Gym that starts a server of its own in its process group (as Gym starts its servers and Ray), says both
# process ids, and runs until a signal ends it.
FAKE_GYM_WITH_A_SERVER = textwrap.dedent(
    """
    import json, subprocess, sys, time
    out = sys.argv[sys.argv.index("--output") + 1]
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    open(out + ".pids", "w").write(json.dumps([0, server.pid]))
    time.sleep(600)
    """
)


def _gym_with_a_server(tmp_path: Path) -> tuple[list[str], Path]:
    script = tmp_path / "fake_gym.py"
    script.write_text(FAKE_GYM_WITH_A_SERVER)
    output = tmp_path / "out.jsonl"
    argv = ["gym", "--port", "0", "--", PYTHON, str(script), "--output", str(output)]
    return [PYTHON, "-m", "rollout_telemetry", *argv], tmp_path / "out.jsonl.pids"


def _gym_processes(pids_file: Path, watch_pid: int) -> list[int]:
    """The fake Gym's process and its server's, once it has said them."""
    wait_until(pids_file.exists, timeout=30, what="the fake Gym to start its server")
    wait_until(lambda: pids_file.read_text().endswith("]"), timeout=10, what="the process ids")
    server = json.loads(pids_file.read_text())[1]
    children = Path(f"/proc/{watch_pid}/task/{watch_pid}/children").read_text().split()
    return [int(pid) for pid in children] + [server]


def test_no_gym_process_outlives_a_watch_killed_with_sigkill(tmp_path: Path) -> None:
    """SIGKILL to the watch (no handler runs): Gym and the server it started end too, at once, not left
    running under PID 1; the guard that ended them ends as well."""
    command, pids_file = _gym_with_a_server(tmp_path)
    watch = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path)
    try:
        processes = _gym_processes(pids_file, watch.pid)
        assert len(processes) == 3  # Gym, the guard, Gym's server
        watch.kill()
        watch.wait(timeout=10)
        wait_until(lambda: not any(alive(pid) for pid in processes), timeout=10, what="Gym to end")
    finally:
        stop_process(watch, timeout=15)


def test_a_hang_up_of_the_terminal_ends_gym(tmp_path: Path) -> None:
    """The terminal closed (a real pseudo-terminal hung up: the kernel sends SIGHUP to the watch, whose
    terminal it is, not to Gym's own process group): Gym and its server end, as they would have without
    the watch; the watch ends with Gym's status."""
    command, pids_file = _gym_with_a_server(tmp_path)
    controller, terminal = os.openpty()
    try:
        # setsid --ctty: the watch leads a session whose controlling terminal is this pseudo-terminal.
        watch = subprocess.Popen(
            ["setsid", "--ctty", *command], stdin=terminal, stdout=terminal, stderr=terminal, cwd=tmp_path
        )
    finally:
        os.close(terminal)
    try:
        processes = _gym_processes(pids_file, watch.pid)
        os.close(controller)  # the hang-up
        controller = -1
        assert watch.wait(timeout=20) == 128 + signal.SIGHUP
        wait_until(lambda: not any(alive(pid) for pid in processes), timeout=10, what="Gym to end")
    finally:
        if controller >= 0:
            os.close(controller)
        stop_process(watch, timeout=15)


def _watched(
    tmp_path: Path, fake_gym: str, flags: list[str], overrides: list[str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``rollout-telemetry gym FLAGS -- python FAKE_GYM --output out.jsonl OVERRIDES`` run to its end."""
    script = tmp_path / "fake_gym.py"
    script.write_text(fake_gym)
    gym = [PYTHON, str(script), "--output", str(tmp_path / "out.jsonl"), *(overrides or [])]
    command = [PYTHON, "-m", "rollout_telemetry", "gym", "--port", "0", *flags, "--", *gym]
    return subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=60, check=False)


STEADY_GYM = textwrap.dedent(
    """
    import json, sys, time
    out = sys.argv[sys.argv.index("--output") + 1]
    stem = out.removesuffix(".jsonl")
    with open(stem + "_materialized_inputs.jsonl", "w") as f:
        for task in range(2):
            for index in range(2):
                f.write(json.dumps({"agent_ref": {"name": "a"}, "_ng_task_index": task,
                                    "_ng_rollout_index": index}) + "\\n")
    for task in range(2):
        for index in range(2):
            time.sleep(0.4)
            with open(out, "a") as f:
                f.write(json.dumps({"reward": 1.0, "agent_ref": {"name": "a"}, "_ng_task_index": task,
                                    "_ng_rollout_index": index, "mask_sample": index == 1}) + "\\n")
    """
)


def test_status_lines_while_gym_runs_and_the_end_served_a_while(tmp_path: Path) -> None:
    """While Gym runs, a status line on stderr says the rollouts written of those expected, the rate, the
    masked and failed so far and the URL; after it ends, the final state is served --linger s more, said."""
    result = _watched(tmp_path, STEADY_GYM, ["--status-every", "0.2", "--linger", "0.5", "--format", "json"])
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["agents"]
    status = [line for line in result.stderr.splitlines() if " rollouts written " in line]
    assert status, result.stderr
    assert all(line.startswith("rollout-telemetry gym: ") for line in status)
    assert any(" of 4 rollouts written (" in line for line in status), status
    assert all(line.endswith("/metrics") and " failed, " in line and " masked; " in line for line in status)
    assert "serving the final state 0.5 s more, for a last scrape (Ctrl-C to stop now)" in result.stderr


@pytest.mark.parametrize("output_format", ["csv", "markdown"])
def test_the_final_report_takes_reports_formats(tmp_path: Path, output_format: str) -> None:
    """``--format csv`` and ``markdown``: standard output is that summary alone, the same figures report
    gives of the files (a row per agent; each mean's interval), Gym's own output on stderr."""
    result = _watched(
        tmp_path, STEADY_GYM, ["--status-every", "0", "--linger", "0", "--format", output_format]
    )
    assert result.returncode == 0, result.stderr
    if output_format == "csv":
        (row,) = csv.DictReader(result.stdout.splitlines())
        assert (row["agent"], row["expected"], row["measured"], row["masked"]) == ("a", "4", "2", "2")
        # Its tasks repeat: the interval is clustered by task (docs/concepts/error-bars.md).
        assert (row["mean_reward"], row["mean_reward_ci95_method"]) == ("1.0", "clustered")
    else:
        header, _, line, *_ = result.stdout.splitlines()
        assert header.startswith("| agent | mean reward [95% CI] |")
        assert line.startswith("| a | 1.000 [")


FOUR_INPUTS = textwrap.dedent(
    """
    import json, sys
    out = sys.argv[sys.argv.index("--output") + 1]
    stem = out.removesuffix(".jsonl")
    with open(stem + "_materialized_inputs.jsonl", "w") as f:
        for task in range(4):
            f.write(json.dumps({"agent_ref": {"name": "a"}, "_ng_task_index": task,
                                "_ng_rollout_index": 0}) + "\\n")
    """
)
"""The start of a fake Gym: its materialized inputs, four rollouts of agent a."""

QUITTING_GYM = FOUR_INPUTS + textwrap.dedent(
    """
    with open(out, "w") as f:
        f.write(json.dumps({"reward": 1.0, "agent_ref": {"name": "a"}, "_ng_task_index": 0,
                            "_ng_rollout_index": 0}) + "\\n")
    sys.exit(1)  # as Gym 0.7.0 at its first failed rollout, without its failures routed
    """
)


@pytest.mark.parametrize("routed", [False, True], ids=["unrouted", "routed"])
def test_a_run_ended_early_without_failures_says_the_flag_that_routes_them(
    tmp_path: Path, routed: bool
) -> None:
    """Gym ends with expected rollouts never written and no failures file: one line says what Gym 0.7.0 does
    without +route_failures_to_sidecar=true and to add it; a command that has it gets no such line."""
    routes = ["+route_failures_to_sidecar=true"] if routed else []
    result = _watched(tmp_path, QUITTING_GYM, ["--linger", "0"], routes)
    assert result.returncode == 1, result.stderr
    said = [line for line in result.stderr.splitlines() if "route_failures_to_sidecar" in line]
    if routed:
        assert said == []
    else:
        assert said == [
            "rollout-telemetry gym: 3 expected rollout(s) were never written and Gym wrote no failure: "
            "unless its configuration sets +route_failures_to_sidecar=true, NeMo Gym 0.7.0 ends the run at "
            "a failed rollout and writes that failure nowhere; add it to the Gym command to see failures by "
            "kind"
        ]


UNREACHABLE_GYM = FOUR_INPUTS + textwrap.dedent(
    """
    sys.stderr.write("\\rRollouts:   0%|          | 0/4")  # a progress bar, no newline
    sys.stderr.write("\\nConnectionRefusedError: head server at 127.0.0.1:1 refused\\n")
    sys.exit(1)  # as Gym 0.7.0 with a wrong head-server port: nothing dispatched
    """
)


def test_a_run_that_failed_before_dispatching_is_not_blamed_on_unrouted_failures(tmp_path: Path) -> None:
    """Gym ending with an error before any rollout or failure row (a wrong head-server port): no hint about
    +route_failures_to_sidecar=true, no final state served for a last scrape (the default 20 s), and a line
    saying Gym ended before writing any rollout; the report still shows the expected rollouts unknown."""
    result = _watched(tmp_path, UNREACHABLE_GYM, ["--format", "json"])
    assert result.returncode == 1, result.stderr
    assert "route_failures_to_sidecar" not in result.stderr
    assert "serving the final state" not in result.stderr
    assert (
        f"rollout-telemetry gym: Gym ended before writing any rollout or failure to {tmp_path / 'out.jsonl'}"
        in result.stderr
    )
    (agent,) = json.loads(result.stdout)["agents"]
    assert (agent["rollouts"]["expected"], agent["rollouts"]["unknown"]) == (4, 4)
