"""NeMo Gym's files as they really are: report, a live follower and a restarted follower agree on them.

The fixture in ``fixtures/gym/`` has every shape real runs produce: output rows without ``agent_ref`` (the
agent comes from the materialized inputs), rows without identity, an unstamped first attempt whose retry
succeeded, a row repeated verbatim, Gym's failure classes (a skip, a judge failure with a reward, a no-result
class, a rollout out of attempts), an unscored rollout next to masked ones. The expected figures below are
worked out by hand from those rows, rule by rule, not by the code under test.
"""

from __future__ import annotations

import json
import logging
import random
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollout_telemetry import Disposition, RolloutTelemetry
from rollout_telemetry._cli.main import main
from rollout_telemetry._sources.follow import RunFiles
from rollout_telemetry._store.coverage import Coverage
from rollout_telemetry._store.names import Names
from rollout_telemetry._views.run_report import build_report
from tests.support import examples

GYM = Path(__file__).parents[1] / "fixtures" / "gym"
FILES = ("run_materialized_inputs.jsonl", "run.jsonl", "run_failures.jsonl")

ROLLOUTS = {  # identities, by the disposition of the newest attempt
    "math": {"expected": 5, "measured": 2, "masked": 1, "unscored": 1, "failed": 1, "retryable": 1,
             "omitted": 0, "unknown": 0, "retried": 1, "unidentified": 0},
    "tool": {"expected": 8, "measured": 3, "masked": 1, "unscored": 0, "failed": 4, "retryable": 1,
             "omitted": 0, "unknown": 0, "retried": 2, "unidentified": 2},
}  # fmt: skip
EVENTS = {  # every row read, the duplicate once
    "math": {"measured": 2, "masked": 1, "unscored": 1, "failed": 2, "omitted": 0},
    "tool": {"measured": 3, "masked": 1, "unscored": 0, "failed": 6, "omitted": 0},
}
GYM_PROGRESS = {
    # math: rewards 1.0, 0.5 (measured), 0.0 (masked), 0.0 (the transient failure row) -> 1.5 / 4
    "progress/math/reward": 37.5,
    "progress/math/reward_lower_bound": 37.5,  # nothing left to expect
    "progress/math/masked_pct": 33.33,  # 1 masked / (1 masked + 2 measured); the unscored one in neither
    "progress/math/reward_unmasked": 75.0,  # (1.0 + 0.5) / 2
    "progress/math/failed": 2,
    # tool: 0.25, 1.0, 0.0 (measured), the skip's and the judge failure's 0.0 -> 1.25 / 5
    "progress/tool/reward": 25.0,
    "progress/tool/reward_lower_bound": 25.0,
    "progress/tool/masked_pct": 25.0,  # 1 / (1 + 3)
    "progress/tool/reward_unmasked": 41.67,  # 1.25 / 3
    "progress/tool/failed": 6,
}
GYM_COVERAGE = {
    "coverage/measured_rollouts": 5,
    "coverage/masked_rollouts": 2,
    "coverage/measured_tasks": 3,  # math 0 and 1, tool 2 (rows without identity are in no task)
    "coverage/fully_masked_tasks": 1,  # tool 3: its one row in the main output is masked (the rest failed)
    # As Gym computes them: the 11 materialized inputs; the distinct rollouts with a main-file row: tasks
    # 0 (3), 1, 2 and 3 (one each), and the 2 rows without identity, each a rollout of its own; 11 - 8.
    "coverage/expected": 11,
    "coverage/scored": 8,
    "coverage/missing": 3,
}
KINDS = {
    "math": {"masked:judge_failed": 1, "failed:agent_request_failed": 1, "failed:transient": 1},
    "tool": {"failed:timeout_exceeded": 2, "failed:environment_server_failed": 1, "failed:incomplete": 1},
}


def _report(folder: Path) -> dict[str, Any]:
    telemetry = RolloutTelemetry()
    follower = telemetry._run_follower(RunFiles.from_main(folder / "run.jsonl"))
    follower.poll()
    follower.finish()
    return build_report(telemetry.snapshot(), follower.coverage.snapshot())


def _check(report: dict[str, Any]) -> None:
    agents = {row["agent"]: row for row in report["agents"]}
    assert set(agents) == {"math", "tool"}
    for name in agents:
        assert agents[name]["rollouts"] == ROLLOUTS[name], name
        events = agents[name]["events"]
        assert {k: events[k] for k in EVENTS[name]} == EVENTS[name], name
        assert events["top_failure_kinds"] == KINDS[name], name
    assert report["gym_progress"] == GYM_PROGRESS
    assert report["gym_coverage"] == GYM_COVERAGE
    assert report["rows_without_identity"] == 2
    assert report["rejected"] == {"duplicate_rollout": 1}


