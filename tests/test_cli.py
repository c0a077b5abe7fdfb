"""The command line: --help for every command, and the demo run in-process."""

from __future__ import annotations

import pytest

from rollout_telemetry._cli.main import main


def test_help_describes_the_tool(capsys: pytest.CaptureFixture[str]) -> None:
    """``rollout-telemetry --help`` lists the commands."""
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "demo" in out
    assert "masked, failed and omitted" in out


@pytest.mark.parametrize("command", ["demo", "serve", "report", "top", "hash-password", "ray-targets"])
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


@pytest.mark.parametrize(
    "options",
    [
        ["--port", "9460"],
        ["--host", "0.0.0.0"],
        ["--basic-auth-user", "prometheus"],
        ["--file-sd", "sd.json"],
    ],
)
def test_ray_targets_endpoint_options_need_start(
    options: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The registry's endpoint options of ``ray-targets`` only create one: without --start they are refused
    in one line, before Ray is contacted."""
    assert main(["ray-targets", "--address", "127.0.0.1:1", "--namespace", "x", *options]) == 2
    assert "go with --start" in capsys.readouterr().err


def test_ray_targets_start_checks_security_flags_first(capsys: pytest.CaptureFixture[str]) -> None:
    """``ray-targets --start`` checks serve's security flags as serve does, before Ray is contacted."""
    command = ["ray-targets", "--address", "127.0.0.1:1", "--namespace", "x", "--start"]
    assert main([*command, "--basic-auth-user", "prometheus"]) == 2
    assert "--basic-auth-user needs --basic-auth-hash-file" in capsys.readouterr().err
