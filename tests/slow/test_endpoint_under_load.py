"""The endpoint's defences where only a real server on the real clock shows them: its deadlines, a scrape's
latency beside idle clients and guessers, and memory given back after a churn of TLS clients.

Each time bound is derived from what it measures and says so; none is tuned to a run. Where a busy machine
adds to it, the margin is ``WIDE``: wide enough for the slowest machine that runs the suite, and still short
of what a broken server does (hold a connection for ever, keep a scraper out while the attack lasts).
"""

from __future__ import annotations

import hashlib
import random
import select
import socket
import ssl
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest

from rollout_telemetry import BasicAuth, RolloutTelemetry, TLSConfig, hash_password
from rollout_telemetry._facade.live import LivePage
from rollout_telemetry._serve.limits import Limits
from rollout_telemetry._serve.metrics_server import MetricsServer, start_server
from rollout_telemetry._store.snapshot import AccountSnapshot
from rollout_telemetry._views.page import REFRESH_SECONDS
from rollout_telemetry._views.story import Point
from tests.serve.test_http import MB, ca, tls, trusting
from tests.serve.test_security import PASSWORD, _basic, _get, _Guessers, recorded, server
from tests.support import coverage_of, groups_of, rss, wait_until

__all__ = ["ca", "recorded", "server", "tls", "trusting"]  # the fixtures, imported for the tests below

LIMITS = Limits()
"""The bounds ``serve()`` serves with: its defaults."""

SCHEDULING = 1.0
"""Seconds a busy machine (2 cores, one of them taken) may add to when a thread runs after it could: what the
design's own arithmetic below allows for."""
WIDE = 10.0
"""Seconds the slowest machine that runs the suite (2 cores beside another CI job) may add to a bound that
the tests assert: wide, since a server that breaks one of them misses it by far more."""


def test_idle_clients_cannot_exhaust_the_server(server: MetricsServer) -> None:
    """Fifty silent connections hold no thread: a scrape still answers at once, and they are closed."""
    idle = [socket.create_connection(("127.0.0.1", server.port), timeout=10) for _ in range(50)]
    try:
        assert _get(server.url)[0] == 200
        # "At once": a scrape queued behind even one idle client would have waited for its idle timeout, which
        # closes them all; answered, none of them is closed yet (an order of events, not a duration).
        readable, _, _ = select.select(idle, [], [], 0)
        assert readable == [], "an idle client was closed before the scrape was answered"
        threads = threading.active_count()
        assert threads < 30, threads
        for connection in idle:
            # A bound: closed at idle_timeout after they connected.
            connection.settimeout(LIMITS.idle_timeout + 5)
            assert connection.recv(1) == b""  # the server closed it
    finally:
        for connection in idle:
            connection.close()


TRICKLE = 0.5
"""Seconds between the bytes of a trickling client."""


def test_the_request_head_has_one_deadline(server: MetricsServer) -> None:
    """A client sending a byte every 0.5 s is closed head_timeout after its first byte: each byte does not
    buy it more time."""
    # Closed at the latest one trickle interval after the deadline, plus a busy machine's delay; a trickler
    # that each byte bought more time would still be sending its 100 bytes then (50 s).
    latest = LIMITS.head_timeout + TRICKLE + WIDE
    payload = iter(b"GET /metrics HTTP/1.1\r\nX-Slow: " + b"a" * 100)
    closed = False
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as trickler:
        trickler.settimeout(TRICKLE)  # waiting for the close paces the trickle
        started = time.monotonic()
        while not closed and time.monotonic() - started < latest:
            try:
                trickler.send(bytes([next(payload)]))
                closed = trickler.recv(1) == b""
            except TimeoutError:
                continue
            except OSError:
                closed = True
        elapsed = time.monotonic() - started
    assert closed, f"still open after {elapsed:.1f} s"
    # Never sooner than head_timeout: the deadline runs from the server's read of the first byte, sent after
    # ``started`` (asyncio may run a timer one tick of its clock early).
    # bound: a lower bound, which no machine's speed brings closer
    assert elapsed >= LIMITS.head_timeout - time.get_clock_info("monotonic").resolution, elapsed
    assert elapsed < latest, elapsed  # bound: WIDE past the deadline, short of the trickle's 50 s


GUESSERS = 64
SCRYPT_COST = 0.04
"""Seconds one password check costs by design (``credentials``: "about 40 ms"). The guesses' checks take
exactly that here, off the CPU, so the bound below is the design's, not this machine's scrypt speed."""


