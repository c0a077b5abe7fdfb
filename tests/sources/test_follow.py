"""Reading Gym's rollout files: the fixture run, live appends, truncation, restarts and rejected rows."""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
from pathlib import Path

import pytest

from rollout_telemetry import Disposition, RolloutTelemetry
from rollout_telemetry._sources.follow import RunFiles, RunFollower
from tests.support import FakeClock, exposition, groups_of, samples, value

FIXTURES = Path(__file__).parents[1] / "fixtures"
ROW = (
    '{{"reward": {reward}, "_ng_task_index": {task}, "_ng_rollout_index": 0, '
    '"_ng_environment_server": "a"}}\n'
)


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """A copy of the fixture run, free to modify."""
    for name in ("run.jsonl", "run_failures.jsonl", "run_materialized_inputs.jsonl"):
        shutil.copy(FIXTURES / name, tmp_path / name)
    return tmp_path


def _follower(clock: FakeClock, main: Path) -> tuple[RolloutTelemetry, RunFollower]:
    # Without the process's runtime, whose figures differ between two telemetries compared here.
    telemetry = RolloutTelemetry(run="r", clock=clock, runtime_metrics=False)
    return telemetry, telemetry._run_follower(RunFiles.from_main(main))


def test_sidecars_are_found_by_name(tmp_path: Path) -> None:
    """<stem>_failures.jsonl and <stem>_materialized_inputs.jsonl sit next to <stem>.jsonl."""
    files = RunFiles.from_main(tmp_path / "out.jsonl")
    assert files.failures == tmp_path / "out_failures.jsonl"
    assert files.inputs == tmp_path / "out_materialized_inputs.jsonl"
    explicit = RunFiles.from_main(tmp_path / "out.jsonl", failures=tmp_path / "f.jsonl")
    assert explicit.failures == tmp_path / "f.jsonl"


def test_the_fixture_run(run_dir: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture) -> None:
    """Events feed the live counters; identities feed coverage, the newest attempt deciding."""
    telemetry, follower = _follower(clock, run_dir / "run.jsonl")
    with caplog.at_level(logging.WARNING):
        assert follower.poll() == 4 + 3 + 7
    snap = telemetry.snapshot()
    math, code, browser = (snap.agent(n) for n in ("math_agent", "code_agent", "browser_agent"))
    assert math is not None and code is not None and browser is not None  # noqa: PT018
    assert (math.measured, math.masked) == (1, 1)
    assert math.by_kind(Disposition.MASKED) == {"judge_failed": 1}
    assert (code.measured, code.unscored, code.failed) == (1, 1, 1)
    assert code.by_kind(Disposition.FAILED) == {"session_lost": 1}  # the record's kind wins over the class
    assert browser.by_kind(Disposition.FAILED) == {"timeout_exceeded": 1}  # a Gym class passes through
    assert browser.by_kind(Disposition.OMITTED) == {"cancelled": 1}
    assert not any("timeout_exceeded" in r.getMessage() for r in caplog.records)  # a known name

    coverage = follower.coverage.snapshot()
    code_coverage = coverage.agent("code_agent")
    assert code_coverage is not None
    assert code_coverage.rollouts[Disposition.MEASURED] == 1  # failed at attempt 0, then measured
    assert code_coverage.rollouts[Disposition.FAILED] == 0
    assert code_coverage.retried == 1
    browser_coverage = coverage.agent("browser_agent")
    assert browser_coverage is not None
    assert (browser_coverage.expected, browser_coverage.unknown) == (3, 1)

    text = exposition(telemetry.registry)
    assert value(text, "rollout_run_expected", agent="browser_agent") == 3
    assert value(text, "rollout_run_rollouts", agent="browser_agent", disposition="unknown") == 1
    assert value(text, "rollout_run_rollouts", agent="code_agent", disposition="measured") == 1
    assert value(text, "rollout_retried_total", agent="code_agent") == 1
    assert value(text, "rollout_failed_total", agent="code_agent", failure_kind="session_lost") == 1


