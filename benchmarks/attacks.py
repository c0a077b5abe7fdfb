"""Attacks on the endpoint from the same host, and whether an authorised scrape still answers within 1 s.

The one attack driver: ``benchmarks/attacks.py`` prints figures, ``tests/slow/test_attacks.py`` imports
``ATTACKS`` and ``run_attack`` from here and asserts on them. Each attack runs in a child process
(``attack`` mode below), so its threads do not share an interpreter with the server or the scraper, against
a server in this process on 127.0.0.1 while a thread of this process records a rollout every 2 ms (as a
collector would). While the attack runs, an authorised scrape is made every 0.5 s (after the previous one
answered or gave up at 3 s); a scraper "restarted" has not been verified before the attack, and its first
scrape may take up to 5 s. Per attack: how many scrapes answered within 1 s, the worst latency beside the
worst of the same scrapes just before the attack (its unattacked control, in the same run), this
process's RSS before the attack, at its peak and 10 s after the attacker stopped, the worst ``record()``
call before and during the attack, the longest pause of this process's garbage collector during it, and how
long file descriptors and threads took to return to their baseline. What this process held before the
attack is left out of the collector's full collections (``gc.freeze``), as the exporter's command line does
at start (``freeze_the_heap``): a test worker's heap from the tests before is not the server's.

    .venv/bin/python benchmarks/attacks.py [--scrapes 5] [--only slowloris-8 wrong-password-64]
    .venv/bin/python benchmarks/attacks.py attack slowloris --port 9464 --connections 8 [--seconds 30]

The attacks named ``targets-...`` are on service discovery's ``GET /targets`` (the same HTTP stack, a full
registry behind basic auth) and scrape that. Those named ``...-at-the-agent-cap`` read ``/rollouts`` as the
authorised client while 20,000 rollouts are in flight over as many agents as the cap admits, each with a
full history on the live page; an attack with a control in ``CONTROLS`` (the live page's ``?open=`` floods,
against the ``name[]=`` flood) also prints the ratio of ``record()``'s 99th percentile under it to under its
control, when both are in the run (``--rounds``: each round runs every attack named once, in order, so an
attack and its control are measured one after the other, round after round; the ratio of each round is
printed, and their median), in one command:

    .venv/bin/python benchmarks/attacks.py --rounds 3 --only filtered-readers-16-at-the-agent-cap
        page-open-readers-16-at-the-agent-cap page-open-agents-readers-16-at-the-agent-cap
"""

from __future__ import annotations

import argparse
import base64
import functools
import gc
import http.client
import os
import random
import selectors
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the attacker child imports nothing of the package
    from rollout_telemetry import MetricsServer, RolloutTelemetry
    from rollout_telemetry._ray.discovery import DiscoveryServer
    from rollout_telemetry._ray.target_registry import TargetRegistry

PASSWORD = "correct horse battery staple"
MB = 1 << 20
# A TLS record header announcing a 512-byte handshake message, then the first bytes of a ClientHello.
PARTIAL_CLIENT_HELLO = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 16


@dataclass(frozen=True)
class Attack:
    """One attack: what the attacker does, the server it is against, and how the authorised scraper asks."""

    kind: str  # the attacker's behaviour (KINDS)
    connections: int  # connections held, clients, or (tls-request) connections opened per second
    tls: bool = False
    auth: bool = False
    rotate: bool = False  # each of the attacker's connections from another address of 127/8
    sources: int = 0  # or: the attacker's connections spread over this many addresses, 127.0.0.2 on
    verified: bool = True  # False: the scraper's credential was not verified before (a restarted server)
    holds: bool = True  # the attack holds connections on the server (wait for them before scraping)
    scraper_source: str = "127.0.0.1"
    scraper_delay: float = 0.0  # seconds from connect to request: a remote Prometheus, a TLS handshake away
    padding_mb: float = 0.0  # a larger exposition
    scraper_rate: float = 0.0  # bytes a second the scraper reads at (0: as fast as it can)
    in_flight: int = 0  # rollouts in flight on the server (/rollouts lists up to 1,000 of them)
    endpoint: str = "/metrics"  # or "/targets": service discovery's, with a full registry (MAX_TARGETS)
    at_the_caps: bool = False  # every agent, failure kind and stage the cardinality caps admit, long labels
    at_the_agent_cap: bool = False  # as many agents as the cap admits, each with the live page's full history


