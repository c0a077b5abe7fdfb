"""Attacks on the endpoint from the same host, and whether an authorised scrape still answers within 1 s.

Each attack runs in a child process (``attack`` mode below), so its threads do not share an interpreter with
the server or the scraper, against a server in this process on 127.0.0.1. While it runs, an authorised
scrape is made every 0.5 s (after the previous one answered or gave up at 3 s). Prints, per attack, how
many scrapes answered within 1 s, the worst latency, and how long this process's file descriptors and
threads took to return to their baseline (measured with the server warmed, before the attack) after the
attacker was stopped. Figures, not assertions: the
assertions are in tests/e2e/test_attacks_e2e.py.

    .venv/bin/python benchmarks/attacks.py [--scrapes 8] [--only slowloris-8 wrong-password-64]
    .venv/bin/python benchmarks/attacks.py attack slowloris --port 9464 --connections 8 [--seconds 30]

Then, unless ``--only`` is given, the attacks on service discovery's ``GET /targets``
(``benchmarks/discovery_attacks.py``, which runs them on its own as well).
"""

from __future__ import annotations

import argparse
import base64
import http.client
import os
import selectors
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import discovery_attacks  # this directory's discovery_attacks.py: the attacks on GET /targets

KINDS = ("slowloris", "idle", "one-byte", "big-body", "slow-reader", "tls-handshake", "wrong-password")
ATTACKS = {  # name: (kind, connections)
    "slowloris-8": ("slowloris", 8),
    "slowloris-300": ("slowloris", 300),
    "idle-reopened-300": ("idle", 300),
    "one-byte-1000": ("one-byte", 1000),
    "big-body-50": ("big-body", 50),
    "slow-readers-16": ("slow-reader", 16),
    "tls-handshakes-100": ("tls-handshake", 100),
    "wrong-password-64": ("wrong-password", 64),
}
PASSWORD = "correct horse battery staple"
# A TLS record header announcing a 512-byte handshake message, then the first bytes of a ClientHello.
PARTIAL_CLIENT_HELLO = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 16


# --- the attacker (a child process) --------------------------------------------------------------------


@dataclass
class _Behaviour:
    """What each connection of a socket attack does; a closed connection is opened again."""

    opening: bytes = b""
    trickle: bytes = b""  # then one byte of this per second, cycling
    read_per_second: int | None = None  # None: read whatever comes (to notice the close) at once
    lifetime: float | None = None  # reopen after this many seconds even if still open


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
    "tls-handshake": _Behaviour(PARTIAL_CLIENT_HELLO),
}


class _Connection:
    def __init__(self, port: int, behaviour: _Behaviour) -> None:
        self.opened = time.monotonic()
        self.sent = 0
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=2)
        if behaviour.read_per_second is not None:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        if behaviour.opening:
            self.sock.sendall(behaviour.opening)
        self.sock.setblocking(False)


class _Connections:
    """The attacker's connections, each doing one behaviour; a closed one is forgotten (and reopened)."""

    def __init__(self, port: int, behaviour: _Behaviour) -> None:
        self.port = port
        self.behaviour = behaviour
        self.selector = selectors.DefaultSelector()
        self.live: dict[socket.socket, _Connection] = {}

    def open(self) -> None:
        try:
            connection = _Connection(self.port, self.behaviour)
        except OSError:
            return
        self.live[connection.sock] = connection
        self.selector.register(connection.sock, selectors.EVENT_READ, connection)

    def close(self, connection: _Connection) -> None:
        self.selector.unregister(connection.sock)
        del self.live[connection.sock]
        connection.sock.close()

    def read_what_came(self) -> None:
        """Read whatever the server sent (to notice it closing), unless this is a slow reader."""
        for key, _ in self.selector.select(timeout=0.05) if self.live else []:
            if self.behaviour.read_per_second is None:
                try:
                    if not key.data.sock.recv(65536):
                        self.close(key.data)
                except BlockingIOError:
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
                if behaviour.read_per_second is not None:
                    connection.sock.recv(behaviour.read_per_second)
            except BlockingIOError:
                pass
            except OSError:
                self.close(connection)
                continue
            if behaviour.lifetime is not None and time.monotonic() - connection.opened > behaviour.lifetime:
                self.close(connection)


def socket_attack(port: int, kind: str, connections: int, stop: threading.Event) -> None:
    """Hold ``connections`` connections doing ``kind`` until ``stop``; reopen each one the server closes."""
    attackers = _Connections(port, BEHAVIOURS[kind])
    for _ in range(connections):
        attackers.open()
    print("ready", flush=True)
    next_tick = time.monotonic() + 1
    while not stop.is_set():
        attackers.read_what_came()
        if time.monotonic() >= next_tick:
            next_tick += 1
            attackers.tick()
        for _ in range(min(connections - len(attackers.live), 50)):
            attackers.open()
        if not attackers.live:
            time.sleep(0.05)
    for connection in list(attackers.live.values()):
        attackers.close(connection)


def wrong_password_attack(port: int, clients: int, stop: threading.Event) -> None:
    """``clients`` threads, each sending requests with a wrong password as fast as it is answered."""
    header = "Basic " + base64.b64encode(b"prometheus:wrong-guess").decode()

    def client() -> None:
        while not stop.is_set():
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            try:
                connection.request("GET", "/metrics", headers={"Authorization": header})
                connection.getresponse().read()
            except (OSError, http.client.HTTPException):
                time.sleep(0.01)
            finally:
                connection.close()

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for thread in threads:
        thread.start()
    print("ready", flush=True)
    stop.wait()
    for thread in threads:
        thread.join(timeout=10)


