"""NeMo Gym's next files (pull request #3302, unreleased), read when present: the run id as the run's
boundary, attempts from 0, omissions in the failures file, a failure record's delivery and terminal flag, and
Gym's own coverage file compared with ours at the end of a run.

The fixture ``fixtures/gym-next/`` is written by hand from the PR branch's field names; its README names the
file of the branch each field comes from. The expected figures are worked out by hand from its rows.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from rollout_telemetry import Disposition, RolloutTelemetry
from rollout_telemetry._cli.main import main
from rollout_telemetry._sources.follow import RunFiles, RunFollower
from rollout_telemetry._sources.gym_account import MAX_BYTES
from tests.support import exposition, samples, value

NEXT = Path(__file__).parents[1] / "fixtures" / "gym-next"
RUN_ID = "3f2a9c1e-run-b"  # run_manifest.json's run_id, on every row
ROWS_WRITTEN, COVERAGE_WRITTEN = 1_000_000_000, 2_000_000_000  # ns: Gym writes its coverage file last


def _copy(folder: Path) -> Path:
    """The fixture run in ``folder``, its coverage file written after its rows as Gym's store does."""
    for source in NEXT.iterdir():
        if source.suffix in (".jsonl", ".json"):
            shutil.copy(source, folder / source.name)
    for path in folder.iterdir():
        written = COVERAGE_WRITTEN if path.name == "run_coverage.json" else ROWS_WRITTEN
        os.utime(path, ns=(written, written), follow_symlinks=False)
    return folder / "run.jsonl"


def _read(main_file: Path) -> tuple[RolloutTelemetry, RunFollower]:
    telemetry = RolloutTelemetry()
    follower = telemetry._run_follower(RunFiles.from_main(main_file))
    follower.read_all()
    follower.finish()
    return telemetry, follower


def _rewrite(path: Path, **fields: Any) -> None:
    """Change fields of a JSON file, keeping its modification time (Gym's coverage file, written last)."""
    data = json.loads(path.read_text())
    data.update(fields)
    path.write_text(json.dumps(data))
    os.utime(path, ns=(COVERAGE_WRITTEN, COVERAGE_WRITTEN))


