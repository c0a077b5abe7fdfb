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


def _loaded_after(code: str) -> list[str]:
    """The modules of NOT_FOR_RECORDING (or under them) loaded by a fresh interpreter after ``code``."""
    probe = (
        f"import json, sys\n{code}\n"
        f"print(json.dumps(sorted(m for m in sys.modules if any(m == p or m.startswith(p + '.') "
        f"for p in {NOT_FOR_RECORDING!r}))))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    loaded: list[str] = json.loads(result.stdout)
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
    assert "rollout_telemetry._serve.server" in served
    assert "asyncio" in served  # the server's event loop