ATTACKS = {
    "slowloris-8": Attack("slowloris", 8),
    "slowloris-300": Attack("slowloris", 300),
    "idle-reopened-300": Attack("idle", 300),
    "one-byte-1000": Attack("one-byte", 1000),
    "big-body-50": Attack("big-body", 50, holds=False),
    "slow-readers-16": Attack("slow-reader", 16, padding_mb=2.5),
    "tls-handshakes-100": Attack("tls-handshake", 100, tls=True),
    "wrong-password-64": Attack("wrong-password", 64, auth=True, holds=False),
    # Each a finding of the attacker pass: TLS connections kept to the write deadline (4) ...
    "tls-requests-52/s": Attack("tls-request", 52, tls=True, holds=False),
    "tls-auth-requests-52/s": Attack("tls-request", 52, tls=True, auth=True, holds=False),
    # ... guesses from rotating addresses, and a scraper restarted beside 64 guessers on its address (5) ...
    "wrong-password-rotating-64": Attack("wrong-password", 64, auth=True, rotate=True, holds=False),
    "wrong-password-restarted-64": Attack("wrong-password", 64, auth=True, verified=False, holds=False),
    # ... expensive unauthenticated reads (6) ...
    "rollouts-readers-50": Attack("rollouts-reader", 50, holds=False, in_flight=10_000),
    "filtered-readers-50": Attack("filtered-reader", 50, holds=False, in_flight=10_000),
    "rollouts-and-filtered-readers-50": Attack("mixed-reader", 50, holds=False, in_flight=10_000),
    # ... and the live page's: a new ?open= set on every request, of names that are no agent's or of the
    # agents', beside the same flood of new name[]= filters (the control), /rollouts read meanwhile.
    "filtered-readers-16-at-the-agent-cap": Attack(
        "filtered-reader", 16, holds=False, in_flight=20_000, endpoint="/rollouts", at_the_agent_cap=True
    ),
    "page-open-readers-16-at-the-agent-cap": Attack(
        "page-open-reader", 16, holds=False, in_flight=20_000, endpoint="/rollouts", at_the_agent_cap=True
    ),
    "page-open-agents-readers-16-at-the-agent-cap": Attack(
        "page-open-agents-reader",
        16,
        holds=False,
        in_flight=20_000,
        endpoint="/rollouts",
        at_the_agent_cap=True,
    ),
    # ... a reconnect flood against a remote TLS scraper (7), memory (8).
    "reconnect-flood-2000": Attack("idle", 2000, tls=True, scraper_source="127.0.0.2", scraper_delay=0.1),
    "tls-churn-400": Attack("tls-idle", 400, tls=True, rotate=True),
    "non-readers-600": Attack("non-reader", 600, rotate=True, padding_mb=2.5, holds=False),
    # Responses that fill the output cap (10): non-readers at 300 a second beside a scraper reading at
    # 10 MB/s, and readers of an exposition larger than the cap beside a scraper: neither scrape is cut.
    "non-readers-300/s-5MB-10MB/s-reader": Attack(
        "flood-non-reader", 600, rotate=True, padding_mb=5, holds=False, scraper_rate=10 * MB
    ),
    "metrics-readers-4-40MB": Attack("metrics-reader", 4, padding_mb=40, holds=False),
    # Non-readers at 600 a second beside a scraper reading at 50 MB/s: every slot held by a write stalled for
    # less than evict_after, a reader takes the slot of one stalled for stalled_briefly.
    "non-readers-600/s-2.5MB-50MB/s-reader": Attack(
        "flood-non-reader-600", 1200, rotate=True, padding_mb=2.5, holds=False, scraper_rate=50 * MB
    ),
    # Readers of the largest exposition the cardinality caps allow (256 agents with 64 failure kinds and 64
    # stages each, every label 128 four-byte characters: 112 MB, over max_output): a scrape that needs a new
    # rendering while another reader's write of the last one is in progress waits for room (room_wait).
    "metrics-readers-4-at-the-caps": Attack("metrics-reader", 4, holds=False, at_the_caps=True),
    # Service discovery (9): a thread per connection under a slowloris, /targets built for every reader.
    # Five addresses together hold more than every slot: answered and lingering, or waiting for a password
    # check's turn.
    "answered-silent-5x128": Attack("answered-silent", 640, sources=5),
    "answered-silent-auth-5x128": Attack("answered-silent", 640, sources=5, auth=True),
    "wrong-password-5x128": Attack("wrong-password", 640, auth=True, sources=5, holds=False),
    "targets-slowloris-1000": Attack("slowloris", 1000, auth=True, endpoint="/targets"),
    "targets-readers-64": Attack("targets-reader", 64, auth=True, holds=False, endpoint="/targets"),
}


CONTROLS = {
    "page-open-readers-16-at-the-agent-cap": "filtered-readers-16-at-the-agent-cap",
    "page-open-agents-readers-16-at-the-agent-cap": "filtered-readers-16-at-the-agent-cap",
}
"""Attacks compared with another: the ratio of ``record()``'s 99th percentile under each is printed."""
AGENT_CAP = 256
"""The agents an ``at_the_agent_cap`` server counts: the package's ``DEFAULT_MAX_AGENTS`` (checked there)."""
AGENT_NAMES = "agent-{:03d}"
"""The agents of an ``at_the_agent_cap`` server (the attacker names them without importing the package)."""
OPEN_NAMED = 50
"""Sections a ``?open=`` attacker names in each request (the page names at most ``MAX_OPEN``, 50)."""


def rotating_source(n: int) -> str:
    """The ``n``-th of many loopback addresses, none in 127.0.0.0/24 (where the scrapers are)."""
    return f"127.{1 + n // 62_500 % 250}.{1 + n // 250 % 250}.{1 + n % 250}"


def source_of_connection(n: int, *, rotate: bool, sources: int) -> str | None:
    """The address the attacker's ``n``-th connection comes from (None: the system's, 127.0.0.1)."""
    if sources:
        return f"127.0.0.{2 + n % sources}"
    return rotating_source(n) if rotate else None


