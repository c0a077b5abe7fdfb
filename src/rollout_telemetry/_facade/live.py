"""The live page at ``GET /`` of an endpoint: the report's pictures of the run so far, updated in the browser.

Every ``STORY_INTERVAL`` seconds the account is read into a ``RunStory`` (bounded: at most ``MOST_INSTANTS``
points per agent, thinned as the run goes on); the page is read when asked, from one snapshot, on the
endpoint's read thread, which shares one read for ``read_interval`` among every reader, whatever sections
each has open (``_views.page.Page``). Nothing of this is on the recording path: ``record()`` is the same
with the page on or off. The page and its history are the telemetry's, so a second endpoint of the same run
shows the same history; points are taken while an endpoint serves the page (a stopped server drops its hold
on it) and until the telemetry's ``close()``. One sampler thread serves every page of the process, as one
watcher thread checks every telemetry's stalls (``_recording.periodic``), and holds them weakly.
"""

from __future__ import annotations

import functools
import json
import logging
import weakref
from collections.abc import Callable, Mapping, Sequence
from importlib import resources

from rollout_telemetry._recording.periodic import Periodic
from rollout_telemetry._store.coverage import CoverageSnapshot
from rollout_telemetry._store.groups import GroupsSnapshot
from rollout_telemetry._store.snapshot import AccountSnapshot
from rollout_telemetry._views.page import REFRESH_SECONDS, Drawings, Page, reward_ranges
from rollout_telemetry._views.run_report import build_report
from rollout_telemetry._views.story import RunStory

__all__ = ["LivePage"]

_log = logging.getLogger("rollout_telemetry.server")

STORY_INTERVAL = 5.0
"""Seconds between two points of the live page's charts at the start (further apart as the run goes on)."""


class LivePage:
    """The page of one telemetry's run; its points are taken while an endpoint holds a reader of it
    (``shown()``), until ``close()``.

    Args:
        snapshot: the account's snapshot; ``coverage`` and ``groups`` the run's other stores'.
        origin: the clock reading the charts' time starts from.
        interval: seconds between two ticks of the sampler.
    """

    def __init__(
        self,
        title: str,
        snapshot: Callable[[], AccountSnapshot],
        coverage: Callable[[], CoverageSnapshot],
        groups: Callable[[], GroupsSnapshot],
        *,
        origin: float,
        interval: float = STORY_INTERVAL,
    ) -> None:
        self._title = title
        self._snapshot = snapshot
        self._coverage = coverage
        self._groups = groups
        self._interval = interval
        self.story = RunStory(snapshot, "seconds", origin=origin)
        packaged = resources.files("rollout_telemetry") / "_monitoring" / "alerts.json"
        self._alerts: list[dict[str, object]] = json.loads(packaged.read_text(encoding="utf-8"))
        self._shown: weakref.WeakSet[_Shown] = weakref.WeakSet()
        # Each agent's charts drawn at most once an update, whatever readers open: what a flood of new
        # ?open= sets can make the endpoint draw is bounded by the agents, not by the requests.
        self._drawings = Drawings(REFRESH_SECONDS)

    def shown(self) -> Callable[[Mapping[str, object] | None], Callable[[str, Sequence[str]], bytes]]:
        """A reader of the page for one endpoint (given its listing of the rollouts in flight, it reads the
        page and returns its ``Page.render``), which holds it while it serves (and drops it when it stops);
        the page is sampled every ``interval`` seconds while some endpoint holds one, on the process's page
        sampler thread (started on first use)."""
        reader = _Shown(self)
        self._shown.add(reader)
        _SAMPLER.watch(self, self._interval)
        return reader

    @property
    def sampling(self) -> bool:
        """Whether the sampler takes this page's points: an endpoint serves it, and ``close()`` was not
        called since."""
        return bool(self._shown) and _SAMPLER.watching(self)

    def sample(self) -> None:
        """Take one point of each agent that changed (the sampler's step)."""
        self.story.tick()

    def read(self, in_flight: Mapping[str, object] | None = None) -> Page:
        """The page now, from one snapshot of the run: its tables made, each agent's charts drawn when a
        reader asks for them (the worst agents' and those of the sections a reader opened), or those drawn
        for a read less than an update (``REFRESH_SECONDS``) before; ``in_flight``: the endpoint's listing of
        the rollouts in flight (``GET /rollouts``'), if it serves one."""
        account = self._snapshot()
        return Page(
            build_report(account, self._coverage(), self._groups()),
            functools.partial(self.story.points, account),
            title=self._title,
            x_axis="seconds",
            in_flight=in_flight,
            refresh=REFRESH_SECONDS,
            alerts=self._alerts,
            drawings=self._drawings,
            at=account.taken_at,
            reward_ranges=reward_ranges(account),
        )

    def close(self) -> None:
        """Stop taking points (those taken stay, and the page is still rendered); a later ``shown()`` takes
        them again."""
        _SAMPLER.unwatch(self)


class _Shown:
    """The page as one endpoint reads it: the endpoint's hold on it keeps the page sampled."""

    __slots__ = ("__weakref__", "_page")

    def __init__(self, page: LivePage) -> None:
        self._page = page

    def __call__(self, in_flight: Mapping[str, object] | None) -> Callable[[str, Sequence[str]], bytes]:
        return self._page.read(in_flight).render


def _sample(page: LivePage) -> None:
    if not page.sampling:  # no endpoint serves it now: no history to keep
        return
    try:
        page.sample()
    except Exception:  # logged; the next interval tries again
        _log.exception("the live page's sampler could not read the account")


_SAMPLER: Periodic[LivePage] = Periodic("rollout-telemetry-page", 0.5, _sample)
"""The one page sampler thread of the process, taking the points of every live page."""
