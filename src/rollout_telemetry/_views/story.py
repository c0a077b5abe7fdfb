"""A run's story along the way, in bounded memory: each agent's mean rewards and outcome counts at points of
the run, for the pictures of the HTML report and the live page (``_views.page``).

Every point is read from an account snapshot, so it says what ``/metrics`` said at that moment: no rule of
the account is computed here again. Points are taken at *instants*: for a run's files read end to end
(``report --format html``), an instant every ``stride`` outcomes counted, and x is the agent's outcomes
counted so far, in the order the files hold them (Gym's rows carry no timestamps); on a live endpoint, an
instant every ``stride`` ticks of the sampler, and x is the seconds since the telemetry began.

A point holds totals and running means, not a window's values, so dropping one loses resolution and nothing
else: at the ``most``-th instant, instants are taken twice as far apart from then on, and of each agent's
points only the last in each span of the new stride is kept. Each agent keeps at most ``most`` points of
``len(POINT_FIELDS)`` doubles (``memory_bound``), however long the run.
"""

from __future__ import annotations

import threading
from array import array
from collections.abc import Callable
from typing import Literal

from rollout_telemetry._contract.outcome import Disposition
from rollout_telemetry._store.snapshot import AccountSnapshot, AgentSnapshot
from rollout_telemetry._views.run_report import unmasked_mean

__all__ = ["POINT_FIELDS", "Point", "RunStory", "XAxis"]

POINT_FIELDS = ("x", "reward", "reward_unmasked", *(disposition.value for disposition in Disposition))
"""What a point holds: x, the mean reward (masked included) and the unmasked one (``None`` stored as NaN
before the first reward), then the outcomes counted by disposition, all cumulative."""
MOST_INSTANTS = 240
"""Instants kept at most (and so points per agent); thinned to half when reached."""

XAxis = Literal["rollouts", "seconds"]
Point = tuple[float, ...]
_NAN = float("nan")
_FIELDS = len(POINT_FIELDS) + 1  # the instant's tick first, then the point
_COUNTS = len(Disposition)  # the last fields: when they are the same, so is every mean


def point_of(agent: AgentSnapshot, x: float) -> Point:
    """The point of ``agent`` at ``x``: its running means and counts, as ``POINT_FIELDS`` orders them.

    The unmasked mean is the report's (``unmasked_mean``): before anything was masked, failed or omitted, the
    mean reward itself.
    """
    reward, unmasked = agent.mean_reward, unmasked_mean(agent)
    counts = (float(agent.count(disposition)) for disposition in Disposition)
    return (x, _NAN if reward is None else reward, _NAN if unmasked is None else unmasked, *counts)


def counted(agent: AgentSnapshot) -> int:
    """The outcomes counted for ``agent``: the x of a run read from its files."""
    return agent.completed + agent.failed + agent.omitted


class RunStory:
    """Points of each agent at instants of the run, at most ``most`` per agent; thread-safe.

    Args:
        snapshot: the account's snapshot (``RolloutTelemetry.snapshot``), taken at each instant.
        x_axis: ``rollouts``: x is the agent's outcomes counted; ``seconds``: the snapshot's time less
            ``origin``.
        stride: ticks between two instants at the start (doubled at each thinning).
        most: instants kept at most, an even number.
    """

    def __init__(
        self,
        snapshot: Callable[[], AccountSnapshot],
        x_axis: XAxis,
        *,
        origin: float = 0.0,
        stride: int = 1,
        most: int = MOST_INSTANTS,
    ) -> None:
        if most < 2 or most % 2 or stride < 1:
            msg = f"most must be an even number of at least 2 and stride at least 1, got {most} and {stride}"
            raise ValueError(msg)
        self._snapshot = snapshot
        self.x_axis: XAxis = x_axis
        self._origin = origin
        self._stride = stride
        self._most = most
        self._ticks = 0
        self._points: dict[str, array[float]] = {}
        self._lock = threading.Lock()

    def tick(self) -> None:
        """One more outcome counted (x in rollouts) or one more sampling interval (x in seconds): at every
        ``stride``-th tick (an instant), the account is read and each agent that changed since its last point
        gets one; at the ``most``-th instant, the story is thinned."""
        with self._lock:
            self._ticks += 1
            if self._ticks % self._stride:
                return
            account = self._snapshot()
            for agent in account.agents:
                point = point_of(agent, self._x(agent, account))
                points = self._points.get(agent.agent)
                if points is None:
                    points = self._points[agent.agent] = array("d")
                elif points[-_COUNTS:] == array("d", point[-_COUNTS:]):  # no outcome since: the same means
                    continue
                points.append(float(self._ticks))
                points.extend(point)
            if self._ticks // self._stride >= self._most:
                self._thin()

    def points(self, account: AccountSnapshot, agent: str) -> list[Point]:
        """The points of ``agent`` so far, oldest first, then its point in ``account`` (the numbers the rest
        of the page shows): any point taken after ``account`` was read is left out, so the line ends there."""
        now_agent = account.agent(agent)
        with self._lock:
            flat = self._points[agent].tolist() if agent in self._points else []
        points = [tuple(flat[at + 1 : at + _FIELDS]) for at in range(0, len(flat), _FIELDS)]
        if now_agent is None:
            return points
        now = point_of(now_agent, self._x(now_agent, account))
        return [point for point in points if point[0] < now[0]] + [now]

    def memory_bound(self, agents: int) -> int:
        """The most bytes the points of ``agents`` agents take (the arrays' items, not the names): nothing
        else is kept per agent."""
        return agents * self._most * _FIELDS * array("d").itemsize

    def _x(self, agent: AgentSnapshot, account: AccountSnapshot) -> float:
        return float(counted(agent)) if self.x_axis == "rollouts" else account.taken_at - self._origin

    def _thin(self) -> None:
        """Take instants twice as far apart: of each agent's points, the last of each new stride's span of
        ticks is kept (it holds the totals up to there), so at most ``most // 2`` points remain, and an
        agent that changed at any instant of a span keeps a point for it."""
        self._stride *= 2
        stride = self._stride
        for name, points in self._points.items():
            kept = array("d")
            count = len(points) // _FIELDS
            for index in range(count):
                at = index * _FIELDS
                span = -(-int(points[at]) // stride)
                if index + 1 == count or -(-int(points[at + _FIELDS]) // stride) != span:
                    kept.extend(points[at : at + _FIELDS])
            self._points[name] = kept
