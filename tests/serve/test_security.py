"""The endpoint's defences, tested with real clients on loopback: TLS, client certificates, basic auth,
idle and slow clients, request bodies."""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import socket
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme

from rollout_telemetry import BasicAuth, RolloutTelemetry, TLSConfig, hash_password
from rollout_telemetry._cli.main import main
from rollout_telemetry._serve.credentials import credentials, matches
from rollout_telemetry._serve.limits import Limits
from rollout_telemetry._serve.metrics_server import MetricsServer
from rollout_telemetry.errors import ConfigError
from tests.support import held, raw_request, samples

PASSWORD = "correct horse battery staple"
LIMITS = Limits()
"""The bounds ``serve()`` serves with: its defaults."""


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    """A test certificate authority."""
    return trustme.CA()


@pytest.fixture(scope="module")
def tls_files(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Server certificate and key for 127.0.0.1, the CA, and a client certificate, as PEM files."""
    folder = tmp_path_factory.mktemp("tls")
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("scraper@example.test")
    files = {
        "cert": folder / "server.pem",
        "key": folder / "server.key",
        "ca": folder / "ca.pem",
        "client": folder / "client.pem",
    }
    server.cert_chain_pems[0].write_to_path(str(files["cert"]))
    server.private_key_pem.write_to_path(str(files["key"]))
    ca.cert_pem.write_to_path(str(files["ca"]))
    client.private_key_and_cert_chain_pem.write_to_path(str(files["client"]))
    return files


@pytest.fixture
def recorded() -> RolloutTelemetry:
    """Telemetry with one rollout."""
    telemetry = RolloutTelemetry(run="secure")
    telemetry.record("math", {"reward": 1.0})
    return telemetry


def _get(
    url: str, context: ssl.SSLContext | None = None, headers: dict[str, str] | None = None
) -> tuple[int, str]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        # A minute, not seconds: a first wrong password costs an scrypt, which CI's unit tiers run at idle
        # priority beside the README's tests (timed out at 5 s on 3.13).
        with urllib.request.urlopen(request, timeout=60, context=context) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.read().decode()


def _basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_https_scrape_with_the_test_ca(recorded: RolloutTelemetry, tls_files: dict[str, Path]) -> None:
    """An HTTPS client that trusts the CA scrapes; plain HTTP and an untrusting client are refused."""
    tls = TLSConfig(str(tls_files["cert"]), str(tls_files["key"]))
    with recorded.serve(port=0, tls=tls) as server:
        assert server.url.startswith("https://127.0.0.1:")
        trusting = ssl.create_default_context(cafile=str(tls_files["ca"]))
        status, body = _get(server.url, trusting)
        assert status == 200
        assert ("rollout_completed_total", frozenset({("agent", "math"), ("run", "secure")})) in samples(body)
        with pytest.raises((ConnectionError, http.client.HTTPException, urllib.error.URLError)):
            _get(server.url.replace("https://", "http://"))
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
            _get(server.url, ssl.create_default_context())


def test_client_certificates_can_be_required(recorded: RolloutTelemetry, tls_files: dict[str, Path]) -> None:
    """With a client CA, a client without a certificate fails the handshake; one with it scrapes."""
    tls = TLSConfig(str(tls_files["cert"]), str(tls_files["key"]), client_cafile=str(tls_files["ca"]))
    with recorded.serve(port=0, tls=tls) as server:
        anonymous = ssl.create_default_context(cafile=str(tls_files["ca"]))
        with pytest.raises((urllib.error.URLError, ConnectionError, ssl.SSLError)):
            _get(server.url, anonymous)
        identified = ssl.create_default_context(cafile=str(tls_files["ca"]))
        identified.load_cert_chain(str(tls_files["client"]))
        assert _get(server.url, identified)[0] == 200


def test_basic_auth(recorded: RolloutTelemetry) -> None:
    """The right user and password scrape; a wrong one, a wrong user or none get 401; /healthz stays open."""
    auth = BasicAuth("prometheus", hash_password(PASSWORD))
    with recorded.serve(port=0, auth=auth) as server:
        assert _get(server.url, headers=_basic("prometheus", PASSWORD))[0] == 200
        assert _get(server.url, headers=_basic("prometheus", "wrong"))[0] == 401
        assert _get(server.url, headers=_basic("someone", PASSWORD))[0] == 401
        assert _get(server.url, headers={"Authorization": "Basic !!!not-base64"})[0] == 401
        status, body = _get(server.url)
        assert status == 401
        assert "rollout_" not in body
        assert _get(server.url.replace("/metrics", "/healthz")) == (200, "ok\n")


def test_password_hash_from_a_file_or_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """hash-password prints a hash that --basic-auth-hash-file and the environment variable both accept."""
    monkeypatch.setattr("sys.stdin", _Lines(PASSWORD + "\n"))
    assert main(["hash-password"]) == 0
    digest = capsys.readouterr().out.strip()
    assert digest.startswith("scrypt$")
    (tmp_path / "hash").write_text(digest + "\n")
    from_file = BasicAuth.from_file("p", tmp_path / "hash")
    monkeypatch.setenv("METRICS_PASSWORD_HASH", digest)
    from_env = BasicAuth.from_env("p", "METRICS_PASSWORD_HASH")
    header = _basic("p", PASSWORD)["Authorization"]
    assert matches(from_file, *_credentials(header))
    assert matches(from_env, *_credentials(header))
    assert not matches(from_env, *_credentials(_basic("p", "nope")["Authorization"]))
    monkeypatch.delenv("METRICS_PASSWORD_HASH")
    with pytest.raises(ConfigError, match="METRICS_PASSWORD_HASH"):
        BasicAuth.from_env("p", "METRICS_PASSWORD_HASH")
    with pytest.raises(ConfigError, match="hash-password"):
        BasicAuth("p", "plaintext")


def _credentials(header: str) -> tuple[bytes, bytes]:
    """The user name and password a well-formed basic ``Authorization`` header carries."""
    parsed = credentials(header)
    assert parsed is not None
    return parsed


class _Lines:
    def __init__(self, text: str) -> None:
        self._text = text

    def isatty(self) -> bool:
        return False

    def readline(self) -> str:
        return self._text


def test_default_host_is_loopback(recorded: RolloutTelemetry) -> None:
    """serve() binds 127.0.0.1 unless a host is given."""
    with recorded.serve(port=0) as server:
        assert server.host == "127.0.0.1"
        assert server.url.startswith("http://127.0.0.1:")


@pytest.fixture
def server(recorded: RolloutTelemetry) -> Iterator[MetricsServer]:
    """A plain server with the default pool."""
    with recorded.serve(port=0) as running:
        yield running


def test_a_trickling_client_does_not_block_scrapes(server: MetricsServer) -> None:
    """A client that sends half a request and stalls ties up one worker at most, until its timeout."""
    trickler = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    try:
        trickler.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        # Accepted before the scrape (one listening queue, first come first served): a scrape queued behind
        # the trickler would be answered only once the trickler's head deadline had closed it.
        assert _get(server.url)[0] == 200
        assert held(trickler), "the scrape was answered only after the trickler was closed"
    finally:
        trickler.close()


def test_a_huge_request_body_is_not_read(server: MetricsServer) -> None:
    """A POST announcing 100 MB is answered 405 without the body being read."""
    connection = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    try:
        connection.sendall(
            b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n" + b"x" * 65536
        )
        reply = connection.recv(4096)  # answered while almost all of the body is still to come
        assert reply.startswith(b"HTTP/1.0 405") or reply.startswith(b"HTTP/1.1 405"), reply[:40]
    finally:
        connection.close()
    assert _get(server.url)[0] == 200


@pytest.mark.parametrize(
    "authorization",
    [
        b"Basic \xc3\xa9\xff\xfe",
        b"Basic " + base64.b64encode(b"prometheus:\xff\xfe"),
        b"Basic " + base64.b64encode(b"no colon"),
        b"Basic",
        b"Basic ====",
        b"\xff\xfe\xfd",
        b"Digest username=prometheus",
    ],
)
def test_a_malformed_authorization_header_is_401_and_quiet(
    recorded: RolloutTelemetry, authorization: bytes, capfd: pytest.CaptureFixture[str]
) -> None:
    """Any bytes in Authorization get 401 (never 500), and nothing is written to stderr."""
    auth = BasicAuth("prometheus", hash_password(PASSWORD))
    with recorded.serve(port=0, auth=auth) as server:
        for _ in range(LIMITS.failure_burst):  # a well-formed case is checked once, then remembered
            request = b"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: " + authorization + b"\r\n\r\n"
            status, headers, body = raw_request(server.port, request)
            assert status == 401
            assert headers["www-authenticate"].startswith("Basic ")
            assert body == b"unauthorized\n"
    assert capfd.readouterr().err == ""


def test_the_scheme_name_is_case_insensitive(recorded: RolloutTelemetry) -> None:
    """ "basic" in lower case (or any case) is the Basic scheme."""
    auth = BasicAuth("prometheus", hash_password(PASSWORD))
    token = _basic("prometheus", PASSWORD)["Authorization"].split(" ")[1]
    with recorded.serve(port=0, auth=auth) as server:
        for scheme in ("basic", "BASIC", "Basic"):
            assert _get(server.url, headers={"Authorization": f"{scheme} {token}"})[0] == 200


def test_a_guess_repeated_costs_no_scrypt(
    recorded: RolloutTelemetry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wrong password sent again is refused without scrypt; the verified scraper is not checked again."""
    auth = BasicAuth("prometheus", hash_password(PASSWORD))
    wrong = "GET /metrics HTTP/1.1\r\nAuthorization: {}\r\n\r\n".format(
        _basic("prometheus", "guess")["Authorization"]
    )
    right = "GET /metrics HTTP/1.1\r\nAuthorization: {}\r\n\r\n".format(
        _basic("prometheus", PASSWORD)["Authorization"]
    )
    checks: list[bytes] = []
    scrypt = hashlib.scrypt

    def counting(password: bytes, **kwargs: Any) -> bytes:
        checks.append(password)
        return scrypt(password, **kwargs)

    monkeypatch.setattr(hashlib, "scrypt", counting)
    with recorded.serve(port=0, auth=auth) as server:
        assert [raw_request(server.port, right.encode())[0] for _ in range(3)] == [200] * 3
        statuses = [raw_request(server.port, wrong.encode())[0] for _ in range(LIMITS.failure_burst * 2)]
        assert statuses == [401] * LIMITS.failure_burst * 2
        assert raw_request(server.port, right.encode())[0] == 200
    assert checks == [PASSWORD.encode(), b"guess"]


def test_rollouts_in_flight_over_https_with_basic_auth(tls_files: dict[str, Path]) -> None:
    """GET /rollouts: oldest first, limited, behind the same TLS and auth as /metrics, no free text; a rollout
    whose outcome is counted is listed ``terminal`` until its block exits, outside the in-flight total, and
    one of attempt 1 ``retrying``."""
    telemetry = RolloutTelemetry(run="secure")
    blocks = [telemetry.rollout("browser", task_index=i, rollout_index=0, attempt=1) for i in range(1000)]
    for block in blocks:
        block.__enter__()
    blocks[0].fail("session_lost", reason="secret text that must never be served")  # terminal, not in flight
    blocks[1].stage("verification")
    tls = TLSConfig(str(tls_files["cert"]), str(tls_files["key"]))
    auth = BasicAuth("prometheus", hash_password("s3cret"))
    trusting = ssl.create_default_context(cafile=str(tls_files["ca"]))
    try:
        with telemetry.serve(port=0, tls=tls, auth=auth) as server:
            base = server.url.removesuffix("/metrics")
            assert _get(base + "/rollouts", trusting)[0] == 401
            status, body = _get(base + "/rollouts?limit=3", trusting, _basic("prometheus", "s3cret"))
            assert status == 200
            listing = json.loads(body)
            assert listing["in_flight"] == 999
            assert [r["task_index"] for r in listing["rollouts"]] == [0, 1, 2]
            assert [r["state"] for r in listing["rollouts"]] == ["terminal", "retrying", "retrying"]
            assert listing["rollouts"][1]["stage"] == "verification"
            third = listing["rollouts"][2]
            assert third == {
                "agent": "browser", "task_index": 2, "rollout_index": 0, "attempt": 1, "stage": "agent",
                "age_seconds": third["age_seconds"], "stalled": False, "trace_id": None, "span_id": None,
                "state": "retrying", "heartbeat_age_seconds": third["heartbeat_age_seconds"],
            }  # fmt: skip
            status, body = _get(base + "/rollouts", trusting, _basic("prometheus", "s3cret"))
            assert len(json.loads(body)["rollouts"]) == 100  # the default limit
            status, body = _get(base + "/rollouts?limit=1000", trusting, _basic("prometheus", "s3cret"))
            assert len(json.loads(body)["rollouts"]) == 1000
            assert "secret" not in body
            for bad in ("0", "1001", "x"):
                assert (
                    _get(f"{base}/rollouts?limit={bad}", trusting, _basic("prometheus", "s3cret"))[0] == 400
                )
    finally:
        for block in blocks:
            block.__exit__(None, None, None)


def _guess(port: int, source: str, password: str) -> int:
    """The status of one request with a wrong password from ``source``."""
    header = _basic("prometheus", password)["Authorization"]
    try:
        return raw_request(
            port, f"GET /metrics HTTP/1.1\r\nAuthorization: {header}\r\n\r\n".encode(), source=source
        )[0]
    except (OSError, IndexError, ValueError):
        return 0


class _Guessers:
    """Clients guessing passwords back to back, each a new one, until stopped; from given addresses."""

    def __init__(self, port: int, sources: list[str]) -> None:
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._guess, args=(port, source, i), daemon=True)
            for i, source in enumerate(sources)
        ]

    def _guess(self, port: int, source: str, client: int) -> None:
        attempt = 0
        while not self._stop.is_set():
            attempt += 1
            _guess(port, source, f"guess-{client}-{attempt}")

    def __enter__(self) -> _Guessers:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=10)


