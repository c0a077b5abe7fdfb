"""``rollout-telemetry report``: the table, the JSON, and the Gym keys of the fixture run."""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rollout_telemetry._cli.main import main
from rollout_telemetry._cli.report_command import observer, print_report
from rollout_telemetry._facade.telemetry import RolloutTelemetry
from rollout_telemetry._sources.run_files import RunFiles
from rollout_telemetry._views.intervals import RewardSamples
from rollout_telemetry._views.run_order import RunOrder
from rollout_telemetry.errors import ConfigError

FIXTURES = Path(__file__).parents[1] / "fixtures"


def test_json_report_of_the_fixture_run(capsys: pytest.CaptureFixture[str]) -> None:
    """--format json gives the coverage account, rewards, masked share, top kinds and the Gym keys."""
    assert main(["report", str(FIXTURES / "run.jsonl"), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    rollouts = {row["agent"]: row["rollouts"] for row in report["agents"]}
    events = {row["agent"]: row["events"] for row in report["agents"]}
    assert rollouts["browser_agent"]["expected"] == 3
    assert rollouts["browser_agent"]["unknown"] == 1
    assert events["browser_agent"]["top_failure_kinds"] == {
        "failed:timeout_exceeded": 1,
        "omitted:cancelled": 1,
    }
    assert events["math_agent"]["mean_reward"] == 0.5
    assert events["math_agent"]["mean_reward_unmasked"] == 1.0
    assert events["math_agent"]["masked_share"] == 0.5
    assert rollouts["code_agent"]["retried"] == 1
    assert rollouts["code_agent"]["measured"] == 1  # failed at attempt 0, measured at attempt 1
    assert rollouts["code_agent"]["failed"] == 0
    assert events["code_agent"]["failed"] == 1  # the failed attempt is still one event
    assert rollouts["code_agent"]["unscored"] == 1
    assert report["gym_coverage"] == {
        "coverage/measured_rollouts": 2,
        "coverage/masked_rollouts": 1,
        "coverage/measured_tasks": 3,  # math 0, code 1 and code 2 (unscored: not masked, as Gym counts it)
        "coverage/fully_masked_tasks": 0,
        # Gym's: 7 materialized inputs; 4 distinct rollouts with a main-file row (tasks 0, 0, 1, 2); 7 - 4.
        "coverage/expected": 7,
        "coverage/scored": 4,
        "coverage/missing": 3,
    }


def test_table_report(capsys: pytest.CaptureFixture[str]) -> None:
    """The default is a table in the terminal with one row per agent and the Gym keys."""
    assert main(["report", str(FIXTURES / "run.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "Rollouts by agent: distinct identities" in out
    assert "Events by agent: every row read" in out
    for agent in ("math_agent", "code_agent", "browser_agent"):
        assert agent in out
    assert "coverage/missing" in out
    assert "failed:session_lost (1)" in out


def test_report_counts_rejected_rows(capsys: pytest.CaptureFixture[str]) -> None:
    """Rejected rows are reported, and the good rows still are (the one naming no agent under the file's)."""
    assert main(["report", str(FIXTURES / "bad.jsonl"), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["rejected"]["malformed_json"] == 2
    rollouts = {row["agent"]: row["rollouts"] for row in report["agents"]}
    assert (rollouts["math_agent"]["measured"], rollouts["bad"]["measured"]) == (2, 1)


def test_missing_file_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A path that does not exist is refused with its name."""
    assert main(["report", str(tmp_path / "nope.jsonl")]) == 2
    assert "nope.jsonl does not exist" in capsys.readouterr().err


def test_a_long_agent_name_is_one_row_and_one_label(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 200-character agent is cut to one 128-character label in the report, the exposition and spans."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from rollout_telemetry import RolloutTelemetry
    from rollout_telemetry._sources.follow import RunFiles
    from tests.support import exposition, samples

    agent = "agent_" + "x" * 194
    assert len(agent) == 200
    main_file = tmp_path / "run.jsonl"
    rows = [
        {"reward": 1.0, "_ng_task_index": 0, "_ng_rollout_index": i, "_ng_environment_server": agent}
        for i in range(2)
    ]
    main_file.write_text("".join(json.dumps(row) + "\n" for row in rows))
    (tmp_path / "run_materialized_inputs.jsonl").write_text(
        "".join(
            json.dumps({"_ng_task_index": 0, "_ng_rollout_index": i, "_ng_environment_server": agent}) + "\n"
            for i in range(3)
        )
    )
    assert main(["report", str(main_file), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [row["agent"] for row in report["agents"]] == [agent[:128]]
    assert report["agents"][0]["rollouts"]["measured"] == 2
    assert report["agents"][0]["rollouts"]["unknown"] == 1

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry = RolloutTelemetry(tracer_provider=provider)
    telemetry._run_follower(RunFiles.from_main(main_file)).poll()
    with telemetry.rollout(agent) as rollout:
        rollout.complete({"reward": 1.0})
    agent_labels = {
        dict(labels)["agent"]
        for (_, labels) in samples(exposition(telemetry.registry))
        if "agent" in dict(labels)
    }
    assert agent_labels == {agent[:128]}
    (span,) = exporter.get_finished_spans()
    assert span.attributes is not None
    assert span.attributes["rollout.agent"] == agent[:128]


def test_piped_report_honours_columns(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Piped, the report is as wide as COLUMNS says; narrower than its tables, every figure an agent at a
    time, whole (no heading cut to ``v…`` or ``degr…`` as the wide tables were at 80 columns)."""
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["report", str(FIXTURES / "gym-0.7.0" / "troubled" / "rollouts.jsonl")]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "…" not in out
    figures = {
        cells[0].strip(): cells[1].strip()
        for line in out.splitlines()
        if line.startswith("│") and len(cells := line.strip("│").split("│")) == 2
    }
    assert (figures["expected"], figures["degraded"], figures["members lost"]) == ("24", "0", "6")
    assert figures["mean reward unmasked"] == "+0.8889"
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["report", str(FIXTURES / "run.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "Rollouts by agent: distinct identities" in out
    assert max(len(line) for line in out.splitlines()) <= 200


def test_a_progress_bar_on_a_terminal_and_none_when_piped(tmp_path: Path) -> None:
    """Reading on a terminal draws rich's progress bar on stderr; piped, stderr stays silent."""
    import os
    import subprocess
    import sys

    row = json.dumps({"reward": 1.0, "_ng_environment_server": "a", "response": {"text": "x" * 2000}})
    (tmp_path / "run.jsonl").write_text((row + "\n") * 20_000)
    command = [
        sys.executable,
        "-m",
        "rollout_telemetry",
        "report",
        str(tmp_path / "run.jsonl"),
        "--format",
        "json",
    ]
    quiet = {
        k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")
    }
    piped = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True, env=quiet)
    assert piped.stderr == ""
    terminal = subprocess.run(
        command, capture_output=True, text=True, timeout=120, check=True, env={**quiet, "FORCE_COLOR": "1"}
    )
    assert "reading" in terminal.stderr
    assert json.loads(terminal.stdout) == json.loads(piped.stdout)


def _rows(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_an_empty_results_file_beside_its_inputs_is_every_rollout_unknown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run that died before its first row: every expected rollout unknown, exit 0, as NeMo Gym counts it."""
    (tmp_path / "run.jsonl").write_text("")
    inputs = [
        {"agent_ref": {"name": "math"}, "_ng_task_index": t, "_ng_rollout_index": r}
        for t in range(3)
        for r in range(2)
    ]
    _rows(tmp_path / "run_materialized_inputs.jsonl", inputs)
    assert main(["report", str(tmp_path / "run.jsonl"), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    (agent,) = report["agents"]
    assert (agent["agent"], agent["rollouts"]["expected"], agent["rollouts"]["unknown"]) == ("math", 6, 6)
    assert report["gym_coverage"] == {"coverage/expected": 6, "coverage/scored": 0, "coverage/missing": 6}
    assert main(["report", str(tmp_path / "run.jsonl")]) == 0
    assert "Rollouts by agent" in capsys.readouterr().out
    (tmp_path / "run_materialized_inputs.jsonl").unlink()
    assert main(["report", str(tmp_path / "run.jsonl")]) == 1  # no inputs: nothing to report
    assert "it is empty" in capsys.readouterr().err


def test_rows_without_identity_fill_the_expected_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rows with neither agent nor identity beside inputs naming one agent are that agent's rollouts, and fill
    its expected ones instead of adding to them (Gym's polymath example: 5 expected, 5 done, not 10)."""
    inputs = [{"agent_ref": {"name": "poly"}, "_ng_task_index": t, "_ng_rollout_index": 0} for t in range(5)]
    _rows(tmp_path / "run_materialized_inputs.jsonl", inputs)
    _rows(tmp_path / "run.jsonl", [{"reward": r} for r in (1.0, 1.0, 0.0, 1.0, 1.0)])
    for extra in ([], ["--agent", "someone"]):  # the inputs' one agent wins over --agent
        assert main(["report", str(tmp_path / "run.jsonl"), "--format", "json", *extra]) == 0
        out, err = capsys.readouterr()
        report = json.loads(out)
        (agent,) = report["agents"]
        assert agent["agent"] == "poly"
        assert (
            agent["rollouts"]["expected"],
            agent["rollouts"]["measured"],
            agent["rollouts"]["unknown"],
        ) == (5, 5, 0)
        assert report["gym_progress"]["progress/poly/reward_lower_bound"] == 80.0
        assert report["gym_coverage"]["coverage/missing"] == 0
        assert err == ""  # the inputs named them: nothing to say


def test_several_files_and_a_glob(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Several PATHs or a quoted glob: one report per run, a sidecar read with its main file (not as a run),
    JSON as a list; a wrong file among them is said in one line, the others still reported, exit 2."""
    for name, reward in (("a", 1.0), ("b", 0.0)):
        _rows(
            tmp_path / f"{name}.jsonl",
            [{"reward": reward, "_ng_environment_server": name, "_ng_task_index": 0, "_ng_rollout_index": 0}],
        )
        _rows(
            tmp_path / f"{name}_materialized_inputs.jsonl",
            [{"_ng_environment_server": name, "_ng_task_index": 0, "_ng_rollout_index": 0}],
        )
    assert main(["report", str(tmp_path / "*.jsonl"), "--format", "json"]) == 0
    reports = json.loads(capsys.readouterr().out)
    assert [
        (r["file"], r["agents"][0]["agent"], r["agents"][0]["rollouts"]["expected"]) for r in reports
    ] == [
        (str(tmp_path / "a.jsonl"), "a", 1),
        (str(tmp_path / "b.jsonl"), "b", 1),
    ]
    (tmp_path / "c.jsonl").write_text("x,y\n1,2\n")
    assert (
        main(["report", str(tmp_path / "a.jsonl"), str(tmp_path / "c.jsonl"), str(tmp_path / "b.jsonl")]) == 2
    )
    out, err = capsys.readouterr()
    assert err.count("\n") == 1
    assert "c.jsonl is not JSON Lines" in err
    assert out.count("Rollouts by agent") == 2
    assert str(tmp_path / "b.jsonl") in out
    assert main(["report", str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl"), "--inputs", "x"]) == 2
    assert "give one PATH with them" in capsys.readouterr().err


def test_a_last_row_without_its_newline_is_counted_once_the_files_are_complete(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A finished file whose last row has no newline (ten of NeMo Gym's example files): report counts it."""
    row = {"reward": 1.0, "_ng_environment_server": "a"}
    (tmp_path / "run.jsonl").write_text(json.dumps(row) + "\n" + json.dumps(row | {"reward": 0.0}))
    assert main(["report", str(tmp_path / "run.jsonl"), "--format", "json"]) == 0
    (agent,) = json.loads(capsys.readouterr().out)["agents"]
    assert (agent["events"]["measured"], agent["events"]["mean_reward"]) == (2, 0.5)


def test_truncation_tokens_and_groups_of_several(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The events give the truncated share of rows and the mean input and output tokens per response with
    usage; groups are shown only for tasks of more than one rollout (one rollout per task shows none)."""

    def response(input_tokens: int, output_tokens: int, truncated: bool) -> dict[str, object]:
        cut: dict[str, object] = {
            "status": "incomplete",
            "incomplete_details": {"reason": "max_output_tokens"},
        }
        usage = {"input_tokens": input_tokens, "output_tokens": output_tokens}
        return {"status": "completed", "usage": usage} | (cut if truncated else {})

    rows = [
        # "solo": one rollout per task (an evaluation); 1 of 4 rows truncated; usage on 3 of them.
        {"reward": 1.0, "response": response(100, 10, False)},
        {"reward": 0.0, "response": response(200, 50, True)},
        {"reward": 1.0, "response": response(300, 30, False)},
        {"reward": 1.0, "response": "no Responses API object"},
    ]
    identified = [
        row | {"_ng_environment_server": "solo", "_ng_task_index": t, "_ng_rollout_index": 0}
        for t, row in enumerate(rows)
    ]
    # "grpo": two tasks of two rollouts, rewards that differ (valid) and that do not (uniform).
    grpo = [
        {
            "reward": reward,
            "_ng_environment_server": "grpo",
            "_ng_task_index": task,
            "_ng_rollout_index": rollout,
        }
        for task, rollout, reward in ((0, 0, 1.0), (0, 1, 0.0), (1, 0, 1.0), (1, 1, 1.0))
    ]
    _rows(tmp_path / "run.jsonl", identified + grpo)
    _rows(
        tmp_path / "run_materialized_inputs.jsonl",
        [
            {key: row[key] for key in ("_ng_environment_server", "_ng_task_index", "_ng_rollout_index")}
            for row in identified + grpo
        ],
    )
    assert main(["report", str(tmp_path / "run.jsonl"), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    events = {row["agent"]: row["events"] for row in report["agents"]}
    assert events["solo"]["truncated_share"] == 0.25
    assert (events["solo"]["mean_input_tokens"], events["solo"]["mean_output_tokens"]) == (200.0, 30.0)
    assert events["grpo"]["truncated_share"] == 0.0
    assert events["grpo"]["mean_input_tokens"] is None  # no usage: no mean, not 0
    assert report["groups"] == {
        "grpo": {"valid": 1, "degraded": 0, "uniform": 1, "insufficient": 0, "no_valid": 0, "open": 0}
    }
    assert main(["report", str(tmp_path / "run.jsonl")]) == 0
    table = capsys.readouterr().out
    assert "trunc %" in table
    assert "25.0" in table
    assert "200.0" in table
    assert "Groups by agent" in table


TROUBLED = FIXTURES / "gym-0.7.0" / "troubled" / "rollouts.jsonl"


def test_markdown_gives_each_agents_means_with_their_intervals_and_denominators(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A real NeMo Gym 0.7.0 run's files (masked and failed rollouts) as Markdown: per agent the means and
    their 95% intervals (clustered by task: 20 of 22 rewards over 6 tasks, 16 of 18 over 5), the counts they
    rest on, the same as --format json's, and lines saying what the denominators, the method and the
    clusters are; then pass@k per agent (its rewards are 0 or 1)."""
    assert main(["report", str(TROUBLED), "--format", "json"]) == 0
    (agent,) = json.loads(capsys.readouterr().out)["agents"]
    assert main(["report", str(TROUBLED), "--format", "markdown"]) == 0
    text = capsys.readouterr().out
    header, rule, row, *notes = text.split("\n\n| agent | tasks |")[0].splitlines()
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    named = dict(zip([cell.strip() for cell in header.strip("|").split("|")], cells, strict=True))
    # 20/22 over 6 tasks and 16/18 over 5 (Wilson, taking the rows as independent: [0.722, 0.975])
    assert named["mean reward [95% CI]"] == "0.909 [0.679, 1.000]"
    assert named["reward_unmasked [95% CI]"] == "0.889 [0.587, 1.000]"
    events = agent["events"]
    assert float(named["mean reward [95% CI]"].split()[0]) == round(events["mean_reward"], 3)
    assert events["mean_reward_ci95"] == {"low": 0.6787, "high": 1.0, "method": "clustered", "clusters": 6}
    counts = {
        column: int(named[column]) for column in ("expected", "measured", "masked", "failed", "unknown")
    }
    assert counts == {k: agent["rollouts"][k] for k in counts}
    assert (int(named["rewards"]), int(named["measured rewards"])) == (22, 18)
    assert any("over every row with a reward" in note for note in notes)
    clusters = "rt_weather_simple_agent 6 (reward_unmasked: 5)"
    assert any("clustered by task" in note and clusters in note for note in notes)
    passes = text.split("\n\n| agent | tasks |")[1].splitlines()[2]
    assert passes == "| rt_weather_simple_agent | 6 | 0.917 | 0.972 | 1.000 (5 tasks) | 0.0% | 83.3% |"
    assert [entry["value"] for entry in events["per_task"]["pass_at_k"]] == [0.9167, 0.9722, 1.0, 1.0]
    guide = (FIXTURES.parent.parent / "docs" / "guides" / "follow-files.md").read_text(encoding="utf-8")
    assert "\n".join((header, rule, row)) in guide  # the guide shows what the command prints


def test_csv_is_a_row_per_agent_with_the_same_figures(capsys: pytest.CaptureFixture[str]) -> None:
    """Two runs as CSV: one header, a row per agent naming its file, the means and their intervals as
    --format json gives them."""
    import csv

    retried = FIXTURES / "gym-0.7.0" / "retried" / "rollouts.jsonl"
    assert main(["report", str(retried), str(TROUBLED), "--format", "json"]) == 0
    reports = json.loads(capsys.readouterr().out)
    assert main(["report", str(retried), str(TROUBLED), "--format", "csv"]) == 0
    rows = list(csv.DictReader(capsys.readouterr().out.splitlines()))
    assert [row["file"] for row in rows] == [str(retried), str(TROUBLED)]
    for row, report in zip(rows, reports, strict=True):
        (agent,) = report["agents"]
        events = agent["events"]
        assert float(row["mean_reward"]) == events["mean_reward"]
        ci = events["mean_reward_unmasked_ci95"]
        assert (
            float(row["mean_reward_unmasked_ci95_low"]),
            float(row["mean_reward_unmasked_ci95_high"]),
        ) == (
            ci["low"],
            ci["high"],
        )
        assert int(row["unknown"]) == agent["rollouts"]["unknown"]


def test_gyms_task_file_is_refused_naming_the_file_to_give(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The tasks given to ``gym eval run --input`` (rows of requests, no reward) were reported as rows
    unscored with exit 0; now one line naming the run's output instead, exit 2. A run's materialized inputs
    under another name: the same."""
    tasks = tmp_path / "data.jsonl"
    tasks.write_text(json.dumps({"responses_create_params": {"input": "what's the weather?"}}) + "\n")
    assert main(["report", str(tasks)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"{tasks} holds NeMo Gym's tasks (requests, no reward): give the run's output" in err
    inputs = tmp_path / "expected.jsonl"
    inputs.write_text((TROUBLED.parent / "rollouts_materialized_inputs.jsonl").read_text())
    assert main(["report", str(inputs)]) == 2
    assert "holds a run's materialized inputs" in capsys.readouterr().err


def test_the_intervals_and_reward_counts_are_each_agents_as_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An agent name longer than a label (cut to 128) keeps its intervals; a masked row without a reward is
    in no mean, nor in the rewards counted (2 measured rows and 1 such masked row: 2 rewards)."""
    import csv

    name = "a" * 130
    rows = [
        {"reward": 1.0, "agent_ref": {"name": name}},
        {"reward": 0.0, "agent_ref": {"name": name}},
        {"reward": None, "mask_sample": True, "agent_ref": {"name": name}},
    ]
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert main(["report", str(path), "--format", "csv"]) == 0
    (row,) = csv.DictReader(capsys.readouterr().out.splitlines())
    assert row["agent"] == name[:128]
    assert (row["rewards"], row["measured_rewards"]) == ("2", "2")
    assert row["mean_reward_ci95_method"] == "wilson"


def test_html_report_embeds_the_json_report(capsys: pytest.CaptureFixture[str]) -> None:
    """--format html is one page holding --format json's report, with a chart per agent's rewards."""
    assert main(["report", str(FIXTURES / "run.jsonl"), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert main(["report", str(FIXTURES / "run.jsonl"), "--format", "html"]) == 0
    page = capsys.readouterr().out
    assert page.startswith("<!doctype html>")
    opening = '<script type="application/json" id="report">'
    embedded = page[page.index(opening) + len(opening) : page.index("</script>", page.index(opening))]
    assert json.loads(embedded) == report
    assert page.count("mean rewards along the run</title>") == len(report["agents"])


def test_html_report_of_several_runs_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """--format html shows one run: two PATHs are a wrong input, said in one line."""
    run = str(FIXTURES / "run.jsonl")
    gym = str(FIXTURES / "gym" / "run.jsonl")
    assert main(["report", run, gym, "--format", "html"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "rollout-telemetry report: --format html shows one run, and 2 files were given: give one PATH"
    ]


def test_gym_html_into_a_missing_folder_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """gym --html naming a folder that does not exist fails before Gym starts, in one line."""
    assert main(["gym", "--html", str(tmp_path / "nowhere" / "run.html"), "--", "gym", "eval", "run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "nowhere is not a directory" in err[0]


@pytest.mark.parametrize(
    ("make", "what"),
    [
        (lambda path, outside: path.symlink_to(outside), "a symbolic link"),
        (lambda path, outside: os.mkfifo(path), "a named pipe (FIFO)"),
        (lambda path, outside: path.mkdir(), "a directory"),
    ],
    ids=["dangling link", "fifo", "directory"],
)
def test_gym_html_naming_what_is_not_a_regular_file_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, make: Callable[[Path, Path], None], what: str
) -> None:
    """gym --html naming a link (to a file not there yet), a named pipe or a folder fails before Gym starts,
    in one line naming the path and what it is; the link's target is not created."""
    page, outside = tmp_path / "run.html", tmp_path / "outside.html"
    make(page, outside)
    assert main(["gym", "--html", str(page), "--", "gym", "eval", "run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert f"{page} is {what}, not a regular file" in err[0]
    assert not outside.exists()


def _html_of_the_fixture_run(page: Path) -> None:
    """Print the fixture run's report and write its page to ``page``, as `gym --html` does at a run's end."""
    telemetry = RolloutTelemetry()
    order = RunOrder()
    follower = telemetry._run_follower(
        RunFiles(FIXTURES / "run.jsonl"), observe=observer(RewardSamples(), order)
    )
    follower.poll()
    print_report(telemetry, follower, "json", html=(page, order))


def test_the_html_page_is_written_whole_and_never_through_a_link(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The page is a new regular file (a hard link to the old one keeps the old page, readable by others:
    0644); a link put at its path since the command started is refused (ConfigError naming it) and the link's
    target keeps its bytes."""
    page = tmp_path / "run.html"
    page.write_text("old page")
    os.link(page, tmp_path / "kept.html")
    _html_of_the_fixture_run(page)
    assert page.read_text().startswith("<!doctype html>")
    assert stat.S_IMODE(page.stat().st_mode) == 0o644
    assert (tmp_path / "kept.html").read_text() == "old page"
    page.unlink()
    page.symlink_to(tmp_path / "kept.html")
    with pytest.raises(ConfigError, match=re.escape(f"{page} is a symbolic link, not a regular file")):
        _html_of_the_fixture_run(page)
    assert (tmp_path / "kept.html").read_text() == "old page"
    assert sorted(os.listdir(tmp_path)) == ["kept.html", "run.html"]
    capsys.readouterr()


def test_a_pass_threshold_gives_pass_at_k_of_rewards_in_between(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rewards between 0 and 1, two tasks of three rollouts: no per-task figures by default; with
    --pass-threshold 0.5 pass@k counts a reward of 0.5 or more as solving, in the JSON and the Markdown;
    a threshold that is not a finite number is refused with one line, exit 2."""
    rewards = {0: (0.2, 0.6, 0.1), 1: (0.9, 0.5, 0.7)}
    rows = [
        {"reward": reward, "_ng_task_index": task, "_ng_rollout_index": index, "agent_ref": {"name": "a"}}
        for task, values in rewards.items()
        for index, reward in enumerate(values)
    ]
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert main(["report", str(path), "--format", "json"]) == 0
    (agent,) = json.loads(capsys.readouterr().out)["agents"]
    assert agent["events"]["per_task"] is None
    assert agent["events"]["mean_reward_ci95"]["method"] == "clustered"
    assert main(["report", str(path), "--format", "json", "--pass-threshold", "0.5"]) == 0
    (agent,) = json.loads(capsys.readouterr().out)["agents"]
    figures = agent["events"]["per_task"]
    assert [entry["value"] for entry in figures["pass_at_k"]] == [0.6667, 0.8333, 1.0]  # 1/3 and 3/3 solve
    assert (figures["never_solved"], figures["always_solved"]) == (0.0, 0.5)
    assert main(["report", str(path), "--format", "markdown", "--pass-threshold", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "| a | 2 | 0.667 | 0.833 | 1.000 | 0.0% | 50.0% |" in out
    assert "when its reward is at least 0.5" in out
    assert main(["report", str(path), "--pass-threshold", "nan"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "--pass-threshold: must be a finite number, got 'nan'" in err


def test_the_table_and_the_page_show_each_interval_with_its_method_and_tasks(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The troubled run's intervals, as --format json gives them, in the wide table, the narrow one (an agent
    at a time) and the HTML report's overview: bounds, method (clustered) and the tasks each rests on."""
    assert main(["report", str(TROUBLED), "--format", "json"]) == 0
    events = json.loads(capsys.readouterr().out)["agents"][0]["events"]
    every, measured = events["mean_reward_ci95"], events["mean_reward_unmasked_ci95"]
    assert (every["method"], every["clusters"], measured["clusters"]) == ("clustered", 6, 5)
    shown = f"[{every['low']:.3f}, {every['high']:.3f}] clustered, 6 tasks"
    assert shown == "[0.679, 1.000] clustered, 6 tasks"
    for columns in ("200", "100"):  # narrow, the cell wraps before "tasks"
        monkeypatch.setenv("COLUMNS", columns)
        assert main(["report", str(TROUBLED)]) == 0
        table = capsys.readouterr().out
        assert shown in table if columns == "200" else shown.removesuffix(" tasks") in table
        assert f"[{measured['low']:.3f}, {measured['high']:.3f}] clustered, 5" in table
    assert main(["report", str(TROUBLED), "--format", "html"]) == 0
    page = capsys.readouterr().out
    assert f'<td data-k="mean_reward_ci95" data-v="{every["low"]},{every["high"]}">{shown}</td>' in page


def _points_drawn(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], path: Path, agent: str
) -> tuple[list[tuple[float, ...]], str]:
    """The points ``report --format html`` draws of ``agent``'s charts (what the page is rendered from), and
    the page."""
    from rollout_telemetry._views import page as page_module

    drawn: list[list[tuple[float, ...]]] = []
    render = page_module.render_page

    def spy(report: Any, points: Callable[[str], Any], **options: Any) -> str:
        drawn.append(list(points(agent)))
        return render(report, points, **options)

    monkeypatch.setattr(page_module, "render_page", spy)
    assert main(["report", str(path), "--format", "html"]) == 0
    return drawn[0], capsys.readouterr().out


def test_the_report_draws_a_failure_from_the_sidecar_at_its_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The report's charts place rows by task, then rollout index: a failure of task 0 read from the failures
    sidecar (after the whole rollouts file) is drawn at task 0, and a row without an identity after all."""
    from rollout_telemetry._views.story import POINT_FIELDS

    agent = {"_ng_environment_server": "math_agent"}
    rows: list[dict[str, object]] = [{"reward": 0.0, "mask_sample": True, **agent}]  # no identity, read first
    rows += [
        {"reward": 1.0, "_ng_task_index": task, "_ng_rollout_index": rollout, **agent}
        for task in range(5)
        for rollout in range(2)
        if (task, rollout) != (0, 1)
    ]
    _rows(tmp_path / "run.jsonl", rows)
    failure = {"_ng_failure_class": "timeout_exceeded", "_ng_failure_terminal": True}
    _rows(
        tmp_path / "run_failures.jsonl", [{**failure, "_ng_task_index": 0, "_ng_rollout_index": 1, **agent}]
    )
    points, page = _points_drawn(monkeypatch, capsys, tmp_path / "run.jsonl", "math_agent")
    failed, masked = POINT_FIELDS.index("failed"), POINT_FIELDS.index("masked")
    assert points[-1][0] == 11  # every row: 9 of the rollouts file, the failure, the row without identity
    assert next(point[0] for point in points if point[failed]) == 2  # task 0's second rollout
    assert next(point[0] for point in points if point[masked]) == 11  # the row without identity, last
    assert "by task index, then rollout index" in page
    assert "Rows without an identity (1) come after the others" in page
