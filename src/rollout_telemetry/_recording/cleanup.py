"""``rollout.cleanup()`` and ``telemetry.cleanup(agent)``: one cleanup (releasing an environment session,
say), timed, then resolved or failed (``Cleanup``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rollout_telemetry._contract.shown import shown
from rollout_telemetry._recording.async_with import AsyncWith
from rollout_telemetry._recording.exception_kinds import kind_of_exception
from rollout_telemetry.errors import OutcomeError, RolloutUsageError

if TYPE_CHECKING:
    from rollout_telemetry._recording.context_shared import Shared
    from rollout_telemetry._store.agent import AgentState

__all__ = ["Cleanup"]


class Cleanup(AsyncWith):
    """One cleanup (releasing an environment session, say), timed: ``with`` or ``async with``.

    Its duration goes to ``rollout_cleanup_duration_seconds``; it is unresolved
    (``rollout_cleanups_unresolved``) from entering until it exits without failing. An exception escaping
    the block, or ``fail(kind)`` inside it, counts it in ``rollout_cleanups_failed_total`` (the exception's
    kind as for a rollout block) and it stays unresolved; the exception is re-raised.
    """

    __slots__ = ("_agent", "_failed", "_kind", "_shared", "_started", "_state")

    def __init__(self, shared: Shared, agent: str) -> None:
        self._shared = shared
        self._agent = agent
        self._state: AgentState | None = None  # while it is open
        self._started = 0.0
        self._failed = False
        self._kind: str | None = None

    def __enter__(self) -> Cleanup:
        if self._state is not None:
            self._shared.rejections.reject(
                RolloutUsageError("cleanup_reentered", f"cleanup of {shown(self._agent, 60)} entered twice")
            )
            return self
        try:
            self._state = self._shared.account.cleanup_started(self._agent)
        except Exception as exc:
            self._shared.rejections.reject(exc)
        self._started = self._shared.clock()
        return self

    def _leave(self, exc: BaseException | None) -> None:
        state, self._state = self._state, None
        if state is None:
            return
        kind = self._kind if self._failed or exc is None else kind_of_exception(exc)
        try:
            seconds = self._shared.clock() - self._started
            self._shared.account.cleanup_finished(state, seconds, self._failed or exc is not None, kind)
        except Exception as error:
            self._shared.rejections.reject(error)

    def fail(self, failure_kind: str | None = None) -> None:
        """Count the cleanup failed with ``failure_kind`` when it exits (it stays unresolved). Outside its
        block, a counted rejection."""
        if self._state is None:
            self._shared.rejections.reject(
                RolloutUsageError(
                    "outcome_outside_block",
                    f"fail() on a cleanup of {shown(self._agent, 60)} outside its block",
                )
            )
            return
        if failure_kind is not None and not isinstance(failure_kind, str):
            self._shared.rejections.reject(OutcomeError("failure_kind", "must be a string or None"))
            failure_kind = None
        self._failed, self._kind = True, failure_kind
