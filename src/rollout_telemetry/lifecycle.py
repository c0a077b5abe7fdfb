"""``telemetry.rollout(...)``: one rollout tracked from start to outcome, as a sync or async context manager.

The rollout is in flight from entering the block until its outcome is recorded; both happen in the one
account, so a rollout is never counted twice and never lost:

- ``complete(response)`` / ``fail(kind, reason=...)`` / ``omit(kind)`` record the outcome once; a second
  call is ignored and logged (raised with ``strict=True``);
- an exception escaping the block records a failure (``agent_run_error`` unless the exception type maps
  to another kind) and re-raises;
- leaving the block without an outcome records a failure of kind ``rollout_telemetry:no_outcome``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from types import TracebackType
from typing import TYPE_CHECKING

from rollout_telemetry import failure_kinds
from rollout_telemetry.outcome import (
    Disposition,
    OutcomeError,
    check_failure_kind,
    check_failure_reason,
    read_completed,
)

if TYPE_CHECKING:
    from rollout_telemetry.account import InFlightHandle
    from rollout_telemetry.spans import OpenSpan
    from rollout_telemetry.telemetry import RolloutTelemetry

__all__ = ["EXCEPTION_KINDS", "NO_OUTCOME", "RolloutContext"]

_log = logging.getLogger("rollout_telemetry.lifecycle")

_MASKED, _UNSCORED, _MEASURED = Disposition.MASKED, Disposition.UNSCORED, Disposition.MEASURED

NO_OUTCOME = "rollout_telemetry:no_outcome"
"""The failure kind of a rollout block left without complete(), fail() or omit()."""

EXCEPTION_KINDS: Mapping[type[BaseException], str] = {
    asyncio.CancelledError: failure_kinds.CANCELLED,
    TimeoutError: failure_kinds.AGENT_TIMEOUT,
    KeyboardInterrupt: failure_kinds.SHUTDOWN,
    SystemExit: failure_kinds.SHUTDOWN,
    ConnectionError: failure_kinds.TRANSPORT_PEER_DROP,
}
"""Exception types (matched along the MRO) and the failure kind an escaping one records."""


def kind_of_exception(exc: BaseException) -> str:
    """The failure kind an exception escaping a rollout block records."""
    for cls in type(exc).__mro__:
        kind = EXCEPTION_KINDS.get(cls)
        if kind is not None:
            return kind
    return failure_kinds.AGENT_RUN_ERROR


class RolloutContext:
    """One rollout in flight. Use as ``with`` or ``async with``; record its outcome inside the block."""

    __slots__ = (
        "_account",
        "_done",
        "_handle",
        "_span",
        "_telemetry",
        "agent",
        "attempt",
        "rollout_index",
        "task_index",
    )

    def __init__(
        self,
        telemetry: RolloutTelemetry,
        agent: str,
        task_index: int | None,
        rollout_index: int | None,
        attempt: int | None,
    ) -> None:
        self._telemetry = telemetry
        self._account = telemetry.account
        self.agent = agent
        self.task_index = task_index
        self.rollout_index = rollout_index
        self.attempt = attempt
        self._handle: InFlightHandle | None = None
        self._span: OpenSpan | None = None
        self._done = False

    # -- entering and leaving -----------------------------------------------------------------------

    def __enter__(self) -> RolloutContext:
        telemetry = self._telemetry
        try:
            handle = self._handle = self._account.begin(self.agent)
            spans = telemetry.spans
            if spans.quiet_until <= handle[-1]:  # the start time: spans share the account's clock
                self._span = spans.start(self.agent, self.task_index, self.rollout_index, self.attempt)
        except Exception as exc:
            if self._handle is None:
                self._done = True  # nothing went in flight: there is nothing to finish
            telemetry._rejected(exc)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._done:
            return
        if exc is not None:
            reason = f"{type(exc).__name__}: {exc}"
            self._finish(Disposition.FAILED, None, kind_of_exception(exc), reason)
        else:
            self._finish(Disposition.FAILED, None, NO_OUTCOME, "rollout block exited without an outcome")

    async def __aenter__(self) -> RolloutContext:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)

    # -- outcomes -----------------------------------------------------------------------------------

    def complete(self, response: object) -> None:
        """Record the rollout's verify response: measured, masked or unscored.

        A response that fails the contract is counted as rejected and the rollout as failed with kind
        ``protocol_violation`` (raised with ``strict=True``), so it is still counted once.
        """
        if self._done and self._already_done("complete"):
            return
        try:
            reward, masked, kind, reason = read_completed(response)
        except OutcomeError as exc:
            self._telemetry._rejected(exc)  # raises in strict mode, leaving the rollout open
            self._finish(Disposition.FAILED, None, failure_kinds.PROTOCOL_VIOLATION, str(exc))
            return
        # disposition_of's rule, written out: this runs once per rollout.
        disposition = _MASKED if masked else (_UNSCORED if reward is None else _MEASURED)
        if self._span is None and self._handle is not None:
            # The common case, written out: no span to close, so count and be done.
            self._done = True
            try:
                self._account.finish(self._handle, disposition, reward, kind)
            except Exception as exc:
                self._telemetry._rejected(exc)
            return
        self._finish(disposition, reward, kind, reason)

    def fail(self, failure_kind: str | None = None, *, reason: str | None = None) -> None:
        """Record that the rollout never reached the output."""
        self._explicit(Disposition.FAILED, failure_kind, reason)

    def omit(self, failure_kind: str | None = None, *, reason: str | None = None) -> None:
        """Record that the rollout was left out on purpose."""
        self._explicit(Disposition.OMITTED, failure_kind, reason)

    def _explicit(self, disposition: Disposition, failure_kind: str | None, reason: str | None) -> None:
        if self._done and self._already_done(disposition.value):
            return
        try:
            kind = check_failure_kind(failure_kind)
            reason = check_failure_reason(reason)
        except OutcomeError as exc:
            self._telemetry._rejected(exc)
            kind, reason = None, None
        self._finish(disposition, None, kind, reason)

    def _already_done(self, what: str) -> bool:
        if self._handle is None:
            return True  # entering failed and was counted; nothing more to do
        msg = f"rollout of {self.agent!r} already has an outcome; {what}() ignored"
        if self._telemetry.strict:
            raise RuntimeError(msg)
        _log.warning(msg)
        return True

    def _finish(
        self,
        disposition: Disposition,
        reward: float | None,
        kind: str | None,
        reason: str | None,
    ) -> None:
        self._done = True
        handle = self._handle
        if handle is None:
            return
        try:
            self._account.finish(handle, disposition, reward, kind)
            if self._span is not None:
                self._telemetry.spans.finish(self._span, disposition, reward, kind, reason)
        except Exception as exc:
            self._telemetry._rejected(exc)
