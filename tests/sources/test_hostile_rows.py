"""What a row or a caller sends cannot take the exporter down, nor grow its memory without bound.

Each test pins down one finding of an attacker pass: a value no float64 counter can carry, a line the decoder
cannot take, a caller's object that raises while read, names and rows that grew caches and stores, lines
longer than any row, and files that are not regular files.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest

from rollout_telemetry import Disposition, RolloutTelemetry
from rollout_telemetry._cli.main import main
from rollout_telemetry._contract.generation import MAX_TOKENS
from rollout_telemetry._contract.outcome import classify
from rollout_telemetry._sources.follow import RunFiles
from rollout_telemetry._sources.gym_rows import _DECODER, MAX_FIELD, decode_row, recover_row
from rollout_telemetry._sources.tail import Tail
from rollout_telemetry._store.coverage import Coverage
from rollout_telemetry._store.groups import Groups
from rollout_telemetry._store.names import Names
from rollout_telemetry.errors import Rejection
from tests.support import examples

ROW = {"reward": 1.0, "agent_ref": {"name": "a"}}


def _usage(**counts: int) -> dict[str, Any]:
    return {"reward": 1.0, "response": {"status": "completed", "usage": counts}}


@pytest.mark.parametrize("count", [10**400, 10**30, MAX_TOKENS + 1, -1])
def test_a_token_count_beyond_the_bound_is_refused_and_every_render_works(count: int) -> None:
    """A count of 10**400 used to break every later render (OverflowError), 10**30 to poison the counter:
    now refused by field, the rollout not counted, and the exposition renders before and after."""
    telemetry = RolloutTelemetry()
    telemetry.record("a", _usage(input_tokens=10, output_tokens=count))
    assert telemetry.snapshot().rejected == {"invalid_output_tokens": 1}
    telemetry.record("a", _usage(input_tokens=10, output_tokens=MAX_TOKENS))
    generate_latest(telemetry.registry)
    agent = telemetry.snapshot().agent("a")
    assert agent is not None
    assert agent.completed == 1
    assert agent.tokens == (10, MAX_TOKENS, 0, 0)


def test_a_token_count_of_400_digits_in_a_followed_row_is_a_counted_rejection(tmp_path: Path) -> None:
    """The same count in a rollout file: the row is rejected, the next one counted, /metrics renders."""
    main_file = tmp_path / "run.jsonl"
    usage = '{"input_tokens": 1, "output_tokens": 1' + "0" * 400 + "}"
    main_file.write_text(
        '{"reward": 1.0, "agent_ref": {"name": "a"}, "response": {"usage": ' + usage + "}}\n"
        + json.dumps(ROW) + "\n"
    )  # fmt: skip
    telemetry = RolloutTelemetry()
    telemetry._run_follower(RunFiles.from_main(main_file)).poll()
    assert telemetry.snapshot().rejected == {"invalid_output_tokens": 1}
    assert b"rollout_completed_total" in generate_latest(telemetry.registry)


DEPTH = 100_000
"""Nesting that exceeds the decoder's recursion limit on every supported Python (3.11 stops at 1,000)."""


def _hostile_file(path: Path) -> None:
    deep = '{"reward": 1.0, "agent_ref": {"name": "a"}, "ignored": ' + "[" * DEPTH + "]" * DEPTH + "}"
    huge_reward = '{"reward": 1' + "0" * 400 + ', "agent_ref": {"name": "a"}}'
    path.write_text("\n".join([json.dumps(ROW), deep, huge_reward, json.dumps(ROW)]) + "\n")


def test_report_survives_a_line_nested_too_deep_and_a_reward_of_400_digits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Both used to end report with a traceback (RecursionError, OverflowError); now each is one counted
    rejection, and the rows around them are counted."""
    _hostile_file(tmp_path / "run.jsonl")
    assert main(["report", str(tmp_path / "run.jsonl"), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["rejected"] == {"malformed_json": 1, "invalid_reward": 1}
    assert report["agents"][0]["events"]["measured"] == 2


def test_a_live_follower_counts_hostile_lines_and_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Followed live, such rows were skipped with a traceback and never counted: now counted rejections,
    with no error logged."""
    _hostile_file(tmp_path / "run.jsonl")
    telemetry = RolloutTelemetry()
    telemetry._run_follower(RunFiles.from_main(tmp_path / "run.jsonl")).poll()
    assert telemetry.snapshot().rejected == {"malformed_json": 1, "invalid_reward": 1}
    assert not [record for record in caplog.records if record.levelname in ("ERROR", "CRITICAL")]


class _Raising:
    """A verify response whose attribute access raises, as a broken property would."""

    @property
    def reward(self) -> float:
        msg = "the judge's client is gone"
        raise RuntimeError(msg)


