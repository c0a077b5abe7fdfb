"""The source reads as written: no comment wrapped around the statement it explains."""

from __future__ import annotations

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
