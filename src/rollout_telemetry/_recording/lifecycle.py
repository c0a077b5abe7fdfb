"""``telemetry.rollout(...)``: one rollout tracked from start to outcome, as a sync or async context manager.

A context made by ``telemetry.offer(...)`` ahead of its block is ``offered`` (its admission wait running)
until its block is entered; one made by ``telemetry.rollout(...)`` is offered and admitted as its block is
entered. The rollout is in flight from then until its outcome is recorded, and ``terminal`` from then until
its block exits; each step happens in the one account under its one lock, so a rollout is never counted twice
and never lost:

- ``complete(response)`` / ``fail(kind, reason=...)`` / ``omit(kind)`` record the outcome once; a second
  one, or one given outside the block, is a counted rejection (raised with ``strict=True``);
- an exception escaping the block records a failure (``agent_run_error`` unless the exception type maps
  to another kind) and re-raises;
- leaving the block without an outcome records a failure of kind ``rollout_telemetry:no_outcome``, or
  ``cancelled`` after ``cancel()``;
- ``abandon()`` takes the rollout out of flight counted nowhere, as a stopped run leaves it.

``heartbeat()`` and ``stage()`` say the rollout is alive; ``cleanup()`` times the release of what it held
(``Cleanup``). Whatever a user hook does (``redact_reason`` raising, say), the span is ended and its context
detached, and the rollout's slot is freed when its block exits.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING

from rollout_telemetry import failure_kinds
from rollout_telemetry._contract.failure_where import Where, failure_where, stage_of
from rollout_telemetry._contract.health import TRAJECTORY, health_of
from rollout_telemetry._contract.identity import Member, member
from rollout_telemetry._contract.outcome import Classified, Disposition, absent, classify
from rollout_telemetry._contract.shown import shown
from rollout_telemetry._recording.async_with import AsyncWith
from rollout_telemetry._recording.cleanup import Cleanup
from rollout_telemetry._recording.exception_kinds import kind_of_exception, reason_of_exception
from rollout_telemetry._recording.rollout_log import INFO, ROLLOUTS, log_outcome
from rollout_telemetry._store.flights import CANCELLED, STAGED
from rollout_telemetry.errors import OutcomeError, RolloutUsageError

if TYPE_CHECKING:
    from rollout_telemetry._recording.context_shared import Shared
    from rollout_telemetry._recording.spans import OpenSpan
    from rollout_telemetry._store.flights import Offered
    from rollout_telemetry._store.in_flight import InFlight

__all__ = ["OfferedContext", "RolloutContext", "note_stalled"]

NO_OUTCOME = "rollout_telemetry:no_outcome"
"""The failure kind of a rollout block left without complete(), fail() or omit()."""

# The states of a rollout context: _TERMINAL, its outcome is counted and its block has not exited.
_NEW, _IN_FLIGHT, _DONE, _NOT_TRACKED, _TERMINAL = 0, 1, 2, 3, 4
_OPEN = (_IN_FLIGHT, _TERMINAL)  # its block has a slot: stage() and heartbeat() apply


class RolloutContext(AsyncWith):
    """One rollout in flight. Use as ``with`` or ``async with``; record its outcome inside the block.

    ``task_index``, ``rollout_index`` and ``attempt`` are its identity as given; an identity refused as the
    block is entered (a counted rejection) reads ``None`` from then on, and the rollout goes ungrouped.
    """

    __slots__ = (
        "_handle",
        "_member",
        "_offered",
        "_shared",
        "_span",
        "_state",
        "agent",
        "attempt",
        "rollout_index",
        "task_index",
    )

    def __init__(  # noqa: PLR0917 - positional: a keyword makes the call to the class slower (3.11 to 3.13)
        self,
        shared: Shared,
        agent: str,
        task_index: int | None = None,
        rollout_index: int | None = None,
        attempt: int | None = None,
        offered: bool = False,
    ) -> None:
        self._shared = shared
        self.agent = agent
        self.task_index = task_index
        self.rollout_index = rollout_index
        self.attempt = attempt
        self._handle: InFlight | None = None
        self._member: Member | None = None  # its identity, checked when it starts
        self._span: OpenSpan | None = None
        self._state = _NEW
        # Made ahead of its block (telemetry.offer): offered from now, the time its admission wait starts at.
        # Made by telemetry.rollout(), to be entered at once: no clock read and no mark (docs/performance.md).
        self._offered: Offered | None = shared.account.offer(agent) if offered else None

    # -- entering and leaving -----------------------------------------------------------------------

    def __enter__(self) -> RolloutContext:
        if self._state != _NEW:
            self._shared.rejections.reject(
                RolloutUsageError("rollout_reentered", f"rollout of {shown(self.agent, 60)} entered twice")
            )
            return self
        now = self._shared.clock()
        refused = None
        if self.task_index is not None or self.rollout_index is not None or self.attempt is not None:
            try:  # checked before anything is counted: a bad identity is rejected, the rollout goes ungrouped
                self._member = member(self.task_index, self.rollout_index, self.attempt)
            except OutcomeError as exc:
                refused = exc
                # Never carried on: not to the span, the listing of rollouts in flight or the page.
                self.task_index = self.rollout_index = self.attempt = None
        try:
            self._handle = self._shared.account.begin(self.agent, now, self, self._offered)
        except Exception as exc:
            self._state = _NOT_TRACKED  # nothing went in flight: its outcome has nothing to finish
            self._shared.rejections.reject(exc)
            return self
        self._state = _IN_FLIGHT
        try:
            if refused is not None:
                self._shared.rejections.reject(refused)
            try:
                spans = self._shared.spans
                self._span = spans.start(self.agent, self.task_index, self.rollout_index, self.attempt, now)
            except Exception as exc:  # a broken tracer provider: the rollout is tracked without a span
                self._shared.rejections.reject(exc)
        except BaseException:  # strict=True raised a rejection: the block never runs, nothing stays in flight
            self._state = _DONE
            self._shared.account.abandon(self._handle)
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if self._state == _IN_FLIGHT:
                if exc is not None:
                    kind, reason = kind_of_exception(exc), reason_of_exception(exc)
                    self._finish(absent(Disposition.FAILED, kind, reason))
                elif self._handle is not None and (slot := self._handle[1]).flags & CANCELLED:
                    self._finish(absent(Disposition.FAILED, failure_kinds.CANCELLED, slot.reason))
                else:
                    self._finish(
                        absent(Disposition.FAILED, NO_OUTCOME, "rollout block exited without an outcome")
                    )
        finally:  # whatever _finish raised (strict=True), the slot is free once the block exits
            if self._state == _TERMINAL:  # its outcome is counted
                self._state = _DONE
                handle = self._handle
                assert handle is not None
                self._shared.account.release(handle)

    async def __aenter__(self) -> RolloutContext:
        self._shared.loop_entered()  # the loop's lag sampler, once (runtime_metrics=True)
        return self.__enter__()

    # -- where it is ---------------------------------------------------------------------------------

    def stage(self, stage: str) -> None:
        """Say where the rollout is: NeMo Gym's stages (``admission``, ``seed``, ``agent``,
        ``verification``, ``cleanup``) or ``<server>:<stage>``; a new rollout is at ``agent``. A stage change
        is a heartbeat too. Outside the block it is ignored; after the outcome it still applies (a terminal
        rollout releasing its session, say)."""
        if self._state not in _OPEN:
            return
        handle = self._handle
        assert handle is not None
        try:
            self._shared.account.set_stage(handle, stage, self._shared.clock())
        except Exception as exc:
            self._shared.rejections.reject(exc)

    def heartbeat(self) -> None:
        """Note that the rollout is alive now: ``/rollouts`` and ``top`` show the seconds since its last
        heartbeat, stage change or start. Outside the block it is ignored."""
        if self._state not in _OPEN:
            return
        handle = self._handle
        assert handle is not None
        try:
            self._shared.account.heartbeat(handle, self._shared.clock())
        except Exception as exc:
            self._shared.rejections.reject(exc)

    def cancel(self, reason: str | None = None) -> None:
        """Mark the rollout ``cancelled`` (a drain decided to drop it, say) until its block exits; leaving the
        block without another outcome then records a failure of kind ``cancelled`` (``reason`` as a
        failure's). Outside the block, or after an outcome, it is a counted rejection."""
        if self._state != _IN_FLIGHT:
            self._refuse("cancel")
            return
        handle = self._handle
        assert handle is not None
        try:
            self._shared.account.cancel(handle, "rollout cancelled" if reason is None else reason)
        except Exception as exc:
            self._shared.rejections.reject(exc)

    def cleanup(self) -> Cleanup:
        """A cleanup of the rollout (releasing its environment session, say): ``with`` or ``async with``,
        inside the block, before or after the outcome (``Cleanup``)."""
        return Cleanup(self._shared, self.agent)

    @property
    def span_ids(self) -> tuple[str, str] | None:
        """(trace id, span id) in hex of the rollout's span, when it has one."""
        span = self._span
        if span is None:
            return None
        context = span.span.get_span_context()
        return format(context.trace_id, "032x"), format(context.span_id, "016x")

    def _stalled(self, age: float, stage: str) -> None:
        """The rollout was found stalled: a ``rollout.stalled`` event on its open span. Never raises."""
        span = self._span
        if span is None or self._state != _IN_FLIGHT:
            return
        try:
            attributes: dict[str, str | float] = {"rollout.stage": stage, "rollout.age_seconds": age}
            self._shared.spans.event(span, "rollout.stalled", attributes)
        except Exception as exc:
            self._shared.rejections.reject(exc)

    # -- outcomes -----------------------------------------------------------------------------------

    def complete(self, response: object) -> None:
        """Record the rollout's verify response: measured, masked or unscored.

        A response that fails the contract is counted as rejected and the rollout as failed with kind
        ``protocol_violation`` (raised with ``strict=True``, leaving the rollout in flight), so it is still
        counted once.
        """
        if self._state != _IN_FLIGHT:
            self._refuse("complete")
            return
        health = None
        try:
            outcome = classify(response)
            # As record(): the trajectory of a rollout with its identity (a dict without one costs no call).
            if self._member is not None and (type(response) is not dict or TRAJECTORY in response):
                health = health_of(response)
        except OutcomeError as exc:
            self._shared.rejections.reject(exc)
            outcome = absent(Disposition.FAILED, failure_kinds.PROTOCOL_VIOLATION, str(exc))
        self._finish(outcome, False, health)  # positional: a call CPython specialises

    def fail(
        self,
        failure_kind: str | None = None,
        *,
        reason: str | None = None,
        terminal: bool = False,
        stage: str | None = None,
        delivery: str | None = None,
    ) -> None:
        """Record that the rollout never reached the output; ``terminal``: it is not to be retried (NeMo
        Gym's ``_ng_failure_terminal``), so the coverage account never counts it ``retryable``. ``stage`` and
        ``delivery`` are ``record_failure``'s; ``stage`` not given is the one ``stage()`` last set, when that
        is one of NeMo Gym's (none set: no stage)."""
        where: Where | None = None
        refused: tuple[OutcomeError, ...] = ()
        if self._state == _IN_FLIGHT:
            assert self._handle is not None
            slot = self._handle[1]
            current = (stage_of(slot.stage) if slot.flags & STAGED else None) if stage is None else stage
            where, refused = failure_where(current, delivery)
        self._absent(Disposition.FAILED, failure_kind, reason, terminal, where)
        for error in refused:  # after the failure is counted, at an unknown stage or delivery
            self._shared.rejections.reject(error)

    def omit(
        self, failure_kind: str | None = None, *, reason: str | None = None, terminal: bool = False
    ) -> None:
        """Record that the rollout was left out on purpose; ``terminal`` as for ``fail``."""
        self._absent(Disposition.OMITTED, failure_kind, reason, terminal)

    def _absent(
        self,
        disposition: Disposition,
        failure_kind: object,
        reason: object,
        terminal: bool,
        where: Where | None = None,
    ) -> None:
        if self._state != _IN_FLIGHT:
            self._refuse(disposition.value)
            return
        try:
            outcome = absent(disposition, failure_kind, reason)
        except OutcomeError as exc:
            self._shared.rejections.reject(exc)
            outcome = absent(Disposition.FAILED, failure_kinds.PROTOCOL_VIOLATION, str(exc))
        self._finish(outcome, terminal, None, where)

    def abandon(self) -> None:
        """Stop tracking the rollout without an outcome, as NeMo Gym leaves a rollout in flight when it is
        stopped: out of flight, counted nowhere (with expected work declared, the coverage account shows it
        ``unknown``: a resumed run produces it). Its span ends with a ``rollout.abandoned`` event. Outside
        the block, or after an outcome, it is a counted rejection, as an outcome would be."""
        if self._state != _IN_FLIGHT:
            self._refuse("abandon")
            return
        self._finish(None)

    def _refuse(self, what: str) -> None:
        if self._state == _NOT_TRACKED:
            return  # entering was refused and counted; its outcome has nothing to add
        if self._state == _NEW:
            reason = "outcome_outside_block"
            msg = f"{what}() on a rollout of {shown(self.agent, 60)} outside its with block: "
            msg += "the outcome is not counted"
        else:
            reason = "duplicate_outcome"
            msg = f"rollout of {shown(self.agent, 60)} already has an outcome: this {what}() is not counted"
        self._shared.rejections.reject(RolloutUsageError(reason, msg))

    def _finish(
        self,
        outcome: Classified | None,
        terminal: bool = False,
        health: tuple[str, ...] | None = None,
        where: Where | None = None,
    ) -> None:
        # The one way out of flight: with an outcome, settled; without one (abandon), counted nowhere.
        handle = self._handle
        assert handle is not None  # in flight
        span = self._span
        self._state = _DONE if outcome is None else _TERMINAL  # abandon() frees the slot at once
        attempts = None
        logged = self._shared.rollout_log and ROLLOUTS.isEnabledFor(INFO)  # its line (rollout_log=True)
        if logged:  # read before abandon() hands the slot back: another block may take it at once
            slot, ended = handle[1], self._shared.clock()
            stage, wait = slot.stage, slot.wait_until(ended)
        try:
            try:
                if outcome is None:
                    self._shared.account.abandon(handle)
                else:
                    exemplar = None if span is None else self.span_ids
                    attempts = self._shared.settle(
                        (self.agent, outcome, handle, self._member, exemplar, terminal, health, None, where)
                    )
            finally:
                if span is not None:
                    self._shared.spans.finish(span, outcome, facts=(where, attempts))
        except Exception as exc:  # a raising hook: counted; the span was ended and its context detached
            self._shared.rejections.reject(exc)
        if logged:
            shared = self._shared
            try:
                ids, elapsed, names = self.span_ids, ended - handle[2], shared.account.names
                log_outcome(
                    names, shared.spans, self.agent, outcome, self._member, terminal, stage, elapsed, ids,
                    where, wait,
                )  # fmt: skip
            except Exception as exc:
                shared.rejections.reject(exc)


class OfferedContext(RolloutContext):
    """A rollout context made by ``telemetry.offer(...)``: gone without its block entered (its task cancelled
    while it waited for a slot, say), it is withdrawn, no longer offered. ``rollout()``'s contexts have no
    finalizer to run."""

    __slots__ = ()

    def __del__(self) -> None:
        # Lock-free (InFlightRollouts.withdraw): a finalizer runs wherever the collector is, the account's
        # lock held by this very thread maybe.
        offered = getattr(self, "_offered", None)  # None: its __init__ raised before the offer
        if offered is not None and self._state == _NEW:
            self._shared.account.withdraw(offered)


def note_stalled(flight: object, age: float, stage: str) -> None:
    """What began a rollout found stalled (``Stalls.check``): a rollout context notes it on its open span;
    never raises."""
    if isinstance(flight, RolloutContext):
        flight._stalled(age, stage)
