"""What an endpoint answers: ``/metrics`` and ``/rollouts`` (behind auth, if any), the live page at ``/``,
``/healthz``, 404 and 405; its bodies made on worker threads and shared by those asking at once."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from urllib.parse import parse_qs

from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import CollectorRegistry

from rollout_telemetry._recording.stalls import MAX_ROLLOUTS_LIMIT
from rollout_telemetry._serve.messages import Request, Response
from rollout_telemetry._serve.port_and_gate import Gate, screen
from rollout_telemetry._serve.rendering import Families, Listing, encode_body
from rollout_telemetry._serve.shared import Shared
from rollout_telemetry._serve.workers import Workers
from rollout_telemetry._views.page import page_policy

__all__ = ["Endpoint", "PageRender"]

_Rendering = tuple[str, tuple[str, ...], bool]  # Accept's choice, name[] filter, gzip
PageRender = Callable[[str, Sequence[str]], bytes]
"""One read's page for a ``?part=`` and the ``?open=`` names."""

DEFAULT_ROLLOUTS_LIMIT = 100
"""Rollouts ``GET /rollouts`` lists unless ``?limit=`` says otherwise."""


class Endpoint:
    """What is answered: ``/metrics`` and ``/rollouts`` (behind auth, if any), ``/healthz``, 404 and 405.

    The full exposition is rendered afresh for each scrape on the render threads; those asking while it is
    rendered, or while it is still being written to another client (within ``read_interval`` of its
    rendering), share it: one body in memory, however many read it at once (``writing`` says whether a body
    is still being written). ``/rollouts`` and ``/metrics?name[]=`` are shared for ``read_interval`` on a
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
        page: Callable[[Mapping[str, object] | None], PageRender] | None = None,
        writing: Callable[[bytes], bool] = lambda body: False,
        read_interval: float,
    ) -> None:
        self._registry = registry
        self._rollouts = rollouts
        self._page = page
        self._gate = gate
        self._renderings: Shared[_Rendering, tuple[bytes, str]] = Shared(
            workers, 0, held=lambda rendering: writing(rendering[0]), held_for=read_interval
        )
        self._collections: Shared[str, list[Metric]] = Shared(reads, read_interval)
        self._filtered: Shared[_Rendering, tuple[bytes, str]] = Shared(reads, read_interval)
        self._listings: Shared[str, Listing] = Shared(reads, read_interval)
        self._page_reads: Shared[str, PageRender] = Shared(reads, read_interval)
        # Shared while being assembled only: cheap to make again, and a second's worth of pages for every
        # set asked for would be a megabyte each.
        self._pages: Shared[tuple[PageRender, str, tuple[str, ...]], bytes] = Shared(reads, 0)
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
        self, read: Callable[[Mapping[str, object] | None], PageRender], request: Request
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

    async def _listing(self, rollouts: Callable[[int], Mapping[str, object]]) -> Listing:
        """The interval's listing of the rollouts in flight, shared by ``/rollouts`` and the page."""
        return await self._listings.get("rollouts", functools.partial(Listing.of, rollouts))

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
            work = functools.partial(encode_body, Families(families, frozenset(names)), accept, gzipped)
            body, content_type = await self._filtered.get(key, work)
        else:
            work = functools.partial(encode_body, self._registry, accept, gzipped)
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
