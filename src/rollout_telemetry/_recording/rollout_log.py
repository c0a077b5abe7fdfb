"""The structured log of rollouts: one JSON line (INFO) on ``rollout_telemetry.rollouts`` per rollout that
reaches its end, its contract the JSON Schema ``docs/reference/rollout-log.schema.json``.

Only with ``RolloutTelemetry(rollout_log=True)`` and that logger enabled for INFO: the recording path tests
the telemetry's flag before ``isEnabledFor``, far dearer, so a run that does not ask for the lines does not
pay for the question (docs/performance.md). The failure reason is there only as the telemetry's
``redact_reason`` hook returned it: free text is never logged raw.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Literal

from rollout_telemetry import failure_kinds
from rollout_telemetry._contract.failure_where import UNKNOWN, Where
from rollout_telemetry._contract.identity import Member
from rollout_telemetry._contract.outcome import Classified, Disposition

if TYPE_CHECKING:
    from rollout_telemetry._recording.spans import SpanRecorder
    from rollout_telemetry._store.names import Names

__all__ = ["INFO", "ROLLOUTS", "log_outcome"]

ROLLOUTS = logging.getLogger("rollout_telemetry.rollouts")
"""The logger of the rollout lines; enable it for INFO to get them."""

INFO = logging.INFO

SCHEMA = "rollout_telemetry.rollout/1"
"""The ``schema`` field of every line: the name and version of its contract."""

State = Literal["terminal", "abandoned", "cancelled"]


def state_of(outcome: Classified | None) -> State:
    """The state a rollout ended in: ``abandoned`` without an outcome, ``cancelled`` when it failed as
    cancelled, ``terminal`` with any other outcome."""
    if outcome is None:
        return "abandoned"
    if outcome[0] is Disposition.FAILED and outcome[2] == failure_kinds.CANCELLED:
        return "cancelled"
    return "terminal"


def log_rollout(
    *,
    agent: str,
    task_index: int | None,
    rollout_index: int | None,
    attempt: int | None,
    state: State,
    disposition: Disposition | None,
    failure_kind: str | None,
    terminal: bool,
    stage: str | None = None,
    delivery: str | None = None,
    elapsed_seconds: float | None = None,
    admission_wait_seconds: float | None = None,
    trace_id: str | None = None,
    span_id: str | None = None,
    reason: str | None = None,
) -> None:
    """Write one rollout's line if ``ROLLOUTS`` is enabled for INFO.

    The identity, state, disposition, failure kind and ``terminal`` are always there (``null`` when there is
    none); the other fields only when known. ``reason`` must be the ``redact_reason`` hook's output. The
    fields also go on the log record as its ``rollout`` attribute, for handlers that format records
    themselves.
    """
    if not ROLLOUTS.isEnabledFor(logging.INFO):
        return
    line: dict[str, object] = {
        "schema": SCHEMA,
        "agent": agent,
        "task_index": task_index,
        "rollout_index": rollout_index,
        "attempt": attempt,
        "state": state,
        "disposition": None if disposition is None else disposition.value,
        "failure_kind": failure_kind,
        "terminal": terminal,
    }
    known = {
        "stage": stage,
        "delivery": delivery,
        "elapsed_seconds": elapsed_seconds,
        "admission_wait_seconds": admission_wait_seconds,
        "trace_id": trace_id,
        "span_id": span_id,
        "reason": reason,
    }
    line.update((key, value) for key, value in known.items() if value is not None)
    ROLLOUTS.info("%s", json.dumps(line, separators=(",", ":")), extra={"rollout": line})


def log_outcome(  # noqa: PLR0917 - the rollout as its callers hold it
    names: Names,
    spans: SpanRecorder,
    agent: str,
    outcome: Classified | None,
    member: Member | None,
    terminal: bool,
    stage: str | None = None,
    elapsed_seconds: float | None = None,
    ids: tuple[str, str] | None = None,
    where: Where | None = None,
    admission_wait_seconds: float | None = None,
) -> None:
    """``log_rollout`` for a rollout that ended with ``outcome`` (``None``: abandoned), under the agent and
    failure-kind labels it was counted under (as on its span), its reason through ``spans``' redact hook;
    ``member`` is its identity as checked (``None``: none, or a bad one, rejected); ``where`` a failure's
    checked (stage, delivery), each given only when known (its stage over ``stage``, where it was).

    Raises:
        Exception: what the redact hook raised (the caller counts it).
    """
    label = names.agent(agent)[0]
    disposition = kind = reason = None
    if outcome is not None:
        disposition = outcome[0]
        kind = names.outcome_kind(label, disposition, outcome[2])
        if outcome[3] is not None:
            reason = spans.redacted(outcome[3])
    task_index, rollout_index, attempt = (None, None, None) if member is None else member
    delivery = None
    if where is not None:
        stage = where[0] if where[0] != UNKNOWN else stage
        delivery = where[1] if where[1] != UNKNOWN else None
    log_rollout(
        agent=label,
        task_index=task_index,
        rollout_index=rollout_index,
        attempt=attempt,
        state=state_of(outcome),
        disposition=disposition,
        failure_kind=kind,
        terminal=terminal,
        stage=stage,
        delivery=delivery,
        elapsed_seconds=elapsed_seconds,
        admission_wait_seconds=admission_wait_seconds,
        trace_id=None if ids is None else ids[0],
        span_id=None if ids is None else ids[1],
        reason=reason,
    )
