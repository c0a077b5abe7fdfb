"""``rollout-telemetry gym``: the Gym command read for its output, exit statuses said as a shell says them,
and wrong inputs in one line.

The watch of a real child (its process group, signals passed on once, its exit status passed through) is in
tests/e2e/test_gym_watch_e2e.py.
"""

from __future__ import annotations

import io
import signal
import sys
from pathlib import Path

import pytest

from rollout_telemetry import Disposition
from rollout_telemetry._cli.gym_command import nothing_written, say_status, status_line
from rollout_telemetry._cli.main import main
from rollout_telemetry._sources.gym_process import GymCommand, describe_status, exit_status
from rollout_telemetry._store.coverage import AgentCoverage, CoverageSnapshot
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
    ("override", "routes"),
    [(None, False), ("+route_failures_to_sidecar=true", True), ("++route_failures_to_sidecar=False", False)],
)
def test_whether_failures_are_routed_to_the_sidecar_is_read(override: str | None, routes: bool) -> None:
    """Hydra's route_failures_to_sidecar= (with + or ++) says whether Gym writes its failed rollouts."""
    argv = ["python", "--output", "o.jsonl", *([override] if override else [])]
    assert GymCommand.parse(argv).routes_failures is routes


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


def test_an_end_after_an_interrupt_says_so_and_explains_gyms_crash() -> None:
    """After a signal passed on, the line names it; Gym 0.7.0's SIGSEGV on an interrupt is said to be how it
    ends, its files read whole; a SIGSEGV nobody asked for is only named."""
    sigint = [signal.SIGINT]
    assert (
        describe_status(130, sigint)
        == "Gym was ended by SIGINT (exit status 130) after SIGINT was passed on to it"
    )
    assert describe_status(139, sigint) == (
        "Gym was ended by SIGSEGV (exit status 139) after SIGINT was passed on to it (expected: NeMo Gym "
        "0.7.0 ends so on an interrupt; everything it wrote was read)"
    )
    assert describe_status(139) == "Gym was ended by SIGSEGV (exit status 139)"
    assert describe_status(1, [signal.SIGTERM, signal.SIGTERM]) == (
        "Gym exited with status 1 after SIGTERM was passed on to it"
    )
    assert describe_status(1, [signal.SIGINT, signal.SIGTERM]) == (
        "Gym exited with status 1 after SIGINT, SIGTERM were passed on to it"
    )


def test_wrong_inputs_end_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """The command's mistakes are one line on stderr and exit 2, before anything starts."""
    assert main(["gym"]) == 2
    assert main(["gym", "--", PYTHON, "-c", "pass"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("rollout-telemetry gym: give the Gym command after --")
    assert lines[1].startswith("rollout-telemetry gym: the Gym command names no output file")


def _coverage(seen: dict[Disposition, int], expected: int | None) -> CoverageSnapshot:
    zeros = dict.fromkeys(Disposition, 0)
    agent = AgentCoverage("a", {**zeros, **seen}, expected, None, 0, 0, 0)
    return CoverageSnapshot((agent,), expected_known=expected is not None)


def test_the_status_line_says_done_of_expected_rate_time_left_failed_and_masked() -> None:
    """Done of expected with its share, the rate per minute, the time left at that rate, failed and masked by
    each rollout's newest attempt, the URL; without expected work, done and the rate alone."""
    url = "http://127.0.0.1:9464/metrics"
    seen = {Disposition.MEASURED: 40, Disposition.MASKED: 5, Disposition.FAILED: 3}
    assert status_line(_coverage(seen, 96), 120.0, url) == (
        f"48 of 96 rollouts written (50%), 24.0/min, about 2 min left; 3 failed, 5 masked; {url}"
    )
    assert (
        status_line(_coverage(seen, None), 60.0, url)
        == f"48 rollouts written, 48.0/min; 3 failed, 5 masked; {url}"
    )
    resumed = status_line(_coverage(seen, 96), 120.0, url, before=40)  # 40 rows there before the watch
    assert (
        resumed == f"48 of 96 rollouts written (50%), 4.0/min, about 12 min left; 3 failed, 5 masked; {url}"
    )
    assert (
        status_line(_coverage({}, 10), 0.0, url)
        == f"0 of 10 rollouts written (0%), 0.0/min; 0 failed, 0 masked; {url}"
    )


class _Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_the_status_line_starts_on_a_line_of_its_own_after_a_progress_bar() -> None:
    """Gym's progress bar leaves the cursor at its end (it ends with a carriage return, not a newline): the
    status line is never joined to it. On a terminal the bar's line is cleared first (the bar is drawn again
    below at its next update); in a file a newline ends the bar's line."""
    bar = "\rRollouts:  45%|####5     | 45/100"
    for stream, fresh in ((io.StringIO(), "\n"), (_Terminal(), "\r\x1b[K")):
        stream.write(bar)
        say_status("45 of 100 rollouts written (45%)", stream)
        assert stream.getvalue() == f"{bar}{fresh}rollout-telemetry gym: 45 of 100 rollouts written (45%)\n"
        last = stream.getvalue().replace("\r\x1b[K", "\n").split("\n")[-2]
        assert last.startswith("rollout-telemetry gym: ")


def test_a_run_that_wrote_nothing_is_said_without_blaming_unrouted_failures() -> None:
    """Gym failing before any row (a wrong head-server port) is said as such, and not as failures that the
    sidecar would have held; an interrupted or successful run that wrote nothing says just that."""
    failed = nothing_written(Path("out/run.jsonl"), failed=True)
    assert failed.startswith("Gym ended before writing any rollout or failure to out/run.jsonl")
    assert "route_failures" not in failed
    assert nothing_written(Path("out/run.jsonl"), failed=False) == "Gym wrote no rollout to out/run.jsonl"
