"""The README's test command on a fresh clone, beside a neighbour that takes the machine as a second CI job
does: prints, for each run, passed or failed, the time it took and pytest's last line.

The neighbour (``--neighbour ci-job``): two processes that spin on the CPU, one that touches 2 GiB of memory
page by page in a loop, and one that writes 4 MiB files and fsyncs each; ``one-core``: one spinning process
(the last wave's "one core busy"). Each run clones this checkout's HEAD into a temporary folder, then runs, in
it, the README's second command as written (``--ci``: ``CI=true bash .ci/run`` instead), the neighbour
started just before and stopped just after; each run's whole output is kept in ``--logs``.

    .venv/bin/python benchmarks/beside_a_neighbour.py [--runs 5] [--neighbour ci-job|one-core] [--ci]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MEMORY = 2 << 30
"""Bytes the memory neighbour keeps touching."""
WRITE = 4 << 20
"""Bytes of each file the disk neighbour writes and fsyncs."""

_SPIN = "while True: pass"
_TOUCH = f"""
import mmap
memory = mmap.mmap(-1, {MEMORY})
while True:
    for offset in range(0, {MEMORY}, mmap.PAGESIZE):
        memory[offset] = (memory[offset] + 1) % 256
"""
_FSYNC = f"""
import os, sys
block = os.urandom({WRITE})
path = os.path.join(sys.argv[1], "neighbour.bin")
while True:
    with open(path, "wb") as out:
        out.write(block)
        out.flush()
        os.fsync(out.fileno())
"""
NEIGHBOURS = {
    "ci-job": [["-c", _SPIN], ["-c", _SPIN], ["-c", _TOUCH], ["-c", _FSYNC]],
    "one-core": [["-c", _SPIN]],
}


def readme_test_command() -> str:
    """The README's second command (the first code block: set up and run the tests), as written."""
    block = (ROOT / "README.md").read_text(encoding="utf-8").split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [line for line in block.splitlines() if line and not line.startswith("#")]
    return commands[1]


@contextlib.contextmanager
def neighbour(kind: str, folder: Path) -> Iterator[None]:
    """The neighbour's processes, running while inside (each in a session of its own, killed after)."""
    processes = [
        subprocess.Popen(
            [sys.executable, *args, str(folder)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        for args in NEIGHBOURS[kind]
    ]
    try:
        yield
    finally:
        for process in processes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def one_run(command: str, kind: str, keep: Path) -> tuple[bool, float, str]:
    """Clone HEAD and run ``command`` in the clone beside the neighbour: (passed, seconds, pytest's last
    lines)."""
    with tempfile.TemporaryDirectory(prefix="beside-a-neighbour-") as folder:
        clone = Path(folder) / "clone"
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
        log = Path(folder) / "run.log"
        with neighbour(kind, Path(folder)), log.open("w") as out:
            started = time.monotonic()
            done = subprocess.run(
                ["bash", "-c", command], check=False, cwd=clone, stdout=out, stderr=subprocess.STDOUT
            )
            took = time.monotonic() - started
        text = log.read_text(encoding="utf-8", errors="replace")
        keep.write_text(text, encoding="utf-8")
    summary = [line for line in text.splitlines() if re.search(r"\b(passed|failed|error)\b", line)]
    if done.returncode != 0:
        failures = [line for line in text.splitlines() if line.startswith(("FAILED ", "ERROR "))]
        summary = [*failures, *summary[-1:]]
    return done.returncode == 0, took, " | ".join(summary[-6:]).strip("= ")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=1, help="runs in a row (default: 1)")
    parser.add_argument("--neighbour", choices=sorted(NEIGHBOURS), default="ci-job")
    parser.add_argument("--ci", action="store_true", help="run CI=true bash .ci/run instead")
    parser.add_argument(
        "--logs",
        type=Path,
        default=Path(tempfile.gettempdir()) / "beside-a-neighbour-logs",
        help="where each run's whole output is kept (default: %(default)s)",
    )
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    command = "CI=true bash .ci/run" if args.ci else readme_test_command()
    print(f"{command!r} on a fresh clone of HEAD beside the {args.neighbour} neighbour, {args.runs} runs")
    passed = 0
    args.logs.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for run in range(1, args.runs + 1):
        keep = args.logs / f"{stamp}-run{run}.log"
        ok, took, summary = one_run(command, args.neighbour, keep)
        passed += ok
        print(f"run {run}: {'passed' if ok else 'FAILED'} in {took:.0f} s: {summary} ({keep})", flush=True)
    print(f"{passed} of {args.runs} passed")


if __name__ == "__main__":
    main()
