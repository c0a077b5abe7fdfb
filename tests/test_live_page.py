"""The live page of a telemetry: sampled from serve() until close(), again after a later serve()."""

from __future__ import annotations

import socket

import pytest

from rollout_telemetry import RolloutTelemetry
from rollout_telemetry.errors import ServeError
from tests.support import live_page


def test_a_page_is_sampled_while_an_endpoint_holds_it_until_close() -> None:
    """A page is sampled while some endpoint holds a renderer of it; not after close() until shown again."""
    page = live_page(RolloutTelemetry(runtime_metrics=False))
    assert not page.sampling
    first = page.shown()
    second = page.shown()
    assert page.sampling
    del first
    assert page.sampling  # the other endpoint still serves it
    page.close()
    assert not page.sampling
    third = page.shown()
    assert page.sampling
    del second, third
    assert not page.sampling


def test_sample_takes_a_point_of_each_agent_that_changed() -> None:
    """One step of the sampler: a point for the agent recorded since, the page's charts drawn from them."""
    telemetry = RolloutTelemetry(runtime_metrics=False)
    page = live_page(telemetry)
    telemetry.record("math", {"reward": 1.0})
    page.sample()
    telemetry.record("math", {"reward": 0.0})
    page.sample()
    body = page.read().main(frozenset())
    assert body.count('<polyline class="reward"') == 1
    assert 'data-agent="math"' in body


def test_a_refused_address_starts_no_sampling() -> None:
    """serve() on a port in use raises, and the run's page is not sampled for it; it is while a server
    serves it, until the server stops or the telemetry closes."""
    telemetry = RolloutTelemetry(runtime_metrics=False)
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        with pytest.raises(ServeError):
            telemetry.serve(port=blocker.getsockname()[1])
    page = telemetry._live_page()
    assert not page.sampling
    with telemetry.serve(port=0):
        assert page.sampling
    assert not page.sampling  # stopped: the server let go of the page
    with telemetry.serve(port=0):
        assert page.sampling
        telemetry.close()
        assert not page.sampling
