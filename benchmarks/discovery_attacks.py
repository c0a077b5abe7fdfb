"""Attacks on service discovery's ``GET /targets`` from the same host, and whether an authorised reader still
gets it within 1 s.

The registry is full (``MAX_TARGETS`` targets with the labels ``serve_on_ray`` gives: about 1.6 MB of
``/targets``) and served by a ``DiscoveryServer`` behind basic auth in this process, on 127.0.0.1. Each attack
runs in a child process (``attack`` mode below), so its threads do not share an interpreter with the server
or the reader:

- ``slowloris``: connections that send a request head for ``/targets`` one byte per second, each reopened
  when the server closes it (the unhardened server held a thread per connection);
- ``readers``: threads with the password that read ``/targets`` back to back (the unhardened server rendered
  the document once per request).

While it runs, authorised ``GET /targets`` are made 0.5 s apart (each after the previous answered or gave up
at 3 s). Prints, per attack, how many answered within 1 s, the worst latency, this process's threads during
the attack, and how long its file descriptors and threads took to return to their baseline (measured with the
server warmed, before the attack) after the attacker stopped. Figures, not assertions: the assertions are in
tests/e2e/test_discovery_attacks_e2e.py. ``benchmarks/attacks.py`` runs these after its ``/metrics`` attacks.

    .venv/bin/python benchmarks/discovery_attacks.py [--reads 5] [--only targets-slowloris-1000]
    .venv/bin/python benchmarks/discovery_attacks.py attack slowloris --port 9460 --connections 1000
"""

from __future__ import annotations

import argparse
import base64
import errno
import http.client
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the attacker child imports nothing of the package
    from rollout_telemetry._serve.discovery import TargetRegistry

KINDS = ("slowloris", "readers")
ATTACKS = {  # name: (kind, connections or reader threads)
    "targets-slowloris-1000": ("slowloris", 1000),
    "targets-readers-64": ("readers", 64),
}
PASSWORD = "correct horse battery staple"
TRICKLE = b"ET /targets HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-Pad: a\r\n" * 1000  # after the first "G"


def authorization() -> str:
    """The ``Authorization`` header of the authorised reader (and of the ``readers`` attack)."""
    return "Basic " + base64.b64encode(f"prometheus:{PASSWORD}".encode()).decode()


# --- the attacker (a child process) --------------------------------------------------------------------


class _Trickling:
    """The attacker's connections, each sending a request head a byte a second; a closed one is forgotten.

    Connections are opened without blocking, so a server slow to accept (a short listen queue) does not
    delay the trickle on those it has accepted.
    """

    def __init__(self, port: int) -> None:
        self.port = port
        self.selector = selectors.DefaultSelector()
        self.sent: dict[socket.socket, int] = {}  # each connection: bytes sent so far, -1 while connecting

    def open(self) -> None:
        connection = socket.socket()
        connection.setblocking(False)
        if connection.connect_ex(("127.0.0.1", self.port)) not in (0, errno.EINPROGRESS):
            connection.close()
            return
        self.sent[connection] = -1
        self.selector.register(connection, selectors.EVENT_WRITE)

    def close(self, connection: socket.socket) -> None:
        self.selector.unregister(connection)
        del self.sent[connection]
        connection.close()

    def serve_events(self) -> None:
        """Send the first byte on connections just made; forget those that failed or the server closed."""
        for key, events in self.selector.select(timeout=0.05) if self.sent else []:
            connection = key.fileobj
            assert isinstance(connection, socket.socket)
            try:
                if self.sent[connection] < 0 and events & selectors.EVENT_WRITE:
                    if connection.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                        self.close(connection)
                        continue
                    connection.send(b"G")
                    self.sent[connection] = 0
                    self.selector.modify(connection, selectors.EVENT_READ)
                elif not connection.recv(65536):
                    self.close(connection)
            except BlockingIOError:
                pass
            except OSError:
                self.close(connection)

    def trickle(self) -> None:
        """One byte more on every connection made."""
        for connection, count in list(self.sent.items()):
            if count < 0:
                continue
            at = count % len(TRICKLE)
            try:
                connection.send(TRICKLE[at : at + 1])
                self.sent[connection] = count + 1
            except BlockingIOError:
                pass
            except OSError:
                self.close(connection)


def slowloris(port: int, connections: int, stop: threading.Event) -> None:
    """Hold ``connections`` connections trickling a request head, one byte a second; reopen those closed."""
    attackers = _Trickling(port)
    for _ in range(connections):
        attackers.open()
    print("ready", flush=True)
    next_tick = time.monotonic() + 1
    while not stop.is_set():
        attackers.serve_events()
        if time.monotonic() >= next_tick:
            next_tick += 1
            attackers.trickle()
        for _ in range(min(connections - len(attackers.sent), 50)):
            attackers.open()
        if not attackers.sent:
            time.sleep(0.05)
    for connection in list(attackers.sent):
        attackers.close(connection)