@functools.cache
def _careless_tls() -> ssl.SSLContext:
    """An attacker's TLS context: it checks nothing (one for all its connections: loading the system's CA
    certificates took 30 ms a context)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


# --- the attacker (a child process) --------------------------------------------------------------------


@dataclass
class _Behaviour:
    """What each connection of a socket attack does; a closed connection is opened again."""

    opening: bytes = b""
    trickle: bytes = b""  # then one byte of this per second, cycling
    read_per_second: int | None = None  # None: read whatever comes (to notice the close) at once; 0: never
    lifetime: float | None = None  # reopen after this many seconds even if still open
    tls: bool = False  # a full TLS handshake first
    pace: float | None = None  # connections opened per second at most (None: all at once)
    silent: bool = False  # once the server has said all it will (its end closed), stay: never close


_FLOOD = _Behaviour(  # a client that never reads, 300 new ones a second
    b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", read_per_second=0, lifetime=12.0, pace=300
)
BEHAVIOURS = {
    "slowloris": _Behaviour(b"G", b"ET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-Pad: a\r\n" * 1000),
    "idle": _Behaviour(),
    "one-byte": _Behaviour(b"G"),
    "big-body": _Behaviour(
        b"POST /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000000000\r\n\r\n", b"x" * 64
    ),
    "slow-reader": _Behaviour(
        b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", read_per_second=1024, lifetime=6.0
    ),
    "non-reader": _Behaviour(  # one at a time, so each gets a rendering of its own
        b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", read_per_second=0, lifetime=12.0, pace=50
    ),
    "answered-silent": _Behaviour(  # reads its answer and stays until the server lets go (1 s), then again
        b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Basic c2NyYXBlcjpndWVzcw==\r\n\r\n",
        lifetime=1.0,
        silent=True,
    ),
    "flood-non-reader": _FLOOD,
    "flood-non-reader-600": replace(_FLOOD, pace=600),
    "tls-handshake": _Behaviour(PARTIAL_CLIENT_HELLO),
    "tls-idle": _Behaviour(tls=True),
}
REQUESTERS = (
    "wrong-password",
    "rollouts-reader",
    "filtered-reader",
    "mixed-reader",
    "targets-reader",
    "metrics-reader",
    "page-open-reader",
    "page-open-agents-reader",
)
KINDS = (*BEHAVIOURS, "tls-request", *REQUESTERS)


class _Connection:
    def __init__(self, port: int, behaviour: _Behaviour, source: str | None) -> None:
        self.opened = time.monotonic()
        self.sent = 0
        address = (source, 0) if source is not None else None
        sock = socket.create_connection(("127.0.0.1", port), timeout=2, source_address=address)
        if behaviour.read_per_second is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        if behaviour.tls:
            try:
                sock = _careless_tls().wrap_socket(sock)
            except OSError:
                sock.close()
                raise
        self.sock = sock
        if behaviour.opening:
            self.sock.sendall(behaviour.opening)
        self.sock.setblocking(False)


class _Connections:
    """The attacker's connections, each doing one behaviour; a closed one is forgotten (and reopened)."""

    def __init__(self, port: int, behaviour: _Behaviour, *, rotate: bool, sources: int) -> None:
        self.port = port
        self.behaviour = behaviour
        self.rotate = rotate
        self.sources = sources
        self.opened = 0
        self.selector = selectors.DefaultSelector()
        self.live: dict[socket.socket, _Connection] = {}

    def open(self) -> None:
        self.opened += 1
        self.adopt(self.make(self.opened))

    def make(self, number: int) -> _Connection | None:
        """The attacker's ``number``-th connection, opened (None if the server would not have it)."""
        try:
            source = source_of_connection(number, rotate=self.rotate, sources=self.sources)
            return _Connection(self.port, self.behaviour, source)
        except OSError:
            return None

    def open_at_once(self, count: int) -> None:
        """Open ``count`` connections, their TLS handshakes (each a blocking round of the client's and the
        server's work) from several threads at once: one after another, 400 took 18 s."""
        numbers = range(self.opened + 1, self.opened + count + 1)
        self.opened += count
        if not self.behaviour.tls:
            for number in numbers:
                self.adopt(self.make(number))
            return
        with ThreadPoolExecutor(max_workers=16) as pool:
            for connection in pool.map(self.make, numbers):
                self.adopt(connection)

    def adopt(self, connection: _Connection | None) -> None:
        if connection is None:
            return
        self.live[connection.sock] = connection
        if self.behaviour.read_per_second is None:  # others would make select() return at once, always
            self.selector.register(connection.sock, selectors.EVENT_READ, connection)

    def close(self, connection: _Connection) -> None:
        if connection.sock in self.selector.get_map():
            self.selector.unregister(connection.sock)
        del self.live[connection.sock]
        connection.sock.close()

    def read_what_came(self) -> None:
        """Read whatever the server sent (to notice it closing), unless this is a slow reader."""
        if not self.selector.get_map():
            time.sleep(0.05)
            return
        for key, _ in self.selector.select(timeout=0.05):
            try:
                if not key.data.sock.recv(65536):
                    if self.behaviour.silent:  # stays, saying nothing, until its lifetime is up
                        self.selector.unregister(key.data.sock)
                    else:
                        self.close(key.data)
            except (BlockingIOError, ssl.SSLWantReadError):
                pass
            except OSError:
                self.close(key.data)

    def tick(self) -> None:
        """Once a second: a byte more of the trickle, a slow read; reopen those past their lifetime."""
        behaviour = self.behaviour
        for connection in list(self.live.values()):
            try:
                if behaviour.trickle:
                    byte = behaviour.trickle[connection.sent % len(behaviour.trickle)]
                    connection.sock.send(bytes([byte]))
                    connection.sent += 1
                if behaviour.read_per_second:
                    connection.sock.recv(behaviour.read_per_second)
            except (BlockingIOError, ssl.SSLWantReadError):
                pass
            except OSError:
                self.close(connection)
                continue
            if behaviour.lifetime is not None and time.monotonic() - connection.opened > behaviour.lifetime:
                self.close(connection)


