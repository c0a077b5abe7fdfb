"""The connection layer under abuse, with real clients on loopback: head cap, TLS closes, memory bounds."""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Iterator

import pytest
import trustme
from prometheus_client.core import GaugeMetricFamily

from rollout_telemetry import RolloutTelemetry, TLSConfig
from rollout_telemetry.server import MAX_HEAD
from tests.support import raw_request, wait_until

MB = 1 << 20


def rss() -> int:
    """Resident memory of this process, in bytes."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096


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


@pytest.mark.parametrize(("size", "status"), [(MAX_HEAD, 200), (MAX_HEAD + 1, 431), (MAX_HEAD + 5, 431)])
def test_the_head_cap_is_exactly_max_head_bytes(recorded: RolloutTelemetry, size: int, status: int) -> None:
    """A request head of MAX_HEAD (16 KiB) bytes is read; one byte more is a 431."""
    assert MAX_HEAD == 16384
    with recorded.serve(port=0) as server:
        assert raw_request(server.port, _head_of(size))[0] == status


def _tls_exchange(port: int, context: ssl.SSLContext, request: bytes, *, timeout: float) -> bytes:
    """Send ``request`` over TLS and read until the server closes; fails if that takes over ``timeout``."""
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
            started = time.monotonic()
            request = f"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: {connection}\r\n\r\n".encode()
            reply = _tls_exchange(server.port, trusting, request, timeout=3)
            assert reply.startswith(b"HTTP/1.1 200 OK\r\n")
            assert b"rollout_completed_total" in reply
            assert time.monotonic() - started < 2


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


def test_clients_that_never_read_a_large_exposition_hold_bounded_memory(recorded: RolloutTelemetry) -> None:
    """150 clients that ask for a 2.5 MB /metrics one after another and never read it grow RSS < 100 MB."""
    recorded.registry.register(_Padding())
    with recorded.serve(port=0) as server:
        before = rss()
        readers: list[socket.socket] = []
        try:
            for i in range(150):
                reader = socket.socket()
                reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                reader.settimeout(5)
                reader.bind((f"127.0.1.{2 + i}", 0))
                reader.connect(("127.0.0.1", server.port))
                reader.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
                reader.recv(16)  # the response has started: its body is rendered; the rest is never read
                readers.append(reader)
            grown = rss() - before
        finally:
            for reader in readers:
                reader.close()
        assert grown < 100 * MB, f"{grown / MB:.0f} MB"


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
        wait_until(
            lambda: rss() - before < 100 * MB,
            timeout=10,
            what=f"RSS back within 100 MB (it grew {(rss() - before) / MB:.0f} MB)",
        )
