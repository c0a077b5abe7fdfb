"""Where a failure happened and whether its request got through: NeMo Gym 0.7.0's failure stage and delivery.

A failure's stage is one of Gym's ``FailureStage`` values (``failure_kinds.STAGES``: admission, seed, agent,
verification, cleanup) and its delivery one of ``RolloutFailure.delivery``'s (not_sent, possibly_delivered,
delivered); either is ``unknown`` when not said. Both are bounded labels
(``rollout_failure_stages_total{stage,delivery}``), so a value outside the sets is refused: the failure is
still counted, with ``unknown``, and the refusal is counted (``invalid_stage``, ``invalid_delivery``).
"""

from __future__ import annotations

from typing import Final

from rollout_telemetry.errors import OutcomeError
from rollout_telemetry.failure_kinds import STAGES

__all__ = ["UNKNOWN", "Where", "failure_where", "stage_of"]

UNKNOWN: Final = "unknown"
"""The stage or delivery of a failure that does not say."""

DELIVERIES: Final[frozenset[str]] = frozenset({"not_sent", "possibly_delivered", "delivered"})
"""NeMo Gym's delivery states of a failed request (``rollout_outcomes.RolloutFailure.delivery``)."""

Where = tuple[str, str]
"""(stage, delivery) of a failure, each a member of its set or ``unknown``."""


def _checked(value: object, allowed: frozenset[str], field: str) -> tuple[str, OutcomeError | None]:
    if value is None:
        return UNKNOWN, None
    if type(value) is str and (value in allowed or value == UNKNOWN):
        return value, None
    shown = repr(value)[:80]
    return UNKNOWN, OutcomeError(field, f"{shown} is not one of {', '.join(sorted(allowed))} or {UNKNOWN}")


def failure_where(stage: object, delivery: object) -> tuple[Where | None, tuple[OutcomeError, ...]]:
    """A failure's (stage, delivery), ``None`` when neither is given, and the refusals of bad values
    (``invalid_stage``, ``invalid_delivery``), each then taken as ``unknown``."""
    if stage is None and delivery is None:
        return None, ()
    stage_label, bad_stage = _checked(stage, STAGES, "stage")
    delivery_label, bad_delivery = _checked(delivery, DELIVERIES, "delivery")
    errors = tuple(error for error in (bad_stage, bad_delivery) if error is not None)
    return (stage_label, delivery_label), errors


def stage_of(current: str) -> str | None:
    """The failure stage of a rollout at stage ``current`` (``ctx.stage()``): one of Gym's stages, also as
    ``<server>:<stage>``, else ``None`` (not said)."""
    stage = current.rpartition(":")[2]
    return stage if stage in STAGES else None
