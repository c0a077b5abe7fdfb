"""The HTTP endpoint: /metrics, /healthz, 404 elsewhere, a clear error for a taken port."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request

import pytest

from rollout_telemetry import RolloutTelemetry, ServeError
from tests.support import samples


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.read().decode()


def test_serves_metrics_and_healthz(telemetry: RolloutTelemetry) -> None:
    """/metrics is the exposition; /healthz says ok; the default host is 127.0.0.1."""
    telemetry.record("math", {"reward": 1.0})
    with telemetry.serve(port=0) as server:
        assert server.url.startswith("http://127.0.0.1:")
        status, body = _get(server.url)
        assert status == 200
        assert (
            samples(body)[("rollout_completed_total", frozenset({("agent", "math"), ("run", "test-run")}))]
            == 1
        )
        assert _get(server.url.replace("/metrics", "/healthz")) == (200, "ok\n")


@pytest.mark.parametrize("path", ["/", "/favicon.ico", "/metrics/extra", "/admin"])
def test_other_paths_are_404(telemetry: RolloutTelemetry, path: str) -> None:
    """Only /metrics and /healthz are served."""
    with telemetry.serve(port=0) as server:
        status, _ = _get(f"http://127.0.0.1:{server.port}{path}")
        assert status == 404


def test_post_is_refused(telemetry: RolloutTelemetry) -> None:
    """A request body is never read: non-GET methods get 405."""
    with telemetry.serve(port=0) as server:
        request = urllib.request.Request(server.url, data=b"x" * 1000, method="POST")
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(request, timeout=5)
        with info.value as error:
            assert error.code == 405


def test_taken_port_is_a_clear_error(telemetry: RolloutTelemetry) -> None:
    """Serving on a port in use raises ServeError naming the port, and leaves nothing running."""
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        with pytest.raises(ServeError, match=f"port {port} is already in use"):
            telemetry.serve(port=port)
    with telemetry.serve(port=port) as server:  # the failed attempt left nothing bound
        assert _get(server.url)[0] == 200


def test_stop_releases_the_port(telemetry: RolloutTelemetry) -> None:
    """After stop() the same port can be served again."""
    server = telemetry.serve(port=0)
    port = server.port
    server.stop()
    again = telemetry.serve(port=port)
    again.stop()
