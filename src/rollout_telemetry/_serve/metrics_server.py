"""The HTTP endpoint of a telemetry: ``/metrics`` (a prometheus_client registry's exposition), ``/rollouts``
(the rollouts in flight, as JSON), ``/`` (the live page, when given one) and ``/healthz``, nothing else.

Binds 127.0.0.1 unless told otherwise. Optional TLS (``tls``) and optional HTTP basic auth
(``port_and_gate.Gate``). What is answered is ``endpoint``'s, on the connections ``http`` holds;
``start_server`` puts them together and ``MetricsServer`` is what the user holds of them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from prometheus_client.registry import CollectorRegistry

from rollout_telemetry._serve.connections import Connections
from rollout_telemetry._serve.credentials import BasicAuth
from rollout_telemetry._serve.endpoint import Endpoint, PageRender
from rollout_telemetry._serve.http import HttpServer
from rollout_telemetry._serve.limits import DEFAULT_LIMITS, Limits
from rollout_telemetry._serve.port_and_gate import Gate, bind, endpoint_url
from rollout_telemetry._serve.tls import TLSConfig, server_context
from rollout_telemetry._serve.workers import Workers

__all__ = ["MetricsServer", "start_server"]


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
    port_range: int = 1,
    rollouts: Callable[[int], Mapping[str, object]] | None = None,
    page: Callable[[Mapping[str, object] | None], PageRender] | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> MetricsServer:
    """Serve ``registry``'s ``/metrics`` (and ``/rollouts``, the page, ``/healthz``) until the server returned
    is stopped.

    With ``port_range=N`` the first free port of ``port .. port+N-1`` is taken: the documented way for
    several collector processes on one node to get a port each without coordinating. ``render_threads``
    worker threads render the exposition (scrapes asking for the same one share it); password checks and
    ``/rollouts`` have threads of their own, and the connections themselves hold none. ``page`` reads the run
    for the page at ``/``, given ``/rollouts``' listing, and returns what renders that read for a ``?part=``
    (``main``: its content alone) and the ``?open=`` names (the agents whose charts to draw), on the
    ``/rollouts`` thread, one read shared for ``read_interval``; without it, ``/`` is 404. ``limits`` are the
    server's bounds.

    Raises:
        ConfigError: a TLS file cannot be loaded.
        ServeError: the address cannot be bound (every port in the range is taken, the host is unknown).
    """
    context = server_context(tls) if tls is not None else None
    listener = bind(host, port, port_range, what="metrics", backlog=limits.listen_backlog)
    bound: int = listener.getsockname()[1]
    workers = Workers(limits.render_threads, max_queued=limits.max_queued)
    reads = Workers(1, max_queued=limits.max_reads_queued)
    gate = Gate(auth, limits) if auth is not None else None
    connections = Connections(limits)  # the endpoint shares a rendering while it is being written
    endpoint = Endpoint(
        registry,
        gate,
        workers,
        reads,
        rollouts=rollouts,
        page=page,
        writing=connections.output.writing,
        read_interval=limits.read_interval,
    )
    http = HttpServer(listener, endpoint, tls=context, limits=limits, connections=connections)

    def stop() -> None:
        http.stop()
        endpoint.release_page()
        workers.close()
        reads.close()
        if gate is not None:
            gate.close()

    url = endpoint_url(host, bound, "/metrics", tls=tls is not None)
    return MetricsServer(host, bound, url, stop)
