"""The connection layer under abuse, with real clients on loopback: head cap, TLS closes, memory bounds."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme
from prometheus_client.core import GaugeMetricFamily

from rollout_telemetry import RolloutTelemetry, TLSConfig
from rollout_telemetry._serve.connections import source_of
from rollout_telemetry._serve.http import HttpServer
from rollout_telemetry._serve.limits import Limits
from rollout_telemetry._serve.messages import Request, Response
from rollout_telemetry._serve.port_and_gate import bind
from tests.support import FakeClock, held, raw_request, read_reply, rss

MB = 1 << 20
LIMITS = Limits()
"""The bounds ``serve()`` serves with: its defaults."""


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    """A test certificate authority."""
    return trustme.CA()


@pytest.fixture(scope="module")
def tls(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> TLSConfig:
    """A server certificate for 127.0.0.1, as files."""
    folder = tmp_path_factory.mktemp("tls")
    cert = ca.issue_cert("127.0.0.1")
    cert.cert_chain_pems[0].write_to_path(str(folder / "server.pem"))
    cert.private_key_pem.write_to_path(str(folder / "server.key"))
    return TLSConfig(str(folder / "server.pem"), str(folder / "server.key"))


@pytest.fixture(scope="module")
def trusting(ca: trustme.CA) -> ssl.SSLContext:
    """A client context that trusts the test CA."""
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return context


@pytest.fixture
def recorded() -> RolloutTelemetry:
    """Telemetry with one rollout."""
    telemetry = RolloutTelemetry(run="http")
    telemetry.record("math", {"reward": 1.0})
    return telemetry


def _head_of(size: int) -> bytes:
    """A GET /metrics request head of exactly ``size`` bytes, its blank line included."""
    start, end = b"GET /metrics HTTP/1.1\r\nX-Pad: ", b"\r\n\r\n"
    return start + b"a" * (size - len(start) - len(end)) + end


@pytest.mark.parametrize(
    ("size", "status"), [(LIMITS.max_head, 200), (LIMITS.max_head + 1, 431), (LIMITS.max_head + 5, 431)]
)
def test_the_head_cap_is_exactly_max_head_bytes(recorded: RolloutTelemetry, size: int, status: int) -> None:
    """A request head of max_head (16 KiB) bytes is read; one byte more is a 431."""
    assert LIMITS.max_head == 16384
    with recorded.serve(port=0) as server:
        assert raw_request(server.port, _head_of(size))[0] == status


def _tls_exchange(port: int, context: ssl.SSLContext, request: bytes, *, timeout: float) -> bytes:
    """Send ``request`` over TLS and read until the server closes; fails if the server is silent for
    ``timeout`` seconds before it closes."""
    with (
        socket.create_connection(("127.0.0.1", port), timeout=timeout) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        tls.sendall(request)
        reply = b""
        while chunk := tls.recv(65536):
            reply += chunk
        return reply


def test_a_tls_connection_is_closed_as_soon_as_the_response_is_written(
    recorded: RolloutTelemetry, tls: TLSConfig, trusting: ssl.SSLContext
) -> None:
    """Over TLS the server closes right after its response, not at the write deadline."""
    with recorded.serve(port=0, tls=tls) as server:
        for connection in ("close", "keep-alive"):
            request = f"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: {connection}\r\n\r\n".encode()
            # A bound, not a measurement: a server holding the connection to its write deadline leaves the
            # read silent for longer than half of it, and the read fails.
            reply = _tls_exchange(server.port, trusting, request, timeout=LIMITS.write_timeout / 2)
            assert reply.startswith(b"HTTP/1.1 200 OK\r\n")
            assert b"rollout_completed_total" in reply


def test_held_tls_connections_take_little_memory(
    recorded: RolloutTelemetry, tls: TLSConfig, trusting: ssl.SSLContext
) -> None:
    """400 TLS connections that finished their handshake and wait cost the server well under 100 MB."""
    with recorded.serve(port=0, tls=tls) as server:
        before = rss()
        held: list[ssl.SSLSocket] = []
        try:
            for i in range(400):  # each from its own address: no per-address cap applies
                raw = socket.create_connection(
                    ("127.0.0.1", server.port),
                    timeout=5,
                    source_address=(f"127.0.{1 + i // 200}.{2 + i % 200}", 0),
                )
                held.append(trusting.wrap_socket(raw, server_hostname="127.0.0.1"))
            grown = rss() - before
        finally:
            for connection in held:
                connection.close()
        assert grown < 100 * MB, f"{grown / MB:.0f} MB"


class _Padding:
    """About 2.5 MB of exposition that is cheap to render: few samples with long label values."""

    def __init__(self) -> None:
        self.family = GaugeMetricFamily("padding_value", "Makes the exposition large.", labels=["i"])
        for i in range(500):
            self.family.add_metric([f"{i:05000d}"], float(i))

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield self.family


@contextlib.contextmanager
def _never_reading(port: int, clients: int, network: str, receive_buffer: int) -> Iterator[None]:
    """``clients`` clients of addresses ``network.2`` on, one after another, ask for /metrics and read
    nothing of it past the start of the response; closed on leaving."""
    held: list[socket.socket] = []
    try:
        for i in range(clients):
            client = socket.socket()
            held.append(client)
            client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
            client.settimeout(5)
            client.bind((f"{network}.{2 + i}", 0))
            client.connect(("127.0.0.1", port))
            client.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            client.recv(16)  # the response has started: its body is rendered; the rest is never read
        yield
    finally:
        for client in held:
            client.close()


def test_clients_that_never_read_a_large_exposition_hold_bounded_memory(recorded: RolloutTelemetry) -> None:
    """150 clients that ask for a 2.5 MB /metrics one after another and never read it grow RSS < 100 MB."""
    recorded.registry.register(_Padding())
    with recorded.serve(port=0) as server:
        before = rss()
        with _never_reading(server.port, 150, "127.0.1", receive_buffer=4096):
            grown = rss() - before
        assert grown < 100 * MB, f"{grown / MB:.0f} MB"


def _kernel_tcp_memory() -> int:
    """Bytes of memory the kernel holds for TCP sockets, all of this machine's (``/proc/net/sockstat``)."""
    with open("/proc/net/sockstat", encoding="ascii") as stats:
        tcp = next(line for line in stats if line.startswith("TCP:")).split()
    return int(tcp[tcp.index("mem") + 1]) * 4096