def attack(port: int, kind: str, connections: int, seconds: float) -> None:
    """Run one attack until SIGTERM or ``seconds``."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    threading.Timer(seconds, stop.set).start()
    if kind == "wrong-password":
        wrong_password_attack(port, connections, stop)
    else:
        socket_attack(port, kind, connections, stop)
    os._exit(0)  # the timer thread may still be waiting


@contextmanager
def attacker(port: int, kind: str, connections: int, *, seconds: float = 60) -> Iterator[None]:
    """Run an attack in a child process while the block runs; it is ready when the block starts."""
    command = [sys.executable, __file__, "attack", kind, "--port", str(port)]
    command += ["--connections", str(connections), "--seconds", str(seconds)]
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


# --- the target and the measurement --------------------------------------------------------------------


def open_descriptors() -> int:
    """File descriptors open in this process."""
    return len(os.listdir("/proc/self/fd"))


def scrape(url: str, *, context: ssl.SSLContext | None, auth: bool, timeout: float) -> float | None:
    """Seconds an authorised scrape took, or None if it failed or took longer than ``timeout``."""
    headers = {}
    if auth:
        headers["Authorization"] = "Basic " + base64.b64encode(f"prometheus:{PASSWORD}".encode()).decode()
    started = time.monotonic()
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, headers=headers), timeout=timeout, context=context
        ) as response:
            response.read()
            if response.status != 200:
                return None
    except (OSError, http.client.HTTPException):
        return None
    elapsed = time.monotonic() - started
    return elapsed if elapsed <= timeout else None


class _Padding:
    """A collector of about ``megabytes`` MB of samples with long label values: large, cheap to render."""

    def __init__(self, megabytes: float) -> None:
        from prometheus_client.core import GaugeMetricFamily

        self._family = GaugeMetricFamily("padding_value", "Makes the exposition large.", labels=["i"])
        for i in range(int(megabytes * 200)):
            self._family.add_metric([f"{i:05000d}"], float(i))

    def collect(self) -> Iterator[object]:
        yield self._family


def measure(name: str, kind: str, connections: int, scrapes: int, folder: Path) -> str:
    """Run one attack against a fresh server; return a line of figures."""
    from rollout_telemetry import BasicAuth, RolloutTelemetry, TLSConfig, hash_password

    telemetry = RolloutTelemetry(run="attack")
    telemetry.record("math", {"reward": 1.0})
    if kind == "slow-reader":
        telemetry.registry.register(_Padding(2.5))  # type: ignore[arg-type]
    tls, context = None, None
    if kind == "tls-handshake":
        import trustme

        ca = trustme.CA()
        cert = ca.issue_cert("127.0.0.1")
        cert.cert_chain_pems[0].write_to_path(str(folder / "server.pem"))
        cert.private_key_pem.write_to_path(str(folder / "server.key"))
        tls = TLSConfig(str(folder / "server.pem"), str(folder / "server.key"))
        context = ssl.create_default_context()
        ca.configure_trust(context)
    auth = BasicAuth("prometheus", hash_password(PASSWORD)) if kind == "wrong-password" else None
    with telemetry.serve(port=0, tls=tls, auth=auth) as server:
        url = server.url

        def once() -> float | None:
            return scrape(url, context=context, auth=auth is not None, timeout=3)

        once()
        baseline = (open_descriptors(), threading.active_count())
        latencies: list[float | None] = []
        with attacker(server.port, kind, connections):
            time.sleep(1)  # let the attack take hold
            for _ in range(scrapes):
                latencies.append(once())
                time.sleep(0.5)
        stopped = time.monotonic()
        recovered = None
        while time.monotonic() - stopped < 30:
            if open_descriptors() <= baseline[0] and threading.active_count() <= baseline[1]:
                recovered = time.monotonic() - stopped
                break
            time.sleep(0.1)
        after = (open_descriptors(), threading.active_count())
    answered = sum(1 for latency in latencies if latency is not None and latency <= 1)
    worst = max((3.0 if latency is None else latency) for latency in latencies)
    back = f"back to baseline in {recovered:.1f} s" if recovered is not None else "NOT back after 30 s"
    return (
        f"{name:20} {answered:3}/{len(latencies):<3} within 1 s, worst {worst:5.2f} s"
        f"{'+' if worst >= 3 else ' '}; fds/threads {baseline[0]}/{baseline[1]}"
        f" -> {after[0]}/{after[1]}, {back}"
    )


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
    parser.add_argument("--scrapes", type=int, default=8, help="authorised scrapes during each attack")
    parser.add_argument("--only", nargs="*", choices=sorted(ATTACKS), help="run only these attacks")
    args = parser.parse_args()
    if args.command == "attack":
        attack(args.port, args.kind, args.connections, args.seconds)
        return
    print("attack               scrapes answered      worst   (3.00+ = failed or over 3 s)")
    with tempfile.TemporaryDirectory() as folder:
        for name in args.only or list(ATTACKS):
            kind, connections = ATTACKS[name]
            print(measure(name, kind, connections, args.scrapes, Path(folder)), flush=True)
    # --- service discovery (benchmarks/discovery_attacks.py) ---
    if not args.only:
        print()
        discovery_attacks.run(None, reads=5)


if __name__ == "__main__":
    main()