def test_without_inputs_expected_is_not_published(run_dir: Path, clock: FakeClock) -> None:
    """No materialized inputs: no expected, no unknown."""
    (run_dir / "run_materialized_inputs.jsonl").unlink()
    telemetry, follower = _follower(clock, run_dir / "run.jsonl")
    follower.poll()
    text = exposition(telemetry.registry)
    assert "rollout_run_expected" not in text
    assert 'disposition="unknown"' not in text
    assert value(text, "rollout_run_rollouts", agent="math_agent", disposition="masked") == 1


def test_half_written_line_waits_for_its_newline(tmp_path: Path, clock: FakeClock) -> None:
    """A last line without its newline is not consumed until the newline arrives."""
    main = tmp_path / "out.jsonl"
    telemetry, follower = _follower(clock, main)
    line = ROW.format(reward=1.0, task=0)
    main.write_text(line[:30])
    assert follower.poll() == 0
    with main.open("a") as handle:
        handle.write(line[30:-1])
    assert follower.poll() == 0
    with main.open("a") as handle:
        handle.write("\n")
    assert follower.poll() == 1
    assert telemetry.snapshot().rejected == {}
    agent = telemetry.snapshot().agent("a")
    assert agent is not None
    assert agent.measured == 1


def test_file_that_does_not_exist_yet(tmp_path: Path, clock: FakeClock) -> None:
    """The follower waits for the file to appear."""
    main = tmp_path / "later.jsonl"
    _, follower = _follower(clock, main)
    assert follower.poll() == 0
    main.write_text(ROW.format(reward=0.5, task=0))
    assert follower.poll() == 1


Counters = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _counters(telemetry: RolloutTelemetry) -> Counters:
    """Every counter sample of one scrape (``_total`` series)."""
    return {key: v for key, v in samples(exposition(telemetry.registry)).items() if key[0].endswith("_total")}


def _assert_no_counter_went_back(before: Counters, after: Counters) -> None:
    for key, old in before.items():
        assert after.get(key, 0.0) >= old, (key, old, after.get(key))


def test_truncation_is_a_new_run(tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture) -> None:
    """A truncated file starts a new run: its new rows are counted on top, no counter goes backwards, and the
    coverage describes the new run alone."""
    main = tmp_path / "out.jsonl"
    main.write_text("".join(ROW.format(reward=1.0, task=i) for i in range(3)))
    telemetry, follower = _follower(clock, main)
    follower.poll()
    before = _counters(telemetry)
    main.write_text(ROW.format(reward=0.0, task=9))
    with caplog.at_level(logging.WARNING):
        follower.poll()
    agent = telemetry.snapshot().agent("a")
    assert agent is not None
    assert (agent.measured, agent.reward_sum) == (4, 3.0)  # 3 rows of the old run, 1 of the new
    covered = follower.coverage.snapshot().agent("a")
    assert covered is not None
    assert covered.rollouts[Disposition.MEASURED] == 1
    assert follower.restarts == 1
    text = exposition(telemetry.registry)
    assert value(text, "rollout_run_restarts_total", run="r") == 1
    _assert_no_counter_went_back(before, _counters(telemetry))
    assert any("truncated, replaced or rewritten" in r.getMessage() for r in caplog.records)


def test_replacement_is_a_new_run(tmp_path: Path, clock: FakeClock) -> None:
    """A file replaced by another (a new inode, as Gym's fresh run recreates its output) is read from the
    start as a new run; the old rows stay counted once."""
    main = tmp_path / "out.jsonl"
    main.write_text(ROW.format(reward=1.0, task=0))
    telemetry, follower = _follower(clock, main)
    follower.poll()
    replacement = tmp_path / "new.jsonl"
    replacement.write_text("".join(ROW.format(reward=0.25, task=task) for task in (5, 6, 7)))
    os.replace(replacement, main)
    follower.poll()
    follower.poll()  # nothing new: nothing counted twice
    agent = telemetry.snapshot().agent("a")
    assert agent is not None
    assert (agent.measured, agent.reward_sum) == (4, 1.75)
    covered = follower.coverage.snapshot().agent("a")
    assert covered is not None
    assert covered.rollouts[Disposition.MEASURED] == 3
    assert follower.restarts == 1


