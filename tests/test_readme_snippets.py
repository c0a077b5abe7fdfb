"""Every Python snippet of the README runs as written, each in a fresh interpreter.

Only a placeholder a reader supplies is stubbed: ``wandb`` (any logger of dicts of numbers) is a module whose
``log`` records what it is given.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

README = (Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")
SNIPPETS = re.findall(r"```python\n(.*?)```", README, re.S)
STUBS = """
import sys, types
wandb = types.ModuleType("wandb")
wandb.logged = []
wandb.log = lambda values, step=None: wandb.logged.append((step, dict(values)))
sys.modules["wandb"] = wandb
"""


def test_the_readme_has_python_snippets() -> None:
    """The snippets are found (the hook API, the lifecycle, OTLP, security)."""
    assert len(SNIPPETS) >= 4


@pytest.mark.parametrize("snippet", SNIPPETS, ids=[f"snippet-{i}" for i in range(len(SNIPPETS))])
def test_a_readme_snippet_runs_as_written(snippet: str, tmp_path: Path) -> None:
    """The snippet runs to its end in a fresh interpreter, without an error or a warning."""
    program = STUBS + "\n" + snippet
    if "wandb" in snippet:
        program += "\nassert wandb.logged and wandb.logged[0][1], wandb.logged\n"
    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", textwrap.dedent(program)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