@pytest.mark.parametrize("response", [_Raising(), {"reward": 10**400}], ids=["raising", "int-reward-10**400"])
def test_complete_never_raises_on_what_the_caller_hands_it(response: object) -> None:
    """rollout().complete() used to raise into the caller and count the rollout as agent_run_error; now the
    input is a counted rejection by its reason and the rollout a protocol_violation failure."""
    telemetry = RolloutTelemetry()
    with telemetry.rollout("a") as rollout:
        rollout.complete(response)
    snapshot = telemetry.snapshot()
    reason = "invalid_response" if isinstance(response, _Raising) else "invalid_reward"
    assert snapshot.rejected == {reason: 1}
    agent = snapshot.agent("a")
    assert agent is not None
    assert agent.by_kind(Disposition.FAILED) == {"protocol_violation": 1}
    assert agent.failed == 1


def test_record_counts_a_raising_response_as_an_invalid_response() -> None:
    """record() of an object that raises while read: invalid_response (it was internal_error); strict raises
    it as the outcome error it is."""
    telemetry = RolloutTelemetry()
    telemetry.record("a", _Raising())
    assert telemetry.snapshot().rejected == {"invalid_response": 1}
    with pytest.raises(ValueError, match=r"^response: could not be read: RuntimeError"):
        classify(_Raising())


def _traced(work: Any) -> int:
    """Bytes still allocated after ``work()`` (tracemalloc)."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        work()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


_EMPTIES = "[" + "[]," * (2 << 20) + "[]]"  # 6 MiB of empty arrays: 1 GB as Python lists
_HUGE_OBJECT = "{" + ",".join(f'"k{i}":[]' for i in range(400_000)) + "}"


def _at_no_cost(read: Any, line: bytes) -> Any:
    """What ``read(line)`` returns, checked to allocate less than a quarter of the line at its peak."""
    tracemalloc.start()
    try:
        result = read(line)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < len(line) // 4, f"{peak} B allocated for a line of {len(line)} B"
    return result


def _row(**fields: str) -> str:
    """A row from its fields' JSON texts."""
    return "{" + ", ".join(f'"{name}": {text}' for name, text in fields.items()) + "}"


@pytest.mark.parametrize(
    ("row", "read"),
    [
        (_row(reward=_EMPTIES, agent_ref='{"name": "a"}'), lambda row: row.reward == []),
        (_row(reward="1", ng_perf=_HUGE_OBJECT), lambda row: row.perf == {}),
        (_row(reward="1", agent_ref=_HUGE_OBJECT), lambda row: row.agent_ref == {}),
        (_row(reward="1", ng_trajectory=_EMPTIES), lambda row: row.trajectory == []),
        (_row(reward="1", response=_EMPTIES), lambda row: row.response == []),
        (
            _row(reward="1", response=_row(status='"completed"', usage=_HUGE_OBJECT, output="[]")),
            lambda row: row.response.usage == {} and row.response.status == "completed",
        ),
    ],
    ids=["reward", "ng_perf", "agent_ref", "ng_trajectory", "response", "response.usage"],
)
def test_a_huge_array_or_object_in_a_read_field_is_read_empty_at_no_cost(row: str, read: Any) -> None:
    """One 60 MiB row whose reward was an array of empty arrays took 1.6 GB: a read field over MAX_FIELD that
    is an array or an object is read as an empty one of its kind (as wrong a value, at no cost); what else
    the row says is read as before."""
    line = row.encode()
    decoded = _at_no_cost(decode_row, line)
    assert read(decoded)
    assert decoded.reward in ([], 1)


def test_a_torn_line_before_a_huge_field_is_recovered_at_no_cost() -> None:
    """A torn start before a whole row is recovered with the same bound as any line (it used the one-pass
    decoder, and built the huge field whole)."""
    line = ('{"rew' + _row(reward=_EMPTIES, agent_ref='{"name": "a"}')).encode()
    with pytest.raises(Rejection):
        decode_row(line)
    recovered = _at_no_cost(recover_row, line)
    assert recovered is not None
    assert recovered[1].reward == []


def test_a_repeated_response_key_in_a_long_line_reads_the_last_one_as_a_model_response() -> None:
    """The last of a repeated key counts, as in the one-pass decoder, whatever the first one was."""
    line = _row(
        response="[1]",
        **{"response ": "0"},  # a key of its own, to make room for the repeat below
    )
    line = line.replace('"response ": 0', '"response": {"status": "completed", "usage": {"input_tokens": 3}}')
    line = line[:-1] + f', "pad": "{"p" * MAX_FIELD}"}}'
    decoded = decode_row(line.encode())
    assert decoded == _DECODER.decode(line.encode())
    assert getattr(decoded.response, "usage", None) == {"input_tokens": 3}