def test_a_file_rewritten_in_place_past_the_offset_is_a_new_run(tmp_path: Path, clock: FakeClock) -> None:
    """Truncated and regrown beyond what was read between two polls (same inode, larger): its first bytes
    differ, so it is a new run and its every row is counted, none of the old twice."""
    main = tmp_path / "out.jsonl"
    main.write_text("".join(ROW.format(reward=1.0, task=i) for i in range(2)))
    telemetry, follower = _follower(clock, main)
    follower.poll()
    inode = main.stat().st_ino
    with main.open("r+") as handle:  # in place: the same inode
        handle.truncate(0)
        handle.write("".join(ROW.format(reward=0.5, task=i) for i in range(10, 16)))
    assert main.stat().st_ino == inode
    follower.poll()
    agent = telemetry.snapshot().agent("a")
    assert agent is not None
    assert (agent.measured, agent.reward_sum) == (8, 5.0)  # 2 old + 6 new
    assert follower.restarts == 1
    covered = follower.coverage.snapshot().agent("a")
    assert covered is not None
    assert covered.rollouts[Disposition.MEASURED] == 6


def test_an_appended_file_is_no_new_run(tmp_path: Path, clock: FakeClock) -> None:
    """Appending (a resumed run) goes on where reading was: no restart, nothing counted twice."""
    main = tmp_path / "out.jsonl"
    main.write_text("".join(ROW.format(reward=1.0, task=i) for i in range(2)))
    telemetry, follower = _follower(clock, main)
    follower.poll()
    with main.open("a") as handle:
        handle.write(ROW.format(reward=0.0, task=2))
    follower.poll()
    agent = telemetry.snapshot().agent("a")
    assert agent is not None
    assert agent.measured == 3
    assert follower.restarts == 0


def test_files_left_from_an_earlier_run_wait_until_written(tmp_path: Path, clock: FakeClock) -> None:
    """With skip_existing, files present at start are not read until they change; then from their start."""
    main = tmp_path / "out.jsonl"
    inputs = tmp_path / "out_materialized_inputs.jsonl"
    old_input = '{"_ng_task_index": %d, "_ng_rollout_index": 0, "agent_ref": {"name": "a"}}\n'
    inputs.write_text("".join(old_input % i for i in range(5)))
    main.write_text("".join(ROW.format(reward=1.0, task=i) for i in range(5)))
    telemetry = RolloutTelemetry(run="r", clock=clock)
    follower = telemetry._run_follower(RunFiles.from_main(main), skip_existing=True)
    assert follower.poll() == 0
    assert telemetry.snapshot().agent("a") is None
    # A fresh run: the inputs rewritten in place (a new modification time), the output recreated.
    stamp = inputs.stat().st_mtime_ns
    inputs.write_text("".join(old_input % i for i in range(2)))
    os.utime(inputs, ns=(stamp + 10**9, stamp + 10**9))
    main.unlink()
    follower.poll()
    main.write_text(ROW.format(reward=0.5, task=0))
    follower.poll()
    agent = telemetry.snapshot().agent("a")
    assert agent is not None
    assert (agent.measured, agent.reward_sum) == (1, 0.5)
    covered = follower.coverage.snapshot().agent("a")
    assert covered is not None
    assert (covered.expected, covered.unknown) == (2, 1)


