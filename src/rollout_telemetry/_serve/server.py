"""The HTTP endpoint: ``/metrics`` (a prometheus_client registry's exposition), ``/rollouts`` (the rollouts in
flight, as JSON), ``/`` (the live page, when given one) and ``/healthz``, nothing else.

Binds 127.0.0.1 unless told otherwise. Optional TLS (certificate, key, optional client-certificate
verification) and optional HTTP basic auth (``rollout_telemetry.auth``). Connections, deadlines and worker
threads are ``rollout_telemetry._http``'s; this module says what is answered. Rendering runs on worker
threads, never on the event loop: scrapes asking for the same exposition at the same time share one
rendering, and ``/rollouts``, filtered ``/metrics`` and the page's read of the run are shared for
``READ_INTERVAL`` on a thread of their own, so that many readers cost what one does.
"""

from __future__ import annotations

import asyncio
import functools
import gzip
import json
import ssl
import time
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar
from urllib.parse import parse_qs

from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

from rollout_telemetry._recording.stalls import MAX_ROLLOUTS_LIMIT
from rollout_telemetry._serve.connections import (
    EVICT_AFTER,
    MAX_CONNECTIONS,
    MAX_OUTPUT,
    MAX_PER_SOURCE,
    STALLED_AFTER,
    Connections,
)
from rollout_telemetry._serve.credentials import BasicAuth, hash_password
from rollout_telemetry._serve.http import HANDSHAKE_TIMEOUT, LISTEN_BACKLOG, WRITE_TIMEOUT, HttpServer
from rollout_telemetry._serve.messages import HEAD_TIMEOUT, IDLE_TIMEOUT, MAX_HEAD, Request, Response
from rollout_telemetry._serve.serving import Gate, bind, endpoint_url, screen
from rollout_telemetry._serve.workers import MAX_QUEUED, Workers
from rollout_telemetry._views.page import MAX_OPEN, page_policy
from rollout_telemetry.errors import ConfigError
from rollout_telemetry.exporters._exposition import encode

__all__ = [
    "DEFAULT_ROLLOUTS_LIMIT",
    "EVICT_AFTER",
    "GZIP_LEVEL",
    "HANDSHAKE_TIMEOUT",
    "HEAD_TIMEOUT",
    "IDLE_TIMEOUT",
    "LISTEN_BACKLOG",
    "MAX_CONNECTIONS",
    "MAX_HEAD",
    "MAX_OPEN",
    "MAX_OUTPUT",
    "MAX_PER_SOURCE",
    "MAX_QUEUED",
    "MAX_READS_QUEUED",
    "MAX_ROLLOUTS_LIMIT",
    "READ_INTERVAL",
    "STALLED_AFTER",
    "WRITE_TIMEOUT",
    "BasicAuth",
    "MetricsServer",
    "TLSConfig",
    "hash_password",
    "server_context",
    "start_server",
]

_Rendering = tuple[str, tuple[str, ...], bool]  # Accept's choice, name[] filter, gzip
_PageRender = Callable[[str, Sequence[str]], bytes]  # one read's page for ?part= and the ?open= names

DEFAULT_ROLLOUTS_LIMIT = 100
"""Rollouts ``GET /rollouts`` lists unless ``?limit=`` says otherwise."""
READ_INTERVAL = 1.0
"""Seconds one listing of ``/rollouts``, one collection for ``/metrics?name[]=`` and one read of the run for
the page are shared for."""
MAX_READS_QUEUED = 64
"""Renders of ``/rollouts``, ``/metrics?name[]=`` and the page that may wait for their thread (503 beyond)."""


@dataclass(frozen=True, slots=True)
class TLSConfig:
    """Serve HTTPS with this certificate and key; with ``client_cafile``, require client certificates."""

    certfile: str
    keyfile: str
    client_cafile: str | None = None


def server_context(tls: TLSConfig) -> ssl.SSLContext:
    """The server-side SSL context of ``tls``, its files loaded.

    Raises:
        ConfigError: a file is missing, unreadable, not PEM, or the key does not match the certificate; the
            message names the file.
    """
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.options |= ssl.OP_NO_RENEGOTIATION  # a client could make the server redo handshakes
    try:
        context.load_cert_chain(tls.certfile, tls.keyfile)
    except OSError as exc:  # ssl.SSLError is an OSError too
        msg = f"TLS certificate {tls.certfile} with key {tls.keyfile}: {_tls_problem(exc)}"
        raise ConfigError(msg) from exc
    if tls.client_cafile:
        try:
            context.load_verify_locations(tls.client_cafile)
        except OSError as exc:
            msg = f"TLS client CA {tls.client_cafile}: {_tls_problem(exc, ca=True)}"
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