_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
_READ = ["reward", "mask_sample", "failure_kind", "failure_reason", "response", "_ng_task_index",
         "_ng_rollout_index", "_ng_attempt_index", "agent_ref", "_ng_environment_server", "ng_perf",
         "ng_trajectory", "_ng_failure_record", "_ng_omitted", "_ng_rollout_id"]  # fmt: skip


@settings(max_examples=examples(60), deadline=None)
@given(
    fields=st.dictionaries(st.sampled_from(_READ), _VALUES, max_size=8),
    usage=st.none() | _VALUES,
    padding=st.integers(MAX_FIELD, 2 * MAX_FIELD),
)
def test_a_long_line_is_read_as_the_whole_line_decoder_reads_it(
    fields: dict[str, Any], usage: Any, padding: int
) -> None:
    """A line longer than MAX_FIELD whose read fields are each shorter (a real row's long response) is read
    field by field, and gives the row the one-pass decoder gives."""
    if usage is not None:
        fields["response"] = {"status": "completed", "usage": usage, "output": ["x" * padding]}
    line = json.dumps({**fields, "responses_create_params": "p" * padding}).encode()
    assert len(line) > MAX_FIELD
    try:
        expected = _DECODER.decode(line)
    except Exception:  # a value the schema refuses: both refuse it
        with pytest.raises(Rejection):
            decode_row(line)
        return
    assert decode_row(line) == expected


def test_huge_agent_names_are_not_kept_in_caches() -> None:
    """1,100 names of 1 MB used to add 1 GB (the caches kept 1,024 raw names whatever their length); names
    longer than MAX_CACHED_NAME are resolved again each time instead."""
    telemetry = RolloutTelemetry(max_agents=4096)

    def work() -> None:
        for i in range(200):
            name = f"{i:05d}" + "x" * 100_000  # made here, as a row makes it: only a cache keeps it
            telemetry.record(name, {"reward": 1.0})
            telemetry.record(name, {"reward": 1.0, "failure_kind": name, "mask_sample": True})

    grown = _traced(work)
    assert grown < 3_000_000, f"{grown} bytes kept for 200 names of 100 kB"  # 20 MB per copy kept
    assert len(telemetry.snapshot().agents) == 200  # each cut to a distinct label, every one counted


def test_rows_without_identity_are_counted_not_stored() -> None:
    """A million rows without an identity used to take 367 MB; each is final at once, so only counted."""
    coverage = Coverage()
    measured = classify({"reward": 1.0})[0]

    def work() -> None:
        for _ in range(100_000):
            coverage.observe("a", None, 0, measured, succeeded=True)

    assert _traced(work) < 100_000
    agent = coverage.snapshot().agent("a")
    assert agent is not None
    assert (agent.unidentified, agent.seen) == (100_000, 100_000)


@pytest.mark.parametrize("per_task", [1, 16])
def test_terminal_identities_take_under_100_bytes_each(per_task: int) -> None:
    """An identity, expected and then measured, took about 530 B in coverage and 1.9 KB with groups; the
    goal is a million in at most 100 MB: both stores, with one rollout per task and with 16 (10,000 of them
    weigh as much each as 50,000 do, under tracemalloc's cost of a quarter of a millisecond each)."""
    names = Names()
    coverage = Coverage(names)
    groups = Groups(names)
    outcome = classify({"reward": 1.0})
    count = 10_000

    def work() -> None:
        for i in range(count):
            task, rollout = divmod(i, per_task)
            coverage.expect("a", task, rollout)
            groups.expect("a", task, rollout)
        for i in range(count):
            task, rollout = divmod(i, per_task)
            coverage.observe("a", (task, rollout), 0, outcome[0], succeeded=True, line=i + 1)
            groups.observe("a", task, rollout, outcome, 0)

    per_identity = _traced(work) / count
    assert per_identity < 100, f"{per_identity:.0f} B per identity"
    group = groups.snapshot().agent("a")
    assert group is not None
    assert group.completed == count // per_task


def test_a_line_longer_than_the_cap_is_skipped_once_and_never_read_again(tmp_path: Path) -> None:
    """A line with no newline used to be held whole and read again at every poll (a 2 GB line: 8.1 GB and
    90% of a core); past max_line its bytes are passed over as they come, and it is one counted rejection."""
    path = tmp_path / "run.jsonl"
    path.write_text(json.dumps(ROW) + "\n" + "x" * 5000)  # still being written: no newline yet
    telemetry = RolloutTelemetry()
    follower = telemetry._run_follower(RunFiles.from_main(path), max_line=1024)
    follower.poll()
    assert follower.position == path.stat().st_size  # passed over, not kept to be read again
    with path.open("a") as handle:
        handle.write("y" * 3000 + "\n" + json.dumps(ROW) + "\n")
    follower.poll()
    follower.poll()
    assert telemetry.snapshot().rejected == {"line_too_long": 1}
    agent = telemetry.snapshot().agent("a")
    assert agent is not None
    assert agent.measured == 2