def test_a_new_run_keeps_group_counts_and_starts_new_groups(tmp_path: Path, clock: FakeClock) -> None:
    """rollout_groups_total goes on across runs; the new run's groups of the same tasks complete again."""
    main = tmp_path / "out.jsonl"
    inputs = tmp_path / "out_materialized_inputs.jsonl"
    inputs.write_text('{"_ng_task_index": 0, "_ng_rollout_index": 0, "agent_ref": {"name": "a"}}\n')
    main.write_text(ROW.format(reward=1.0, task=0))
    telemetry, follower = _follower(clock, main)
    follower.poll()
    groups = groups_of(telemetry).agent("a")
    assert groups is not None
    assert groups.completed == 1
    main.unlink()
    main.write_text(ROW.format(reward=0.0, task=0))
    follower.poll()
    groups = groups_of(telemetry).agent("a")
    assert groups is not None
    assert (groups.completed, groups.states["insufficient"]) == (2, 2)


def test_a_restarted_follower_rebuilds_the_same_counts(run_dir: Path, clock: FakeClock) -> None:
    """A new follower over the same files counts exactly what the first one did."""
    first, follower = _follower(clock, run_dir / "run.jsonl")
    follower.poll()
    second, again = _follower(clock, run_dir / "run.jsonl")
    again.poll()
    assert exposition(first.registry) == exposition(second.registry)


REJECTIONS = {
    "malformed_json": 2,  # a cut-off object and a NaN literal
    "not_an_object": 2,
    "missing_agent": 1,
    "invalid_task_index": 1,  # a rollout index without its task index
    "invalid_reward": 1,
    "invalid_mask_sample": 1,
    "invalid_failure_kind": 1,
    "invalid_failure_reason": 1,
}


def test_each_rejected_row_reason(tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture) -> None:
    """Bad lines are counted by reason and warned about with file and line; good lines around them count."""
    main = tmp_path / "bad.jsonl"
    shutil.copy(FIXTURES / "bad.jsonl", main)
    telemetry, follower = _follower(clock, main)
    with caplog.at_level(logging.WARNING):
        follower.poll()
    assert telemetry.snapshot().rejected == REJECTIONS
    agent = telemetry.snapshot().agent("math_agent")
    assert agent is not None
    assert agent.measured == 2
    messages = [r.getMessage() for r in caplog.records]
    assert any(f"{main}: rejected (malformed_json): line 2:" in m for m in messages)
    assert any(f"{main}: rejected (not_an_object): line 3:" in m for m in messages)
    assert any(f"{main}: rejected (missing_agent): line 5:" in m for m in messages)


