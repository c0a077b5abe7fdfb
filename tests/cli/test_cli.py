"""The command line: --help for every command, and the demo run in-process."""

from __future__ import annotations

import argparse
import re
import shlex
import sys

import pytest

from rollout_telemetry._cli.main import EXAMPLES, _parser, main
from rollout_telemetry._cli.scenarios import RECOVERY_SCENARIOS


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
    # No stalled rollout: one would hold the end for stall_after + 2 s.
    code = main(
        ["demo", "--port", "0", "--duration", "1", "--rate", "200", "--seed", "3",
         "--max-rollout-seconds", "0.05", "--summary-interval", "0.5", "--agents", "a,b", "--stalled", "0"]
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


def test_slow_after_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    """--slow-after, like --stall-after, takes a positive number of seconds."""
    assert main(["demo", "--slow-after", "0", "--port", "0"]) == 2
    assert "--slow-after" in capsys.readouterr().err


@pytest.mark.parametrize("scenario", RECOVERY_SCENARIOS)
def test_demo_help_explains_each_recovery_scenario(scenario: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``demo --help`` names every recovery scenario with what it breaks, and --scenario accepts it."""
    assert main(["demo", "--help"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert re.search(rf"{scenario} \(\w", help_text), f"{scenario} is not explained"
    args = _parser()[0].parse_args(["demo", "--scenario", scenario])
    assert args.scenario == scenario


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


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    return _parser()[1]


def _options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The options of a command that take a value (argparse keeps no public list of them)."""
    return [
        a for a in parser._actions if a.option_strings and a.nargs != 0 and a.help is not argparse.SUPPRESS
    ]


def test_every_command_ends_its_help_with_an_example_that_parses(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each command's --help ends with one example, the tool's --help lists them all, and each example is
    a command line the parser takes (shell redirections aside)."""
    monkeypatch.setenv("COLUMNS", "1000")
    parser, subcommands = _parser()
    assert subcommands.keys() == EXAMPLES.keys()
    for name, subcommand in subcommands.items():
        assert subcommand.format_help().rstrip().endswith(f"example: {EXAMPLES[name]}")
        assert f"  {EXAMPLES[name]}\n" in parser.format_help()
        words = shlex.split(EXAMPLES[name])
        words = words[: words.index("<")] if "<" in words else words
        assert words[0] == "rollout-telemetry"
        assert parser.parse_args(words[1:]).command == name


def test_every_option_with_a_value_states_its_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """In every command's --help, each option that takes a value and is not required says its default."""
    monkeypatch.setenv("COLUMNS", "1000")
    for name, subcommand in _subcommands().items():
        text = subcommand.format_help()
        for action in _options(subcommand):
            if action.required:
                continue
            # The value's name once per value an option takes (``--compare-agents NAME NAME``), then its help.
            said = re.search(
                rf"^  {re.escape(action.option_strings[-1])} \S+(?: [A-Z_]+)*\s+(.*)", text, re.MULTILINE
            )
            assert said is not None, (name, action.option_strings)
            assert "default" in said[1], (name, action.option_strings, said[1])


METAVARS = {
    "ADDRESS",
    "NAME",
    "FILE",
    "PATH",
    "N",
    "NUMBER",
    "SECONDS",
    "SHARE",
    "PORT",
    "URL",
    "VAR",
    "AGENTS",
}


def test_metavars_are_one_vocabulary(monkeypatch: pytest.MonkeyPatch) -> None:
    """A value's metavar names its kind, from one vocabulary, and an option reads the same in every command
    (no --failures FAILURES beside --agent NAME)."""
    monkeypatch.setenv("COLUMNS", "1000")
    seen: dict[str, str] = {}
    for name, subcommand in _subcommands().items():
        text = subcommand.format_help()
        for action in _options(subcommand):
            if action.choices:
                continue  # {table,json}: the choices themselves
            option = action.option_strings[-1]
            found = re.search(rf"^  {re.escape(option)} ([A-Z_]+)", text, re.MULTILINE)
            assert found is not None, (name, option)
            assert found[1] in METAVARS, (name, option, found[1])
            assert seen.setdefault(option, found[1]) == found[1], (name, option)
            if re.search(r"\bfile\b", action.help or ""):
                assert found[1] in ("FILE", "PATH"), (name, option)


def test_ctrl_c_while_the_command_line_loads_exits_130(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C while the console script is still importing the command line exits 130, not a traceback."""
    import importlib.abc

    from rollout_telemetry._cli import entry

    class Interrupted(importlib.abc.MetaPathFinder):
        def find_spec(self, name: str, path: object, target: object = None) -> None:
            if name == "rollout_telemetry._cli.main":
                raise KeyboardInterrupt

    monkeypatch.delitem(sys.modules, "rollout_telemetry._cli.main")
    monkeypatch.setattr(sys, "meta_path", [Interrupted(), *sys.meta_path])
    assert entry.run() == 130
