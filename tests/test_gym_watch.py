"""``rollout-telemetry gym``: the Gym command read for its output, the child in its own process group, signals
passed on once, the child's exit status passed through, and wrong inputs in one line."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rollout_telemetry._cli.main import main
from rollout_telemetry._sources.gym import GymCommand, describe_status, exit_status
from rollout_telemetry.errors import ConfigError

PYTHON = sys.executable


@pytest.mark.parametrize(
    ("argv", "output", "resume"),
    [
        (["--", "python", "-m", "x", "--output", "out/a.jsonl"], "out/a.jsonl", False),
        (["python", "-o", "b.jsonl", "--resume"], "b.jsonl", True),
        (["python", "--output=c.jsonl"], "c.jsonl", False),
        (["python", "+output_jsonl_fpath=d.jsonl", "+resume_from_cache=true"], "d.jsonl", True),
        (["python", "output_jsonl_fpath=e.jsonl", "++resume_from_cache=False"], "e.jsonl", False),
        (["python", "--output", "first.jsonl", "--output", "last.jsonl"], "last.jsonl", False),
    ],
)
def test_the_output_and_resume_are_read_as_gym_reads_them(argv: list[str], output: str, resume: bool) -> None:
    """--output/-o, --output=, Hydra's output_jsonl_fpath= (with + or ++), --resume and resume_from_cache=;
    the last one wins."""
    command = GymCommand.parse(argv)
    assert (command.output, command.resume) == (Path(output), resume)
    assert command.argv[0] == "python"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "give the Gym command after --"),
        (["--"], "give the Gym command after --"),
        (["python", "eval", "run"], "names no output file"),
        (["python", "--output"], "names no output file"),
        (["no-such-gym-command", "--output", "x.jsonl"], "cannot run 'no-such-gym-command'"),
    ],
)
def test_a_command_that_cannot_be_watched_is_refused(argv: list[str], message: str) -> None:
    """No command, no output file, or a program that is not there: one clear error."""
    with pytest.raises(ConfigError, match=message):
        GymCommand.parse(argv)


def test_exit_statuses_are_reported_as_a_shell_does() -> None:
    """A signal's end is 128 + its number; the line names the signal."""
    assert exit_status(0) == 0
    assert exit_status(3) == 3
    assert exit_status(-signal.SIGKILL) == 137
    assert describe_status(137) == "Gym was ended by SIGKILL (exit status 137)"
    assert describe_status(2) == "Gym exited with status 2"


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
    deadline = time.monotonic() + 30
    while not got and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)  # a second signal, if one were passed on, would arrive now
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
    deadline = time.monotonic() + 30
    while not output.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.3)  # the child has installed its handlers by the time it writes
    watch.send_signal(signal.SIGINT)
    stdout, stderr = watch.communicate(timeout=60)
    assert watch.returncode == 7, stderr.decode()
    assert (tmp_path / "out.jsonl.signals").read_text() == f"[{int(signal.SIGINT)}]"
    assert b'"agents"' in stdout
    assert "rollout-telemetry gym: Gym exited with status 7" in stderr.decode()


def test_wrong_inputs_end_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """The command's mistakes are one line on stderr and exit 2, before anything starts."""
    assert main(["gym"]) == 2
    assert main(["gym", "--", PYTHON, "-c", "pass"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("rollout-telemetry gym: give the Gym command after --")
    assert lines[1].startswith("rollout-telemetry gym: the Gym command names no output file")