def test_warnings_are_rate_limited(
    tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A flood of bad lines logs one warning per reason and file, and counts every line."""
    main = tmp_path / "flood.jsonl"
    main.write_text("not json\n" * 500)
    telemetry, follower = _follower(clock, main)
    with caplog.at_level(logging.WARNING):
        follower.poll()
    assert telemetry.snapshot().rejected == {"malformed_json": 500}
    assert [r.getMessage().split(": line")[0] for r in caplog.records] == [
        f"{main}: rejected (malformed_json)"
    ]


def test_background_following_picks_up_appends(tmp_path: Path, clock: FakeClock) -> None:
    """start() polls in a thread: appended lines show up within the poll interval."""
    main = tmp_path / "live.jsonl"
    main.write_text("")
    telemetry, follower = _follower(clock, main)
    counted = threading.Event()
    poll = follower.poll

    def poll_and_check() -> int:  # the thread's poll, telling the test when the rows are in
        read = poll()
        agent = telemetry.snapshot().agent("a")
        if agent is not None and agent.measured == 20:
            counted.set()
        return read

    follower.poll = poll_and_check  # type: ignore[method-assign]
    follower.start(interval=0.05)
    try:
        with main.open("a") as handle:
            for i in range(20):
                handle.write(ROW.format(reward=1.0, task=i))
                handle.flush()
        assert counted.wait(timeout=10), "the 20 appended rows were not counted within 10 s"
    finally:
        follower.stop()


def test_directory_disappearing_is_survived(
    tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The follow file's directory vanishes: a warning, counts kept, and reading resumes when it returns."""
    folder = tmp_path / "run"
    folder.mkdir()
    main = folder / "out.jsonl"
    main.write_text(ROW.format(reward=1.0, task=0))
    telemetry, follower = _follower(clock, main)
    follower.poll()
    shutil.rmtree(folder)
    with caplog.at_level(logging.WARNING):
        assert follower.poll() == 0
        assert follower.poll() == 0
    assert sum("disappeared" in r.getMessage() for r in caplog.records) == 1
    agent = telemetry.snapshot().agent("a")
    assert agent is not None
    assert agent.measured == 1
    folder.mkdir()
    # A new file, whatever inode it gets (its first row is not the one read before): read from its start, its
    # rows counted on top of the old one's (counters never go back).
    main.write_text(ROW.format(reward=1.0, task=5) + ROW.format(reward=1.0, task=6))
    with caplog.at_level(logging.WARNING):
        assert follower.poll() == 2
    assert any("reading it from the start" in r.getMessage() for r in caplog.records)
    agent = telemetry.snapshot().agent("a")
    assert agent is not None
    assert agent.measured == 3


def test_a_missing_file_is_announced_once_and_a_vanished_one_once_per_absence(
    tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """'waiting for' once before the file exists; 'disappeared' once each time it goes, however many polls."""
    main = tmp_path / "run.jsonl"
    telemetry, follower = _follower(clock, main)
    with caplog.at_level(logging.WARNING):
        for _ in range(5):
            follower.poll()
        main.write_text(ROW.format(reward=1.0, task=0))
        follower.poll()
        for _ in range(2):  # gone and back, twice
            main.rename(tmp_path / "aside.jsonl")
            for _ in range(5):
                follower.poll()
            (tmp_path / "aside.jsonl").rename(main)
            follower.poll()
    messages = [r.getMessage() for r in caplog.records]
    assert [m for m in messages if "does not exist yet" in m] == [
        f"waiting for {main}: it does not exist yet"
    ]
    assert len([m for m in messages if "disappeared" in m]) == 2
    assert not [m for m in messages if "cannot read" in m]
    agent = telemetry.snapshot().agent("a")
    assert agent is not None
    assert agent.measured == 1  # the same file back: nothing counted twice


def test_lines_longer_than_the_read_buffer_and_cut_by_it(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows larger than the read chunk, and rows cut by a chunk's end, are read whole, each once."""
    from rollout_telemetry._sources import tail

    monkeypatch.setattr(tail, "_CHUNK", 64)
    main = tmp_path / "run.jsonl"
    rows = [
        json.dumps(
            {"reward": 0.25 * (i % 4), "_ng_task_index": i, "_ng_rollout_index": 0,
             "_ng_environment_server": "a", "response": {"text": "x" * (i * 37 % 300)}}
        ) + "\n"
        for i in range(50)
    ]  # fmt: skip
    main.write_text("".join(rows[:30]) + rows[30][:50])  # the last one still being written
    telemetry, follower = _follower(clock, main)
    follower.poll()
    agent = telemetry.snapshot().agent("a")
    assert agent is not None
    assert agent.measured == 30
    with main.open("a") as handle:
        handle.write(rows[30][50:] + "".join(rows[31:]))
    follower.poll()
    agent = telemetry.snapshot().agent("a")
    assert agent is not None
    assert agent.measured == 50
    assert agent.reward_sum == pytest.approx(sum(0.25 * (i % 4) for i in range(50)))
    assert telemetry.snapshot().rejected == {}


def test_read_all_counts_what_poll_counts_and_restores_the_collector(run_dir: Path, clock: FakeClock) -> None:
    """read_all() (report's way) reads the same as poll() and leaves the garbage collector as it found it."""
    import gc

    first, follower = _follower(clock, run_dir / "run.jsonl")
    assert follower.read_all() == 4 + 3 + 7
    assert gc.isenabled()
    second, again = _follower(clock, run_dir / "run.jsonl")
    again.poll()
    assert exposition(first.registry) == exposition(second.registry)
