"""What every rollout context and cleanup of one telemetry records through (``Shared``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rollout_telemetry._recording.settlement import Settlement

if TYPE_CHECKING:
    from rollout_telemetry._recording.spans import SpanRecorder
    from rollout_telemetry._store.account import Account
    from rollout_telemetry._store.rejections import Rejections

__all__ = ["Shared"]


@dataclass(frozen=True, slots=True)
class Shared:
    """What every rollout context of one telemetry records through: made once, referenced by each context.

    One object rather than five arguments, so making a context (one per rollout) is a call with a few
    positional values (docs/performance.md).
    """

    account: Account
    settle: Callable[[Settlement], int | None]
    """The recording part's one path for an outcome (``Recorder.settle``); returns the attempts its identity
    took when it made it final."""
    spans: SpanRecorder
    rejections: Rejections
    clock: Callable[[], float]
    loop_entered: Callable[[], None] = lambda: None
    """Called as an ``async with`` block is entered, on its event loop (which the facade samples)."""
    rollout_log: bool = False  # rollout_log=True: each rollout's line when it ends