@pytest.mark.alone  # the kernel's TCP memory is the machine's: no other test's sockets meanwhile
def test_clients_that_never_read_are_written_a_send_buffer_not_the_exposition(
    recorded: RolloutTelemetry,
) -> None:
    """60 clients of addresses that never read a 2.5 MB /metrics make the kernel hold less than 50 MB for
    them (non_reader_send_buffer each, and their receive buffer), where the buffers it tunes itself took each
    response whole (150 MB)."""
    recorded.registry.register(_Padding())
    with recorded.serve(port=0) as server:
        before = _kernel_tcp_memory()
        with _never_reading(server.port, 60, "127.0.2", receive_buffer=65536):
            grown = _kernel_tcp_memory() - before
    assert grown < 50 * MB, f"{grown / MB:.0f} MB"


def _connect_from(port: int, source: str) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))


def _closed(connection: socket.socket, within: float) -> bool:
    """Whether the server closes ``connection`` within ``within`` seconds."""
    connection.settimeout(within)
    try:
        return connection.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


def test_a_flood_of_newcomers_does_not_evict_a_connection_about_to_send(recorded: RolloutTelemetry) -> None:
    """With every slot taken, 600 newcomers do not evict a client whose request is still on its way."""
    with recorded.serve(port=0) as server:
        held = [_connect_from(server.port, f"127.0.{8 + i // 250}.{1 + i % 250}") for i in range(511)]
        scraper = _connect_from(server.port, "127.0.0.2")  # the newest of max_connections
        flood = []
        try:
            for i in range(600):
                with contextlib.suppress(OSError):  # refused at once: the test is whether it evicts
                    flood.append(_connect_from(server.port, f"127.0.{12 + i // 250}.{1 + i % 250}"))
            scraper.sendall(b"GET /healthz HTTP/1.1\r\n\r\n")
            scraper.settimeout(5)
            assert scraper.recv(4096).startswith(b"HTTP/1.1 200 OK")
        finally:
            for connection in [*held, *flood, scraper]:
                connection.close()


def test_a_source_at_its_cap_gives_up_its_own_oldest_idle_connection(recorded: RolloutTelemetry) -> None:
    """A source holds at most max_per_source connections: its next one closes its oldest idle one, and
    another source's connections are untouched."""
    with recorded.serve(port=0) as server:
        other = _connect_from(server.port, "127.0.20.2")
        mine = [_connect_from(server.port, "127.0.20.1") for _ in range(LIMITS.max_per_source)]
        try:
            newest = _connect_from(server.port, "127.0.20.1")
            mine.append(newest)
            assert _closed(mine[0], within=2)
            assert not _closed(mine[1], within=0.2)
            assert not _closed(other, within=0.2)
            newest.sendall(b"GET /healthz HTTP/1.1\r\n\r\n")
            newest.settimeout(5)
            assert newest.recv(4096).startswith(b"HTTP/1.1 200 OK")
        finally:
            for connection in [*mine, other]:
                connection.close()


