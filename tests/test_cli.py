"""The command line: --help for every command, and the demo run in-process."""

from __future__ import annotations

import pytest

from rollout_telemetry.cli import main


def test_help_describes_the_tool(capsys: pytest.CaptureFixture[str]) -> None:
    """``rollout-telemetry --help`` lists the commands."""
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "demo" in out
    assert "masked, failed and omitted" in out


@pytest.mark.parametrize("command", ["demo", "serve", "report", "top", "hash-password"])
def test_each_command_has_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Every subcommand explains itself."""
    assert main([command, "--help"]) == 0
    assert "usage: rollout-telemetry " + command in capsys.readouterr().out


def test_demo_runs_and_prints_url_and_summaries(capsys: pytest.CaptureFixture[str]) -> None:
    """A short demo serves, prints its URL and one summary line per agent."""
    code = main(
        ["demo", "--port", "0", "--duration", "1", "--rate", "200", "--seed", "3",
         "--max-rollout-seconds", "0.05", "--summary-interval", "0.5", "--agents", "a,b"]
    )  # fmt: skip
    assert code == 0
    out = capsys.readouterr().out
    assert "serving http://127.0.0.1:" in out
    assert any(line.startswith("a ") and "completed=" in line for line in out.splitlines())
    assert any(line.startswith("b ") and "masked=" in line for line in out.splitlines())


def test_bad_share_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """A share outside 0..1 is a usage error."""
    assert main(["demo", "--masked", "1.5"]) == 2
    assert "between 0 and 1" in capsys.readouterr().err


def test_shares_over_one_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """masked + failed + omitted above 1 is refused with a clear message."""
    assert main(["demo", "--masked", "0.6", "--failed", "0.6", "--port", "0"]) == 2
    assert "must not exceed 1" in capsys.readouterr().err