def test_password_checks_never_delay_a_verified_scrape(
    recorded: RolloutTelemetry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """64 guessers, each from an address of its own, do not make a verified scraper's scrape wait or 503."""
    auth = BasicAuth("prometheus", hash_password(PASSWORD))
    scrypt = hashlib.scrypt
    checking = threading.Semaphore(0)
    release = threading.Event()

    def held_guesses(password: bytes, **kwargs: Any) -> bytes:
        if password == PASSWORD.encode():
            return scrypt(password, **kwargs)
        checking.release()
        release.wait(timeout=30)  # a guess's check holds its thread until the test lets go
        return b"not the hash"

    monkeypatch.setattr(hashlib, "scrypt", held_guesses)
    with recorded.serve(port=0, auth=auth) as server:
        assert _get(server.url, headers=_basic("prometheus", PASSWORD))[0] == 200  # verified once
        with _Guessers(server.port, [f"127.0.4.{2 + i}" for i in range(64)]):
            try:
                for _ in range(LIMITS.auth_threads):  # every password-check thread is held by a guess
                    assert checking.acquire(timeout=10), "the guesses never reached a password check"
                # A scrape that waited for a check would wait for ever here (or be refused 429 after
                # auth_wait): a 200 is the proof that it did not.
                statuses = [_get(server.url, headers=_basic("prometheus", PASSWORD))[0] for _ in range(5)]
            finally:
                release.set()
        assert statuses == [200] * 5, statuses


def _head_lines(port: int, request: bytes) -> list[str]:
    """The status line and header lines of the reply to ``request``, as sent (repeated headers kept)."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(request)
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    return reply.partition(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")


_ASKED = {
    "/metrics": b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
    "/metrics?name[]=": b"GET /metrics?name[]=rollout_completed_total HTTP/1.1\r\nHost: x\r\n\r\n",
    "/rollouts": b"GET /rollouts HTTP/1.1\r\nHost: x\r\n\r\n",
    "/": b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    "/?part=main": b"GET /?part=main HTTP/1.1\r\nHost: x\r\n\r\n",
    "HEAD /": b"HEAD / HTTP/1.1\r\nHost: x\r\n\r\n",
    "/healthz": b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
    "404": b"GET /admin HTTP/1.1\r\nHost: x\r\n\r\n",
    "405": b"POST /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
    "400": b"GET /metrics\r\nHost: x\r\n\r\n",
    "431": b"GET /metrics HTTP/1.1\r\nX-Pad: " + b"a" * LIMITS.max_head + b"\r\n\r\n",
    "/rollouts?limit=0": b"GET /rollouts?limit=0 HTTP/1.1\r\nHost: x\r\n\r\n",
}


@pytest.mark.parametrize("asked", list(_ASKED))
def test_every_response_of_the_endpoint_says_nosniff(server: MetricsServer, asked: str) -> None:
    """Whatever is asked, the answer carries X-Content-Type-Options: nosniff once (a browser takes each body
    for its Content-Type), and Cache-Control: no-store once."""
    lines = [line.lower() for line in _head_lines(server.port, _ASKED[asked])]
    assert lines.count("x-content-type-options: nosniff") == 1, lines
    assert lines.count("cache-control: no-store") == 1, lines
    assert sum(line.startswith("x-content-type-options:") for line in lines) == 1


def test_refusals_behind_basic_auth_and_discovery_say_nosniff(recorded: RolloutTelemetry) -> None:
    """A 401 of an endpoint behind basic auth, its authorised answers, and service discovery's /targets and
    its 404 carry X-Content-Type-Options: nosniff, once."""
    from rollout_telemetry._ray.discovery import DiscoveryServer
    from rollout_telemetry._ray.target_registry import TargetRegistry

    auth = BasicAuth("prometheus", hash_password(PASSWORD))
    token = base64.b64encode(f"prometheus:{PASSWORD}".encode())
    authorised = b"Authorization: Basic " + token + b"\r\n"
    with recorded.serve(port=0, auth=auth) as secured:
        asked = [
            (secured.port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", "401"),
            (secured.port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + authorised + b"\r\n", "200"),
            (secured.port, b"GET / HTTP/1.1\r\nHost: x\r\n" + authorised + b"\r\n", "200"),
        ]
        discovery = DiscoveryServer(TargetRegistry())
        try:
            asked += [
                (discovery.port, b"GET /targets HTTP/1.1\r\nHost: x\r\n\r\n", "200"),
                (discovery.port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", "404"),
            ]
            for port, request, status in asked:
                lines = [line.lower() for line in _head_lines(port, request)]
                assert lines[0].split(" ")[1] == status, lines
                assert lines.count("x-content-type-options: nosniff") == 1, lines
        finally:
            discovery.stop()
