"""One outcome on its way into the counts: the record ``Recorder.settle`` takes, declared once.

What ends a rollout (``record*()`` through the recording part, a rollout block, a followed row) makes one
``Settlement`` of the outcome and what is known of its rollout, positionally, and hands it to ``settle``,
which weighs it in the coverage account, counts it (ending the rollout's flight) and gives it to its group.
A plain tuple, as ``Classified`` is: every rollout block makes one (docs/performance.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rollout_telemetry._contract.failure_where import Where
from rollout_telemetry._contract.identity import Member
from rollout_telemetry._contract.outcome import Classified

if TYPE_CHECKING:
    from rollout_telemetry._store.in_flight import InFlight

__all__ = ["Settlement"]

Settlement = tuple[
    str,
    Classified,
    "InFlight | None",
    Member | None,
    tuple[str, str] | None,
    bool,
    tuple[str, ...] | None,
    int | None,
    Where | None,
]
"""``(agent, outcome, in_flight, member, exemplar, terminal, health, line, where)``: an outcome and
what is known of its rollout, as ``Recorder.settle`` takes it.

- ``agent``: as the caller named it; ``outcome``: checked and classified (``Classified``);
- ``in_flight``: the handle of the rollout block it ends (its flight ends as it is counted), else ``None``;
- ``member``: (task index, rollout index, attempt or ``None``), checked before anything was counted;
  ``None``: no identity, or a bad one (rejected);
- ``exemplar``: the (trace id, span id) of the rollout's span, if it has one;
- ``terminal``: a failure NeMo Gym will not retry (never ``retryable`` in the coverage account);
- ``health``: the health checks its trajectory failed, ``None`` without a trajectory;
- ``line``: the line of a followed row, written earlier (0: not known); ``None`` for an outcome that happens
  now, whose time the coverage account takes;
- ``where``: a failure's (stage, delivery), when it said either.
"""
