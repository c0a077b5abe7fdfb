"""Every code block of the README and the docs site works as written.

Python blocks run as a reader copies them, each in a fresh interpreter with warnings as errors, nothing
stubbed (a block that needs a module the package does not install fails here as it would for the reader). In
shell blocks, each ``rollout-telemetry report`` line runs on a run's files at the paths it names (the fixture
run copied there) and must exit 0; every other ``rollout-telemetry`` line must be accepted by the command
line's parser (they serve or watch until stopped). YAML and JSON blocks parse.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from rollout_telemetry._cli.main import _parser
from tests.conftest import held_alone
from tests.support import own_ray_folder, ray_environment

ROOT = Path(__file__).parent.parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def _blocks(language: str) -> list[tuple[str, str]]:
    """``(id, text)`` of every block in ``language`` of every page."""
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for number, match in enumerate(m for m in BLOCK.finditer(text) if m.group(1) == language):
            found.append((f"{page.relative_to(ROOT)}#{number}", match.group(2)))
    return found


def _commands(block: str) -> list[list[str]]:
    """The ``rollout-telemetry`` command lines of a shell block, continuations joined, comments dropped."""
    joined = block.replace("\\\n", " ")
    lines = []
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        if words and words[0] == "rollout-telemetry":
            ends = [i for i, word in enumerate(words) if word in {">", "|", "&&", ";"}]
            lines.append(words[1 : ends[0] if ends else None])
    return lines


SNIPPET_LIMIT = 150
"""Seconds a block may run: one starts a Ray cluster (15 s alone, several times that beside other tests)."""


def _succeeds(command: list[str], cwd: Path) -> None:
    """``command`` run in ``cwd`` exits 0 with no traceback (a Ray it starts is its own; the documented
    default ports it may serve on are its own while it runs)."""
    with held_alone("documented-ports"), own_ray_folder() as ray_folder:
        env = {**os.environ, **ray_environment(ray_folder)}
        result = subprocess.run(
            command, cwd=cwd, env=env,
            capture_output=True, text=True, timeout=SNIPPET_LIMIT, check=False,
        )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr


PYTHON = _blocks("python")
COMMANDS = [
    (f"{where}:{i}", argv) for where, block in _blocks("bash") for i, argv in enumerate(_commands(block))
]


def test_the_pages_have_code_to_test() -> None:
    """The blocks are found: Python in the README and the guides, commands in the quickstarts."""
    assert any(where.startswith("README.md") for where, _ in PYTHON)
    assert len(PYTHON) >= 6
    assert len(COMMANDS) >= 10


@pytest.mark.parametrize("snippet", [text for _, text in PYTHON], ids=[where for where, _ in PYTHON])
@pytest.mark.timeout(SNIPPET_LIMIT + 30)
def test_a_python_block_runs_as_written(snippet: str, tmp_path: Path) -> None:
    """The block runs to its end in a fresh interpreter, without an error or a warning."""
    _succeeds([sys.executable, "-W", "error", "-c", textwrap.dedent(snippet)], tmp_path)


@pytest.mark.parametrize("argv", [argv for _, argv in COMMANDS], ids=[where for where, _ in COMMANDS])
def test_a_command_line_is_accepted(argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``report`` line runs to exit 0 on a run's files at its paths; any other line parses as written, given
    the certificate, key and hash files it names."""
    if argv[0] != "report":
        monkeypatch.chdir(tmp_path)
        for word in argv:
            if word.endswith((".pem", ".key", ".hash")):
                (tmp_path / word).touch()
        parser, _ = _parser()
        args, unknown = parser.parse_known_args(argv)
        assert not unknown, unknown
        assert args.command == argv[0]
        return
    for word in argv[1:]:
        if word.endswith(".jsonl"):
            stem = tmp_path / word.removesuffix(".jsonl")
            stem.parent.mkdir(parents=True, exist_ok=True)
            for suffix in ("", "_failures", "_materialized_inputs"):
                shutil.copy(FIXTURES / f"run{suffix}.jsonl", f"{stem}{suffix}.jsonl")
    _succeeds([sys.executable, "-m", "rollout_telemetry", *argv], tmp_path)


@pytest.mark.parametrize(
    ("language", "text"),
    [(language, text) for language in ("yaml", "json") for _, text in _blocks(language)],
)
def test_a_data_block_parses(language: str, text: str) -> None:
    """A YAML block is YAML; a JSON block is one JSON document or JSON lines."""
    if language == "yaml":
        assert yaml.safe_load(text) is not None
        return
    try:
        json.loads(text)
    except json.JSONDecodeError:
        for line in text.splitlines():
            json.loads(line)