def _in_time(work: Any, seconds: float = 10.0) -> None:
    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "blocked"


def test_a_fifo_swapped_in_live_is_not_opened(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A FIFO in the followed path used to block the follower for good (the open never returns); it is not
    a regular file, so it is not opened, and that is said once."""
    path = tmp_path / "run.jsonl"
    path.write_text(json.dumps(ROW) + "\n")
    telemetry = RolloutTelemetry()
    follower = telemetry._run_follower(RunFiles.from_main(path))
    follower.poll()
    path.unlink()
    os.mkfifo(path)
    _in_time(follower.poll)
    _in_time(follower.poll)
    assert sum("is not a regular file" in record.getMessage() for record in caplog.records) == 1
    assert b"rollout_completed_total" in generate_latest(telemetry.registry)


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "rollout_telemetry", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize("command", ["serve", "report"])
def test_a_fifo_or_device_given_at_start_is_one_line(tmp_path: Path, command: str) -> None:
    """serve FIFO blocked start-up forever; now one line and exit 2, as for /dev/zero."""
    fifo = tmp_path / "run.jsonl"
    os.mkfifo(fifo)
    for path in (str(fifo), "/dev/zero"):
        result = _run(*(["serve", path, "--port", "0"] if command == "serve" else ["report", path]))
        assert result.returncode == 2
        assert result.stderr.strip().splitlines() == [
            f"rollout-telemetry {command}: {path} is not a regular file (a FIFO or a device): give the "
            "run's <stem>.jsonl"
        ]


def test_a_device_as_a_sidecar_is_not_read(tmp_path: Path) -> None:
    """--failures /dev/zero used to be read forever; a device is never opened, and the run is reported."""
    main_file = tmp_path / "run.jsonl"
    main_file.write_text(json.dumps(ROW) + "\n")
    result = _run("report", str(main_file), "--failures", "/dev/zero", "--format", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["agents"][0]["events"]["measured"] == 1


@pytest.mark.parametrize("swapped_in", ["zero", "fifo"])
def test_a_path_swapped_between_check_and_read_is_not_read(
    tmp_path: Path, swapped_in: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The path swapped for a symlink to /dev/zero (it was read forever at 100% CPU) or a FIFO (an open that
    never returned) just after the follower checked it: what is read is what was opened and checked, so the
    poll returns at once, says so once, and the rows written once the path is back are counted."""
    real = tmp_path / "kept.jsonl"
    real.write_text(json.dumps(ROW) + "\n")
    path = tmp_path / "run.jsonl"
    path.symlink_to(real)  # a symlink to a regular file is followed
    telemetry = RolloutTelemetry()
    follower = telemetry._run_follower(RunFiles.from_main(path))
    follower.poll()
    with real.open("a") as rows:
        rows.write(json.dumps(ROW) + "\n")
    checked = Tail.check

    def check_then_swap(tail: Tail) -> bool | None:
        started_over = checked(tail)
        if tail.path == path and path.is_symlink() and path.resolve() == real:
            path.unlink()
            if swapped_in == "zero":
                path.symlink_to("/dev/zero")
            else:
                os.mkfifo(path)
        return started_over

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Tail, "check", check_then_swap)
        _in_time(follower.poll, seconds=5)
        _in_time(follower.poll, seconds=5)
    path.unlink()
    path.symlink_to(real)
    with real.open("a") as rows:
        rows.write(json.dumps(ROW) + "\n")
    follower.poll()
    agent = telemetry.snapshot().agent("a")
    assert agent is not None
    assert agent.measured == 3
    assert sum("is not a regular file" in record.getMessage() for record in caplog.records) == 1


def test_an_unreadable_followed_file_is_said_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A followed path that cannot be opened (here a symlink loop: the tests run as root, whom permissions
    do not stop) was warned about at every poll; it is said once, and its rows are read once it can be."""
    path = tmp_path / "run.jsonl"
    path.symlink_to(path)
    telemetry = RolloutTelemetry()
    follower = telemetry._run_follower(RunFiles.from_main(path))
    for _ in range(3):
        follower.poll()
    assert sum("cannot read" in record.getMessage() for record in caplog.records) == 1
    path.unlink()
    path.write_text(json.dumps(ROW) + "\n")
    follower.poll()
    agent = telemetry.snapshot().agent("a")
    assert agent is not None
    assert agent.measured == 1
