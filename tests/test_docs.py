"""The README fits a screen or two and starts with the two commands; the docs' reference pages are what the
code generates; the guides state the endpoint's bounds and the registry's limits as built."""

from __future__ import annotations

import re
import shlex
from dataclasses import fields
from pathlib import Path

import pytest

from benchmarks.attacks import ATTACKS
from docs import generate
from rollout_telemetry._cli.main import EXAMPLES
from rollout_telemetry._ray import target_registry, targets
from rollout_telemetry._serve.admission import FOR_A_FULL_SERVER, FOR_A_SOURCE_AT_ITS_CAP
from rollout_telemetry._serve.limits import Limits

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
    """Every field of ``Limits`` is in the security guide with its default: a bound with a row of the table
    has its value there, the others are stated in its prose (or the lifecycle guide's, for ``/rollouts``)."""
    limits = Limits()

    def seconds(value: float) -> str:
        return f"{value:g} s"

    rows = {
        "max_connections": str(limits.max_connections),
        "max_per_source": str(limits.max_per_source),
        "fair_share": str(limits.fair_share),
        "evict_after": seconds(limits.evict_after),
        "listen_backlog": str(limits.listen_backlog),
        "accept_batch": str(limits.accept_batch),
        "handshake_timeout": seconds(limits.handshake_timeout),
        "idle_timeout": seconds(limits.idle_timeout),
        "head_timeout": seconds(limits.head_timeout),
        "max_head": f"{limits.max_head // 1024} KiB",
        "max_queued": str(limits.max_queued),
        "max_reads_queued": str(limits.max_reads_queued),
        "max_output": f"{limits.max_output // (1 << 20)} MiB",
        "stalled_after": seconds(limits.stalled_after),
        "non_reader_send_buffer": f"{limits.non_reader_send_buffer // 1024} KiB",
        "write_timeout": seconds(limits.write_timeout),
        "linger": seconds(limits.linger),
        "linger_bytes": f"{limits.linger_bytes // (1 << 20)} MiB",
    }
    for name, value in rows.items():
        row = next(line for line in SECURITY.splitlines() if line.startswith("|") and f"(`{name}`)" in line)
        cell = row.split("|")[2].strip()  # "512", "2 s in all", "1 s, 1 MiB"
        assert re.fullmatch(rf"(.*, )?{re.escape(value)}(,| |$).*", cell), (name, value, row)
    assert limits.max_head == 16 * 1024  # "16 KiB" exactly
    prose = {
        "max_verified": f"last {limits.max_verified} verified",
        "max_refused": f"last {limits.max_refused:,} refused",
        "auth_threads": f"one of {limits.auth_threads} threads of its own",
        "failure_burst": f"some of their {limits.failure_burst} attempts",
        "failure_refill": f"given back at {limits.failure_refill:g} per second",
        "max_sources": f"at most {limits.max_sources:,} sources",
        "auth_wait": f"within {limits.auth_wait:g} s gets `429",
        "render_threads": f"never more: {limits.render_threads} render the exposition (`render_threads`)",
        "read_interval": f"shares for {limits.read_interval:g} s (`read_interval`)",
        "reader_body": f"`reader_body`, {limits.reader_body // 1024} KiB",
        "max_readers": f"`max_readers`, {limits.max_readers:,}",
        "stalled_briefly": f"`stalled_briefly` ({limits.stalled_briefly:g} s)",
        "room_wait": f"`room_wait` ({limits.room_wait:g} s;",
    }
    flat = " ".join((SECURITY + LIFECYCLE).split())  # phrases may wrap across lines; /rollouts is a guide
    for phrase in [
        *prose.values(),
        f"share those {limits.auth_threads} threads",
        f"{limits.auth_threads} check passwords",
        f"may be up to {limits.read_interval:g} s old",
        f"`stalled_after`, {limits.stalled_after:g} s",
    ]:
        assert phrase in flat, phrase
    assert set(rows) | set(prose) == {field.name for field in fields(Limits)}


def test_the_security_guide_lists_each_admission_rule_with_the_attack_that_needs_it() -> None:
    """The guide's table of who makes room for a newcomer has a row for each rule of ``admission``, in the
    order they are tried, and every attack a row names is one of ``benchmarks/attacks.py``'s ``ATTACKS``."""
    table = SECURITY.split("| rule, in order |", 1)[1].split("\n\n", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    rules = [rule.__name__ for rule in (*FOR_A_SOURCE_AT_ITS_CAP, *FOR_A_FULL_SERVER)]
    assert [row.split("`")[1] for row in rows] == rules
    for row in rows:
        attacks = [word for word in row.split("|")[3].split("`")[1::2] if "-" in word]  # attack names
        assert set(attacks) <= set(ATTACKS), (row, set(attacks) - set(ATTACKS))


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
