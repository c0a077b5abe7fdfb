"""The source reads as written: no comment wrapped around the statement it explains."""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
FOLDERS = ("src", "tests", "benchmarks", "dashboards", "docs")
PRAGMA = re.compile(r"#\s*(fmt:|noqa|type:|pragma)")
CLOSER = re.compile(r"^\s*[)\]}]+:?\s*(#.*)$")
"""A line holding only closing brackets (and the colon of a compound statement) and a comment: where
``ruff format`` puts a trailing comment that made its line too long, wrapping a short statement around it."""


def wrapped_comments(source: str) -> list[int]:
    """The lines of ``source`` where a comment (not a tool's pragma) follows closing brackets alone."""
    return [
        number
        for number, line in enumerate(source.splitlines(), 1)
        if (match := CLOSER.match(line)) and not PRAGMA.match(match[1])
    ]


MODULES = sorted(path for folder in FOLDERS for path in (ROOT / folder).rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda path: path.relative_to(ROOT).as_posix())
def test_no_comment_is_wrapped_around_its_statement(path: Path) -> None:
    """A comment too long to trail its statement goes on the line above it, not after a closing bracket that
    the formatter broke the statement open for."""
    assert wrapped_comments(path.read_text(encoding="utf-8")) == []


def test_the_check_finds_a_wrapped_comment() -> None:
    """The formatter's wrapping is found; a pragma on a closing bracket, and a comment above, are not."""
    source = "\n".join(
        [
            "",
            "if (",
            "    ready",
            "):  # a reason that did not fit after the condition",
            "    pass",
            "values = (",
            "    1, 2,",
            ")  # fmt: skip",
            "# a reason above its statement",
            "lock = make()",
        ]
    )
    assert wrapped_comments(source) == [4]


DOTTED = re.compile(r"\brollout_telemetry(?:\.[A-Za-z_]\w*)+(?![\w/])")
"""A dotted name under the package, as the source's prose names a module or what a module holds (not a
schema's name, ``rollout_telemetry.rollout/1``)."""
LOGGER = re.compile(r"getLogger\(\"([\w.]+)\"\)")


def resolves(name: str) -> bool:
    """Whether the dotted ``name`` is a module, or something a module holds."""
    parts = name.split(".")
    found: object = importlib.import_module(parts[0])
    for depth, part in enumerate(parts[1:], 2):
        module = ".".join(parts[:depth])
        if hasattr(found, "__path__") and importlib.util.find_spec(module) is not None:
            found = importlib.import_module(module)
        elif (found := getattr(found, part, None)) is None:
            return False
    return True


def unresolved(text: str, loggers: frozenset[str] = frozenset()) -> list[str]:
    """The dotted names under the package in ``text`` that name neither a module nor something a module
    holds (a stale name: a module renamed, moved or gone), nor one of the ``loggers``."""
    return [name for name in sorted(set(DOTTED.findall(text)) - loggers) if not resolves(name)]


PACKAGE = sorted((ROOT / "src").rglob("*.py"))
LOGGERS = frozenset(name for path in PACKAGE for name in LOGGER.findall(path.read_text(encoding="utf-8")))
"""The package's loggers' names (``rollout_telemetry.rollouts``...), which name no module."""


@pytest.mark.parametrize("path", PACKAGE, ids=lambda path: path.relative_to(ROOT).as_posix())
def test_every_name_the_package_source_gives_exists(path: Path) -> None:
    """A module or a name the source's docstrings and comments give as ``rollout_telemetry.x.y`` exists, or
    is one of the package's loggers."""
    assert unresolved(path.read_text(encoding="utf-8"), LOGGERS) == []


def test_the_check_finds_a_stale_name() -> None:
    """A module that does not exist and a name a module does not hold are found; real ones are not."""
    text = (
        "rollout_telemetry.series, rollout_telemetry._views.series.CATALOGUE, "
        "rollout_telemetry._views.series.NOPE, rollout_telemetry.errors.ConfigError, "
        "rollout_telemetry.rollouts, rollout_telemetry.rollout/1"
    )
    assert unresolved(text, LOGGERS) == ["rollout_telemetry._views.series.NOPE", "rollout_telemetry.series"]
    assert "rollout_telemetry.rollouts" in unresolved(text)