async def _ok(request: Request) -> Response:
    """Every request answered 200: what is tested is the connection layer under the handler."""
    return Response.text(200, "ok\n")


def test_a_full_server_evicts_only_connections_idle_past_evict_after(clock: FakeClock) -> None:
    """With every slot taken by young connections a newcomer is closed at once; past evict_after the
    oldest idle one makes room for it instead."""
    listener = bind("127.0.0.1", 0, 1, what="the eviction test", backlog=LIMITS.listen_backlog)
    port = listener.getsockname()[1]
    server = HttpServer(listener, _ok, tls=None, clock=clock)  # connection ages on the test's clock
    oldest_first = [
        _connect_from(port, f"127.0.{24 + i // 250}.{1 + i % 250}") for i in range(LIMITS.max_connections)
    ]
    newcomers: list[socket.socket] = []
    start = clock()
    try:
        # The first newcomer is accepted after every held connection (one listening queue, first come first
        # served), so from its answer on they are all held, opened at ``start``.
        for age in (0.0, LIMITS.evict_after / 2):
            clock.now = start + age
            newcomers.append(_connect_from(port, "127.0.30.1"))
            assert _closed(newcomers[-1], within=5)
            assert held(oldest_first[0]), f"the oldest was evicted at an age of {age} s"
        clock.now = start + LIMITS.evict_after
        newcomers.append(_connect_from(port, "127.0.30.2"))
        assert _closed(oldest_first[0], within=5)
        newcomers[-1].sendall(b"GET /healthz HTTP/1.1\r\n\r\n")
        newcomers[-1].settimeout(5)
        assert newcomers[-1].recv(4096).startswith(b"HTTP/1.1 200 OK")
        # Nothing above waits: all of this is well within the held connections' idle timeout.
        assert all(held(connection) for connection in oldest_first[1:]), "more than the oldest was evicted"
    finally:
        for connection in [*oldest_first, *newcomers]:
            connection.close()
        server.stop()


def test_a_handler_waiting_inside_its_requests_evictable_gives_up_its_connection(clock: FakeClock) -> None:
    """A handler that waits inside ``request.evictable()`` (as a password check's turn does) holds its
    connection as an idle one: on a full server (two slots here) a newcomer past evict_after takes that slot
    and the handler is cancelled, while a handler waiting outside it keeps its own."""
    limits = Limits(max_connections=2)
    entered = {"/evictable": threading.Event(), "/busy": threading.Event()}
    cancelled = threading.Event()

    async def waiting(request: Request) -> Response:
        if request.path not in entered:
            return Response.text(200, "ok\n")
        entered[request.path].set()
        try:
            if request.path == "/evictable":
                with request.evictable():
                    await asyncio.Event().wait()
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            if request.path == "/evictable":
                cancelled.set()
            raise
        raise AssertionError("unreachable: the handlers wait until cancelled")

    listener = bind("127.0.0.1", 0, 1, what="the evictable test", backlog=limits.listen_backlog)
    port = listener.getsockname()[1]
    server = HttpServer(listener, waiting, tls=None, limits=limits, clock=clock)
    opened: list[socket.socket] = []
    try:
        for path, source in (("/busy", "127.0.40.1"), ("/evictable", "127.0.40.2")):
            opened.append(_connect_from(port, source))
            opened[-1].sendall(f"GET {path} HTTP/1.1\r\n\r\n".encode())
            assert entered[path].wait(timeout=10)
        busy, evictable = opened
        clock.now += limits.evict_after
        opened.append(newcomer := _connect_from(port, "127.0.40.3"))
        assert _closed(evictable, within=5)
        assert cancelled.wait(timeout=10)
        assert held(busy)
        newcomer.sendall(b"GET /healthz HTTP/1.1\r\n\r\n")
        newcomer.settimeout(5)
        assert newcomer.recv(4096).startswith(b"HTTP/1.1 200 OK")
    finally:
        for connection in opened:
            connection.close()
        server.stop()


