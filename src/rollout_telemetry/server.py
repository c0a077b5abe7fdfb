"""The HTTP endpoint: ``/metrics`` (prometheus_client's exposition), ``/rollouts`` (the rollouts in flight,
as JSON) and ``/healthz``, nothing else.

Binds 127.0.0.1 unless told otherwise. Optional TLS (certificate, key, optional client-certificate
verification) and optional HTTP basic auth (``rollout_telemetry.auth``). Connections, deadlines and worker
threads are ``rollout_telemetry._http``'s; this module says what is answered. Rendering the exposition runs
on a worker thread, never on the event loop, and scrapes asking for the same thing at the same time share
one rendering.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import gzip
import json
import socket
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import parse_qs

from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry

from rollout_telemetry._http import (
    EVICT_AFTER,
    HANDSHAKE_TIMEOUT,
    HEAD_TIMEOUT,
    IDLE_TIMEOUT,
    LISTEN_BACKLOG,
    MAX_CONNECTIONS,
    MAX_HEAD,
    MAX_OUTPUT,
    MAX_PER_SOURCE,
    MAX_QUEUED,
    WRITE_TIMEOUT,
    HttpServer,
    Request,
    Response,
    Workers,
    source_of,
)
from rollout_telemetry.auth import (
    Authenticator,
    BasicAuth,
    PasswordChecks,
    ServeError,
    Verdict,
    hash_password,
)

__all__ = [
    "DEFAULT_ROLLOUTS_LIMIT",
    "EVICT_AFTER",
    "HANDSHAKE_TIMEOUT",
    "HEAD_TIMEOUT",
    "IDLE_TIMEOUT",
    "LISTEN_BACKLOG",
    "MAX_CONNECTIONS",
    "MAX_HEAD",
    "MAX_OUTPUT",
    "MAX_PER_SOURCE",
    "MAX_QUEUED",
    "MAX_ROLLOUTS_LIMIT",
    "WRITE_TIMEOUT",
    "BasicAuth",
    "MetricsServer",
    "ServeError",
    "TLSConfig",
    "hash_password",
]

_ADDRESS_IN_USE = {errno.EADDRINUSE, 48, 10048}  # Linux, macOS, Windows
_CHALLENGE = ("WWW-Authenticate", 'Basic realm="rollout-telemetry", charset="UTF-8"')
_Rendering = tuple[str, tuple[str, ...], bool]  # Accept's choice, name[] filter, gzip

DEFAULT_ROLLOUTS_LIMIT = 100
"""Rollouts ``GET /rollouts`` lists unless ``?limit=`` says otherwise."""
MAX_ROLLOUTS_LIMIT = 1000


@dataclass(frozen=True, slots=True)
class TLSConfig:
    """Serve HTTPS with this certificate and key; with ``client_cafile``, require client certificates."""

    certfile: str
    keyfile: str
    client_cafile: str | None = None

    def context(self) -> ssl.SSLContext:
        """Build the server-side SSL context.

        Raises:
            ServeError: a file is missing, unreadable, not PEM, or the key does not match the certificate;
                the message names the file.
        """
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.options |= ssl.OP_NO_RENEGOTIATION  # a client could make the server redo handshakes
        try:
            context.load_cert_chain(self.certfile, self.keyfile)
        except OSError as exc:  # ssl.SSLError is an OSError too
            msg = f"TLS certificate {self.certfile} with key {self.keyfile}: {_tls_problem(exc)}"
            raise ServeError(msg) from exc
        if self.client_cafile:
            try:
                context.load_verify_locations(self.client_cafile)
            except OSError as exc:
                msg = f"TLS client CA {self.client_cafile}: {_tls_problem(exc, ca=True)}"
                raise ServeError(msg) from exc
            context.verify_mode = ssl.CERT_REQUIRED
        return context


def _tls_problem(exc: OSError, *, ca: bool = False) -> str:
    """What is wrong with a TLS file, in words (OpenSSL's own say 'PEM lib')."""
    if isinstance(exc, ssl.SSLError):
        if "KEY_VALUES_MISMATCH" in str(exc):
            return "the key does not belong to the certificate"
        what = "a PEM CA certificate" if ca else "a PEM certificate and its PEM private key"
        return f"not {what} (were the certificate and the key swapped?)" if not ca else f"not {what}"
    return exc.strerror or str(exc)


class _Endpoint:
    """What is answered: ``/metrics`` (behind auth, if any), ``/healthz``, 404 and 405 otherwise."""

    def __init__(
        self,
        registry: CollectorRegistry,
        checks: tuple[Authenticator, PasswordChecks] | None,
        workers: Workers,
        rollouts: Callable[[int], Mapping[str, object]] | None = None,
    ) -> None:
        self._registry = registry
        self._rollouts = rollouts
        self._checks = checks
        self._workers = workers
        self._renderings: dict[_Rendering, asyncio.Future[tuple[bytes, str]]] = {}

    async def __call__(self, request: Request) -> Response:
        if request.path not in ("/metrics", "/healthz", "/rollouts") or (
            request.path == "/rollouts" and self._rollouts is None
        ):
            return Response.text(404, "not found: try /metrics\n")
        if request.method not in ("GET", "HEAD"):
            return Response.text(405, "GET or HEAD only\n", ("Allow", "GET, HEAD"))
        if request.path == "/healthz":  # says nothing but "ok": left open for liveness probes
            return Response.text(200, "ok\n")
        if self._checks is not None:
            refusal = await self._authenticate(*self._checks, request)
            if refusal is not None:
                return refusal
        if request.path == "/rollouts" and self._rollouts is not None:
            return await self._in_flight(self._rollouts, request)
        return await self._metrics(request)

    async def _in_flight(self, rollouts: Callable[[int], Mapping[str, object]], request: Request) -> Response:
        """The rollouts in flight, oldest first, as JSON: ``?limit=`` (default 100, at most 1000)."""
        values = parse_qs(request.query).get("limit", [str(DEFAULT_ROLLOUTS_LIMIT)])
        try:
            limit = int(values[-1])
        except ValueError:
            limit = -1
        if not 1 <= limit <= MAX_ROLLOUTS_LIMIT:
            return Response.text(400, f"limit must be a whole number from 1 to {MAX_ROLLOUTS_LIMIT}\n")
        listing = await self._workers.run(functools.partial(rollouts, limit))
        body = json.dumps(listing, separators=(",", ":")).encode()
        return Response(200, (("Content-Type", "application/json"),), body)

    async def _authenticate(
        self, authenticator: Authenticator, checks: PasswordChecks, request: Request
    ) -> Response | None:
        header = request.headers.get("authorization")
        verdict = authenticator.screen(header)
        if verdict is None:
            verdict = await checks.check(header, source_of(request.source))
        if verdict is Verdict.LIMITED:
            return Response.text(429, "too many attempts: try again\n", ("Retry-After", "1"), _CHALLENGE)
        if verdict is Verdict.DENIED:
            return Response.text(401, "unauthorized\n", _CHALLENGE)
        return None

    async def _metrics(self, request: Request) -> Response:
        _, content_type = choose_encoder(request.headers.get("accept", ""))
        names = tuple(sorted(parse_qs(request.query).get("name[]", [])))
        gzipped = "gzip" in request.headers.get("accept-encoding", "").lower()
        key = (content_type, names, gzipped)
        rendering = self._renderings.get(key)
        if rendering is None:  # the first asking renders; those asking meanwhile share its result
            rendering = self._workers.run(
                functools.partial(self._render, request.headers.get("accept", ""), names, gzipped)
            )
            self._renderings[key] = rendering
            rendering.add_done_callback(lambda _: self._renderings.pop(key, None))
        body, content_type = await asyncio.shield(rendering)
        headers = [("Content-Type", content_type)]
        if gzipped:
            headers.append(("Content-Encoding", "gzip"))
        return Response(200, tuple(headers), body)

    def _render(self, accept: str, names: tuple[str, ...], gzipped: bool) -> tuple[bytes, str]:
        """prometheus_client's exposition of the registry (on a worker thread)."""
        encoder, content_type = choose_encoder(accept)
        registry = self._registry.restricted_registry(names) if names else self._registry
        body = encoder(registry)
        return (gzip.compress(body) if gzipped else body), content_type


def _bind(host: str, port: int, port_range: int) -> socket.socket:
    """A listening socket on the first free port of ``port .. port+port_range-1``."""
    if port_range < 1:
        msg = f"port_range must be at least 1, got {port_range}"
        raise ServeError(msg)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    candidates = [port] if port == 0 else list(range(port, port + port_range))
    for candidate in candidates:
        listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((host, candidate))
            listener.listen(LISTEN_BACKLOG)
        except OSError as exc:
            listener.close()
            if exc.errno in _ADDRESS_IN_USE and candidate != candidates[-1]:
                continue
            msg = f"cannot serve metrics on {host}:{candidate}: {exc.strerror or exc}"
            if exc.errno in _ADDRESS_IN_USE:
                taken = f"port {port} is" if len(candidates) == 1 else f"ports {port}-{candidates[-1]} are"
                msg = f"cannot serve metrics on {host}:{candidate}: {taken} already in use"
            raise ServeError(msg) from exc
        return listener
    raise AssertionError("unreachable: the last candidate returns or raises")


class MetricsServer:
    """A running ``/metrics`` endpoint; ``stop()`` (or leaving the ``with`` block) shuts it down.

    With ``port_range=N`` the first free port of ``port .. port+N-1`` is taken: the documented way for
    several collector processes on one node to get a port each without coordinating. ``threads`` worker
    threads render the exposition (scrapes asking for the same one share it, and each thread keeps a heap
    of its own, so few are best); password checks have threads of their own, and connections hold none.

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
        threads: int = 2,
        port_range: int = 1,
        rollouts: Callable[[int], Mapping[str, object]] | None = None,
    ) -> None:
        self._tls = tls
        context = tls.context() if tls is not None else None
        listener = _bind(host, port, port_range)
        self.host = host
        self.port: int = listener.getsockname()[1]
        self._workers = Workers(threads)
        checks = None
        if auth is not None:
            authenticator = Authenticator(auth)
            checks = (authenticator, PasswordChecks(authenticator))
        self._checks = checks[1] if checks is not None else None
        endpoint = _Endpoint(registry, checks, self._workers, rollouts)
        self._http = HttpServer(listener, endpoint, tls=context)

    @property
    def url(self) -> str:
        """The URL of ``/metrics``."""
        scheme = "https" if self._tls is not None else "http"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{scheme}://{host}:{self.port}/metrics"

    def stop(self) -> None:
        """Stop serving and release the port."""
        self._http.stop()
        self._workers.close()
        if self._checks is not None:
            self._checks.close()

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
