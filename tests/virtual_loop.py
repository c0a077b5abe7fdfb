"""An asyncio event loop on a FakeClock, for unit tests of code that waits on the loop's time.

The loop's ``time()`` is the clock's. When nothing is ready to run and a timer is pending, the loop does not
wait for it: the clock jumps to the timer's time at once, so timers run in their order, each exactly when it
is due, and no wall-clock time passes. A test injects a delay the loop did not see coming (a callback that
blocked the loop, say) with ``clock.advance(seconds)``, then yields.

With no timer pending the loop waits for real, for another thread's ``call_soon_threadsafe``. With a timer
pending it never does: a timeout on the loop (``asyncio.timeout``, ``wait_for``) around work done by another
thread expires at once. Use this loop for work on the loop only.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Callable, Coroutine
from contextvars import Context
from typing import Any, TypeVar, TypeVarTuple

from tests.support import FakeClock

__all__ = ["VirtualLoop", "idle", "run_virtual"]

_Result = TypeVar("_Result")
_Args = TypeVarTuple("_Args")


class _IdleAdvancesClock(selectors.DefaultSelector):
    """A selector that, asked to wait for a timer, polls once and moves the clock to the timer instead."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self._clock = clock

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None or timeout <= 0:  # nothing scheduled (a real wait), or something ready
            return super().select(timeout)
        ready = super().select(0)
        if not ready:
            # The loop asks for the time until its earliest timer (when - now): the clock lands on it exactly.
            self._clock.advance(timeout)
        return ready


class VirtualLoop(asyncio.SelectorEventLoop):
    """An event loop whose time is ``clock``'s and whose idle waits move the clock to the next timer.

    ``armed`` lists every timer armed on it, as ``(when, callback)``, in the order they were armed.
    """

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(_IdleAdvancesClock(clock))
        self.clock = clock
        self.armed: list[tuple[float, Callable[..., object]]] = []

    def time(self) -> float:
        return self.clock()

    def call_at(
        self,
        when: float,
        callback: Callable[[*_Args], object],
        *args: *_Args,
        context: Context | None = None,
    ) -> asyncio.TimerHandle:
        self.armed.append((when, callback))
        return super().call_at(when, callback, *args, context=context)


def run_virtual(main: Coroutine[Any, Any, _Result], clock: FakeClock) -> _Result:
    """``asyncio.run(main)`` on a new ``VirtualLoop`` on ``clock``."""
    with asyncio.Runner(loop_factory=lambda: VirtualLoop(clock)) as runner:
        return runner.run(main)


async def idle(seconds: float) -> None:
    """Let ``seconds`` of the running ``VirtualLoop``'s time pass, every timer due meanwhile run in order
    (no wall-clock time: refused on another loop)."""
    loop = asyncio.get_running_loop()
    if not isinstance(loop, VirtualLoop):
        msg = f"idle() waits on a VirtualLoop's clock only, not on {type(loop).__name__}"
        raise TypeError(msg)
    await asyncio.sleep(seconds)
