"""Rollouts in flight: one slot each (when it started, its stage, what began it, whether it stalled).

The lifecycle API puts a rollout in flight when its block starts and takes it out when its outcome is
counted, in the same step as the count (``Account.count``). Slots are reused, so starting and finishing
allocate nothing. The stall rule (in flight longer than its agent's ``stall_after``) is applied here, once
per rollout. Only touched under the account's lock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from rollout_telemetry.failure_kinds import AGENT

__all__ = ["Flight", "FlightRecord", "Flights", "Slot"]


class Flight(Protocol):
    """What began a rollout in flight (the lifecycle's rollout context): read for ``/rollouts``."""

    task_index: int | None
    rollout_index: int | None
    attempt: int | None

    @property
    def span_ids(self) -> tuple[str, str] | None:
        """(trace id, span id) in hex, when the rollout has a span."""

    def stalled(self, age: float, stage: str) -> None:
        """The rollout was found stalled: note it (on its span); never raises."""


@dataclass(frozen=True, slots=True)
class FlightRecord:
    """One rollout in flight, as ``/rollouts`` shows it."""

    agent: str
    task_index: int | None
    rollout_index: int | None
    attempt: int | None
    stage: str
    age_seconds: float
    stalled: bool
    trace_id: str | None
    span_id: str | None


class Slot:
    """One rollout in flight: free when ``start`` is ``None``."""

    __slots__ = ("flight", "stage", "stalled", "start")

    def __init__(self) -> None:
        self.start: float | None = None
        self.stage = AGENT
        self.flight: Flight | None = None
        self.stalled = False


class Flights:
    """One agent's rollouts in flight, and the stages and stalls seen."""

    __slots__ = ("free", "slots", "stage_labels", "stalls")

    def __init__(self) -> None:
        self.slots: list[Slot] = []
        self.free: list[Slot] = []
        self.stage_labels: set[str] = {AGENT}  # every stage seen: their gauges read 0 when nothing is there
        self.stalls: dict[str, int] = {}  # rollouts that crossed the stall bound, by the stage they were in

    def begin(self, now: float, flight: Flight | None) -> Slot:
        """A rollout in flight since ``now``, at stage ``agent``."""
        if self.free:
            slot = self.free.pop()
        else:  # more rollouts in flight than ever before
            slot = Slot()
            self.slots.append(slot)
        slot.start = now
        slot.stage = AGENT
        slot.flight = flight
        return slot

    def end(self, slot: Slot) -> None:
        """The rollout is out of flight: its slot is free again."""
        slot.start = None
        slot.flight = None
        slot.stalled = False
        self.free.append(slot)

    def stalled_past(self, now: float, limit: float) -> list[tuple[str, Flight | None, float]]:
        """Flag, and count once by their stage, the rollouts in flight longer than ``limit`` not flagged yet;
        return each as (stage, what began it, age). The one place the stall rule is applied."""
        found = []
        for slot in self.slots:
            start = slot.start
            if start is None or slot.stalled or now - start <= limit:
                continue
            slot.stalled = True
            self.stalls[slot.stage] = self.stalls.get(slot.stage, 0) + 1
            found.append((slot.stage, slot.flight, now - start))
        return found

    def live(self) -> list[tuple[float, str, Flight | None, bool]]:
        """(start, stage, what began it, stalled) of each rollout in flight."""
        return [(s.start, s.stage, s.flight, s.stalled) for s in self.slots if s.start is not None]

    def by_stage(self) -> tuple[dict[str, int], dict[str, int], dict[str, float]]:
        """Rollouts in flight, of them stalled, and the oldest start, by stage (every stage seen: 0)."""
        in_flight = dict.fromkeys(self.stage_labels, 0)
        stalled = dict.fromkeys(self.stage_labels, 0)
        oldest: dict[str, float] = {}
        for slot in self.slots:
            start = slot.start
            if start is not None:
                stage = slot.stage
                in_flight[stage] = in_flight.get(stage, 0) + 1
                stalled[stage] = stalled.get(stage, 0) + slot.stalled
                if start < oldest.get(stage, start + 1.0):
                    oldest[stage] = start
        return in_flight, stalled, oldest
