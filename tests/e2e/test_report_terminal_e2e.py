"""``rollout-telemetry report`` in a real terminal (a pseudo-terminal: rich draws for a terminal): names from
the run holding rich markup are printed as text, and no hyperlink reaches the terminal."""

from __future__ import annotations

import fcntl
import json
import os
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

NAMES = ["[/x]", "[link=https://evil.example]click[/link]", "[bold red]x"]


def _in_a_terminal(args: list[str], columns: int) -> tuple[int, str]:
    """Run the CLI with a pseudo-terminal ``columns`` wide as its standard streams; its exit status and
    everything it wrote there."""
    leader, follower = os.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    unset = ("FORCE_COLOR", "NO_COLOR", "COLUMNS", "LINES", "TTY_COMPATIBLE", "TTY_INTERACTIVE")
    env = {key: value for key, value in os.environ.items() if key not in unset} | {"TERM": "xterm-256color"}
    process = subprocess.Popen(
        [sys.executable, "-m", "rollout_telemetry", *args],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env=env,
    )
    os.close(follower)
    written = bytearray()
    deadline = time.monotonic() + 60  # a report of a few rows takes a second or two; a hang fails here
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], deadline - time.monotonic())
            if not ready:
                break
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the command ended and its end of the terminal is closed
                break
            if not chunk:
                break
            written += chunk
    finally:
        os.close(leader)
        status = process.wait(timeout=10)
    return status, written.decode("utf-8", "replace")


def test_markup_in_names_is_printed_as_text_in_a_terminal(tmp_path: Path) -> None:
    """In a terminal, a run whose agents are named ``[/x]``, ``[link=...]click[/link]`` and ``[bold red]x``
    is reported with exit 0 (``[/x]`` ended it with a MarkupError traceback), each name printed as it reads,
    in colour (rich drew for a terminal), and without an OSC 8 hyperlink to the attacker's address."""
    rows = [
        {"reward": reward, "_ng_task_index": task, "_ng_rollout_index": index, "agent_ref": {"name": name}}
        for task, name in enumerate(NAMES)
        for index, reward in enumerate((1.0, 0.0))
    ]
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    for columns in (200, 80):  # the wide tables, and an agent at a time (each name its table's title)
        status, screen = _in_a_terminal(["report", str(path)], columns)
        assert status == 0, screen
        assert "Traceback" not in screen
        assert all(name in screen for name in NAMES), screen
        assert "\x1b[" in screen  # drawn for a terminal: colour codes
        assert "\x1b]8;" not in screen
