"""The README fits a screen or two and starts with the two commands; the docs' reference pages are what the
code generates; the guides state the endpoint's bounds and the registry's limits as built."""

from __future__ import annotations

import inspect
import shlex
from pathlib import Path

import pytest
from docs import generate

from rollout_telemetry._cli.main import EXAMPLES
from rollout_telemetry._ray import target_registry, targets
from rollout_telemetry._serve import auth, connections, endpoint, http, messages, server, workers

ROOT = Path(__file__).parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
GUIDES = ROOT / "docs" / "guides"
SECURITY = (GUIDES / "security.md").read_text(encoding="utf-8")
RAY = (GUIDES / "ray.md").read_text(encoding="utf-8")
LIFECYCLE = (GUIDES / "lifecycle.md").read_text(encoding="utf-8")


def test_the_readme_fits_a_screen_or_two() -> None:
    """The README is the front door: at most 150 lines, the manual is the docs site."""
    assert len(README.splitlines()) <= 150


@pytest.mark.parametrize("page", sorted(set(generate.PAGES) - {"cli.md"}))
def test_a_reference_page_is_what_the_code_generates(page: str) -> None:
    """The committed page equals what ``python -m docs.generate`` builds now (``cli.md``, whose ``--help``
    differs between Python versions, is checked by ``.ci/run`` on ``.venv``'s interpreter)."""
    assert (generate.REFERENCE / page).read_text(encoding="utf-8") == generate.PAGES[page](), (
        "run: .venv/bin/python -m docs.generate"
    )


def test_the_command_reference_has_every_command() -> None:
    """The command reference has a section for the program and for each of its commands."""
    text = (generate.REFERENCE / "cli.md").read_text(encoding="utf-8")
    for name in generate._commands():
        assert f"## `rollout-telemetry {name}`" in text, name
        assert f"usage: rollout-telemetry {name}" in text, name


def test_the_generator_refuses_an_undocumented_argument() -> None:
    """A constructor argument without an ``Args:`` entry fails the generation, naming it."""

    class Undocumented:
        """One argument documented.

        Args:
            documented: it is.
        """

        def __init__(self, documented: int, forgotten: int = 1) -> None:
            del documented, forgotten

    with pytest.raises(ValueError, match="'forgotten'"):
        generate._constructor_table(Undocumented)


def test_every_nav_page_exists_and_every_page_is_in_the_nav() -> None:
    """``mkdocs.yml``'s nav names every page of ``docs/`` once, and only pages that exist."""
    import yaml

    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))

    def pages(entries: list[object]) -> list[str]:
        found: list[str] = []
        for entry in entries:
            assert isinstance(entry, dict)
            for value in entry.values():
                found += pages(value) if isinstance(value, list) else [value]
        return found

    named = pages(config["nav"])
    assert len(named) == len(set(named))
    assert set(named) == {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}


def test_readme_starts_with_the_two_commands() -> None:
    """The first code block sets up and runs the demo, then sets up and runs the tests."""
    block = README.split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [line for line in block.splitlines() if line and not line.startswith("#")]
    assert len(commands) == 2
    assert "rollout-telemetry demo" in commands[0]
    assert "pytest" in commands[1]