def test_a_restarted_scraper_is_verified_within_five_seconds_under_guessing(
    recorded: RolloutTelemetry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scraper not yet verified that shares 127.0.0.1 with 64 guessers gets its 200 within 5 s."""
    auth = BasicAuth("prometheus", hash_password(PASSWORD))
    scrypt = hashlib.scrypt
    guesses_checked = threading.Semaphore(0)

    def at_design_cost(password: bytes, **kwargs: Any) -> bytes:
        if password == PASSWORD.encode():
            return scrypt(password, **kwargs)
        time.sleep(SCRYPT_COST)
        guesses_checked.release()
        return b"not the hash"

    monkeypatch.setattr(hashlib, "scrypt", at_design_cost)
    # The scraper's attempt waits behind at most one guess of each guesser (each has one request in flight;
    # one queue per source, oldest first): GUESSERS checks over auth_threads threads, 1.3 s, within
    # auth_wait, so its first attempt has its turn (how soon, beside a control: benchmarks/attacks.py).
    # While the guessers go on, a scheduler that starved it would keep it out for good: WIDE tells them apart.
    assert GUESSERS * SCRYPT_COST / LIMITS.auth_threads + SCHEDULING < LIMITS.auth_wait
    within = LIMITS.auth_wait + WIDE
    with recorded.serve(port=0, auth=auth) as server, _Guessers(server.port, ["127.0.0.1"] * GUESSERS):
        for _ in range(LIMITS.failure_burst):  # the guessers have spent the address's attempts
            assert guesses_checked.acquire(timeout=10), "the guesses never reached a password check"
        started = time.monotonic()
        statuses = []
        while time.monotonic() - started < within:
            status = _get(server.url, headers=_basic("prometheus", PASSWORD))[0]
            statuses.append(status)
            if status == 200:
                break
        assert statuses[-1] == 200, statuses
        assert time.monotonic() - started < within, statuses  # bound: auth_wait + WIDE, above


def test_tls_memory_is_given_back_after_churn(
    recorded: RolloutTelemetry, tls: TLSConfig, trusting: ssl.SSLContext
) -> None:
    """Three waves of 400 TLS clients each asking once: RSS is back within 100 MB of before soon after."""
    with recorded.serve(port=0, tls=tls) as server:
        before = rss()
        for wave in range(3):
            held: list[ssl.SSLSocket] = []
            try:
                for i in range(400):
                    source = (f"127.0.{3 + wave}.{2 + i % 200}", 0)
                    raw = socket.create_connection(
                        ("127.0.0.1", server.port), timeout=5, source_address=source
                    )
                    held.append(trusting.wrap_socket(raw, server_hostname="127.0.0.1"))
                for connection in held:
                    connection.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            finally:
                for connection in held:
                    connection.close()
        # "Soon": a connection whose client has gone is held at most until its response's write deadline
        # and the linger after it; then what it held is freed.
        wait_until(
            lambda: rss() - before < 100 * MB,
            timeout=LIMITS.write_timeout + LIMITS.linger + WIDE,
            what=f"RSS back within 100 MB (it grew {(rss() - before) / MB:.0f} MB)",
        )


PAGE_AGENTS = 40
OPEN_READERS = 8
OPEN_REQUESTS = 30
"""Requests each reader of the page makes, each naming a new set of sections."""


def _named(reader: int, request: int) -> list[str]:
    """A new ?open= set: ten names no agent has, or five of them and five agents' picked at random."""
    unknown = [f"x{reader}-{request}-{i}" for i in range(10)]
    if request % 2:
        return unknown
    chosen = random.Random(reader * OPEN_REQUESTS + request).sample(range(PAGE_AGENTS), 5)
    return unknown[:5] + [f"agent-{i:02d}" for i in chosen]


def test_a_flood_of_new_open_sets_reads_the_run_once_an_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    """Readers of the live page naming a new ?open= set on every request (names no agent has, and the
    agents'): the run is read for the page at most once a read_interval and each agent's charts drawn at most
    once an update, /rollouts is answered all along, and every reader gets the charts of the agents it
    named."""
    telemetry = RolloutTelemetry(runtime_metrics=False)
    for i in range(PAGE_AGENTS):
        telemetry.record(f"agent-{i:02d}", {"reward": 1.0, "mask_sample": i % 3 == 0})
    reads = Counter[str]()

    def snapshot() -> AccountSnapshot:  # once a read of the run for the page (no sampler tick meanwhile)
        reads["page"] += 1
        return telemetry.snapshot()

    page = LivePage(
        "flood",
        snapshot,
        lambda: coverage_of(telemetry),
        lambda: groups_of(telemetry),
        origin=0.0,
        interval=3600.0,
    )
    drawn = Counter[str]()
    points = page.story.points

    def counted(account: AccountSnapshot, agent: str) -> Sequence[Point]:
        drawn[agent] += 1
        return points(account, agent)

    monkeypatch.setattr(page.story, "points", counted)
    server = start_server(
        telemetry.registry, port=0, rollouts=telemetry.rollouts_in_flight, page=page.shown()
    )
    root = f"http://127.0.0.1:{server.port}"
    missing: list[str] = []

    def reader(number: int) -> None:
        for request in range(OPEN_REQUESTS):
            named = _named(number, request)
            url = f"{root}/?part=main" + "".join(f"&open={name}" for name in named)
            with urllib.request.urlopen(url, timeout=60) as response:
                main = response.read().decode()
            for name in (name for name in named if name.startswith("agent-")):
                section = main[main.index(f'data-agent="{name}" id=') :]
                if '<svg class="chart"' not in section[: section.index("</details>")]:
                    missing.append(name)

    listings = 0
    try:
        started = time.monotonic()
        readers = [threading.Thread(target=reader, args=(i,)) for i in range(OPEN_READERS)]
        for thread in readers:
            thread.start()
        while any(thread.is_alive() for thread in readers):
            with urllib.request.urlopen(f"{root}/rollouts", timeout=60) as response:
                assert response.status == 200
                assert b'"rollouts":[' in response.read()
                listings += 1
        for thread in readers:
            thread.join()
        elapsed = time.monotonic() - started
    finally:
        server.stop()
    # Each read is shared for read_interval from when it began, and each drawing of an agent's charts for
    # REFRESH_SECONDS after the read that made it (both on the monotonic clock): at least that far apart.
    # bound: counts per interval of the run's own length: a slower machine makes the run longer, not more
    # reads an interval.
    assert reads["page"] <= elapsed // LIMITS.read_interval + 1, (reads, elapsed)
    assert max(drawn.values()) <= elapsed // REFRESH_SECONDS + 1, (drawn, elapsed)  # bound: as above
    assert missing == []
    assert listings >= 1