K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class _Shared(Generic[K, V]):
    """Results of slow work on ``workers``, by key: whoever asks for a key while its work runs shares it,
    and, with ``fresh_for`` > 0, so does whoever asks within that many seconds after it began; with ``held``,
    so does whoever asks while ``held(result)`` (its bytes are still being written to a client), within
    ``held_for`` seconds after it began.

    Lives on the event loop. Entries are forgotten once stale (a held one ``held_for`` after it is made),
    so it holds at most what was asked for in the last ``fresh_for`` or ``held_for`` seconds.
    """

    def __init__(
        self,
        workers: Workers,
        fresh_for: float,
        clock: Callable[[], float] = time.monotonic,
        *,
        held: Callable[[V], bool] | None = None,
        held_for: float = 0.0,
    ) -> None:
        self._workers = workers
        self._fresh_for = fresh_for
        self._clock = clock
        self._held = held
        self._held_for = held_for
        self._entries: dict[K, tuple[float, asyncio.Future[V]]] = {}  # oldest first

    async def get(self, key: K, work: Callable[[], V]) -> V:
        """The shared result of ``work`` for ``key``, made now if there is none fresh.

        Raises:
            Busy: the work had to be made and the workers' queue is full.
        """
        now = self._clock()
        while self._entries:  # forget what is stale, oldest first
            oldest = next(iter(self._entries))
            began, future = self._entries[oldest]
            if not future.done() or now - began < max(self._fresh_for, self._held_for):
                break
            del self._entries[oldest]
        entry = self._entries.get(key)
        if entry is None or (entry[1].done() and not self._shared(now, *entry)):
            entry = (now, self._workers.run(work))
            self._entries.pop(key, None)
            self._entries[key] = entry
            if self._fresh_for <= 0:
                entry[1].add_done_callback(functools.partial(self._done, key, now))
        return await asyncio.shield(entry[1])

    def _shared(self, now: float, began: float, future: asyncio.Future[V]) -> bool:
        """Whether a finished result may still be shared."""
        if now - began < self._fresh_for:
            return True
        if self._held is None or now - began >= self._held_for or future.cancelled() or future.exception():
            return False
        return self._held(future.result())

    def _done(self, key: K, began: float, future: asyncio.Future[V]) -> None:
        if self._held is None:
            self._forget(key, began)
        else:  # shared while held, then let go of (the timer holds no reference to the result)
            asyncio.get_running_loop().call_later(self._held_for, self._forget, key, began)

    def _forget(self, key: K, began: float) -> None:
        entry = self._entries.get(key)
        if entry is not None and entry[0] == began and entry[1].done():
            del self._entries[key]


