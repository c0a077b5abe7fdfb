"""The recording path's interpreter-specific habits, each timed against the plain way, on one interpreter.

The recording path (``record()``, ``Account.count``, the lifecycle) is written in a few ways that were chosen
for CPython 3.11's figures. Each habit is timed here in isolation, written the way the code writes it and
the plain way, in interleaved rounds of one process: the ratio plain / habit says what the habit buys on
this interpreter (above 1: it pays). ``docs/performance.md`` keeps the figures of 3.11, 3.12 and 3.13 and the
decision for each habit.

- ``lock``: ``lock.acquire()`` / ``try`` / ``finally: lock.release()`` against ``with lock:``.
- ``attribute_call``: a callable kept in an attribute, read into a local and called, against
  ``self._clock()`` (3.11 cannot specialise a call of a callable found in an instance attribute).
- ``keyword_only``: a call with the two identity arguments left out, to a function whose identity
  parameters are positional with defaults behind a placeholder (``record()``: keyword-only to its callers,
  a positional identity refused), against one whose are keyword-only, and one without the placeholder.
- ``keywords_class``: a rollout context made from one shared object and four positional values, against a
  class called with nine keyword arguments.
- ``tuple``: the classified outcome as a plain tuple (built, then unpacked as ``Account.count`` does),
  against a ``NamedTuple`` and a frozen slotted dataclass read by name.

    .venv/bin/python benchmarks/tricks.py [--calls 200000] [--rounds 15]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import threading
import time
import timeit
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/ is a package of the checkout

from rollout_telemetry._cli.args import at_least_one  # the CLI's check, and its message

_lock = threading.Lock()
_counts = {"a": 0}


def lock_acquire() -> None:
    lock = _lock
    lock.acquire()
    try:
        _counts["a"] += 1
    finally:
        lock.release()


def lock_with() -> None:
    with _lock:
        _counts["a"] += 1


class _Holder:
    __slots__ = ("_clock",)

    def __init__(self) -> None:
        self._clock = time.monotonic

    def from_local(self) -> float:
        clock = self._clock
        return clock()

    def from_attribute(self) -> float:
        return self._clock()


def positional(
    agent: str, response: object, task_index: int | None = None, rollout_index: int | None = None
) -> None:
    if task_index is None:
        return


def keyword_only(
    agent: str, response: object, *, task_index: int | None = None, rollout_index: int | None = None
) -> None:
    if task_index is None:
        return


def placeholder(
    agent: str,
    response: object,
    _by_keyword: None = None,
    task_index: int | None = None,
    rollout_index: int | None = None,
) -> None:
    if _by_keyword is not None:
        raise TypeError(_by_keyword)
    if task_index is None:
        return


class _Shared:
    __slots__ = ("account", "clock", "rejections", "settle", "spans")

    def __init__(self) -> None:
        self.account = self.settle = self.spans = self.rejections = self.clock = None


class _FromShared:
    __slots__ = ("_agent", "_attempt", "_rollout", "_shared", "_task")

    def __init__(
        self, shared: _Shared, agent: str, task: int | None, rollout: int | None, attempt: int | None
    ) -> None:
        self._shared = shared
        self._agent = agent
        self._task = task
        self._rollout = rollout
        self._attempt = attempt


class _FromKeywords:
    __slots__ = (
        "_account",
        "_agent",
        "_attempt",
        "_clock",
        "_rejections",
        "_rollout",
        "_settle",
        "_spans",
        "_task",
    )

    def __init__(
        self, *, account: object, settle: object, spans: object, rejections: object, clock: object,
        agent: str, task: int | None, rollout: int | None, attempt: int | None,
    ) -> None:  # fmt: skip
        self._account = account
        self._settle = settle
        self._spans = spans
        self._rejections = rejections
        self._clock = clock
        self._agent = agent
        self._task = task
        self._rollout = rollout
        self._attempt = attempt


class _Named(NamedTuple):
    disposition: str
    reward: float | None
    kind: str | None
    reason: str | None
    generation: object


@dataclass(frozen=True, slots=True)
class _Data:
    disposition: str
    reward: float | None
    kind: str | None
    reason: str | None
    generation: object


# Each builds the outcome, reads every field (as Account.count unpacks four and the facade reads the reason).
def as_tuple(reward: float) -> bool:
    outcome = ("measured", reward, None, None, None)
    disposition, reward_, kind, _, generation = outcome
    return (disposition, reward_, kind, generation, outcome[3]) is None


def as_named(reward: float) -> bool:
    outcome = _Named("measured", reward, None, None, None)
    disposition, reward_, kind, _, generation = outcome
    return (disposition, reward_, kind, generation, outcome.reason) is None


def as_dataclass(reward: float) -> bool:
    outcome = _Data("measured", reward, None, None, None)
    return (outcome.disposition, outcome.reward, outcome.kind, outcome.generation, outcome.reason) is None


# A row's five fields, read as check_outcome reads a dict (most rows lack four of them).
def get_each(row: dict[str, object]) -> tuple[object, ...]:
    return (
        row.get("reward"),
        row.get("mask_sample"),
        row.get("failure_kind"),
        row.get("failure_reason"),
        row.get("response"),
    )


def get_bound(row: dict[str, object]) -> tuple[object, ...]:
    get = row.get
    return get("reward"), get("mask_sample"), get("failure_kind"), get("failure_reason"), get("response")


_shared = _Shared()
_holder = _Holder()
_row: dict[str, object] = {"reward": 0.5}

HABITS: dict[str, tuple[str, dict[str, str]]] = {
    "lock": ("lock_acquire()", {"with": "lock_with()"}),
    "attribute_call": ("holder.from_local()", {"self._clock()": "holder.from_attribute()"}),
    "keyword_only": (
        "placeholder('a', None)",
        {"keyword-only": "keyword_only('a', None)", "no placeholder": "positional('a', None)"},
    ),
    "keywords_class": (
        "FromShared(shared, 'a', 1, 0, None)",
        {
            "nine keywords": (
                "FromKeywords(account=None, settle=None, spans=None, rejections=None, clock=None,"
                " agent='a', task=1, rollout=0, attempt=None)"
            )
        },
    ),
    "tuple": ("as_tuple(0.5)", {"NamedTuple": "as_named(0.5)", "dataclass": "as_dataclass(0.5)"}),
    "dict_get": ("get_each(row)", {"get = row.get": "get_bound(row)"}),
}
"""habit -> (the statement as the code writes it, {plain way: its statement})."""

NAMES = {
    "lock_acquire": lock_acquire,
    "lock_with": lock_with,
    "holder": _holder,
    "positional": positional,
    "keyword_only": keyword_only,
    "placeholder": placeholder,
    "FromShared": _FromShared,
    "FromKeywords": _FromKeywords,
    "shared": _shared,
    "as_tuple": as_tuple,
    "as_named": as_named,
    "as_dataclass": as_dataclass,
    "get_each": get_each,
    "get_bound": get_bound,
    "row": _row,
}


def measure(calls: int, rounds: int) -> dict[str, dict[str, tuple[float, float]]]:
    """habit -> plain way -> (median ratio plain / habit, ns per call of the habit)."""
    results: dict[str, dict[str, tuple[float, float]]] = {}
    for habit, (ours, plains) in HABITS.items():
        timers = {"ours": timeit.Timer(ours, globals=NAMES)} | {
            name: timeit.Timer(statement, globals=NAMES) for name, statement in plains.items()
        }
        for timer in timers.values():
            timer.timeit(calls // 10)  # warm up: the adaptive interpreter specialises on the first calls
        ratios: dict[str, list[float]] = {name: [] for name in plains}
        ours_times: list[float] = []
        for _ in range(rounds):
            base = timers["ours"].timeit(calls)
            ours_times.append(base)
            for name in plains:
                ratios[name].append(timers[name].timeit(calls) / base)
        per_call = statistics.median(ours_times) / calls * 1e9
        results[habit] = {name: (statistics.median(values), per_call) for name, values in ratios.items()}
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--calls", type=at_least_one, default=200_000, help="calls per timing")
    parser.add_argument("--rounds", type=at_least_one, default=15, help="interleaved rounds")
    args = parser.parse_args()
    interpreter = f"{platform.python_implementation()} {platform.python_version()}"
    print(f"{interpreter}: plain way / habit (above 1: it pays)")
    for habit, plains in measure(args.calls, args.rounds).items():
        for name, (ratio, per_call) in plains.items():
            print(f"  {habit:15} {per_call:6.1f} ns   {name:15} {ratio:5.2f}x")


if __name__ == "__main__":
    main()