def test_report_accounts_for_every_row(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """report --format json gives the hand-worked figures; no Gym failure class is warned about."""
    with caplog.at_level(logging.WARNING):
        assert main(["report", str(GYM / "run.jsonl"), "--format", "json"]) == 0
    _check(json.loads(capsys.readouterr().out))
    warnings = [r.getMessage() for r in caplog.records]
    assert not [m for m in warnings if "unregistered failure kind" in m]
    (duplicate,) = [m for m in warnings if "duplicate_rollout" in m]
    assert "line 6: repeats line 5" in duplicate


def test_a_restarted_follower_rebuilds_the_same_report(tmp_path: Path) -> None:
    """A follower started on the finished files gives what report gives."""
    for name in FILES:
        shutil.copy(GYM / name, tmp_path / name)
    _check(_report(tmp_path))


def _lines(name: str) -> list[str]:
    return (GYM / name).read_text().splitlines(keepends=True)


@settings(max_examples=examples(60), deadline=None)
@given(seed=st.integers(0, 2**32 - 1), polls=st.integers(1, 30))
def test_any_interleaving_of_appends_gives_the_same_report(
    tmp_path_factory: pytest.TempPathFactory, seed: int, polls: int
) -> None:
    """A live follower fed the files' lines in any interleaving, polled anywhere, ends as report does."""
    folder = tmp_path_factory.mktemp("live")
    for name in FILES:
        (folder / name).write_text("")
    chooser = random.Random(seed)
    pending = {name: _lines(name) for name in FILES}
    order = [name for name in FILES for _ in pending[name]]
    chooser.shuffle(order)
    poll_after = set(chooser.sample(range(len(order)), min(polls, len(order))))
    telemetry = RolloutTelemetry()
    follower = telemetry._run_follower(RunFiles.from_main(folder / "run.jsonl"))
    for step, name in enumerate(order):
        with (folder / name).open("a") as handle:
            handle.write(pending[name].pop(0))
        if step in poll_after:
            follower.poll()
    follower.poll()
    follower.finish()
    live = build_report(telemetry.snapshot(), follower.coverage.snapshot())
    _check(live)
    assert live == _report(folder)


def test_rows_wait_for_their_inputs_row_and_never_drop(tmp_path: Path) -> None:
    """An output row naming no agent waits for its materialized inputs row, then counts under its agent."""
    (tmp_path / "run_materialized_inputs.jsonl").write_text("")
    (tmp_path / "run.jsonl").write_text('{"reward": 1.0, "_ng_task_index": 0, "_ng_rollout_index": 0}\n')
    telemetry = RolloutTelemetry()
    follower = telemetry._run_follower(RunFiles.from_main(tmp_path / "run.jsonl"))
    follower.poll()
    assert (follower.waiting, telemetry.snapshot().agents) == (1, ())
    with (tmp_path / "run_materialized_inputs.jsonl").open("a") as inputs:
        inputs.write('{"_ng_task_index": 0, "_ng_rollout_index": 0, "agent_ref": {"name": "math"}}\n')
    follower.poll()
    agent = telemetry.snapshot().agent("math")
    assert agent is not None
    assert (follower.waiting, agent.measured) == (0, 1)


def test_the_default_agent_and_the_files_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Rows naming no agent and matching no input row take --agent; without it the file's name, said once."""
    (tmp_path / "run.jsonl").write_text(
        '{"reward": 1.0}\n{"reward": 0.0, "_ng_task_index": 3, "_ng_rollout_index": 0}\n'
    )
    assert main(["report", str(tmp_path / "run.jsonl"), "--format", "json", "--agent", "solo"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [row["agent"] for row in report["agents"]] == ["solo"]
    assert report["agents"][0]["events"]["measured"] == 2
    assert report["rows_without_identity"] == 1
    assert capsys.readouterr().err == ""  # named with --agent: nothing to say
    assert main(["report", str(tmp_path / "run.jsonl"), "--format", "json"]) == 0
    out, err = capsys.readouterr()
    assert [row["agent"] for row in json.loads(out)["agents"]] == ["run"]
    assert err.count("\n") == 1
    assert "2 rows of" in err
    assert "shown as 'run'; --agent NAME names them" in err


GYM_CLASSES = (
    "transient", "legitimate", "timeout_exceeded", "skipped", "incomplete", "judge_failed",
    "remote_agent_error", "verify_failed", "reference_missing", "eval_missing", "transport_ineligible",
    "judge_invalid",
)  # fmt: skip


@pytest.mark.parametrize("failure_class", GYM_CLASSES)
def test_each_gym_failure_class_is_a_failure_of_that_kind(
    tmp_path: Path, failure_class: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A failures row of each class is one failure of that kind, without a warning; a skip is final."""
    (tmp_path / "run.jsonl").write_text("")
    row = {"_ng_task_index": 0, "_ng_rollout_index": 0, "_ng_environment_server": "env",
           "_ng_failure_class": failure_class}  # fmt: skip
    if failure_class == "skipped":
        row |= {"skipped": True, "_ng_failure_terminal": True}
    (tmp_path / "run_failures.jsonl").write_text(json.dumps(row) + "\n")
    telemetry = RolloutTelemetry()
    follower = telemetry._run_follower(RunFiles.from_main(tmp_path / "run.jsonl"))
    with caplog.at_level(logging.WARNING):
        follower.poll()
    agent = telemetry.snapshot().agent("env")
    assert agent is not None
    assert agent.by_kind(Disposition.FAILED) == {failure_class: 1}
    assert caplog.records == []
    covered = follower.coverage.snapshot().agent("env")
    assert covered is not None
    assert covered.retryable == (0 if failure_class == "skipped" else 1)


def test_an_explicit_omission_stays_an_omission(tmp_path: Path) -> None:
    """_ng_omitted: true in the failures file is an omission, as before."""
    (tmp_path / "run.jsonl").write_text("")
    row = {"_ng_task_index": 0, "_ng_rollout_index": 0, "_ng_environment_server": "env", "_ng_omitted": True,
           "_ng_failure_class": "cancelled"}  # fmt: skip
    (tmp_path / "run_failures.jsonl").write_text(json.dumps(row) + "\n")
    telemetry = RolloutTelemetry()
    telemetry._run_follower(RunFiles.from_main(tmp_path / "run.jsonl")).poll()
    agent = telemetry.snapshot().agent("env")
    assert agent is not None
    assert (agent.omitted, agent.failed) == (1, 0)


def test_a_torn_line_loses_only_itself(tmp_path: Path) -> None:
    """A writer dies mid-line; the next writer's whole rows are recovered, the first one included."""
    main_file = tmp_path / "run.jsonl"
    row = (
        '{{"reward": {reward}, "_ng_task_index": {task}, "_ng_rollout_index": 0, '
        '"_ng_environment_server": "a"}}'
    )
    main_file.write_text(row.format(reward=1.0, task=0) + "\n" + row.format(reward=0.5, task=1)[:40])
    telemetry = RolloutTelemetry()
    follower = telemetry._run_follower(RunFiles.from_main(main_file))
    follower.poll()
    with main_file.open("a") as handle:  # a new writer appends whole rows after the torn one
        handle.write(row.format(reward=0.25, task=2) + "\n" + row.format(reward=0.75, task=3) + "\n")
    follower.poll()
    agent = telemetry.snapshot().agent("a")
    assert agent is not None
    assert agent.measured == 3  # tasks 0, 2 and 3: only the torn row of task 1 is lost
    assert agent.reward_sum == pytest.approx(1.0 + 0.25 + 0.75)
    assert telemetry.snapshot().rejected == {"malformed_json": 1}
    covered = follower.coverage.snapshot().agent("a")
    assert covered is not None
    assert covered.rollouts[Disposition.MEASURED] == 3


def test_an_empty_file_or_a_directory_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """report exits non-zero with one line naming the file when there is nothing to report."""
    (tmp_path / "run.jsonl").write_text("")
    assert main(["report", str(tmp_path / "run.jsonl")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "it is empty" in err  # noqa: PT018
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is a directory" in err  # noqa: PT018


def test_coverage_caps_agents_like_the_account() -> None:
    """The coverage account folds agents beyond the cap into _other, as the account does."""
    coverage = Coverage(Names(max_agents=2))
    for name in ("a", "b", "c", "d"):
        coverage.observe(name, (0, 0), 0, Disposition.MEASURED, succeeded=True)
    assert [a.agent for a in coverage.snapshot().agents] == ["_other", "a", "b"]


REAL = Path(__file__).parents[1] / "fixtures" / "gym-0.7.0"
"""Files written by NeMo Gym 0.7.0's own collection in ``tests/gym`` (its example flow, the test environment,
the fake model), with Gym's captured metrics beside them: ``troubled`` (masked, failed to the sidecar) and
``retried`` (killed, resumed, then its failures retried as attempt 1; metrics of the last session)."""


@pytest.mark.parametrize("name", ["troubled", "retried"])
def test_report_on_files_nemo_gym_wrote(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """report on a real Gym run: one agent (as Gym names it), the files' counts, Gym's end-of-run keys, its
    aggregate metrics and, where the run was one session, its last progress step, key for key."""
    from tests.gym.oracle import GymRun, check_report

    run = GymRun(REAL / name / "rollouts.jsonl", REAL / name / "gym-metrics.jsonl")
    assert main(["report", str(run.output), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [row["agent"] for row in report["agents"]] == ["rt_weather_simple_agent"]
    check_report(report, run, gym_progress=name == "troubled")
    if name == "retried":
        rollouts = report["agents"][0]["rollouts"]
        assert (rollouts["failed"], rollouts["retried"], rollouts["unknown"]) == (0, 2, 0)