_SUFFIXES = {
    "counter": ("_total", "_created"),
    "summary": ("_sum", "_count", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "gaugehistogram": ("_bucket", "_gcount", "_gsum"),
    "info": ("_info",),
}
"""The names a family's samples can have beside the family's own, by type, as prometheus_client names them."""


def _sample_names(family: Metric) -> Iterator[str]:
    yield family.name
    for suffix in _SUFFIXES.get(family.type, ()):
        yield family.name + suffix


class _Families(Collector):
    """Metric families collected once, restricted to some sample names, for an encoder to read."""

    def __init__(self, families: list[Metric], names: frozenset[str]) -> None:
        self._families = families
        self._names = names

    def collect(self) -> Iterator[Metric]:
        """prometheus_client's name filter: a family keeps the samples with one of the names, if any. A family
        none of whose sample names is asked for is passed over unread (its samples may be made as read)."""
        for family in self._families:
            if self._names.isdisjoint(_sample_names(family)):
                continue
            samples = [sample for sample in family.samples if sample.name in self._names]
            if samples:
                kept = Metric(family.name, family.documentation, family.type, family.unit)
                kept.samples = samples
                yield kept


class _Endpoint:
    """What is answered: ``/metrics`` and ``/rollouts`` (behind auth, if any), ``/healthz``, 404 and 405.

    The full exposition is rendered afresh for each scrape on the render threads; those asking while it is
    rendered, or while it is still being written to another client (within ``READ_INTERVAL`` of its
    rendering), share it: one body in memory, however many read it at once (``writing`` says whether a body
    is still being written). ``/rollouts`` and ``/metrics?name[]=`` are shared for ``READ_INTERVAL`` on a
    thread of their own: one collection of the registry and one listing of the rollouts in flight per
    interval, whatever the readers ask, so many readers cost what one does and never delay a scrape. So is
    the page's read of the run, which lists that interval's rollouts in flight: the page for each set of
    open sections is assembled from it there (those asking for the same set at once share one), each agent's
    charts drawn at most once whatever the sets (``_views.page``).
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        gate: Gate | None,
        workers: Workers,
        reads: Workers,
        *,
        rollouts: Callable[[int], Mapping[str, object]] | None = None,
        page: Callable[[Mapping[str, object] | None], _PageRender] | None = None,
        writing: Callable[[bytes], bool] = lambda body: False,
    ) -> None:
        self._registry = registry
        self._rollouts = rollouts
        self._page = page
        self._gate = gate
        self._renderings: _Shared[_Rendering, tuple[bytes, str]] = _Shared(
            workers, 0, held=lambda rendering: writing(rendering[0]), held_for=READ_INTERVAL
        )
        self._collections: _Shared[str, list[Metric]] = _Shared(reads, READ_INTERVAL)
        self._filtered: _Shared[_Rendering, tuple[bytes, str]] = _Shared(reads, READ_INTERVAL)
        self._listings: _Shared[str, _Listing] = _Shared(reads, READ_INTERVAL)
        self._page_reads: _Shared[str, _PageRender] = _Shared(reads, READ_INTERVAL)
        # Shared while being assembled only: cheap to make again, and a second's worth of pages for every
        # set asked for would be a megabyte each.
        self._pages: _Shared[tuple[_PageRender, str, tuple[str, ...]], bytes] = _Shared(reads, 0)
        self._paths = ("/metrics",) + ("/rollouts",) * (rollouts is not None) + ("/",) * (page is not None)

    async def __call__(self, request: Request) -> Response:
        refusal = await screen(request, paths=self._paths, gate=self._gate)
        if refusal is not None:
            return refusal
        if request.path == "/rollouts" and self._rollouts is not None:
            return await self._in_flight(self._rollouts, request)
        if request.path == "/" and self._page is not None:
            return await self._page_of(self._page, request)
        return await self._metrics(request)

    def release_page(self) -> None:
        """Hold the page no more (the server stopped)."""
        self._page = None

    async def _page_of(
        self, read: Callable[[Mapping[str, object] | None], _PageRender], request: Request
    ) -> Response:
        """The live page (``?part=main``: its content alone; ``&open=NAME``: an agent whose charts to draw,
        at most ``MAX_OPEN``), assembled on the read thread from the interval's read of the run, which lists
        the interval's rollouts in flight (``/rollouts``' listing: the account is not read for them twice)."""
        query = parse_qs(request.query)
        part = "main" if query.get("part", [""])[-1] == "main" else "page"
        named = tuple(query.get("open", []))
        listing = None if self._rollouts is None else (await self._listing(self._rollouts)).listing
        render = await self._page_reads.get("page", functools.partial(read, listing))
        body = await self._pages.get((render, part, named), functools.partial(render, part, named))
        return Response(200, _PAGE_HEADERS, body)

    async def _listing(self, rollouts: Callable[[int], Mapping[str, object]]) -> _Listing:
        """The interval's listing of the rollouts in flight, shared by ``/rollouts`` and the page."""
        return await self._listings.get("rollouts", functools.partial(_Listing.of, rollouts))

    async def _in_flight(self, rollouts: Callable[[int], Mapping[str, object]], request: Request) -> Response:
        """The rollouts in flight, oldest first, as JSON: ``?limit=`` (default 100, at most 1000)."""
        values = parse_qs(request.query).get("limit", [str(DEFAULT_ROLLOUTS_LIMIT)])
        try:
            limit = int(values[-1])
        except ValueError:
            limit = -1
        if not 1 <= limit <= MAX_ROLLOUTS_LIMIT:
            return Response.text(400, f"limit must be a whole number from 1 to {MAX_ROLLOUTS_LIMIT}\n")
        listing = await self._listing(rollouts)
        body = listing.opening + b",".join(listing.records[:limit]) + b"]}"  # joined bytes: cheap on the loop
        return Response(200, (("Content-Type", "application/json"),), body)

    async def _metrics(self, request: Request) -> Response:
        accept = request.headers.get("accept", "")
        _, content_type = choose_encoder(accept)
        names = tuple(sorted(set(parse_qs(request.query).get("name[]", []))))
        gzipped = "gzip" in request.headers.get("accept-encoding", "").lower()
        key = (content_type, names, gzipped)
        if names:
            families = await self._collections.get("registry", lambda: list(self._registry.collect()))
            work = functools.partial(_encode, _Families(families, frozenset(names)), accept, gzipped)
            body, content_type = await self._filtered.get(key, work)
        else:
            work = functools.partial(_encode, self._registry, accept, gzipped)
            body, content_type = await self._renderings.get(key, work)
        headers = [("Content-Type", content_type)]
        if gzipped:
            headers.append(("Content-Encoding", "gzip"))
        return Response(200, tuple(headers), body)


