"""How much faster record() is than one prometheus_client .labels().inc(), and would be with no lock.

``benchmarks/record.py`` is run in fresh processes, alternately on this tree and on a copy of it whose
``Account.count`` takes no lock at all (unsafe: for measuring only, never imported by anything else). For
each: how many times slower one ``.labels().inc()`` is than ``record()`` (measured, masked, failed), the
median and the range over the runs. No design that keeps ``record()``'s layers (the facade,
``check_outcome`` and ``Account.count``) and stays thread-safe can do better than the copy: it is the
ceiling of those layers on the interpreter that runs the script.

    .venv/bin/python benchmarks/record_ceiling.py [--processes 2] [--calls 100000] [--rounds 11]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/ is a package of the checkout

from benchmarks.record_against import worker  # its one line when a measuring process fails
from rollout_telemetry._cli.args import at_least_one  # the CLI's check, and its message

ROOT = Path(__file__).resolve().parents[1]
OUTCOMES = ("measured", "masked", "failed")
_RATIO = re.compile(r"^record\(\) (\w+) .*one inc: +([\d.]+)x", re.MULTILINE)


def unlocked_copy(into: Path) -> Path:
    """A copy of this tree's ``src`` whose ``Account.count`` neither takes nor gives back its lock."""
    src = into / "src"
    shutil.copytree(ROOT / "src", src)
    account = src / "rollout_telemetry" / "_store" / "account.py"
    text = account.read_text()
    start = text.find("    def count(")
    end = text.find("\n    def ", start + 1)
    body = text[start:end]
    for call in ("lock.acquire()", "lock.release()"):
        if start < 0 or end < 0 or body.count(call) != 1:
            sys.exit(f"record_ceiling.py: Account.count no longer calls {call} once; update this script")
        body = body.replace(call, "pass")
    account.write_text(text[:start] + body + text[end:])
    return src


def ratios(src: Path, calls: int, rounds: int) -> dict[str, float]:
    """One run of ``benchmarks/record.py`` with ``src``'s package: how much slower one inc is, by outcome."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    imported = worker(
        [sys.executable, "-P", "-c", "import rollout_telemetry; print(rollout_telemetry.__file__)"], env
    ).stdout
    if not Path(imported.strip()).is_relative_to(src):
        sys.exit(f"record_ceiling.py: {src} was not the package imported ({imported.strip()})")
    printed = worker(
        [sys.executable, str(ROOT / "benchmarks" / "record.py"), f"--calls={calls}", f"--rounds={rounds}"],
        env,
    ).stdout
    found = {outcome: float(value) for outcome, value in _RATIO.findall(printed)}
    if set(found) != set(OUTCOMES):
        sys.exit("record_ceiling.py: benchmarks/record.py no longer prints record()'s one-inc ratios")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=at_least_one, default=2, help="runs of each tree, alternately")
    parser.add_argument("--calls", type=at_least_one, default=100_000, help="calls per timing")
    parser.add_argument("--rounds", type=at_least_one, default=11, help="interleaved rounds per run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"this tree": ROOT / "src", "without the lock": unlocked_copy(Path(tmp))}
        runs: dict[str, list[dict[str, float]]] = {tree: [] for tree in trees}
        for _ in range(args.processes):
            for tree, src in trees.items():
                runs[tree].append(ratios(src, args.calls, args.rounds))
    version = ".".join(map(str, sys.version_info[:3]))
    runs_of = f"median and range over runs: {args.processes}"
    print(f"one .labels().inc() is slower than record() by (CPython {version}, {runs_of})")
    print(f"{'':<18}" + "".join(f"{outcome:>22}" for outcome in OUTCOMES))
    for tree, found in runs.items():
        cells = []
        for outcome in OUTCOMES:
            values = [one[outcome] for one in found]
            cells.append(f"{statistics.median(values):.2f}x ({min(values):.2f}-{max(values):.2f})")
        print(f"{tree:<18}" + "".join(f"{cell:>22}" for cell in cells))


if __name__ == "__main__":
    main()
