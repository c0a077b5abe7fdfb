"""Where ``rollout-telemetry top`` reads from: exporters over HTTP(S), or a run's files in-process.

Every source yields a :class:`~rollout_telemetry._cli.top_model.Reading` through one parser of the Prometheus
text exposition: an exporter's ``/metrics`` as scraped, a run's files as an in-process registry publishes
them. So the table means the same whichever way it was fed. Each source is polled on a thread of its own, so
an exporter that hangs or refuses delays nothing else: it shows as down while the others keep updating.
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from rollout_telemetry._cli.top_model import AgentTotals, InFlightRollout, Reading, SourceView, Tracker
from rollout_telemetry._sources.follow import RunFollower
from rollout_telemetry._views.series import published

if TYPE_CHECKING:
    from rollout_telemetry._facade.telemetry import RolloutTelemetry

__all__ = ["ClientSecurity", "ExporterSource", "FollowSource", "Poller", "Source"]

IN_FLIGHT_LIMIT = 50
"""How many of an exporter's oldest rollouts in flight to ask for."""

# The series read, named through the catalogue: a renamed family fails here, at import.
_SUMMED = {
    published("rollout_completed_total"): "completed",
    published("rollout_rewarded_total"): "rewarded",
    published("rollout_reward_positive_total"): "reward_positive",
    published("rollout_reward_negative_total"): "reward_negative",
    published("rollout_in_flight"): "in_flight",
    published("rollout_stalled"): "stalled",
    published("rollout_run_expected"): "expected",
}
_GAUGES = {
    published("rollout_reward"): "mean_reward",
    published("rollout_reward_unmasked"): "unmasked_reward",
    published("rollout_masked_ratio"): "masked_ratio",
}
_BY_KIND = {published("rollout_failed_total"): "failed", published("rollout_omitted_total"): "omitted"}
_OLDEST = published("rollout_oldest_in_flight_age_seconds")
_RUN_ROLLOUTS = published("rollout_run_rollouts")
_IN_FLIGHT = published("rollout_in_flight")


class SourceDown(Exception):
    """A source could not be read; the message says why, briefly."""


class Source(Protocol):
    """Something ``top`` can read: a label for the screen and a reading on demand."""

    label: str

    def read(self) -> Reading:
        """Everything the source says now; raises :class:`SourceDown` if it cannot be read."""
        ...


def parse_metrics(text: str) -> tuple[AgentTotals, ...]:
    """The per-agent figures of a Prometheus text exposition, in order of first appearance.

    Extra labels (``run``, ``stage``, ``state`` and any constant labels) are summed over per agent (terminal
    rollouts are not in flight); the in-flight age is
    the largest over them. A mean that several series give for one agent is recomputed from the reward
    counters (sum / count); the other ratio gauges are averaged.
    """
    sums: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    gauges: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    kinds: dict[str, dict[str, dict[str, float]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(float))
    )
    oldest: dict[str, float] = {}
    order: dict[str, None] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            agent = sample.labels.get("agent")
            if agent is None:
                continue
            name, value = sample.name, float(sample.value)
            if (summed := _summed(name, sample.labels)) is not None:
                sums[agent][summed] += value
            elif name in _GAUGES:
                gauges[agent][_GAUGES[name]].append(value)
            elif name in _BY_KIND:
                kind = sample.labels.get("failure_kind", "")
                kinds[agent][_BY_KIND[name]][kind] += value
            elif name == _OLDEST:
                oldest[agent] = max(value, oldest.get(agent, value))
            else:
                continue
            order.setdefault(agent)
    agents = []
    for agent in order:
        counted, means = sums[agent], gauges[agent]
        mean = _average(means.get("mean_reward"))
        if len(means.get("mean_reward", ())) > 1 and counted.get("rewarded", 0.0) > 0:
            mean = (counted["reward_positive"] - counted["reward_negative"]) / counted["rewarded"]
        agents.append(
            AgentTotals(
                agent=agent,
                completed=counted.get("completed", 0.0),
                rewarded=counted.get("rewarded", 0.0),
                reward_positive=counted.get("reward_positive", 0.0),
                reward_negative=counted.get("reward_negative", 0.0),
                mean_reward=mean,
                unmasked_reward=_average(means.get("unmasked_reward")),
                masked_ratio=_average(means.get("masked_ratio")),
                failed=dict(kinds[agent]["failed"]),
                omitted=dict(kinds[agent]["omitted"]),
                in_flight=counted.get("in_flight"),
                oldest_age=oldest.get(agent),
                stalled=counted.get("stalled"),
                expected=counted.get("expected"),
                unknown=counted.get("unknown"),
            )
        )
    return tuple(agents)


