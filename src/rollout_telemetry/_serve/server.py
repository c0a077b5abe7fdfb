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
import functools
import gzip
import json
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import parse_qs

from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry

from rollout_telemetry._serve.auth import Authenticator, BasicAuth, hash_password
from rollout_telemetry._serve.http import (
    HANDSHAKE_TIMEOUT,
    HEAD_TIMEOUT,
    IDLE_TIMEOUT,
    MAX_CONNECTIONS,
    MAX_HEAD,
    MAX_QUEUED,
    WRITE_TIMEOUT,
    HttpServer,
    Request,
    Response,
    Workers,
)
from rollout_telemetry._serve.serving import bind, screen
from rollout_telemetry.errors import ConfigError

__all__ = [
    "DEFAULT_ROLLOUTS_LIMIT",
    "HANDSHAKE_TIMEOUT",
    "HEAD_TIMEOUT",
    "IDLE_TIMEOUT",
    "MAX_CONNECTIONS",
    "MAX_HEAD",
    "MAX_QUEUED",
    "MAX_ROLLOUTS_LIMIT",
    "WRITE_TIMEOUT",
    "BasicAuth",
    "MetricsServer",
    "TLSConfig",
    "hash_password",
]

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
            ConfigError: a file is missing, unreadable, not PEM, or the key does not match the certificate;
                the message names the file.
        """
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(self.certfile, self.keyfile)
        except OSError as exc:  # ssl.SSLError is an OSError too
            msg = f"TLS certificate {self.certfile} with key {self.keyfile}: {_tls_problem(exc)}"
            raise ConfigError(msg) from exc
        if self.client_cafile:
            try:
                context.load_verify_locations(self.client_cafile)
            except OSError as exc:
                msg = f"TLS client CA {self.client_cafile}: {_tls_problem(exc, ca=True)}"
                raise ConfigError(msg) from exc
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
        auth: Authenticator | None,
        workers: Workers,
        rollouts: Callable[[int], Mapping[str, object]] | None = None,
    ) -> None:
        self._registry = registry
        self._rollouts = rollouts
        self._auth = auth
        self._workers = workers
        self._renderings: dict[_Rendering, asyncio.Future[tuple[bytes, str]]] = {}
        self._paths = ("/metrics", "/rollouts") if rollouts is not None else ("/metrics",)

    async def __call__(self, request: Request) -> Response:
        refusal = await screen(request, paths=self._paths, auth=self._auth, workers=self._workers)
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


class MetricsServer:
    """A running ``/metrics`` endpoint; ``stop()`` (or leaving the ``with`` block) shuts it down.

    With ``port_range=N`` the first free port of ``port .. port+N-1`` is taken: the documented way for
    several collector processes on one node to get a port each without coordinating. ``threads`` worker
    threads render the exposition and check passwords; the connections themselves hold no thread.

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
        rollouts: Callable[[int], Mapping[str, object]] | None = None,
    ) -> None:
        self._tls = tls
        context = tls.context() if tls is not None else None
        listener = bind(host, port, port_range, what="metrics")
        self.host = host
        self.port: int = listener.getsockname()[1]
        self._workers = Workers(threads)
        authenticator = Authenticator(auth) if auth is not None else None
        endpoint = _Endpoint(registry, authenticator, self._workers, rollouts)
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

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
