"""Prometheus service discovery for exporters that come and go: a target registry served.

The registry (``target_registry``: leases, registrants, its cap, refusals) holds targets (``targets``: what a
target may be, and the host rule). It is served here as Prometheus HTTP service discovery
(``http_sd_configs``: a JSON list of target groups) on the package's hardened HTTP stack (``_serve``), with
the same TLS and basic-auth options as ``/metrics``, and can be written as a ``file_sd_configs`` file,
replaced atomically. ``registry_actor`` runs one in a Ray actor; none of the three modules imports Ray.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from rollout_telemetry._files import write_whole
from rollout_telemetry._ray.target_registry import TargetRegistry
from rollout_telemetry._ray.targets import TargetGroup
from rollout_telemetry._serve.http import HttpServer
from rollout_telemetry._serve.limits import DEFAULT_LIMITS, Limits
from rollout_telemetry._serve.messages import Request, Response
from rollout_telemetry._serve.port_and_gate import Gate, bind, endpoint_url, screen
from rollout_telemetry._serve.tls import server_context
from rollout_telemetry._serve.workers import Workers

if TYPE_CHECKING:
    from rollout_telemetry._serve.credentials import BasicAuth
    from rollout_telemetry._serve.tls import TLSConfig

__all__ = ["DiscoveryServer", "FileSD"]


class FileSD:
    """Writes target groups to a ``file_sd_configs`` file atomically (a rename), only when they change."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._written: str | None = None
        self._lock = threading.Lock()

    def write(self, groups: list[TargetGroup]) -> bool:
        """Write the groups unless the file already holds them; return whether it was written."""
        text = json.dumps(groups, indent=1, sort_keys=True) + "\n"
        with self._lock:
            if text == self._written:
                return False
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_whole(self.path, text.encode("utf-8"))  # Prometheus never sees a half-written file
            self._written = text
            return True


class _Endpoint:
    """What discovery answers: ``/targets`` (behind auth, if any), ``/healthz``, 404 and 405 otherwise."""

    def __init__(self, registry: TargetRegistry, gate: Gate | None, workers: Workers) -> None:
        self._registry = registry
        self._gate = gate
        self._workers = workers
        self._rendering: asyncio.Future[bytes] | None = None

    async def __call__(self, request: Request) -> Response:
        refusal = await screen(request, paths=("/targets",), gate=self._gate)
        if refusal is not None:
            return refusal
        return Response(200, (("Content-Type", "application/json"),), await self._document())

    async def _document(self) -> bytes:
        """The current rendering, on the event loop; a stale one is rendered on a worker, once for all."""
        body = self._registry.rendered()
        if body is not None:
            return body
        if self._rendering is None:
            rendering = self._workers.run(self._registry.document)
            rendering.add_done_callback(self._rendered)
            self._rendering = rendering
        return await asyncio.shield(self._rendering)

    def _rendered(self, rendering: asyncio.Future[bytes]) -> None:
        if self._rendering is rendering:
            self._rendering = None


class DiscoveryServer:
    """Serves a registry as Prometheus HTTP service discovery: ``GET /targets`` (and ``/healthz``).

    On the same stack as ``/metrics`` (``_serve.http``): one event-loop thread holds every connection under
    its deadlines and the connection cap, ``render_threads`` worker threads render ``/targets``, and
    passwords are checked on threads of their own (``serving.Gate``), all within ``limits``. ``tls`` and
    ``auth`` are those of ``RolloutTelemetry.serve``; ``/healthz`` stays open.

    Raises:
        ServeError: the address cannot be bound.
        ConfigError: a TLS file cannot be loaded.
    """

    def __init__(
        self,
        registry: TargetRegistry,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        tls: TLSConfig | None = None,
        auth: BasicAuth | None = None,
        limits: Limits = DEFAULT_LIMITS,
    ) -> None:
        context = server_context(tls) if tls is not None else None
        listener = bind(host, port, 1, what="service discovery", backlog=limits.listen_backlog)
        self.host = host
        self.port: int = listener.getsockname()[1]
        self._tls = tls
        self._workers = Workers(limits.render_threads, max_queued=limits.max_queued)
        self._gate = Gate(auth, limits) if auth is not None else None
        endpoint = _Endpoint(registry, self._gate, self._workers)
        self._http = HttpServer(listener, endpoint, tls=context, limits=limits)

    @property
    def url(self) -> str:
        """The URL to give ``http_sd_configs``."""
        return endpoint_url(self.host, self.port, "/targets", tls=self._tls is not None)

    def stop(self) -> None:
        """Stop serving and release the port."""
        self._http.stop()
        self._workers.close()
        if self._gate is not None:
            self._gate.close()
