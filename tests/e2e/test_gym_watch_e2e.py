"""``rollout-telemetry gym`` watching a real child: signals passed on to it once, its exit status passed on.

The command line's reading and its one-line errors are in tests/test_gym_watch.py.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.support import stop_process, wait_until

PYTHON = sys.executable

FAKE_GYM = textwrap.dedent(
    """
    import json, signal, sys, time
    out = sys.argv[sys.argv.index("--output") + 1]
    got = []
    def on_signal(signum, frame):
        got.append(signum)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
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


def test_ctrl_c_is_passed_on_once_and_the_status_is_the_childs(tmp_path: Path) -> None:
    """SIGINT to the watch reaches the child exactly once; the report follows, the exit status is the child's
    (7), and a line says how it ended."""
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
        watch.send_signal(signal.SIGINT)
        stdout, stderr = watch.communicate(timeout=20)
    finally:
        stop_process(watch, timeout=15)
    assert watch.returncode == 7, stderr.decode()
    assert (tmp_path / "out.jsonl.signals").read_text() == f"[{int(signal.SIGINT)}]"
    assert b'"agents"' in stdout
    assert "rollout-telemetry gym: Gym exited with status 7" in stderr.decode()
