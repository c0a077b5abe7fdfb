"""The HTTP endpoint: ``/metrics`` (prometheus_client's WSGI app) and ``/healthz``, nothing else.

Binds 127.0.0.1 unless told otherwise. Optional TLS (certificate, key, optional client-certificate
verification) and optional HTTP basic auth. Requests are served by a bounded pool of threads, each
connection with a socket timeout, so slow clients cannot pile up threads.
"""

from __future__ import annotations

import base64
import binascii
import errno
import hashlib
import hmac
import logging
import os
import secrets
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client import make_wsgi_app
from prometheus_client.registry import CollectorRegistry

__all__ = [
    "BasicAuth",
    "MetricsServer",
    "ServeError",
    "TLSConfig",
    "hash_password",
]

_log = logging.getLogger("rollout_telemetry.server")

_StartResponse = Callable[..., Any]
_WSGIApp = Callable[[dict[str, Any], _StartResponse], Iterable[bytes]]

IDLE_TIMEOUT = 3.0
"""Seconds a connection may stay silent before it is closed; it holds no thread meanwhile."""
REQUEST_TIMEOUT = 5.0
"""Seconds a worker waits on a client while reading its request or writing the response."""
MAX_WAITING = 256
"""Connections that may wait for their first bytes at once; further ones are closed at once."""

_SCRYPT_N, _SCRYPT_R, _SCRYPT_P = 2**14, 8, 1
_ADDRESS_IN_USE = {errno.EADDRINUSE, 48, 10048}  # Linux, macOS, Windows


class ServeError(RuntimeError):
    """The metrics endpoint could not be started."""


def hash_password(password: str, *, salt: bytes | None = None) -> str:
    """Return a scrypt hash of ``password`` in the form ``BasicAuth`` reads (``scrypt$n$r$p$salt$hash``)."""
    salt = salt if salt is not None else secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=_SCRYPT_N, r=_SCRYPT_R, p=_SCRYPT_P)
    encode = base64.b64encode
    return f"scrypt${_SCRYPT_N}${_SCRYPT_R}${_SCRYPT_P}${encode(salt).decode()}${encode(digest).decode()}"