def _rows(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def test_the_next_release_s_files_are_counted_as_gym_counts_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every rollout of the fixture has the disposition Gym's coverage() gives it: the newest attempt
    (numbered from 0) decides, the omission row is an omission of kind ``skipped``, and nothing differs from
    Gym's coverage file; no row is rejected or warned about."""
    with caplog.at_level(logging.WARNING):
        telemetry, follower = _read(_copy(tmp_path))
    assert caplog.records == []
    assert telemetry.snapshot().rejected == {}
    covered = follower.coverage.snapshot().agent("math")
    assert covered is not None
    assert dict(covered.rollouts) == {
        Disposition.MEASURED: 2, Disposition.MASKED: 1, Disposition.UNSCORED: 1, Disposition.FAILED: 1,
        Disposition.OMITTED: 1,
    }  # fmt: skip
    assert (covered.expected, covered.unknown) == (6, 0)
    assert covered.retried == 2  # task 0 rollout 1 and task 2 rollout 0: a second attempt each
    agent = telemetry.snapshot().agent("math")
    assert agent is not None
    assert agent.by_kind(Disposition.OMITTED) == {"skipped": 1}
    assert agent.by_kind(Disposition.FAILED) == {
        "agent_timeout": 1,
        "transport_unreachable": 1,
        "verifier_error": 1,
    }
    assert follower.run_id == RUN_ID
    assert follower.restarts == 0
    assert follower.gym_differences() == []


def test_a_failure_gym_did_not_send_is_counted_apart_from_one_it_delivered(tmp_path: Path) -> None:
    """The failure record's delivery is the failure's delivery label, by the rule record_failure(delivery=)
    uses: the one not_sent apart from the two delivered."""
    telemetry, _ = _read(_copy(tmp_path))
    text = exposition(telemetry.registry)
    by_delivery: dict[str, float] = {}
    for (name, labels), count in samples(text).items():
        if name == "rollout_failure_stages_total":
            delivery = dict(labels)["delivery"]
            by_delivery[delivery] = by_delivery.get(delivery, 0) + count
    assert by_delivery == {"not_sent": 1, "delivered": 2}
    assert value(text, "rollout_failure_stages_total", stage="admission", delivery="not_sent") == 1


def test_the_failure_record_s_terminal_flag_ends_the_retries(tmp_path: Path) -> None:
    """A failure whose record says ``failure.terminal: true`` is not retryable, as the row's own
    ``_ng_failure_terminal`` already made it; without either it stays retryable."""
    (tmp_path / "run.jsonl").write_text("")
    record = {"delivery": "delivered", "failure": {"failure_kind": "verifier_error", "terminal": True}}
    _rows(tmp_path / "run_failures.jsonl", [
        {"_ng_task_index": 0, "_ng_rollout_index": 0, "_ng_environment_server": "env",
         "_ng_failure_class": "legitimate", "_ng_failure_record": record},
        {"_ng_task_index": 1, "_ng_rollout_index": 0, "_ng_environment_server": "env",
         "_ng_failure_class": "legitimate",
         "_ng_failure_record": {**record, "failure": {"failure_kind": "agent_timeout", "terminal": False}}},
    ])  # fmt: skip
    _, follower = _read(tmp_path / "run.jsonl")
    covered = follower.coverage.snapshot().agent("env")
    assert covered is not None
    assert (covered.rollouts[Disposition.FAILED], covered.retryable) == (2, 1)


def test_a_terminal_skip_of_the_next_release_is_an_omission(tmp_path: Path) -> None:
    """A terminal ``skipped`` row that carries its run's id is an omission, as Gym's next release counts it,
    even without ``_ng_omitted``; the same row without a run id (NeMo Gym 0.7.0) stays a failure."""
    (tmp_path / "run.jsonl").write_text("")
    skip = {"_ng_rollout_index": 0, "_ng_environment_server": "env", "_ng_failure_class": "skipped",
            "_ng_failure_terminal": True}  # fmt: skip
    _rows(tmp_path / "run_failures.jsonl", [{**skip, "_ng_task_index": 0, "_ng_run_id": "r1"}])
    telemetry, _ = _read(tmp_path / "run.jsonl")
    agent = telemetry.snapshot().agent("env")
    assert agent is not None
    assert (agent.omitted, agent.failed) == (1, 0)
    assert agent.by_kind(Disposition.OMITTED) == {"skipped": 1}
    _rows(tmp_path / "run_failures.jsonl", [{**skip, "_ng_task_index": 0}])
    telemetry, _ = _read(tmp_path / "run.jsonl")
    agent = telemetry.snapshot().agent("env")
    assert agent is not None
    assert (agent.omitted, agent.failed) == (0, 1)


def _row(task: int, run_id: str, **fields: Any) -> dict[str, Any]:
    return {"_ng_task_index": task, "_ng_rollout_index": 0, "_ng_attempt_index": 0, "_ng_run_id": run_id,
            "agent_ref": {"name": "math"}, "reward": 1.0, **fields}  # fmt: skip


def test_a_row_of_another_run_begins_a_new_run(tmp_path: Path) -> None:
    """Rows of two runs in the same files: the second run's first row begins a new run (its coverage alone,
    the inputs read again, every counter going on); a later row of the first run is rejected as
    ``earlier_run``."""
    inputs = [{"_ng_task_index": t, "_ng_rollout_index": 0, "agent_ref": {"name": "math"}} for t in range(3)]
    _rows(tmp_path / "run_materialized_inputs.jsonl", inputs)
    _rows(tmp_path / "run.jsonl", [_row(0, "a"), _row(1, "a"), _row(0, "b")])
    _rows(tmp_path / "run_failures.jsonl", [_row(2, "a", _ng_failure_class="transient")])
    telemetry, follower = _read(tmp_path / "run.jsonl")
    covered = follower.coverage.snapshot().agent("math")
    assert covered is not None
    assert (covered.expected, covered.rollouts[Disposition.MEASURED], covered.unknown) == (3, 1, 2)
    assert (follower.restarts, follower.run_id) == (1, "b")
    agent = telemetry.snapshot().agent("math")
    assert agent is not None
    assert (agent.completed, agent.failed) == (3, 0)
    assert telemetry.snapshot().rejected == {"earlier_run": 1}


def test_a_fresh_run_in_replaced_files_is_one_new_run(tmp_path: Path) -> None:
    """Gym's fresh run deletes and recreates the files with a new run id: one new run, not a second one when
    its first row's id is read, and its inputs stay expected."""
    inputs = [{"_ng_task_index": t, "_ng_rollout_index": 0, "agent_ref": {"name": "math"}} for t in range(2)]
    _rows(tmp_path / "run_materialized_inputs.jsonl", inputs)
    _rows(tmp_path / "run.jsonl", [_row(0, "a")])
    (tmp_path / "run_failures.jsonl").write_text("")
    telemetry = RolloutTelemetry()
    follower = telemetry._run_follower(RunFiles.from_main(tmp_path / "run.jsonl"))
    follower.poll()
    for name in ("run.jsonl", "run_failures.jsonl", "run_materialized_inputs.jsonl"):
        (tmp_path / name).unlink()
    _rows(tmp_path / "run_materialized_inputs.jsonl", inputs)
    _rows(tmp_path / "run.jsonl", [_row(1, "b")])
    (tmp_path / "run_failures.jsonl").write_text("")
    follower.poll()
    covered = follower.coverage.snapshot().agent("math")
    assert covered is not None
    assert (follower.restarts, follower.run_id) == (1, "b")
    assert (covered.expected, covered.rollouts[Disposition.MEASURED], covered.unknown) == (2, 1, 1)
    assert telemetry.snapshot().rejected == {}


def test_a_run_id_that_is_not_a_string_is_no_run_id(tmp_path: Path) -> None:
    """A run id that is a number, empty or longer than 256 characters is ignored: the row counts, no run
    begins."""
    rows = [_row(0, "a"), _row(1, "", _ng_run_id=7), _row(2, "x" * 257), _row(3, "")]
    _rows(tmp_path / "run.jsonl", rows)
    telemetry, follower = _read(tmp_path / "run.jsonl")
    assert (follower.restarts, follower.run_id) == (0, "a")
    agent = telemetry.snapshot().agent("math")
    assert agent is not None
    assert agent.completed == 4


def test_each_field_that_differs_from_gym_s_coverage_file_is_one_line(tmp_path: Path) -> None:
    """Where Gym's coverage file counts otherwise, each field is named in one line with both numbers; a field
    unknown here, or of a type Gym does not write, is ignored."""
    main_file = _copy(tmp_path)
    coverage = tmp_path / "run_coverage.json"
    _rewrite(tmp_path / "run_coverage.json", failed=2, measured=1, masked="1", future_count=9,
             max_rollout_attempts=5)  # fmt: skip
    _, follower = _read(main_file)
    assert follower.gym_differences() == [
        f"measured: {coverage} says 1, rollout-telemetry counted 2",
        f"failed: {coverage} says 2, rollout-telemetry counted 1",
        f"max_rollout_attempts: {coverage} says 5, rollout-telemetry counted 3",
    ]


def test_a_coverage_file_of_another_run_says_so(tmp_path: Path) -> None:
    """A coverage file or manifest naming another run than the rows says it in one line each."""
    main_file = _copy(tmp_path)
    _rewrite(tmp_path / "run_coverage.json", run_id="other")
    manifest = json.loads((tmp_path / "run_manifest.json").read_text())
    (tmp_path / "run_manifest.json").write_text(json.dumps({**manifest, "run_id": "older"}))
    _, follower = _read(main_file)
    assert follower.gym_differences() == [
        f"run_id: {tmp_path / 'run_manifest.json'} names run 'older', the rows run {RUN_ID!r}",
        f"run_id: {tmp_path / 'run_coverage.json'} names run 'other', the rows run {RUN_ID!r}",
    ]


def test_a_coverage_file_older_than_the_last_row_is_not_compared(tmp_path: Path) -> None:
    """Gym writes its coverage file when the store opens and when it closes: one older than the last row is
    the opening's count, said in one line and not compared."""
    main_file = _copy(tmp_path)
    _rewrite(tmp_path / "run_coverage.json", failed=0)
    os.utime(tmp_path / "run_coverage.json", ns=(ROWS_WRITTEN - 1, ROWS_WRITTEN - 1))
    _, follower = _read(main_file)
    assert follower.gym_differences() == [
        f"{tmp_path / 'run_coverage.json'} is older than the run's last row (the run goes on): not compared"
    ]


def test_no_coverage_file_says_nothing(tmp_path: Path) -> None:
    """A run without Gym's coverage file and manifest (NeMo Gym 0.7.0) has nothing to compare: no line."""
    main_file = _copy(tmp_path)
    (tmp_path / "run_coverage.json").unlink()
    (tmp_path / "run_manifest.json").unlink()
    _, follower = _read(main_file)
    assert follower.gym_differences() == []


BAD_FILES = {
    "not JSON": (b'{"schema_version": 2, "failed": ', "is not a JSON object"),
    "an array": (b"[2, 3]", "is not a JSON object"),
    "too deep": (b"[" * 100_000, "is not a JSON object"),
    "schema 3": (b'{"schema_version": 3, "failed": 0}', "has schema_version 3, not 2: ignored"),
    "no schema": (b'{"failed": 0}', "has schema_version None, not 2: ignored"),
    "schema as text": (b'{"schema_version": "2", "failed": 0}', "has schema_version '2', not 2: ignored"),
}


@pytest.mark.parametrize("name", ["run_coverage.json", "run_manifest.json"])
@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_a_malformed_coverage_file_or_manifest_is_ignored_in_one_line(
    tmp_path: Path, name: str, case: str
) -> None:
    """A coverage file or manifest that is not JSON, not an object, or of another schema is ignored with one
    line naming it; the other file is still read."""
    main_file = _copy(tmp_path)
    content, said = BAD_FILES[case]
    (tmp_path / name).write_bytes(content)
    os.utime(tmp_path / name, ns=(COVERAGE_WRITTEN, COVERAGE_WRITTEN))
    if name == "run_manifest.json":
        _rewrite(tmp_path / "run_coverage.json", failed=0)
    _, follower = _read(main_file)
    lines = follower.gym_differences()
    assert lines[0].startswith(f"{tmp_path / name} ")
    assert said in lines[0]
    if name == "run_manifest.json":
        assert lines[1:] == [f"failed: {tmp_path / 'run_coverage.json'} says 0, rollout-telemetry counted 1"]
    else:
        assert len(lines) == 1


def test_a_huge_coverage_file_is_not_read_past_its_bound(tmp_path: Path) -> None:
    """A coverage file larger than 64 MiB is ignored in one line, after reading one byte past the bound."""
    main_file = _copy(tmp_path)
    with (tmp_path / "run_coverage.json").open("r+b") as file:
        file.truncate(4 * MAX_BYTES)  # sparse: nothing written, as large as a hostile file
    os.utime(tmp_path / "run_coverage.json", ns=(COVERAGE_WRITTEN, COVERAGE_WRITTEN))
    _, follower = _read(main_file)
    assert follower.gym_differences() == [f"{tmp_path / 'run_coverage.json'} is larger than 64 MiB: ignored"]


def test_a_coverage_file_that_is_a_link_or_a_fifo_is_not_read(tmp_path: Path) -> None:
    """A symbolic link at the coverage file's name is refused, never followed (even to a good file), and a
    FIFO is not opened to wait on: one line each."""
    main_file = _copy(tmp_path)
    coverage = tmp_path / "run_coverage.json"
    coverage.rename(tmp_path / "elsewhere.json")
    coverage.symlink_to(tmp_path / "elsewhere.json")
    _, follower = _read(main_file)
    said = f"{coverage} is not a regular file (a symbolic link, a pipe, a device or a folder): not read"
    assert follower.gym_differences() == [said]
    coverage.unlink()
    os.mkfifo(coverage)
    assert follower.gym_differences() == [said]


def test_report_names_each_difference_on_stderr_and_keeps_stdout_machine_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``report --format json`` prints the report alone on stdout and each field that differs from Gym's
    coverage file in one line on stderr."""
    main_file = _copy(tmp_path)
    _rewrite(tmp_path / "run_coverage.json", unknown=1)
    assert main(["report", str(main_file), "--format", "json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["file"] == str(main_file)
    said = f"unknown: {tmp_path / 'run_coverage.json'} says 1, rollout-telemetry counted 0"
    assert err == f"rollout-telemetry report: {said}\n"


def test_report_of_gym_0_7_0_files_says_nothing_more(capsys: pytest.CaptureFixture[str]) -> None:
    """NeMo Gym 0.7.0's files (no coverage file, no manifest, no run id) give no new line."""
    main_file = Path(__file__).parents[1] / "fixtures" / "gym-0.7.0" / "retried" / "rollouts.jsonl"
    assert main(["report", str(main_file), "--format", "json"]) == 0
    assert capsys.readouterr().err == ""


def test_a_live_follower_and_report_agree_on_the_next_release_s_files(tmp_path: Path) -> None:
    """The fixture's rows appended one at a time, the failures interleaved, read live after each append: the
    same coverage as reading the whole files at once, and nothing differs from Gym's coverage file."""
    whole_folder = tmp_path / "whole"
    whole_folder.mkdir()
    _, whole = _read(_copy(whole_folder))
    live_folder = tmp_path / "live"
    live_folder.mkdir()
    shutil.copy(NEXT / "run_materialized_inputs.jsonl", live_folder)
    main_lines = (NEXT / "run.jsonl").read_text().splitlines(keepends=True)
    failure_lines = (NEXT / "run_failures.jsonl").read_text().splitlines(keepends=True)
    for name in ("run.jsonl", "run_failures.jsonl"):
        (live_folder / name).write_text("")
    telemetry = RolloutTelemetry()
    follower = telemetry._run_follower(RunFiles.from_main(live_folder / "run.jsonl"))
    for index in range(max(len(main_lines), len(failure_lines))):
        for name, lines in (("run_failures.jsonl", failure_lines), ("run.jsonl", main_lines)):
            if index < len(lines):
                with (live_folder / name).open("a") as file:
                    file.write(lines[index])
                follower.poll()
    follower.finish()
    assert follower.coverage.snapshot() == whole.coverage.snapshot()
    shutil.copy(NEXT / "run_coverage.json", live_folder)
    assert follower.gym_differences() == []


def test_the_report_counts_failures_gym_never_sent_apart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``report`` gives the failures by delivery, the one not_sent apart from the two delivered, as data
    and in the table; a NeMo Gym 0.7.0 run, whose failures do not say, has no such key."""
    main_file = _copy(tmp_path)
    assert main(["report", str(main_file), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["failures_by_delivery"] == {
        "math": {"delivered": 2, "not_sent": 1}
    }
    assert main(["report", str(main_file)]) == 0
    said = "failures by delivery (not_sent: the request never left): math: delivered 2, not_sent 1"
    assert said in capsys.readouterr().out
    old = Path(__file__).parents[1] / "fixtures" / "gym-0.7.0" / "troubled" / "rollouts.jsonl"
    assert main(["report", str(old), "--format", "json"]) == 0
    assert "failures_by_delivery" not in json.loads(capsys.readouterr().out)


def test_rows_begin_a_bounded_number_of_runs(tmp_path: Path) -> None:
    """A file whose every row names a run of its own begins at most 64 new runs (each reads the inputs again);
    the rows of further runs are rejected as ``too_many_runs``."""
    _rows(tmp_path / "run_materialized_inputs.jsonl",
          [{"_ng_task_index": 0, "_ng_rollout_index": 0, "agent_ref": {"name": "math"}}])  # fmt: skip
    _rows(tmp_path / "run.jsonl", [_row(0, f"r{number}") for number in range(70)])
    telemetry, follower = _read(tmp_path / "run.jsonl")
    assert (follower.restarts, follower.run_id) == (64, "r64")
    assert telemetry.snapshot().rejected == {"too_many_runs": 5}
    agent = telemetry.snapshot().agent("math")
    assert agent is not None
    assert agent.completed == 65