def socket_attack(
    port: int, kind: str, connections: int, stop: threading.Event, *, rotate: bool, sources: int
) -> None:
    """Hold ``connections`` connections doing ``kind`` until ``stop``; reopen each one the server closes."""
    behaviour = BEHAVIOURS[kind]
    attackers = _Connections(port, behaviour, rotate=rotate, sources=sources)
    if behaviour.pace is None:
        attackers.open_at_once(connections)
    print("ready", flush=True)
    next_tick = time.monotonic() + 1
    due, last = 0.0, time.monotonic()  # opens the pace allows
    while not stop.is_set():
        attackers.read_what_came()
        now = time.monotonic()
        if now >= next_tick:
            next_tick += 1
            attackers.tick()
        opens = min(connections - len(attackers.live), 50)
        if behaviour.pace is not None:
            due, last = min(due + (now - last) * behaviour.pace, 50.0), now
            opens = min(opens, int(due))
            due -= max(opens, 0)
        for _ in range(opens):
            attackers.open()
    for connection in list(attackers.live.values()):
        attackers.close(connection)


def tls_request_attack(port: int, per_second: int, stop: threading.Event) -> None:
    """Open ``per_second`` TLS connections a second, each asking /metrics without credentials with
    ``Connection: close`` and reading until the server closes it."""
    request = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    selector = selectors.DefaultSelector()
    context = _careless_tls()
    print("ready", flush=True)
    next_open = time.monotonic()
    while not stop.is_set():
        while time.monotonic() >= next_open:
            next_open += 1 / per_second
            try:
                sock = context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=2))
                sock.sendall(request)
                sock.setblocking(False)
                selector.register(sock, selectors.EVENT_READ, sock)
            except OSError:
                pass
        for key, _ in selector.select(timeout=0.01) if selector.get_map() else []:
            sock = key.data
            try:
                if sock.recv(65536):
                    continue
            except ssl.SSLWantReadError:
                continue
            except OSError:
                pass
            selector.unregister(sock)
            sock.close()
        if not selector.get_map():
            time.sleep(0.01)
    for key in list(selector.get_map().values()):
        key.data.close()


_FIXED_PATHS = {
    "rollouts-reader": "/rollouts?limit=1000",
    "metrics-reader": "/metrics",  # the whole exposition, as a second Prometheus would
}


def _request_of(kind: str, client: int, attempt: int) -> tuple[str, dict[str, str]]:
    """The path and headers of one request of a requesting attacker: each guess, filter and set is new."""
    if kind == "wrong-password":
        token = base64.b64encode(f"prometheus:guess-{client}-{attempt}".encode()).decode()
        return "/metrics", {"Authorization": f"Basic {token}"}
    if kind in _FIXED_PATHS:
        return _FIXED_PATHS[kind], {}
    if kind == "mixed-reader":  # half the clients read /rollouts, half their own filter
        return _request_of("rollouts-reader" if client % 2 else "filtered-reader", client, attempt)
    if kind == "targets-reader":  # with the password, as often as answered: a full /targets each time
        token = base64.b64encode(f"prometheus:{PASSWORD}".encode()).decode()
        return "/targets", {"Authorization": f"Basic {token}"}
    if kind.startswith("page-open"):  # the live page's update, naming a new set of sections each time
        return "/?part=main" + "".join(f"&open={name}" for name in _opened(kind, client, attempt)), {}
    return f"/metrics?name[]=rollout_completed_total&name[]=other_{client}_{attempt}", {}


def _opened(kind: str, client: int, attempt: int) -> list[str]:
    """The sections a ``?open=`` attacker names: no agent's (``page-open-reader``), or a random set of the
    agents' (``page-open-agents-reader``)."""
    if kind == "page-open-agents-reader":
        return [AGENT_NAMES.format(i) for i in random.sample(range(AGENT_CAP), OPEN_NAMED)]
    return [f"x{client}-{attempt}-{i}" for i in range(OPEN_NAMED)]


