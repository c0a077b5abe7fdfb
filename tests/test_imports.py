"""What a process loads to record: recording needs no HTTP server, no file source, no CLI, no asyncio and no
pydantic; each is imported by the part that uses it, when it is used."""

from __future__ import annotations

import json
import subprocess
import sys

NOT_FOR_RECORDING = (
    "asyncio",
    "msgspec",
    "opentelemetry.sdk",
    "pydantic",
    "rich",
    "rollout_telemetry._cli",
    "rollout_telemetry._serve",
    "rollout_telemetry._sources",
)
NOT_FOR_HELP = (
    "asyncio",
    "prometheus_client",
    "rollout_telemetry._cli.simulation",
    "rollout_telemetry._facade.telemetry",
    "rollout_telemetry._serve",
    "rollout_telemetry._sources",
)


def _loaded_after(code: str, modules: tuple[str, ...] = NOT_FOR_RECORDING) -> list[str]:
    """The ``modules`` (or modules under them) loaded by a fresh interpreter after ``code``."""
    probe = (
        f"import json, sys\n{code}\n"
        f"print(json.dumps(sorted(m for m in sys.modules if any(m == p or m.startswith(p + '.') "
        f"for p in {modules!r}))))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    loaded: list[str] = json.loads(result.stdout.strip().splitlines()[-1])  # after what ``code`` printed
    return loaded


def test_recording_an_outcome_loads_none_of_the_server_sources_cli_asyncio_or_pydantic() -> None:
    """Importing the package, making a telemetry, recording outcomes and a rollout block."""
    code = (
        "from rollout_telemetry import RolloutTelemetry\n"
        "telemetry = RolloutTelemetry(run='r')\n"
        "telemetry.record('math', {'reward': 1.0})\n"
        "telemetry.record('math', {'reward': 0.0, 'mask_sample': True, 'failure_kind': 'session_lost'})\n"
        "with telemetry.rollout('math', task_index=0, rollout_index=0) as rollout:\n"
        "    rollout.complete({'reward': 1.0})\n"
        "telemetry.snapshot()\n"
    )
    assert _loaded_after(code) == []


def test_each_part_is_imported_when_used() -> None:
    """The model, the server and the event-loop watch load what they need once they are used."""
    assert "pydantic" in _loaded_after(
        "from rollout_telemetry import VerifyResponse\nVerifyResponse.model_validate({'reward': 1.0})"
    )
    served = _loaded_after(
        "from rollout_telemetry import RolloutTelemetry\n"
        "server = RolloutTelemetry().serve(port=0)\nserver.stop()"
    )
    assert "rollout_telemetry._serve.metrics_server" in served
    assert "asyncio" in served  # the server's event loop


def test_the_command_lines_help_and_a_wrong_flag_load_nothing_a_command_needs() -> None:
    """``--help`` and an argument error are answered before anything a command runs is imported: no
    telemetry, server, file source or simulation, and neither prometheus_client nor asyncio."""
    for argv in (["--help"], ["serve", "--port", "no"], ["demo", "--help"]):
        code = f"from rollout_telemetry._cli.main import main\nmain({argv!r})"
        assert _loaded_after(code, NOT_FOR_HELP) == [], argv
