"""``rollout-telemetry gym`` and ``serve`` at the end of a run of NeMo Gym's next release: Gym's own coverage
file compared with what was read, each differing field one line on stderr, stdout left to its report.

The files are the hand-written fixture of ``fixtures/gym-next/`` (its README names where each field comes
from: NVIDIA-NeMo/Gym pull request #3302); a fake Gym writes them as Gym's store does, the coverage file last.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.support import stop_process, wait_until

PYTHON = sys.executable
NEXT = Path(__file__).parents[1] / "fixtures" / "gym-next"

FAKE_GYM = textwrap.dedent(
    """
    import json, shutil, sys
    from pathlib import Path
    fixture, out = Path(sys.argv[1]), Path(sys.argv[sys.argv.index("--output") + 1])
    for name in ("materialized_inputs.jsonl", "manifest.json", "failures.jsonl"):
        shutil.copy(fixture / f"run_{name}", out.with_name(f"{out.stem}_{name}"))
    shutil.copy(fixture / "run.jsonl", out)
    coverage = json.loads((fixture / "run_coverage.json").read_text())
    coverage["failed"] = 2  # Gym counts one failure more than its files show
    out.with_name(f"{out.stem}_coverage.json").write_text(json.dumps(coverage))  # last, as the store's close
    """
)
SAID = "failed: {} says 2, rollout-telemetry counted 1"


def test_gym_names_a_field_gym_s_coverage_file_counts_otherwise(tmp_path: Path) -> None:
    """After the run, the field Gym's coverage file counts otherwise is one line on stderr; stdout is the JSON
    report alone, with the files' own counts."""
    script = tmp_path / "fake_gym.py"
    script.write_text(FAKE_GYM)
    output = tmp_path / "run.jsonl"
    argv = ["gym", "--port", "0", "--linger", "0", "--format", "json", "--", PYTHON, str(script), str(NEXT),
            "--output", str(output)]  # fmt: skip
    done = subprocess.run(
        [PYTHON, "-m", "rollout_telemetry", *argv],
        check=False,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["agents"][0]["rollouts"]["failed"] == 1
    assert f"rollout-telemetry gym: {SAID.format(tmp_path / 'run_coverage.json')}\n" in done.stderr


def test_serve_names_it_when_it_stops_after_the_run(tmp_path: Path) -> None:
    """``serve`` stopped after the run ended says the same line on stderr."""
    script = tmp_path / "fake_gym.py"
    script.write_text(FAKE_GYM)
    output = tmp_path / "run.jsonl"
    subprocess.run([PYTHON, str(script), str(NEXT), "--output", str(output)], check=True, timeout=60)
    serve = subprocess.Popen(
        [PYTHON, "-m", "rollout_telemetry", "serve", str(output), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    try:
        assert serve.stdout is not None
        wait_until(lambda: serve.stdout is not None and "serving" in serve.stdout.readline(), timeout=30,
                   what="serve to start")  # fmt: skip
        serve.send_signal(signal.SIGTERM)
        _, stderr = serve.communicate(timeout=20)
    finally:
        stop_process(serve, timeout=15)
    assert serve.returncode == 0, stderr
    assert f"rollout-telemetry serve: {SAID.format(tmp_path / 'run_coverage.json')}\n" in stderr
