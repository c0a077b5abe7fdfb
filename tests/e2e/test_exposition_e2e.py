"""The endpoint's own exposition read by the real tools: Prometheus scrapes it, promtool checks it."""

from __future__ import annotations

import urllib.request
from pathlib import Path

from prometheus_client.openmetrics.parser import text_string_to_metric_families

from rollout_telemetry import RolloutTelemetry
from tests.e2e.prometheus import Prometheus
from tests.support import FakeClock, promtool_check_metrics

AGENTS = ("math", 'quoted "agent"', "back\\slash", "new\nline", "ünïcode")

Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


RUN = 'e2e "run"'
"""The run label, quotes and all: written escaped, stored as it is."""


def _recorded() -> RolloutTelemetry:
    clock = FakeClock()
    # The account's series only: the runtime's (GC pauses, process) change while the test reads them.
    telemetry = RolloutTelemetry(run=RUN, const_labels={"zone": "a\\b"}, clock=clock, runtime_metrics=False)
    for number, agent in enumerate(AGENTS):
        telemetry.record(agent, {"reward": 0.1 * number})
        telemetry.record(agent, {"reward": -2.5, "mask_sample": True, "failure_kind": "judge_failed"})
        telemetry.record(agent, {"reward": None, "failure_kind": "env:no_reward"})
        telemetry.record_failure(agent, "session_lost")
        telemetry.record_omission(agent, "cancelled")
        with telemetry.rollout(agent) as rollout:
            clock.advance(0.3 * number)
            rollout.complete({"reward": 1.0})
    telemetry.record("math", {"reward": "not a number"})  # a rejection: the run's own family
    return telemetry


def _get(url: str, accept: str) -> str:
    request = urllib.request.Request(url, headers={"Accept": accept})
    with urllib.request.urlopen(request, timeout=10) as response:
        return str(response.read().decode())


def _ours(text: str) -> Series:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)  # type: ignore[no-untyped-call]
        for sample in family.samples
    }


def test_prometheus_stores_every_series_of_the_endpoint_as_written(tmp_path: Path) -> None:
    """A real Prometheus scraping the endpoint (OpenMetrics) stores each series it writes, odd label values
    and the histogram included, with the value written; promtool finds the text format sound."""
    telemetry = _recorded()
    server = telemetry.serve(port=0)
    try:
        text = _get(server.url, "text/plain")
        checked = promtool_check_metrics(text)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        expected = _ours(_get(server.url, "application/openmetrics-text; version=1.0.0"))
        assert len(expected) > 100
        with Prometheus(tmp_path, [f"127.0.0.1:{server.port}"]) as prom:

            def stored() -> Series:
                found: Series = {}
                for result in prom.query('{run="e2e \\"run\\"", job!=""}'):  # scraped, not recorded
                    labels = dict(result["metric"])
                    name = labels.pop("__name__")
                    labels.pop("job"), labels.pop("instance")
                    found[(name, tuple(sorted(labels.items())))] = float(result["value"][1])
                return found

            prom.wait_for(lambda: len(stored()) == len(expected), timeout=30, what="every series stored")
            assert stored() == expected
    finally:
        server.stop()
