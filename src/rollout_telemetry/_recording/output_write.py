"""``telemetry.output_write()``: one write of the collection's output (a rollout's row appended to the results
file, say), timed, its size counted where the writer gives it, and counted failed if it raises."""

from __future__ import annotations

from collections.abc import Callable

from rollout_telemetry._contract.shown import shown
from rollout_telemetry._recording.async_with import AsyncWith
from rollout_telemetry._store.runtime_observations import Runtime
from rollout_telemetry.errors import OutcomeError, RolloutUsageError

__all__ = ["OutputWrite"]


class OutputWrite(AsyncWith):
    """One output write, timed: ``with`` or ``async with``.

    Its duration goes to ``rollout_output_write_seconds``; the bytes given to ``wrote(n)`` inside the block
    to ``rollout_output_write_bytes``. An exception escaping the block counts it in
    ``rollout_output_writes_failed_total`` (its duration is observed all the same) and is re-raised.
    """

    __slots__ = ("_clock", "_reject", "_runtime", "_size", "_started")

    def __init__(
        self, runtime: Runtime, clock: Callable[[], float], reject: Callable[[Exception], None]
    ) -> None:
        self._runtime = runtime
        self._clock = clock
        self._reject = reject
        self._started: float | None = None  # while it is open
        self._size: int | None = None

    def __enter__(self) -> OutputWrite:
        if self._started is not None:
            self._reject(RolloutUsageError("output_write_reentered", "an output write entered twice"))
            return self
        self._size = None
        self._started = self._clock()
        return self

    def wrote(self, size: int) -> None:
        """Count ``size`` more bytes written by this write (once, or once per piece). A size that is not an
        integer >= 0 is a counted rejection (``invalid_size``), as is a call outside the block
        (``outcome_outside_block``)."""
        if self._started is None:
            outside = "wrote() on an output write outside its block"
            self._reject(RolloutUsageError("outcome_outside_block", outside))
            return
        if type(size) is not int or size < 0:
            self._reject(OutcomeError("size", f"must be an integer >= 0, got {shown(size, 50)}"))
            return
        self._size = size if self._size is None else self._size + size

    def _leave(self, exc: BaseException | None) -> None:
        started, self._started = self._started, None
        if started is None:
            return
        try:
            self._runtime.wrote(max(self._clock() - started, 0.0), self._size, exc is not None)
        except Exception as error:  # never into the writer's way: counted
            self._reject(error)