def test_the_security_section_states_each_bound_as_built() -> None:
    """Each bound of the HTTP endpoint appears in the security guide's table with the value the code uses."""

    def seconds(value: float) -> str:
        return f"{value:g} s"

    rows = {
        "MAX_CONNECTIONS": str(connections.MAX_CONNECTIONS),
        "MAX_PER_SOURCE": str(connections.MAX_PER_SOURCE),
        "EVICT_AFTER": seconds(connections.EVICT_AFTER),
        "LISTEN_BACKLOG": str(http.LISTEN_BACKLOG),
        "HANDSHAKE_TIMEOUT": seconds(http.HANDSHAKE_TIMEOUT),
        "IDLE_TIMEOUT": seconds(messages.IDLE_TIMEOUT),
        "HEAD_TIMEOUT": seconds(messages.HEAD_TIMEOUT),
        "MAX_HEAD": f"{messages.MAX_HEAD // 1024} KiB",
        "MAX_QUEUED": str(workers.MAX_QUEUED),
        "MAX_READS_QUEUED": str(endpoint.MAX_READS_QUEUED),
        "MAX_OUTPUT": f"{connections.MAX_OUTPUT // (1 << 20)} MiB",
        "STALLED_AFTER": seconds(connections.STALLED_AFTER),
        "NON_READER_SEND_BUFFER": f"{connections.NON_READER_SEND_BUFFER // 1024} KiB",
        "WRITE_TIMEOUT": seconds(http.WRITE_TIMEOUT),
        "ACCEPT_BATCH": str(http.ACCEPT_BATCH),
    }
    for name, value in rows.items():
        row = next(line for line in SECURITY.splitlines() if f"(`{name}`)" in line)
        assert f"| {value} " in row, (name, value, row)
    assert messages.MAX_HEAD == 16 * 1024  # "16 KiB" exactly
    prose = [
        f"last {auth.MAX_VERIFIED} verified",
        f"last {auth.MAX_REFUSED:,} refused",
        f"one of {auth.AUTH_THREADS} threads of its own",
        f"some of their {auth.FAILURE_BURST} attempts",
        f"given back at {auth.FAILURE_REFILL:g} per second",
        f"at most {auth.MAX_SOURCES:,} sources",
        f"within {auth.AUTH_WAIT:g} s gets `429",
        f"share those {auth.AUTH_THREADS} threads",
        f"Worker threads are started with the server and never more: {_default_threads()} render",
        f"{auth.AUTH_THREADS} check passwords",
        f"shares for {endpoint.READ_INTERVAL:g} s",
        f"may be up to {endpoint.READ_INTERVAL:g} s old",
        f"`READER_BODY`, {connections.READER_BODY // 1024} KiB",
        f"`MAX_READERS`, {connections.MAX_READERS:,}",
        f"`STALLED_BRIEFLY` ({connections.STALLED_BRIEFLY:g} s)",
        f"`ROOM_WAIT` ({connections.ROOM_WAIT:g} s;",
        f"`STALLED_AFTER`, {connections.STALLED_AFTER:g} s",
    ]
    flat = " ".join((SECURITY + LIFECYCLE).split())  # phrases may wrap across lines; /rollouts is a guide
    for phrase in prose:
        assert phrase in flat, phrase


def _default_threads() -> int:
    """The default of ``start_server(threads=)``."""
    default = inspect.signature(server.start_server).parameters["threads"].default
    assert isinstance(default, int)
    return default


def test_the_ray_section_states_what_the_registry_accepts_as_built() -> None:
    """The target cap, the label limits and a sample of the reserved labels in the Ray guide are the code's
    own."""
    section = RAY
    assert f"at most **{target_registry.MAX_TARGETS:,}** targets (`MAX_TARGETS`" in section
    assert f"at most {targets.MAX_TARGET_LABELS} labels" in section
    for label in ("job", "instance", "run", "agent", "failure_kind", "disposition", "le"):
        assert label in targets.RESERVED_LABELS
        assert f"`{label}`" in section


def _command_lines(text: str) -> list[list[str]]:
    """The command lines of the ``bash`` blocks of a Markdown page, continuations joined, comments cut."""
    blocks = [block.split("```")[0] for block in text.split("```bash\n")[1:]]
    joined = "\n".join(block.replace("\\\n", " ") for block in blocks)
    return [words for line in joined.splitlines() if (words := shlex.split(line, comments=True))]


def test_every_gym_command_shown_is_the_one_run_on_the_real_gym() -> None:
    """The README's and ``gym --help``'s watched Gym collection are the quickstart's, word for word: the line
    tests/gym/test_gym_run.py runs on the real NeMo Gym 0.7.0 (so each runs as written)."""
    quickstart = _command_lines((ROOT / "docs" / "quickstart-gym.md").read_text(encoding="utf-8"))
    (watched,) = [words for words in quickstart if words[:2] == ["rollout-telemetry", "gym"]]
    readme = [words for words in _command_lines(README) if words[:2] == ["rollout-telemetry", "gym"]]
    assert readme == [watched]
    assert shlex.split(EXAMPLES["gym"]) == watched