_PAGE_HEADERS = (
    ("Content-Type", "text/html; charset=utf-8"),
    # The page's own policy (its <meta> says the same), and no page of another origin may frame it: a
    # directive only a header can give.
    ("Content-Security-Policy", f"{page_policy(updates=True)}; frame-ancestors 'none'"),
)

GZIP_LEVEL = 1
"""zlib's fastest level: 52,500 series (4.4 MB) in 8 ms and 0.18 MB, against 172 ms and 0.14 MB at the
default (9), CPU taken from the training process at every scrape (docs/performance.md)."""


def _encode(collector: Collector, accept: str, gzipped: bool) -> tuple[bytes, str]:
    """The exposition of what ``collector`` collects (on a worker thread): prometheus_client's bytes, the
    package's own collectors writing theirs without an object per series (``exporters._exposition``)."""
    body, content_type = encode(collector, accept)
    return (gzip.compress(body, GZIP_LEVEL) if gzipped else body), content_type


@dataclass(frozen=True, slots=True)
class _Listing:
    """The longest listing of rollouts in flight (``listing``), encoded once: its opening and each rollout's
    JSON, so a response for any ``limit`` is a join of bytes already made."""

    listing: Mapping[str, object]
    opening: bytes
    records: list[bytes]

    @classmethod
    def of(cls, rollouts: Callable[[int], Mapping[str, object]]) -> _Listing:
        """The listing now (on the read thread)."""
        listing = rollouts(MAX_ROLLOUTS_LIMIT)
        head = {key: value for key, value in listing.items() if key != "rollouts"}
        records = listing.get("rollouts", [])
        assert isinstance(records, list)
        opening = json.dumps(head, separators=(",", ":"))[:-1] + ("," if head else "") + '"rollouts":['
        encoded = [json.dumps(record, separators=(",", ":")).encode() for record in records]
        return cls(listing, opening.encode(), encoded)


class MetricsServer:
    """The running endpoint ``RolloutTelemetry.serve()`` returns; ``stop()`` (or leaving the ``with`` block)
    shuts it down. Made by ``serve()``: its constructor is not for users."""

    def __init__(self, host: str, port: int, url: str, stop: Callable[[], None]) -> None:
        self.host = host
        self.port = port
        self._url = url
        self._stop = stop

    @property
    def url(self) -> str:
        """The URL of ``/metrics``."""
        return self._url

    def stop(self) -> None:
        """Stop serving and release the port (and the page: its history is kept while it is served)."""
        self._stop()

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_server(
    registry: CollectorRegistry,
    *,
    port: int = 9464,
    host: str = "127.0.0.1",
    tls: TLSConfig | None = None,
    auth: BasicAuth | None = None,
    threads: int = 2,
    port_range: int = 1,
    rollouts: Callable[[int], Mapping[str, object]] | None = None,
    page: Callable[[Mapping[str, object] | None], Callable[[str, Sequence[str]], bytes]] | None = None,
) -> MetricsServer:
    """Serve ``registry``'s ``/metrics`` (and ``/rollouts``, the page, ``/healthz``) until the server returned
    is stopped.

    With ``port_range=N`` the first free port of ``port .. port+N-1`` is taken: the documented way for
    several collector processes on one node to get a port each without coordinating. ``threads`` worker
    threads render the exposition (scrapes asking for the same one share it, and each thread keeps a heap
    of its own, so few are best); password checks and ``/rollouts`` have threads of their own, and the
    connections themselves hold none. ``page`` reads the run for the page at ``/``, given ``/rollouts``'
    listing, and returns what renders that read for a ``?part=`` (``main``: its content alone) and the
    ``?open=`` names (the agents whose charts to draw), on the ``/rollouts`` thread, one read shared for
    ``READ_INTERVAL``; without it, ``/`` is 404.

    Raises:
        ConfigError: a TLS file cannot be loaded.
        ServeError: the address cannot be bound (every port in the range is taken, the host is unknown).
    """
    context = server_context(tls) if tls is not None else None
    listener = bind(host, port, port_range, what="metrics")
    bound: int = listener.getsockname()[1]
    workers = Workers(threads)
    reads = Workers(1, max_queued=MAX_READS_QUEUED)
    gate = Gate(auth) if auth is not None else None
    connections = Connections()  # the endpoint shares a rendering while it is being written
    endpoint = _Endpoint(
        registry, gate, workers, reads, rollouts=rollouts, page=page, writing=connections.writing
    )
    http = HttpServer(listener, endpoint, tls=context, connections=connections)

    def stop() -> None:
        http.stop()
        endpoint.release_page()
        workers.close()
        reads.close()
        if gate is not None:
            gate.close()

    url = endpoint_url(host, bound, "/metrics", tls=tls is not None)
    return MetricsServer(host, bound, url, stop)
