"""The README documents every published series and span attribute and the endpoint's bounds, and starts with
the two commands."""

from __future__ import annotations

import inspect
from pathlib import Path

from rollout_telemetry._recording.spans import ATTRIBUTES
from rollout_telemetry._serve import auth, discovery, server
from rollout_telemetry._views.series import CATALOGUE

ROOT = Path(__file__).parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
PAGES = [README, *(page.read_text(encoding="utf-8") for page in sorted((ROOT / "docs").glob("*.md")))]


def test_every_family_is_in_the_metric_table() -> None:
    """Each family of the catalogue has a row of its own in a metric table of the README or a docs page."""
    for family in CATALOGUE:
        assert any(f"| `{family.name}` | {family.type} |" in page for page in PAGES), family.name


def test_every_span_attribute_is_documented() -> None:
    """Each span attribute the recorder sets is named in the README or a docs page."""
    for attribute in ATTRIBUTES:
        assert any(f"`{attribute}`" in page for page in PAGES), attribute


def test_readme_starts_with_the_two_commands() -> None:
    """The first code block sets up and runs the demo, then sets up and runs the tests."""
    block = README.split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [line for line in block.splitlines() if line and not line.startswith("#")]
    assert len(commands) == 2
    assert "rollout-telemetry demo" in commands[0]
    assert "pytest" in commands[1]


def test_the_security_section_states_each_bound_as_built() -> None:
    """Each bound of the HTTP endpoint appears in the README's table with the value the code uses."""

    def seconds(value: float) -> str:
        return f"{value:g} s"

    rows = {
        "MAX_CONNECTIONS": str(server.MAX_CONNECTIONS),
        "MAX_PER_SOURCE": str(server.MAX_PER_SOURCE),
        "EVICT_AFTER": seconds(server.EVICT_AFTER),
        "LISTEN_BACKLOG": str(server.LISTEN_BACKLOG),
        "HANDSHAKE_TIMEOUT": seconds(server.HANDSHAKE_TIMEOUT),
        "IDLE_TIMEOUT": seconds(server.IDLE_TIMEOUT),
        "HEAD_TIMEOUT": seconds(server.HEAD_TIMEOUT),
        "MAX_HEAD": f"{server.MAX_HEAD // 1024} KiB",
        "MAX_QUEUED": str(server.MAX_QUEUED),
        "MAX_READS_QUEUED": str(server.MAX_READS_QUEUED),
        "MAX_OUTPUT": f"{server.MAX_OUTPUT // (1 << 20)} MiB",
        "WRITE_TIMEOUT": seconds(server.WRITE_TIMEOUT),
    }
    for name, value in rows.items():
        row = next(line for line in README.splitlines() if f"(`{name}`)" in line)
        assert f"| {value} " in row, (name, value, row)
    assert server.MAX_HEAD == 16 * 1024  # "16 KiB" exactly
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
        f"shares for {server.READ_INTERVAL:g} s",
        f"may be up to {server.READ_INTERVAL:g} s old",
    ]
    flat = " ".join(README.split())  # phrases may wrap across lines
    for phrase in prose:
        assert phrase in flat, phrase


def _default_threads() -> int:
    """The default of ``MetricsServer(threads=)``."""
    default = inspect.signature(server.MetricsServer).parameters["threads"].default
    assert isinstance(default, int)
    return default


def test_the_ray_section_states_what_the_registry_accepts_as_built() -> None:
    """The target cap, the label limits and a sample of the reserved labels in the README are the code's."""
    section = README.split("## On a Ray cluster", 1)[1].split("\n## ", 1)[0]
    assert f"at most **{discovery.MAX_TARGETS:,}** targets (`MAX_TARGETS`" in section
    assert f"at most {discovery.MAX_TARGET_LABELS} labels" in section
    for label in ("job", "instance", "run", "agent", "failure_kind", "disposition", "le"):
        assert label in discovery.RESERVED_LABELS
        assert f"`{label}`" in section
