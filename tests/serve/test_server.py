"""The HTTP endpoint: /metrics, /healthz, 404 elsewhere, HEAD, quiet headers; a taken port."""

from __future__ import annotations

import asyncio
import base64
import gzip
import hashlib
import json
import logging
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter, Metric
from prometheus_client.core import CounterMetricFamily

from rollout_telemetry import RolloutTelemetry
from rollout_telemetry._serve.limits import Limits
from rollout_telemetry._serve.metrics_server import start_server
from rollout_telemetry._serve.shared import Shared
from rollout_telemetry._serve.workers import Busy, Workers
from rollout_telemetry.errors import ServeError
from tests.support import FakeClock, live_page, raw_request, sample_names, samples

LIMITS = Limits()
"""The bounds ``serve()`` serves with: its defaults."""


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.read().decode()


def test_serves_metrics_and_healthz(telemetry: RolloutTelemetry) -> None:
    """/metrics is the exposition; /healthz says ok; the default host is 127.0.0.1."""
    telemetry.record("math", {"reward": 1.0})
    with telemetry.serve(port=0) as server:
        assert server.url.startswith("http://127.0.0.1:")
        status, body = _get(server.url)
        assert status == 200
        assert (
            samples(body)[("rollout_completed_total", frozenset({("agent", "math"), ("run", "test-run")}))]
            == 1
        )
        assert _get(server.url.replace("/metrics", "/healthz")) == (200, "ok\n")


@pytest.mark.parametrize("path", ["/favicon.ico", "/metrics/extra", "/admin", "/index.html"])
def test_other_paths_are_404(telemetry: RolloutTelemetry, path: str) -> None:
    """Only /metrics, /rollouts, the page at / and /healthz are served."""
    with telemetry.serve(port=0) as server:
        status, _ = _get(f"http://127.0.0.1:{server.port}{path}")
        assert status == 404


def test_the_page_can_be_turned_off(telemetry: RolloutTelemetry) -> None:
    """With page=False, / is 404 and /metrics is served as before."""
    with telemetry.serve(port=0, page=False) as server:
        assert _get(f"http://127.0.0.1:{server.port}/")[0] == 404
        assert _get(server.url)[0] == 200


def test_post_is_refused(telemetry: RolloutTelemetry) -> None:
    """A request body is never read: non-GET methods get 405."""
    with telemetry.serve(port=0) as server:
        request = urllib.request.Request(server.url, data=b"x" * 1000, method="POST")
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(request, timeout=5)
        with info.value as error:
            assert error.code == 405


def test_taken_port_is_a_clear_error(telemetry: RolloutTelemetry) -> None:
    """Serving on a port in use raises ServeError naming the port, and leaves nothing running."""
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        with pytest.raises(ServeError, match=f"port {port} is already in use"):
            telemetry.serve(port=port)
    with telemetry.serve(port=port) as server:  # the failed attempt left nothing bound
        assert _get(server.url)[0] == 200


def test_stop_releases_the_port(telemetry: RolloutTelemetry) -> None:
    """After stop() the same port can be served again."""
    server = telemetry.serve(port=0)
    port = server.port
    server.stop()
    again = telemetry.serve(port=port)
    again.stop()