def _summed(name: str, labels: Mapping[str, str]) -> str | None:
    """The per-agent sum a sample adds to, if any."""
    if name == _RUN_ROLLOUTS:  # of the run's expected rollouts, those without an outcome yet
        return "unknown" if labels.get("disposition") == "unknown" else None
    if name == _IN_FLIGHT and labels.get("state") == "terminal":
        return None  # outcome counted, its block not exited: not in flight
    return _SUMMED.get(name)


def _average(values: list[float] | None) -> float | None:
    return sum(values) / len(values) if values else None


def _optional_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def parse_rollouts(body: Any) -> tuple[tuple[InFlightRollout, ...] | None, float | None]:
    """The rollouts in flight of a ``/rollouts`` JSON body, oldest first (``None`` when it says it tracks
    none: an exporter following a run's files), and its stall bound.

    Raises:
        ValueError: the body is not the documented shape.
    """
    if not isinstance(body, dict) or not isinstance(body.get("rollouts"), list):
        msg = "not a /rollouts body"
        raise ValueError(msg)
    rollouts = []
    for item in body["rollouts"]:
        if not isinstance(item, dict):
            continue
        trace, state, beat = item.get("trace_id"), item.get("state"), item.get("heartbeat_age_seconds")
        rollouts.append(
            InFlightRollout(
                agent=str(item.get("agent", "")),
                stage=str(item.get("stage", "")),
                age_seconds=float(item.get("age_seconds", 0.0)),
                stalled=item.get("stalled") is True,
                task_index=_optional_int(item.get("task_index")),
                rollout_index=_optional_int(item.get("rollout_index")),
                attempt=_optional_int(item.get("attempt")),
                trace_id=trace if isinstance(trace, str) else None,
                state=state if isinstance(state, str) else "active",
                heartbeat_age_seconds=float(beat) if isinstance(beat, int | float) else None,
            )
        )
    rollouts.sort(key=lambda r: r.age_seconds, reverse=True)
    stall = body.get("stall_after_seconds")
    listed = None if body.get("tracked") is False else tuple(rollouts)
    return listed, float(stall) if isinstance(stall, int | float) else None


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    """How to reach a secured exporter: the CA to verify it, a client certificate, basic-auth credentials."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    username: str | None = None
    password: str | None = None

    def ssl_context(self) -> ssl.SSLContext:
        """A verifying client context: the given CA (else the system's), the client certificate if any."""
        context = ssl.create_default_context(cafile=self.ca_file)
        if self.cert_file:
            context.load_cert_chain(self.cert_file, self.key_file)
        return context

    def headers(self) -> dict[str, str]:
        """The request headers: ``Authorization`` when there are credentials."""
        if self.username is None:
            return {}
        token = base64.b64encode(f"{self.username}:{self.password or ''}".encode()).decode("ascii")
        return {"Authorization": f"Basic {token}"}


def _base_url(url: str) -> str:
    if "://" not in url:
        url = f"http://{url}"
    parts = urllib.parse.urlsplit(url)
    path = parts.path.rstrip("/").removesuffix("/metrics")
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def _why(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}"
    if isinstance(exc, urllib.error.URLError):
        exc = exc.reason if isinstance(exc.reason, BaseException) else exc
    if isinstance(exc, TimeoutError | socket.timeout):
        return "timed out"
    if isinstance(exc, ssl.SSLError):
        return f"TLS: {exc.reason or exc}"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return str(exc) or type(exc).__name__


class ExporterSource:
    """An exporter's ``/metrics`` and, where it has one, ``/rollouts``."""

    def __init__(self, url: str, security: ClientSecurity | None = None, *, timeout: float = 5.0) -> None:
        self.base = _base_url(url)
        parts = urllib.parse.urlsplit(self.base)
        self.label = parts.netloc + parts.path
        self._security = security or ClientSecurity()
        self._context = self._security.ssl_context() if parts.scheme == "https" else None
        self._timeout = timeout

    def _get(self, path: str, accept: str) -> bytes:
        request = urllib.request.Request(
            self.base + path, headers={"Accept": accept, **self._security.headers()}
        )
        with urllib.request.urlopen(request, timeout=self._timeout, context=self._context) as response:
            return bytes(response.read())

    def read(self) -> Reading:
        """Scrape ``/metrics``, then ask ``/rollouts``; an exporter without it has no in-flight list."""
        try:
            agents = parse_metrics(self._get("/metrics", "text/plain").decode("utf-8"))
        except (OSError, ValueError, http.client.HTTPException) as exc:
            raise SourceDown(_why(exc)) from exc
        try:
            body = json.loads(self._get(f"/rollouts?limit={IN_FLIGHT_LIMIT}", "application/json"))
            in_flight, stall_after = parse_rollouts(body)
        except (OSError, ValueError, http.client.HTTPException):
            return Reading(agents)  # 404 from an older exporter, or anything else: no list, not down
        return Reading(agents, in_flight, stall_after, tracks_in_flight=in_flight is not None)


class FollowSource:
    """A run's files, read in-process on each poll and published through a registry as ``serve`` would."""

    def __init__(self, follower: RunFollower, telemetry: RolloutTelemetry) -> None:
        self.label = str(follower.files.main)
        self._follower = follower
        self._telemetry = telemetry

    def read(self) -> Reading:
        """Read what was appended since the last poll; the figures as its ``/metrics`` would show them."""
        if not self._follower.files.main.is_file():
            msg = "no such file (yet)"
            raise SourceDown(msg)
        try:
            grew = self._follower.poll() > 0
        except OSError as exc:
            raise SourceDown(_why(exc)) from exc
        agents = parse_metrics(generate_latest(self._telemetry.registry).decode("utf-8"))
        note = self._follower.unnamed_note() if agents else self._no_agent()
        return Reading(agents, note=note, tracks_in_flight=False, ended=not grew and self._all_done())

    def _all_done(self) -> bool:
        """Every rollout the run expects has an outcome (known from its materialized inputs)."""
        coverage = self._follower.coverage.snapshot()
        return coverage.expected_known and not any(agent.unknown for agent in coverage.agents)

    def _no_agent(self) -> str:
        """Why no agent has a row: the files hold none yet, or every row was rejected (the reasons)."""
        rejected = self._telemetry.snapshot().rejected
        if not rejected:
            return f"no rollout row in {self._follower.files.main} yet"
        reasons = ", ".join(f"{reason} {count}" for reason, count in sorted(rejected.items()))
        return f"every row was rejected ({reasons}); `rollout-telemetry report PATH` says why, line by line"


class Poller:
    """Reads one source every ``interval`` seconds on a daemon thread; :attr:`view` is the latest state."""

    def __init__(
        self, source: Source, interval: float, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.source = source
        self._interval = interval
        self._clock = clock
        self._tracker = Tracker()
        self._last_ok: float | None = None
        self._stop = threading.Event()
        self.view = SourceView(source.label, up=False, waiting=True)
        self._thread = threading.Thread(target=self._loop, name=f"top {source.label}", daemon=True)

    def poll_once(self) -> SourceView:
        """Read the source now and update :attr:`view`."""
        try:
            reading = self.source.read()
        except Exception as exc:  # SourceDown, or a fault in reading: either way the others keep going
            now = self._clock()
            down_for = None if self._last_ok is None else now - self._last_ok
            self.view = SourceView(self.source.label, up=False, error=str(exc), down_for=down_for)
            return self.view
        now = self._clock()
        self._last_ok = now
        rows = self._tracker.update(reading, now)
        self.view = SourceView(
            self.source.label,
            up=True,
            agents=rows,
            in_flight=reading.in_flight,
            stall_after_seconds=reading.stall_after_seconds,
            note=reading.note,
            tracks_in_flight=reading.tracks_in_flight,
            ended=reading.ended,
        )
        return self.view

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = self._clock()
            self.poll_once()
            self._stop.wait(max(self._interval - (self._clock() - started), 0.0))

    def start(self) -> None:
        """Start polling in the background."""
        self._thread.start()

    def stop(self) -> None:
        """Ask the thread to stop; it is a daemon, so a read still hanging does not hold up the exit."""
        self._stop.set()
