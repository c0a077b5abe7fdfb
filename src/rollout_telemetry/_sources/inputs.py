"""NeMo Gym's materialized inputs: the rollouts a run is expected to produce, one row each.

The follower reads them live beside a run's outputs; ``RolloutTelemetry.expect(inputs=)`` reads a whole file
at once, for a training loop that records through the hook API. Both take a row's expected rollout from
``input_rollout``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from rollout_telemetry._sources.gym_rows import Row, decode_row, row_agent, row_identity
from rollout_telemetry.errors import ConfigError, Rejection

__all__ = ["input_rollout", "read_inputs"]


def input_rollout(row: Row, default_agent: str | None) -> tuple[str, tuple[int, int]]:
    """The agent and identity (task index, rollout index) a materialized inputs row expects.

    Raises:
        Rejection: the row has no identity (``missing_identity``), names no agent and no default is given
            (``missing_agent``), or a field is invalid.
    """
    identity = row_identity(row)
    agent = row_agent(row) or default_agent
    if identity is None:
        raise Rejection("missing_identity", "a materialized inputs row needs its identity")
    if agent is None:
        raise Rejection("missing_agent", "no agent_ref.name or _ng_environment_server")
    return agent, identity


def read_inputs(
    path: str | Path, default_agent: str | None = None
) -> Iterator[tuple[int, tuple[str, tuple[int, int]] | Rejection]]:
    """Each non-blank line of a materialized inputs file: (line number, its expected rollout or why not).

    Raises:
        ConfigError: the file cannot be opened.
    """
    try:
        lines = Path(path).open("rb")  # noqa: SIM115 - closed below, once every line is read
    except OSError as exc:
        msg = f"materialized inputs {path} cannot be read: {exc.strerror}"
        raise ConfigError(msg) from None
    with lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                yield number, input_rollout(decode_row(line), default_agent)
            except Rejection as exc:
                yield number, exc