@dataclass(frozen=True, slots=True)
class BasicAuth:
    """HTTP basic auth: one user name and a scrypt password hash from ``hash_password``."""

    username: str
    password_hash: str

    @classmethod
    def from_file(cls, username: str, path: str | Path) -> BasicAuth:
        """Read the password hash from a file (its first line)."""
        return cls(username, Path(path).read_text(encoding="utf-8").strip().splitlines()[0])

    @classmethod
    def from_env(cls, username: str, variable: str) -> BasicAuth:
        """Read the password hash from an environment variable.

        Raises:
            ServeError: the variable is not set.
        """
        value = os.environ.get(variable)
        if not value:
            msg = f"environment variable {variable} with the password hash is not set"
            raise ServeError(msg)
        return cls(username, value.strip())

    def __post_init__(self) -> None:
        parts = self.password_hash.split("$")
        if len(parts) != 6 or parts[0] != "scrypt":
            msg = "password hash must come from 'rollout-telemetry hash-password' (scrypt$n$r$p$salt$hash)"
            raise ServeError(msg)

    def check(self, header: str | None) -> bool:
        """Return whether an ``Authorization`` header carries this user and password (constant time)."""
        if not header or not header.startswith("Basic "):
            return False
        try:
            username, _, password = base64.b64decode(header[6:], validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        _, n, r, p, salt, expected = self.password_hash.split("$")
        digest = hashlib.scrypt(password.encode(), salt=base64.b64decode(salt), n=int(n), r=int(r), p=int(p))
        user_ok = hmac.compare_digest(username.encode(), self.username.encode())
        password_ok = hmac.compare_digest(digest, base64.b64decode(expected))
        return user_ok and password_ok


@dataclass(frozen=True, slots=True)
class TLSConfig:
    """Serve HTTPS with this certificate and key; with ``client_cafile``, require client certificates."""

    certfile: str
    keyfile: str
    client_cafile: str | None = None

    def context(self) -> ssl.SSLContext:
        """Build the server-side SSL context."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.certfile, self.keyfile)
        if self.client_cafile:
            context.load_verify_locations(self.client_cafile)
            context.verify_mode = ssl.CERT_REQUIRED
        return context


def _plain(start_response: _StartResponse, status: str, body: bytes, *extra: tuple[str, str]) -> list[bytes]:
    start_response(status, [("Content-Type", "text/plain; charset=utf-8"), *extra])
    return [body]


def make_app(registry: CollectorRegistry, auth: BasicAuth | None = None) -> _WSGIApp:
    """Return the WSGI app: ``/metrics`` and ``/healthz``; 404 for anything else."""
    metrics_app = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: _StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path not in ("/metrics", "/healthz"):
            return _plain(start_response, "404 Not Found", b"not found: try /metrics\n")
        if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
            return _plain(start_response, "405 Method Not Allowed", b"GET only\n", ("Allow", "GET, HEAD"))
        if path == "/healthz":  # says nothing but "ok": left open for liveness probes
            return _plain(start_response, "200 OK", b"ok\n")
        if auth is not None and not auth.check(environ.get("HTTP_AUTHORIZATION")):
            return _plain(
                start_response,
                "401 Unauthorized",
                b"unauthorized\n",
                ("WWW-Authenticate", 'Basic realm="rollout-telemetry", charset="UTF-8"'),
            )
        body: Iterable[bytes] = metrics_app(environ, start_response)
        return body

    return app


class _QuietHandler(WSGIRequestHandler):
    timeout = REQUEST_TIMEOUT  # reading the request and writing the response, once a worker has it

    def log_message(self, format: str, *args: Any) -> None:
        _log.debug("%s " + format, self.address_string(), *args)


class _PooledServer(WSGIServer):
    """A WSGI server that cannot be exhausted by slow or idle clients.

    Accepted connections first wait in a selector, with no thread of their own, until they have sent
    something; one that stays silent for ``IDLE_TIMEOUT`` seconds is closed, and at most
    ``MAX_WAITING`` wait at once. Only a connection with data is handed to the bounded pool of workers,
    which reads the request and writes the response under ``REQUEST_TIMEOUT``. TLS handshakes happen on
    the pool, after the client has spoken.
    """

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        *,
        threads: int,
        tls: ssl.SSLContext | None,
        family: socket.AddressFamily,
    ) -> None:
        self.address_family = family
        self._tls = tls
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="rollout-telemetry-http")
        self._waiting = selectors.DefaultSelector()
        self._waiting_lock = threading.Lock()
        self._closed = threading.Event()
        self._dispatcher = threading.Thread(
            target=self._dispatch, name="rollout-telemetry-http-wait", daemon=True
        )
        super().__init__(address, _QuietHandler)  # binds; on failure it calls server_close itself
        self._dispatcher.start()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._waiting_lock:
            if len(self._waiting.get_map()) >= MAX_WAITING:
                _log.debug("too many idle connections; closing %s", client_address)
                self.shutdown_request(request)
                return
            request.setblocking(False)
            self._waiting.register(request, selectors.EVENT_READ, (client_address, time.monotonic()))

    def _dispatch(self) -> None:
        while not self._closed.is_set():
            ready = self._waiting.select(timeout=0.2)
            now = time.monotonic()
            with self._waiting_lock:
                for key, _ in ready:
                    connection = cast(socket.socket, key.fileobj)
                    self._waiting.unregister(connection)
                    client_address, _ = key.data
                    self._pool.submit(self._serve_one, connection, client_address)
                expired = [
                    key for key in list(self._waiting.get_map().values()) if now - key.data[1] > IDLE_TIMEOUT
                ]
                for key in expired:
                    connection = cast(socket.socket, key.fileobj)
                    self._waiting.unregister(connection)
                    self.shutdown_request(connection)

    def _serve_one(self, request: socket.socket, client_address: Any) -> None:
        try:
            request.setblocking(True)
            request.settimeout(REQUEST_TIMEOUT)
            if self._tls is not None:
                request = self._tls.wrap_socket(request, server_side=True)
            self.finish_request(request, client_address)
        except (OSError, ssl.SSLError) as exc:
            _log.debug("connection from %s dropped: %s", client_address, exc)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        _log.exception("error serving %s", client_address)

    def server_close(self) -> None:
        super().server_close()
        self._closed.set()
        if self._dispatcher.is_alive():
            self._dispatcher.join(timeout=5)
        with self._waiting_lock:
            for key in list(self._waiting.get_map().values()):
                connection = cast(socket.socket, key.fileobj)
                self._waiting.unregister(connection)
                self.shutdown_request(connection)
        self._waiting.close()
        self._pool.shutdown(wait=False, cancel_futures=True)


class MetricsServer:
    """A running ``/metrics`` endpoint; ``stop()`` (or leaving the ``with`` block) shuts it down.

    With ``port_range=N`` the first free port of ``port .. port+N-1`` is taken: the documented way for
    several collector processes on one node to get a port each without coordinating.

    Raises:
        ServeError: the address cannot be bound (every port in the range is taken, the host is unknown).
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        port: int = 9464,
        host: str = "127.0.0.1",
        tls: TLSConfig | None = None,
        auth: BasicAuth | None = None,
        threads: int = 8,
        port_range: int = 1,
    ) -> None:
        self._tls = tls
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        context = tls.context() if tls is not None else None
        if port_range < 1:
            msg = f"port_range must be at least 1, got {port_range}"
            raise ServeError(msg)
        candidates = [port] if port == 0 else list(range(port, port + port_range))
        server: _PooledServer | None = None
        for candidate in candidates:
            try:
                server = _PooledServer((host, candidate), threads=threads, tls=context, family=family)
                break
            except OSError as exc:
                if exc.errno in _ADDRESS_IN_USE and candidate != candidates[-1]:
                    continue
                msg = f"cannot serve metrics on {host}:{candidate}: {exc.strerror or exc}"
                if exc.errno in _ADDRESS_IN_USE:
                    taken = (
                        f"port {port} is" if len(candidates) == 1 else f"ports {port}-{candidates[-1]} are"
                    )
                    msg = f"cannot serve metrics on {host}:{candidate}: {taken} already in use"
                raise ServeError(msg) from exc
        assert server is not None
        self._server = server
        self._server.set_app(make_app(registry, auth))
        self.host = host
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="rollout-telemetry-http",
            daemon=True,
        )
        self._thread.start()

    @property
    def url(self) -> str:
        """The URL of ``/metrics``."""
        scheme = "https" if self._tls is not None else "http"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{scheme}://{host}:{self.port}/metrics"

    def stop(self) -> None:
        """Stop serving and release the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
