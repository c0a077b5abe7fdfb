"""The rollouts worth opening (``report``'s ``notable``): failed, masked, slowest, longest output.

Each category keeps at most ``limit`` rollouts in a bounded heap, so reading millions of rows keeps a few
dozen: failed and masked the first in the run's order (task index, rollout index, attempt; rows without an
identity after, then by file and line), slowest and longest output the largest, ties in the run's order. The
choice depends on the rows only, never on the order they are read in.
"""

from __future__ import annotations

import heapq
from typing import Any

from rollout_telemetry._contract.outcome import Classified, Disposition
from rollout_telemetry._views.run_order import NO_TASK, run_position

__all__ = ["NotableRollouts", "Place"]

Place = tuple[str, int, "float | None", "str | None"]
"""Where a counted row is and what its file says of it: ``(file, line, duration in seconds, stage)``."""

CATEGORIES = ("failed", "masked", "slowest", "longest_output")
"""The lists, in the order the report shows them."""

Entry = tuple[str, Classified, "tuple[int, int] | None", int, Place]


def _output_tokens(outcome: Classified) -> int | None:
    """The output tokens a row's usage says, or ``None`` without a usage."""
    generation = outcome[4]
    return None if generation is None or generation[0] is None else generation[0][1]


class NotableRollouts:
    """At most ``limit`` rollouts per category (``CATEGORIES``), chosen deterministically; with
    ``reasons``, each listed failure's ``failure_reason`` (from the user's own files, never a served page)."""

    def __init__(self, limit: int = 10, *, reasons: bool = False) -> None:
        self.limit = limit
        self.reasons = reasons
        self._files: dict[str, int] = {}  # a file's index: keys hold numbers only, so they can be negated
        self._heaps: dict[str, list[tuple[tuple[float, ...], int, Entry]]] = {c: [] for c in CATEGORIES}
        self._seen = 0  # a tie-breaker after the key, so entries are never compared

    def observe(
        self,
        agent: str,
        outcome: Classified,
        identity: tuple[int, int] | None,
        attempt: int,
        place: Place,
    ) -> None:
        """Consider one counted row for each category it belongs to; most rows are passed over by one
        comparison per category."""
        disposition, duration = outcome[0], place[2]
        tokens = _output_tokens(outcome) or 0
        listed = disposition is Disposition.FAILED or disposition is Disposition.MASKED
        heaps, limit = self._heaps, self.limit
        slow = duration is not None and (
            len(heaps["slowest"]) < limit or duration >= heaps["slowest"][0][0][0]
        )
        long = tokens > 0 and (
            len(heaps["longest_output"]) < limit or tokens >= heaps["longest_output"][0][0][0]
        )
        if not (listed or slow or long):
            return  # the common row: no category would keep it
        file = self._files.setdefault(place[0], len(self._files))
        # The run's order negated: of two rollouts equally notable, the earlier one scores higher.
        position = run_position(*(identity if identity is not None else (NO_TASK, 0)), attempt)
        earlier = (*(-part for part in position), -file, -place[1])
        entry = (agent, outcome, identity, attempt, place)
        if listed:
            self._keep("failed" if disposition is Disposition.FAILED else "masked", earlier, entry)
        if slow and duration is not None:
            self._keep("slowest", (duration, *earlier), entry)
        if long:
            self._keep("longest_output", (tokens, *earlier), entry)

    def _keep(self, category: str, score: tuple[float, ...], entry: Entry) -> None:
        # A min-heap of the ``limit`` highest scores: the lowest kept, the next to go, at the top.
        heap = self._heaps[category]
        if len(heap) < self.limit:
            self._seen += 1
            heapq.heappush(heap, (score, self._seen, entry))
        elif score > heap[0][0]:
            self._seen += 1
            heapq.heapreplace(heap, (score, self._seen, entry))

    def listing(self) -> dict[str, list[dict[str, Any]]]:
        """Each category's rollouts, the most notable first, as the report's JSON shows them."""
        return {
            category: [self._shown(entry) for _, _, entry in sorted(heap, reverse=True)]
            for category, heap in self._heaps.items()
        }

    def _shown(self, entry: Entry) -> dict[str, Any]:
        agent, outcome, identity, attempt, (file, line, duration, stage) = entry
        shown: dict[str, Any] = {
            "agent": agent,
            "task_index": None if identity is None else identity[0],
            "rollout_index": None if identity is None else identity[1],
            "attempt": attempt,
            "disposition": outcome[0].value,
            "failure_kind": outcome[2],
            "stage": stage,
            "duration_s": duration,
            "output_tokens": _output_tokens(outcome),
            "file": file,
            "line": line,
        }
        if self.reasons:
            shown["failure_reason"] = outcome[3]
        return shown