def request_attack(
    port: int, kind: str, clients: int, stop: threading.Event, *, rotate: bool, sources: int
) -> None:
    """``clients`` threads, each sending requests of ``kind`` as fast as they are answered."""
    numbers = iter(range(1 << 30))
    lock = threading.Lock()

    def client(number: int) -> None:
        attempt = 0
        while not stop.is_set():
            attempt += 1
            with lock:
                address = source_of_connection(next(numbers), rotate=rotate, sources=sources)
            source = (address, 0) if address is not None else None
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5, source_address=source)
            try:
                path, headers = _request_of(kind, number, attempt)
                connection.request("GET", path, headers=headers)
                connection.getresponse().read()
            except (OSError, http.client.HTTPException):
                time.sleep(0.01)
            finally:
                connection.close()

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for thread in threads:
        thread.start()
    print("ready", flush=True)
    stop.wait()  # the clients are not waited for: the process exits, closing their connections at once


def attack(port: int, kind: str, connections: int, seconds: float, *, rotate: bool, sources: int) -> None:
    """Run one attack until SIGTERM or ``seconds``."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    threading.Timer(seconds, stop.set).start()
    if kind in REQUESTERS:
        request_attack(port, kind, connections, stop, rotate=rotate, sources=sources)
    elif kind == "tls-request":
        tls_request_attack(port, connections, stop)
    else:
        socket_attack(port, kind, connections, stop, rotate=rotate, sources=sources)
    os._exit(0)  # the timer thread may still be waiting


@contextmanager
def attacker(port: int, attack: Attack, *, seconds: float = 120) -> Iterator[None]:
    """Run an attack in a child process while the block runs; it is ready when the block starts."""
    command = [sys.executable, __file__, "attack", attack.kind, "--port", str(port)]
    command += ["--connections", str(attack.connections), "--seconds", str(seconds)]
    command += ["--rotate"] if attack.rotate else []
    command += ["--sources", str(attack.sources)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # the child stops itself after ``seconds``
        assert line.strip() == "ready", f"attacker did not start: {line!r}"
        yield
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()


# --- the target and the measurement --------------------------------------------------------------------


def open_descriptors() -> int:
    """File descriptors open in this process."""
    return len(os.listdir("/proc/self/fd"))


def rss() -> int:
    """Resident memory of this process, in bytes."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class _Padding:
    """About ``megabytes`` MB of samples with long label values: a large exposition, cheap to render."""

    def __init__(self, megabytes: float) -> None:
        from prometheus_client.core import GaugeMetricFamily

        self._family = GaugeMetricFamily("padding_value", "Makes the exposition large.", labels=["i"])
        for i in range(int(megabytes * 200)):
            self._family.add_metric([f"{i:05000d}"], float(i))

    def collect(self) -> Iterator[object]:
        yield self._family


def fill_to_the_caps(telemetry: RolloutTelemetry) -> None:
    """Record into every agent, failure kind and stage the default cardinality caps admit (256 agents, 64
    kinds and 64 stages each), each label the longest allowed (128 characters) of four-byte characters, each
    kind failed, masked and omitted: the largest exposition the caps allow."""
    import logging

    from rollout_telemetry._contract.labels import MAX_LABEL_LENGTH
    from rollout_telemetry._store.names import DEFAULT_MAX_AGENTS, DEFAULT_MAX_KINDS_PER_AGENT

    wide = "\U0001d51e"  # four bytes in UTF-8
    logger = logging.getLogger("rollout_telemetry")
    level = logger.level
    logger.setLevel(logging.ERROR)  # each kind and stage is unregistered: 16,384 warnings
    try:
        for a in range(DEFAULT_MAX_AGENTS):
            agent = f"{a:03d}" + wide * (MAX_LABEL_LENGTH - 3)
            for k in range(DEFAULT_MAX_KINDS_PER_AGENT):
                kind = f"k{k:02d}_" + wide * (MAX_LABEL_LENGTH - 4)
                telemetry.record(agent, {"reward": 0.0, "mask_sample": True, "failure_kind": kind})
                telemetry.record_failure(agent, failure_kind=kind)
                telemetry.record_omission(agent, failure_kind=kind)
                with telemetry.rollout(agent, task_index=k, rollout_index=0) as rollout:
                    rollout.stage(f"s{k:02d}:" + wide * (MAX_LABEL_LENGTH - 4))
                    rollout.complete({"reward": 1.0})
    finally:
        logger.setLevel(level)


def fill_to_the_agent_cap(telemetry: RolloutTelemetry) -> None:
    """Record into as many agents as the default cap admits (``math`` and ``browser`` among them), each
    changing at every instant of the live page's history until each chart draws all the points it can."""
    from rollout_telemetry._store.names import DEFAULT_MAX_AGENTS
    from rollout_telemetry._views.page import CHART_POINTS

    assert AGENT_CAP == DEFAULT_MAX_AGENTS, "AGENT_CAP is the package's DEFAULT_MAX_AGENTS"
    agents = ["math", "browser", *(AGENT_NAMES.format(i) for i in range(AGENT_CAP - 2))]
    page = telemetry._live_page()  # the page serve() shows: its history, as its sampler takes it
    for instant in range(CHART_POINTS - 1):  # with the current point, as many as a chart draws unthinned
        for n, agent in enumerate(agents):
            masked = (instant + n) % 7 == 0
            telemetry.record(agent, {"reward": float((instant + n) % 3 == 0), "mask_sample": masked})
            if (instant + n) % 5 == 0:
                telemetry.record_failure(agent, "session_lost")
        page.sample()