def readers(port: int, clients: int, stop: threading.Event) -> None:
    """``clients`` threads with the password, each reading ``/targets`` as fast as it is answered."""
    header = authorization()

    def client() -> None:
        while not stop.is_set():
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            try:
                connection.request("GET", "/targets", headers={"Authorization": header})
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
    (readers if kind == "readers" else slowloris)(port, connections, stop)
    os._exit(0)  # the timer thread may still be waiting


@contextmanager
def attacker(port: int, kind: str, connections: int, *, seconds: float = 120) -> Iterator[None]:
    """Run an attack in a child process while the block runs; it is ready when the block starts."""
    command = [sys.executable, __file__, "attack", kind, "--port", str(port)]
    command += ["--connections", str(connections), "--seconds", str(seconds)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
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


def full_registry() -> TargetRegistry:
    """A registry holding ``MAX_TARGETS`` targets with the labels ``serve_on_ray`` gives."""
    from rollout_telemetry._serve.discovery import MAX_TARGETS, Target, TargetRegistry

    registry = TargetRegistry()
    node = "8f" * 28  # a Ray node id is 56 hex digits
    for i in range(MAX_TARGETS):
        labels = {"ray_node_id": node, "ray_actor": "RolloutWorker", "pid": str(100000 + i)}
        address = f"10.0.{i // 250}.{i % 250 + 1}:{40000 + i % 1000}"
        registry.register(Target.of(address, labels), registrant=f"actor:{i}")
    return registry


def read(url: str, *, timeout: float) -> float | None:
    """Seconds an authorised ``GET /targets`` took, or None if it failed or took longer than ``timeout``."""
    started = time.monotonic()
    request = urllib.request.Request(url, headers={"Authorization": authorization()})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            if response.status != 200 or not response.read().startswith(b'[{"targets":'):
                return None
    except (OSError, http.client.HTTPException):
        return None
    elapsed = time.monotonic() - started
    return elapsed if elapsed <= timeout else None


def measure(name: str, kind: str, connections: int, reads: int) -> str:
    """Run one attack against a fresh discovery server; return a line of figures."""
    from rollout_telemetry import BasicAuth, hash_password
    from rollout_telemetry._serve.discovery import DiscoveryServer
    from rollout_telemetry._serve.http import MAX_CONNECTIONS

    registry = full_registry()
    server = DiscoveryServer(registry, auth=BasicAuth("prometheus", hash_password(PASSWORD)))
    try:
        read(server.url, timeout=3)  # warm: the password is verified and remembered, /targets rendered
        baseline = (open_descriptors(), threading.active_count())
        latencies: list[float | None] = []
        with attacker(server.port, kind, connections):
            if kind == "slowloris":  # wait until the attack holds connections here
                held = min(connections, MAX_CONNECTIONS) // 2
                deadline = time.monotonic() + 30
                while open_descriptors() < baseline[0] + held and time.monotonic() < deadline:
                    time.sleep(0.1)
            else:
                time.sleep(1)  # let the readers take hold
            held = open_descriptors() - baseline[0]
            for _ in range(reads):
                latencies.append(read(server.url, timeout=3))
                time.sleep(0.5)
            during = threading.active_count()
        stopped = time.monotonic()
        recovered = None
        while time.monotonic() - stopped < 30:
            if open_descriptors() <= baseline[0] and threading.active_count() <= baseline[1]:
                recovered = time.monotonic() - stopped
                break
            time.sleep(0.1)
    finally:
        server.stop()
    answered = sum(1 for latency in latencies if latency is not None and latency <= 1)
    worst = max((3.0 if latency is None else latency) for latency in latencies)
    back = f"back to baseline in {recovered:.1f} s" if recovered is not None else "NOT back after 30 s"
    return (
        f"{name:24} {answered:3}/{len(latencies):<3} within 1 s, worst {worst:5.2f} s"
        f"{'+' if worst >= 3 else ' '}; {held:4} connections held, threads {baseline[1]} -> {during};"
        f" fds and threads {back}"
    )


def run(names: list[str] | None, reads: int) -> None:
    """Print the figures of each attack (all of them by default)."""
    print("attack on GET /targets   reads answered         worst   (3.00+ = failed or over 3 s)")
    for name in names or list(ATTACKS):
        kind, connections = ATTACKS[name]
        print(measure(name, kind, connections, reads), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command")
    one = commands.add_parser("attack", help="run one attack (the child process)")
    one.add_argument("kind", choices=KINDS)
    one.add_argument("--port", type=int, required=True)
    one.add_argument("--connections", type=int, required=True)
    one.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--reads", type=int, default=5, help="authorised GET /targets during each attack")
    parser.add_argument("--only", nargs="*", choices=sorted(ATTACKS), help="run only these attacks")
    args = parser.parse_args()
    if args.command == "attack":
        attack(args.port, args.kind, args.connections, args.seconds)
        return
    run(args.only, args.reads)


if __name__ == "__main__":
    main()