def test_a_body_larger_than_the_cap_waits_for_the_write_in_progress() -> None:
    """A new body that does not fit the output cap while a client is taking another (each larger than the cap,
    each one of its own) waits for that write to end and is then written whole: no 503, nothing cut. (The
    wait and the stall bounds are lengthened: what is tested is the order, not this machine's speed.)"""
    # starved at idle priority, a write took over 10 s in CI
    patient = Limits(room_wait=60.0, write_timeout=60.0, stalled_after=60.0)
    size = patient.max_output + 1
    asked = [threading.Event(), threading.Event()]

    async def larger_than_the_cap(request: Request) -> Response:
        asked[int(request.path == "/second")].set()
        return Response(200, (("Content-Type", "text/plain"),), bytes(size))

    listener = bind("127.0.0.1", 0, 1, what="the output cap test", backlog=patient.listen_backlog)
    server = HttpServer(listener, larger_than_the_cap, tls=None, limits=patient)
    port = listener.getsockname()[1]
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as first:
            first.sendall(b"GET /first HTTP/1.1\r\n\r\n")
            reply = first.recv(65536)  # its write is in progress
            assert reply.startswith(b"HTTP/1.1 200 ")
            with socket.create_connection(("127.0.0.1", port), timeout=10) as second:
                second.sendall(b"GET /second HTTP/1.1\r\n\r\n")
                assert asked[1].wait(timeout=10)  # its body is made: it now needs room
                while chunk := first.recv(1 << 20):
                    reply += chunk
                assert reply.endswith(bytes(1024))
                assert len(reply.partition(b"\r\n\r\n")[2]) == size
                status, _, body = read_reply(second)
        assert (status, len(body)) == (200, size)
    finally:
        server.stop()


_NETLINK_SOCK_DIAG, _SOCK_DIAG_BY_FAMILY, _TCP_LISTEN = 4, 20, 10
_NLM_F_REQUEST, _NLM_F_DUMP, _NLMSG_ERROR, _NLMSG_DONE = 0x1, 0x300, 2, 3


def _listen_backlog(port: int) -> int:
    """The backlog the kernel keeps for the IPv4 TCP socket listening on ``port`` (what ``ss -l`` shows as
    Send-Q), asked over netlink's sock_diag as ``ss`` asks it."""
    # inet_diag_req_v2: family, protocol, extensions, padding, the states wanted, an empty socket id
    request = struct.pack("=BBBxI48x", socket.AF_INET, socket.IPPROTO_TCP, 0, 1 << _TCP_LISTEN)
    flags = _NLM_F_REQUEST | _NLM_F_DUMP
    message = struct.pack("=IHHII", 16 + len(request), _SOCK_DIAG_BY_FAMILY, flags, 1, 0) + request
    backlogs: list[int] = []
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG) as diag:
        diag.settimeout(10)
        diag.send(message)
        while True:
            reply, offset = diag.recv(1 << 16), 0
            while offset < len(reply):
                length, kind = struct.unpack_from("=IH", reply, offset)
                if kind == _NLMSG_DONE:
                    assert len(backlogs) == 1, backlogs
                    return backlogs[0]
                assert kind != _NLMSG_ERROR, "sock_diag refused the request"
                # inet_diag_msg after its 16-byte header: the source port (big-endian) at 4, and for a
                # listening socket the backlog (sk_max_ack_backlog) as the write queue at 60
                (source_port,) = struct.unpack_from("!H", reply, offset + 16 + 4)
                (backlog,) = struct.unpack_from("=I", reply, offset + 16 + 60)
                if source_port == port:
                    backlogs.append(backlog)
                offset += (length + 3) & ~3


def test_the_listen_backlog_is_large(recorded: RolloutTelemetry) -> None:
    """The listening socket queues listen_backlog connections (as far as net.core.somaxconn allows)."""
    somaxconn = int(Path("/proc/sys/net/core/somaxconn").read_text())
    with recorded.serve(port=0) as server:
        backlog = _listen_backlog(server.port)
    assert backlog == min(LIMITS.listen_backlog, somaxconn)


@pytest.mark.parametrize(
    ("address", "source"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("10.1.2.3", "10.1.2.3"),
        ("2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:bbbb::9", "2001:db8:1:2::/64"),
        ("fe80::1%eth0", "fe80::/64"),
        ("::ffff:192.0.2.7", "192.0.2.7"),
        ("not an address", "not an address"),
    ],
)
def test_a_source_is_an_ipv4_address_or_an_ipv6_slash_64(address: str, source: str) -> None:
    """Caps and fair turns count an IPv6 host's whole /64 as one source, and a mapped IPv4 as its IPv4."""
    assert source_of(address) == source