class _Sampler:
    """A thread that records a rollout every 2 ms (timing each call) and samples RSS (keeping its peak)."""

    def __init__(self, record: Callable[[], None]) -> None:
        self._record = record
        self._stop = threading.Event()
        self.calls = 0  # record() calls made, every one of which the account must count
        self.worst_record = 0.0
        self.durations: list[float] = []
        self.peak_rss = rss()
        self._thread = threading.Thread(target=self._run, name="attack-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        samples = 0
        while not self._stop.wait(0.002):
            started = time.perf_counter()
            self._record()
            self.calls += 1
            took = time.perf_counter() - started
            self.worst_record = max(self.worst_record, took)
            self.durations.append(took)
            samples += 1
            if samples % 25 == 0:
                self.peak_rss = max(self.peak_rss, rss())

    def reset(self) -> tuple[float, int, float]:
        """The worst record() and peak RSS so far, and record()'s 99th percentile, all then started again."""
        durations = sorted(self.durations)
        p99 = durations[min(len(durations) - 1, len(durations) * 99 // 100)] if durations else 0.0
        figures = (self.worst_record, self.peak_rss, p99)
        self.worst_record, self.peak_rss, self.durations = 0.0, rss(), []
        return figures

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


@dataclass
class Outcome:
    """What one attack did to the server and its scraper."""

    latencies: list[float | None]  # each scrape during the attack: seconds, None if failed or too slow
    rss: tuple[int, int, int]  # bytes before the attack, at its peak, 10 s after it (or when back)
    worst_record: tuple[float, float]  # seconds: the worst record() call before and during the attack
    descriptors: tuple[tuple[int, int], tuple[int, int]]  # (fds, threads) before and after
    recovered: float | None  # seconds until fds and threads were back to their baseline
    verified_after: float | None = None  # a restarted scraper: seconds until its first 200
    threads_during: int = 0  # threads while the attack held its connections (no thread per connection)
    gc_pause: float = 0.0  # seconds: the garbage collector's longest pause during the attack
    record_p99: tuple[float, float] = (0.0, 0.0)  # seconds: record()'s 99th percentile before and during
    control: list[float | None] = field(default_factory=list)  # the same scrapes just before the attack
    recorded: tuple[int, int] = (0, 0)  # outcomes recorded, and counted by the account, when it was over

    @property
    def held(self) -> int:
        """Scrapes that answered within 1 s."""
        return self.held_within(1.0)

    def held_within(self, seconds: float) -> int:
        """Scrapes that answered within ``seconds``."""
        return sum(1 for latency in self.latencies if latency is not None and latency <= seconds)

    def line(self, name: str) -> str:
        """One line of figures."""
        worst = max((3.0 if latency is None else latency) for latency in self.latencies)
        unattacked = max((3.0 if latency is None else latency) for latency in self.control or [0.0])
        before, peak, after = (value / MB for value in self.rss)
        verified = f", verified in {self.verified_after:.1f} s" if self.verified_after is not None else ""
        back = f"{self.recovered:.1f} s" if self.recovered is not None else "NOT back"
        return (
            f"{name:28} {self.held}/{len(self.latencies)} within 1 s, worst {worst:5.2f} s"
            f"{'+' if worst >= 3 else ' '} (unattacked {unattacked:4.2f} s){verified};"
            f" RSS {before:4.0f} -> peak {peak:4.0f}"
            f" -> {after:4.0f} MB after; record() worst {self.worst_record[0] * 1000:5.1f}"
            f" -> {self.worst_record[1] * 1000:6.1f} ms (p99 {self.record_p99[0] * 1e6:4.0f} ->"
            f" {self.record_p99[1] * 1e6:6.0f} us); GC pause {self.gc_pause * 1000:5.1f} ms;"
            f" fds/threads back in {back}"
        )


class _Pauses:
    """The garbage collector's longest pause (every thread stops for it) while inside."""

    def __init__(self) -> None:
        self.longest = 0.0
        self._began = 0.0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.longest = max(self.longest, time.perf_counter() - self._began)

    def __enter__(self) -> _Pauses:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)


class Target:
    """A server set up for one attack in this process, and an authorised scraper of it."""

    def __init__(self, attack: Attack, folder: Path) -> None:
        from rollout_telemetry import BasicAuth, RolloutTelemetry, TLSConfig, hash_password

        self.attack = attack
        self.telemetry = RolloutTelemetry(run="attacked")
        self.telemetry.record("math", {"reward": 1.0})
        if attack.padding_mb:
            self.telemetry.registry.register(_Padding(attack.padding_mb))  # type: ignore[arg-type]
        if attack.at_the_caps:
            fill_to_the_caps(self.telemetry)
        if attack.at_the_agent_cap:
            fill_to_the_agent_cap(self.telemetry)
        self._stack = ExitStack()
        for i in range(attack.in_flight):
            self._stack.enter_context(self.telemetry.rollout("browser", task_index=i, rollout_index=0))
        tls, self.context = None, None
        if attack.tls:
            import trustme

            ca = trustme.CA()
            cert = ca.issue_cert("127.0.0.1")
            cert.cert_chain_pems[0].write_to_path(str(folder / "server.pem"))
            cert.private_key_pem.write_to_path(str(folder / "server.key"))
            tls = TLSConfig(str(folder / "server.pem"), str(folder / "server.key"))
            self.context = ssl.create_default_context()
            ca.configure_trust(self.context)
        auth = BasicAuth("prometheus", hash_password(PASSWORD)) if attack.auth else None
        self.server: MetricsServer | DiscoveryServer
        if attack.endpoint == "/targets":
            from rollout_telemetry._ray.discovery import DiscoveryServer

            self.server = DiscoveryServer(full_registry(), tls=tls, auth=auth)
        else:
            self.server = self.telemetry.serve(port=0, tls=tls, auth=auth)
        self._authorization = b""
        if attack.auth:
            token = base64.b64encode(f"prometheus:{PASSWORD}".encode())
            self._authorization = b"Authorization: Basic " + token + b"\r\n"

    def scrape(self, *, timeout: float = 3.0, path: str | None = None) -> float | None:
        """Seconds an authorised scrape (of the attack's endpoint, unless ``path``) took, or None if it failed
        or took longer than ``timeout``.

        From the attack's scraper address, waiting its delay between connect and request.
        """
        path = path or self.attack.endpoint
        request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode() + self._authorization + b"\r\n"
        started = time.monotonic()
        reply = bytearray()
        try:
            with socket.create_connection(
                ("127.0.0.1", self.server.port),
                timeout=timeout,
                source_address=(self.attack.scraper_source, 0),
            ) as raw:
                time.sleep(self.attack.scraper_delay)
                sock = (
                    raw
                    if self.context is None
                    else self.context.wrap_socket(raw, server_hostname="127.0.0.1")
                )
                with sock:
                    sock.sendall(request)
                    rate = self.attack.scraper_rate
                    while time.monotonic() - started < timeout and (chunk := sock.recv(65536)):
                        reply += chunk
                        if rate:  # no faster than the rate: wait until what was read is due
                            time.sleep(max(0.0, started + len(reply) / rate - time.monotonic()))
        except OSError:
            return None
        elapsed = time.monotonic() - started
        expected = {
            "/metrics": b"rollout_completed_total",
            "/targets": b'[{"targets":',
            "/rollouts": b'"rollouts":[',
        }.get(path, b"ok")
        if not reply.startswith(b"HTTP/1.1 200 ") or expected not in reply or elapsed > timeout:
            return None
        return elapsed

    def close(self) -> None:
        self.server.stop()
        self._stack.close()
        self.telemetry.close()  # its background work too: the next attack counts the threads


def full_registry() -> TargetRegistry:
    """A discovery registry holding ``MAX_TARGETS`` targets with the labels ``serve_on_ray`` gives."""
    from rollout_telemetry._ray.target_registry import MAX_TARGETS, TargetRegistry
    from rollout_telemetry._ray.targets import Target

    registry = TargetRegistry()
    node = "8f" * 28  # a Ray node id is 56 hex digits
    for i in range(MAX_TARGETS):
        labels = {"ray_node_id": node, "ray_actor": "RolloutWorker", "pid": str(100000 + i)}
        address = f"10.0.{i // 250}.{i % 250 + 1}:{40000 + i % 1000}"
        registry.register(Target.of(address, labels), registrant=f"actor:{i}")
    return registry


def _take_hold(attack: Attack, descriptors: int) -> None:
    """Wait until the attack holds half the connections it can here, or holds no more for 2 s (the server
    closes them as fast as they come: TLS connections idle after their handshake), up to 30 s; a second for
    an attack that holds none."""
    from rollout_telemetry._serve.limits import DEFAULT_LIMITS as limits

    if not attack.holds:
        time.sleep(1)
        return
    most = limits.max_connections if attack.rotate else limits.max_per_source * max(attack.sources, 1)
    held = min(attack.connections, most, limits.max_connections) // 2
    started = time.monotonic()
    most_seen, rose = open_descriptors(), started
    while most_seen < descriptors + held and time.monotonic() - started < 30:
        time.sleep(0.1)
        now, count = time.monotonic(), open_descriptors()
        if count > most_seen:
            most_seen, rose = count, now
        elif now - rose >= 2:
            return


def _first_success(target: Target, within: float) -> float | None:
    """Seconds until a scrape succeeded, trying every 0.5 s (as a scraper would, not back to back) until
    ``within`` seconds have passed."""
    started = time.monotonic()
    while (left := within - (time.monotonic() - started)) > 0:
        if target.scrape(timeout=left) is not None:
            return time.monotonic() - started
        time.sleep(0.5)
    return None


def _aftermath(
    base: tuple[int, int], baseline_rss: int, settle: float, early: bool
) -> tuple[float | None, int]:
    """Seconds until descriptors and threads were back (at most 30), and RSS ``settle`` seconds after
    (``early``: as soon as it is within 100 MB of ``baseline_rss`` with the rest back)."""
    stopped = time.monotonic()
    recovered = None
    while True:
        elapsed = time.monotonic() - stopped
        if recovered is None and open_descriptors() <= base[0] and threading.active_count() <= base[1]:
            recovered = elapsed
        after_rss = rss()
        if early and recovered is not None and after_rss - baseline_rss < 100 * MB:
            return recovered, after_rss
        if elapsed >= settle and (recovered is not None or elapsed >= 30):
            return recovered, after_rss
        time.sleep(0.1)


def run_attack(
    attack: Attack,
    folder: Path,
    *,
    scrapes: int = 5,
    settle: float = 10.0,
    early: bool = False,
    patience: float = 3.0,
) -> Outcome:
    """Run one attack against a fresh server; ``settle`` seconds after it (or, ``early``, as soon as
    descriptors, threads and RSS are back) measure what it left. A scrape gives up after ``patience``
    seconds (a restarted scraper's verification after ``patience + 2``); the same scrapes are made just before
    the attack, as its control."""
    gc.collect()
    gc.freeze()
    target = Target(attack, folder)
    math = target.telemetry.snapshot().agent("math")
    counted_before = 0 if math is None else math.measured
    sampler = _Sampler(lambda: target.telemetry.record("math", {"reward": 1.0}))
    pauses = _Pauses()
    try:
        for _ in range(3):  # warm: the threads exist and have rendered (a verified scraper: verified)
            target.scrape(path=None if attack.verified else "/healthz")
        time.sleep(1)
        control = [target.scrape(timeout=patience) for _ in range(min(scrapes, 3))]
        base = (open_descriptors(), threading.active_count())
        record_before, _, p99_before = sampler.reset()
        baseline_rss = rss()
        latencies: list[float | None] = []
        verified_after = None
        with pauses, attacker(target.server.port, attack):
            _take_hold(attack, base[0])
            if not attack.verified:
                verified_after = _first_success(target, within=patience + 2)
            for _ in range(scrapes):
                latencies.append(target.scrape(timeout=patience))
                time.sleep(0.5)
            threads_during = threading.active_count()
            record_during, peak, p99_during = sampler.reset()
        recovered, after_rss = _aftermath(base, baseline_rss, settle, early)
        peak = max(peak, sampler.reset()[1])
        sampler.stop()
        math = target.telemetry.snapshot().agent("math")
        recorded = (counted_before + sampler.calls, 0 if math is None else math.measured)
        return Outcome(
            latencies,
            (baseline_rss, max(peak, after_rss), after_rss),
            (record_before, record_during),
            (base, (open_descriptors(), threading.active_count())),
            recovered,
            verified_after,
            threads_during,
            pauses.longest,
            (p99_before, p99_during),
            control,
            recorded,
        )
    finally:
        sampler.stop()
        target.close()
        gc.unfreeze()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command")
    one = commands.add_parser("attack", help="run one attack (the child process)")
    one.add_argument("kind", choices=KINDS)
    one.add_argument("--port", type=int, required=True)
    one.add_argument("--connections", type=int, required=True)
    one.add_argument("--seconds", type=float, default=60)
    one.add_argument("--rotate", action="store_true", help="each connection from another 127/8 address")
    one.add_argument("--sources", type=int, default=0, help="connections spread over 127.0.0.2 and on")
    parser.add_argument("--scrapes", type=int, default=5, help="authorised scrapes during each attack")
    parser.add_argument("--only", nargs="*", choices=sorted(ATTACKS), help="run only these")
    parser.add_argument("--rounds", type=int, default=1, help="run them all this many times, interleaved")
    args = parser.parse_args()
    if args.command == "attack":
        attack(args.port, args.kind, args.connections, args.seconds, rotate=args.rotate, sources=args.sources)
        return
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    print("attack                       scrapes within 1 s (3.00+ = failed or over 3 s); RSS before ->")
    print("                             peak -> 10 s after; worst record() before -> during the attack")
    outcomes: dict[str, list[Outcome]] = {}
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(args.rounds):
            for name in args.only or list(ATTACKS):
                outcome = run_attack(ATTACKS[name], Path(folder), scrapes=args.scrapes)
                outcomes.setdefault(name, []).append(outcome)
                print(outcome.line(name), flush=True)
    for name, control in CONTROLS.items():
        if name in outcomes and control in outcomes:
            print(_compared(name, outcomes[name], control, outcomes[control]))


def _compared(name: str, under: list[Outcome], control: str, against: list[Outcome]) -> str:
    """``record()``'s 99th percentile under an attack against under its control, round by round (each
    round's pair run one after the other), and the attack's scrapes."""
    ratios = sorted(u.record_p99[1] / a.record_p99[1] for u, a in zip(under, against, strict=True))
    latencies = [3.0 if latency is None else latency for outcome in under for latency in outcome.latencies]
    held = sum(outcome.held for outcome in under)
    return (
        f"{name}: record() p99 over {control}'s: {', '.join(f'{r:.2f}' for r in ratios)}"
        f" (median {statistics.median(ratios):.2f}); {ATTACKS[name].endpoint} answered within 1 s"
        f" {held}/{len(latencies)}, worst {max(latencies):.2f} s"
    )


if __name__ == "__main__":
    main()