def test_head_answers_like_get_without_a_body() -> None:
    """HEAD on /metrics and /healthz: 200, the headers GET would send (its Content-Length), no body."""
    # The runtime's series (CPU seconds, GC pauses) may change length between the two requests.
    telemetry = RolloutTelemetry(runtime_metrics=False)
    telemetry.record("math", {"reward": 1.0})
    with telemetry.serve(port=0) as server:
        for path in ("/metrics", "/healthz"):
            get = raw_request(server.port, f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            head = raw_request(server.port, f"HEAD {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            assert head[0] == get[0] == 200
            assert head[2] == b""
            assert int(head[1]["content-length"]) == len(get[2]) > 0
            assert head[1]["content-type"] == get[1]["content-type"]


def test_no_version_banner_and_no_caching(telemetry: RolloutTelemetry) -> None:
    """No Server header on any response; /metrics says Cache-Control: no-store."""
    with telemetry.serve(port=0) as server:
        for path in ("/metrics", "/healthz", "/nope"):
            _, headers, _ = raw_request(server.port, f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            assert "server" not in headers
            assert "python" not in str(headers).lower()
        assert raw_request(server.port, b"GET /metrics HTTP/1.1\r\n\r\n")[1]["cache-control"] == "no-store"


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GET /<script>alert(1)</script> HTTP/1.1\r\n\r\n", 404),
        (b"GET /<script>alert(1)</script> HTTP/9.9\r\n\r\n", 400),
        (b"<script>alert(1)</script>\r\n\r\n", 400),
        (b"GET /metrics HTTP/1.1\r\n <script>: folded\r\n\r\n", 400),
        (b"GET /metrics HTTP/1.1\r\nX-<script>: 1\r\n\r\n", 400),
        (b"GET /metrics HTTP/1.1\r\nX-A: " + b"<script>" * 3000 + b"\r\n\r\n", 431),
    ],
)
def test_error_pages_do_not_echo_the_request(
    telemetry: RolloutTelemetry, request_bytes: bytes, status: int
) -> None:
    """Malformed or unknown requests get a fixed short answer that repeats nothing the client sent."""
    with telemetry.serve(port=0) as server:
        got, _, body = raw_request(server.port, request_bytes)
        assert got == status
        assert b"script" not in body
        assert len(body) < 100


def test_exposition_honours_accept_and_name_filter(telemetry: RolloutTelemetry) -> None:
    """prometheus_client's exposition: OpenMetrics when asked, ?name[]= filtering, gzip when accepted."""
    telemetry.record("math", {"reward": 1.0})
    Counter("plain_events", "A plain counter, for the name filter.", registry=telemetry.registry).inc()
    with telemetry.serve(port=0) as server:
        request = "GET /metrics?name[]=plain_events_total HTTP/1.1\r\nAccept: {}\r\n{}\r\n"
        _, _, everything = raw_request(server.port, b"GET /metrics HTTP/1.1\r\n\r\n")
        assert {"rollout_completed_total", "plain_events_total"} <= sample_names(everything.decode())
        _, headers, body = raw_request(server.port, request.format("text/plain", "").encode())
        assert sample_names(body.decode()) == {"plain_events_total"}
        openmetrics = "application/openmetrics-text; version=1.0.0"
        _, headers, body = raw_request(server.port, request.format(openmetrics, "").encode())
        assert headers["content-type"].startswith("application/openmetrics-text")
        assert body.endswith(b"# EOF\n")
        _, headers, body = raw_request(
            server.port, request.format("*/*", "Accept-Encoding: gzip\r\n").encode()
        )
        assert headers["content-encoding"] == "gzip"
        assert sample_names(gzip.decompress(body).decode()) == {"plain_events_total"}


def test_a_full_queue_is_refused_with_503() -> None:
    """Work beyond the workers and their bounded queue is refused at once (the server answers 503)."""
    started, release = threading.Event(), threading.Event()
    workers = Workers(1, max_queued=1)

    def hold() -> bool:
        started.set()
        return release.wait(10)

    async def fill() -> list[str]:
        running = workers.run(hold)
        assert await asyncio.to_thread(started.wait, 10)
        queued = workers.run(lambda: True)
        with pytest.raises(Busy):
            workers.run(lambda: True)
        release.set()
        return [str(await running), str(await queued)]

    try:
        assert asyncio.run(fill()) == ["True", "True"]
    finally:
        release.set()
        workers.close()


def test_stop_ends_every_thread_and_connection(telemetry: RolloutTelemetry) -> None:
    """After stop() the server's threads are gone and its sockets closed, idle connections included (the one
    page sampler of the process, started on first use, stays, as the stall watcher does)."""
    threads = set(threading.enumerate())
    server = telemetry.serve(port=0)
    idle = [socket.create_connection(("127.0.0.1", server.port), timeout=10) for _ in range(20)]
    try:
        assert _get(server.url)[0] == 200
        assert len(set(threading.enumerate()) - threads) > 1
        server.stop()
        assert {t.name for t in set(threading.enumerate()) - threads} <= {"rollout-telemetry-page"}
        for connection in idle:
            assert connection.recv(1) == b""  # closed by the server, not left to time out
    finally:
        for connection in idle:
            connection.close()


class _Broken:
    """A collector that fails at every scrape."""

    def collect(self) -> Iterator[Metric]:
        raise RuntimeError("broken collector")


def test_errors_are_logged_throttled_without_a_traceback(
    telemetry: RolloutTelemetry, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    """A failing scrape is a short 500; ten of them log one line, with no traceback, nothing on stderr."""
    telemetry.registry.register(_Broken())
    with caplog.at_level(logging.DEBUG, logger="rollout_telemetry"), telemetry.serve(port=0) as server:
        for _ in range(10):
            assert _get(server.url) == (500, "internal error\n")
    errors = [record for record in caplog.records if record.levelno >= logging.ERROR]
    assert len(errors) == 1
    assert "broken collector" in errors[0].getMessage()
    assert all(record.exc_info is None for record in caplog.records)
    assert capfd.readouterr().err == ""


def _get_all(urls: list[str]) -> list[tuple[int, str]]:
    """GET each URL at once, each from its own thread."""
    results: list[tuple[int, str]] = [(0, "")] * len(urls)
    barrier = threading.Barrier(len(urls))

    def fetch(i: int) -> None:
        barrier.wait(10)
        results[i] = _get(urls[i])

    threads = [threading.Thread(target=fetch, args=(i,)) for i in range(len(urls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results


def test_fifty_readers_of_rollouts_share_one_listing() -> None:
    """50 clients asking /rollouts at once, each with another limit, cost one listing, each sliced right."""
    calls: list[int] = []

    def rollouts(limit: int) -> dict[str, object]:
        calls.append(limit)
        listing = [{"task_index": i} for i in range(limit)]
        return {"in_flight": 10_000, "stall_after_seconds": None, "rollouts": listing}

    with start_server(CollectorRegistry(), port=0, rollouts=rollouts) as server:
        base = server.url.removesuffix("/metrics")
        results = _get_all([f"{base}/rollouts?limit={951 + i}" for i in range(50)])
    for i, (status, body) in enumerate(results):
        assert status == 200
        listing = json.loads(body)
        assert listing["in_flight"] == 10_000
        assert [r["task_index"] for r in listing["rollouts"]] == list(range(951 + i))
    assert len(calls) <= 2, len(calls)


def test_the_page_and_rollouts_share_one_listing() -> None:
    """Readers of /rollouts and of the page at once cost one listing of the rollouts in flight (the account is
    not read for them twice): the page says how many are in flight and lists the oldest IN_FLIGHT_SHOWN."""
    from rollout_telemetry._views.page import IN_FLIGHT_SHOWN

    calls: list[int] = []

    def rollouts(limit: int) -> dict[str, object]:
        calls.append(limit)
        listing = [
            {"agent": "math", "task_index": i, "stage": "agent", "state": "active", "age_seconds": 1.0}
            for i in range(limit)
        ]
        return {"in_flight": 10_000, "rollouts": listing}

    telemetry = RolloutTelemetry(runtime_metrics=False)
    telemetry.record("math", {"reward": 1.0})
    page = live_page(telemetry)
    with start_server(CollectorRegistry(), port=0, rollouts=rollouts, page=page.shown()) as server:
        base = server.url.removesuffix("/metrics")
        results = _get_all([f"{base}/rollouts"] * 10 + [f"{base}/?part=main"] * 10)
    assert all(status == 200 for status, _ in results)
    for _, main in results[10:]:
        assert '<span data-k="in_flight">10,000</span>' in main
        listed = main[main.index("In flight now") :]
        assert listed[: listed.index("</table>")].count('<tr data-agent="math">') == IN_FLIGHT_SHOWN
    assert len(calls) <= 2, len(calls)


class _Counting:
    """A collector of two counters that counts how often it is collected."""

    def __init__(self) -> None:
        self.collected = 0

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        self.collected += 1
        yield from self._families()

    def _families(self) -> Iterator[Metric]:
        for name in ("first", "second"):
            family = CounterMetricFamily(f"{name}_events", "Events.", labels=["i"])
            for i in range(50):
                family.add_metric([str(i)], float(i))
            yield family


def test_fifty_distinct_name_filters_share_one_collection() -> None:
    """50 clients each asking /metrics with another name[] set cost one collection of the registry."""
    registry = CollectorRegistry()
    counting = _Counting()
    registry.register(counting)
    with start_server(registry, port=0) as server:
        counting.collected = 0
        urls = [f"{server.url}?name[]=first_events_total&name[]=unknown_{i}" for i in range(25)] + [
            f"{server.url}?name[]=second_events_total&name[]=other_{i}" for i in range(25)
        ]
        results = _get_all(urls)
    for i, (status, body) in enumerate(results):
        assert status == 200
        assert sample_names(body) == {"first_events_total" if i < 25 else "second_events_total"}
    assert counting.collected <= 2, counting.collected


def test_a_name_filter_reads_only_the_families_it_can_match(telemetry: RolloutTelemetry) -> None:
    """/metrics?name[]=rollout_completed_total reads the samples of that family alone: the telemetry's
    families make their samples as they are read, so the others' would be made for nothing. The body is the
    family as the full exposition has it."""
    for agent in range(20):
        telemetry.record(f"agent_{agent}", {"reward": 1.0})
        telemetry.record_failure(f"agent_{agent}", "session_lost")
    read: list[str] = []
    registry = telemetry.registry
    collect = registry.collect

    def noting() -> Iterator[Metric]:
        for family in collect():
            samples = family.samples
            family.samples = _Noted(family.name, samples, read)  # type: ignore[assignment]
            yield family

    registry.collect = noting  # type: ignore[method-assign]
    with telemetry.serve(port=0) as server:
        status, body = _get(f"http://127.0.0.1:{server.port}/metrics?name[]=rollout_completed_total")
        filtered = set(read)
        _, whole = _get(f"http://127.0.0.1:{server.port}/metrics")
    assert status == 200
    assert filtered == {"rollout_completed"}
    assert sample_names(body) == {"rollout_completed_total"}
    completed = {key: value for key, value in samples(whole).items() if key[0] == "rollout_completed_total"}
    assert samples(body) == completed


class _Noted(list[object]):
    """Samples that note the family's name each time they are read."""

    def __init__(self, name: str, samples: object, read: list[str]) -> None:
        super().__init__(samples)  # type: ignore[call-overload]
        self._name, self._read = name, read

    def __iter__(self) -> Iterator[object]:
        self._read.append(self._name)
        return super().__iter__()


def test_rollouts_lists_each_rollouts_state_and_heartbeat_age(clock: FakeClock) -> None:
    """GET /rollouts gives every resident rollout's state, stage, age, attempt and heartbeat age; in_flight
    counts those without an outcome, and the slow bound is given beside the stall bound."""
    telemetry = RolloutTelemetry(clock=clock, slow_after=30.0)
    waiting = telemetry.rollout("a", task_index=0, rollout_index=0, attempt=2).__enter__()
    waiting.stage("admission")
    clock.advance(8.0)
    done = telemetry.rollout("a", task_index=1, rollout_index=0).__enter__()
    done.complete({"reward": 1.0})
    clock.advance(2.0)
    with telemetry.serve(port=0) as server:
        status, body = _get(f"http://127.0.0.1:{server.port}/rollouts")
    assert status == 200
    listing = json.loads(body)
    assert (listing["in_flight"], listing["stall_after_seconds"], listing["slow_after_seconds"]) == (
        1,
        600,
        30,
    )
    seen = [
        (r["task_index"], r["state"], r["stage"], r["age_seconds"], r["attempt"], r["heartbeat_age_seconds"])
        for r in listing["rollouts"]
    ]
    assert seen == [(0, "retrying", "admission", 10.0, 2, 10.0), (1, "terminal", "agent", 2.0, None, 2.0)]
    for context in (waiting, done):
        context.__exit__(None, None, None)


def test_a_rendering_is_shared_while_it_is_written_and_never_after(clock: FakeClock) -> None:
    """A finished rendering is given to whoever asks while it is still being written to a client, within
    read_interval of its making; once written, or past that, the next asker gets a rendering of its own
    (so a scrape after another never reads what the first did)."""
    workers = Workers(1, max_queued=LIMITS.max_queued)
    written: set[int] = set()
    shared: Shared[str, bytes] = Shared(
        workers, 0, clock, held=lambda body: id(body) in written, held_for=LIMITS.read_interval
    )
    made: list[bytes] = []

    def render() -> bytes:
        made.append(f"rendering {len(made)}".encode())
        return made[-1]

    async def scrapes() -> list[bytes]:
        first = await shared.get("metrics", render)
        written.add(id(first))  # a slow client is still reading it
        beside = await shared.get("metrics", render)
        clock.advance(LIMITS.read_interval)
        late = await shared.get("metrics", render)  # too old to share, though still being written
        written.clear()
        after = await shared.get("metrics", render)  # nobody is reading the last: made afresh
        return [first, beside, late, after]

    try:
        got = asyncio.run(scrapes())
    finally:
        workers.close()
    assert got == [b"rendering 0", b"rendering 0", b"rendering 1", b"rendering 2"]
    assert got[0] is got[1]


def test_the_page_is_served_at_the_root(telemetry: RolloutTelemetry) -> None:
    """GET / is the live page, with a policy that lets it load nothing, run no script but its own (by its
    hash) and fetch only from its origin, the policy its <meta> gives and no frame; ?part=main is its
    content alone."""
    telemetry.record("math", {"reward": 1.0})
    with telemetry.serve(port=0) as server:
        root = f"http://127.0.0.1:{server.port}"
        with urllib.request.urlopen(root + "/", timeout=5) as response:
            policy = response.headers["Content-Security-Policy"]
            page = response.read().decode()
            assert response.headers["Content-Type"] == "text/html; charset=utf-8"
        assert "default-src 'none'" in policy
        assert "connect-src 'self'" in policy
        assert "'unsafe-inline'" not in policy
        assert policy.endswith("; frame-ancestors 'none'")
        script = page[page.rindex("<script>") + len("<script>") : page.rindex("</script>")]
        digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
        assert f"script-src 'sha256-{digest}'" in policy
        meta = f'<meta http-equiv="Content-Security-Policy" content="{policy}">'
        assert meta.replace("; frame-ancestors 'none'", "") in page
        assert page.startswith("<!doctype html>")
        status, main = _get(root + "/?part=main")
        assert status == 200
        assert main.startswith('<script type="application/json" id="report">')
        assert 'data-agent="math"' in main


def test_the_page_draws_the_charts_of_the_agents_named_open() -> None:
    """An agent beyond the ten worst is charted only when named by ?open=; past MAX_OPEN names are ignored."""
    from rollout_telemetry._views.page import MAX_OPEN

    telemetry = RolloutTelemetry(runtime_metrics=False)
    for i in range(12):
        telemetry.record(f"agent-{i:02d}", {"reward": 1.0, "mask_sample": i < 11})
    with telemetry.serve(port=0) as server:
        root = f"http://127.0.0.1:{server.port}/?part=main"
        healthy = 'data-agent="agent-11"'

        def charted(url: str) -> bool:
            main = _get(url)[1]
            section = main[main.index(f'<details class="agent" {healthy}') :]
            return '<svg class="chart"' in section[: section.index("</details>")]

        assert not charted(root)
        assert charted(root + "&open=agent-11")
        assert not charted(root + "".join(f"&open=x{i}" for i in range(MAX_OPEN)) + "&open=agent-11")
