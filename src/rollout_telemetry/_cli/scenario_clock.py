"""The demo's event loop, on the scenario's clock: a simulated rollout lasts what the scenario drew for it.

On a loop on the wall clock a busy machine stretches every ``await asyncio.sleep(d)`` (the loop wakes late,
or is busy when the timer is due), so a demo beside other work shows slow rollouts, stalls and loop lag that
its scenario never asked for. Here the loop's ``time()`` is the scenario's: it moves from one timer to the
next, and each timer runs at exactly its time, however late the machine lets the loop get to it. Waiting is
real, so the scenario's time keeps pace with the wall clock, and falls behind it by what the machine withheld
(a late wake), never ahead. The telemetry the demo records through reads this clock, so a rollout's duration,
its age in flight and the loop's lag are the scenario's own; work the scenario itself does on the loop
(``block``: the ``loop_lag`` scenario's) takes its time on both clocks.
"""

from __future__ import annotations

import asyncio
import heapq
import selectors
import time
from collections.abc import Callable
from contextvars import Context
from typing import TypeVarTuple

__all__ = ["ScenarioLoop"]

_Args = TypeVarTuple("_Args")

_SLACK = 0.002
"""Seconds a timer may run after its time without putting the scenario behind: the kernel wakes a timer a
little late every time, which would otherwise slow the scenario's clock by a few percent."""


class _PacedSelector(selectors.DefaultSelector):
    """A selector that waits for the loop's next timer in real time and puts the loop's clock on it."""

    def __init__(self, loop: ScenarioLoop) -> None:
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        loop = self._loop
        due = loop.next_due()
        if due is None or timeout is None or loop.settle():  # no timer, or one due at the scenario's time
            return super().select(timeout)  # that has not run: no time moves (it runs first)
        began = time.monotonic()
        ready = super().select(0 if timeout <= 0 else max(due - began, 0.0))
        if timeout > 0 and ready and time.monotonic() < due:  # woken by I/O first: as long as the wall waited
            loop.advance(time.monotonic() - began)
        elif timeout > 0 or time.monotonic() >= due:  # the timer is due (work ready or not): its time is now
            loop.reach(time.monotonic())
        return ready


class ScenarioLoop(asyncio.SelectorEventLoop):
    """An event loop whose ``time()`` is the scenario's: it starts at ``time.monotonic()`` and moves from one
    timer to the next, each reached at its time exactly; ``block(seconds)`` is work of the scenario that holds
    the loop, and takes its time on both clocks."""

    def __init__(self) -> None:
        self._now = time.monotonic()
        self._behind = 0.0  # seconds the scenario's time is behind the wall clock: late wakes withheld them
        self._timers: list[float] = []  # the times of the timers armed, earliest first (cancelled ones too)
        self._unsettled = False  # a timer fell due without the loop reaching it: it runs before time moves
        super().__init__(_PacedSelector(self))

    def time(self) -> float:
        return self._now

    def call_at(
        self,
        when: float,
        callback: Callable[[*_Args], object],
        *args: *_Args,
        context: Context | None = None,
    ) -> asyncio.TimerHandle:
        heapq.heappush(self._timers, when)
        if when <= self._now:  # armed already due: it runs at the scenario's time, not at the next timer's
            self._unsettled = True
        return super().call_at(when, callback, *args, context=context)

    def next_due(self) -> float | None:
        """When, on the wall clock, the earliest timer still ahead of the scenario's time is due (a cancelled
        one may be among them: its time is reached, nothing runs, and nothing later is passed)."""
        timers = self._timers
        while timers and timers[0] <= self._now:
            heapq.heappop(timers)
        return timers[0] + self._behind if timers else None

    def settle(self) -> bool:
        """Whether a timer fell due at the scenario's time since the loop last waited (armed in the past, or
        passed by ``block``): the loop runs it before the scenario's time moves on, however late the machine
        lets the loop get to it. Asked once a wait."""
        unsettled, self._unsettled = self._unsettled, False
        return unsettled

    def reach(self, wall: float) -> None:
        """The earliest timer ahead is due at ``wall`` on the wall clock: the scenario's time is its time, and
        what the machine made it wait past that (beyond the kernel's slack) puts the scenario behind."""
        self._now = self._timers[0]
        self._behind = max(self._behind, wall - self._now - _SLACK)

    def advance(self, seconds: float) -> None:
        """The loop was woken before its next timer, ``seconds`` after it began to wait: as many pass, up to
        that timer's time."""
        self._now = min(self._now + seconds, self._timers[0])

    def block(self, seconds: float) -> None:
        """Hold the loop for ``seconds`` of the wall clock, as work that does not await does, and count them
        in the scenario's time too: what is due meanwhile runs that late."""
        time.sleep(seconds)
        self._now += seconds
        self._unsettled = True
