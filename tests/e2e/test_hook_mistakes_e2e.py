"""A hook's mistake never takes the page down: rollouts in flight with identities the telemetry refused, read
over real sockets and in real Chromium while they are in flight."""

from __future__ import annotations

import os
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from typing import TYPE_CHECKING

import pytest

from docs.browser import chromium, chromium_path
from rollout_telemetry import RolloutTelemetry
from tests.support import samples

if TYPE_CHECKING:
    from playwright.sync_api import Browser

MISTAKES: list[dict[str, object]] = [
    {"task_index": "task-17", "rollout_index": 0},  # task_index=row["id"]
    {"rollout_index": "0"},
    {"task_index": 10**5000, "rollout_index": 0},
    {"task_index": 0, "rollout_index": 0, "attempt": 10**5000},
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Debian's Chromium, headless; in CI a missing one fails (scripts/setup-dev installs it)."""
    if chromium_path() is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed: scripts/setup-dev installs it")
        pytest.skip("chromium is not installed: scripts/setup-dev installs it")
    with chromium() as launched:
        yield launched


def _get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.status, response.read().decode()


def test_refused_identities_in_flight_leave_the_page_up(browser: Browser) -> None:
    """With a string, a rollout index alone and 5,000-digit integers in flight, GET / and GET /?part=main
    answer 200, Chromium lists every rollout with no part of a refused identity (the valid one with its own),
    and each refusal is counted once in /metrics."""
    telemetry = RolloutTelemetry(run="mistakes", runtime_metrics=False)
    server = telemetry.serve(port=0)
    origin = server.url.removesuffix("/metrics")
    try:
        with ExitStack() as in_flight:
            in_flight.enter_context(telemetry.rollout("good", task_index=3, rollout_index=1))
            for identity in MISTAKES:
                in_flight.enter_context(telemetry.rollout("bad", **identity))  # type: ignore[arg-type]
            for path in ("/", "/?part=main"):
                assert _get(origin + path)[0] == 200
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto(origin + "/")
            listed = [
                [cell.inner_text() for cell in row.locator("td").all()[:3]]
                for row in page.locator("h3:has-text('In flight now') ~ table tr[data-agent]").all()
            ]
            assert sorted(listed) == sorted([["good", "3", "1"]] + [["bad", "-", "-"]] * len(MISTAKES))
            assert errors == []
            page.close()
        text = _get(server.url)[1]
        rejected = {
            dict(labels)["reason"]: v
            for (name, labels), v in samples(text).items()
            if name == "rollout_telemetry_rejected_total"
        }
        assert rejected == {"invalid_task_index": 3, "invalid_attempt": 1}
    finally:
        server.stop()
        telemetry.close()
