"""The HTML report and the live page in a real browser: headless Chromium (Debian's) driven by Playwright.

The numbers a reader sees are read off the page and compared with ``report --format json`` and ``/metrics``;
the page asks nothing of any other origin; markup in an agent's name stays text; the pages' policy lets their
own script run and refuses any other, and the report opened from disk connects nowhere.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import trustme

from docs.browser import chromium, chromium_path
from rollout_telemetry import BasicAuth, RolloutTelemetry, TLSConfig, hash_password
from tests.support import samples

FIXTURES = Path(__file__).parents[1] / "fixtures"
HOSTILE = '<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>"&'
HOSTILE_KIND = 'x" tabindex="0" autofocus onfocus="window.pwned=3'

if TYPE_CHECKING:
    from collections.abc import Callable

    from playwright.sync_api import Browser, Page, Route


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Debian's Chromium, headless; in CI a missing one fails (scripts/setup-dev installs it)."""
    if chromium_path() is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed: scripts/setup-dev installs it")
        pytest.skip("chromium is not installed: scripts/setup-dev installs it")
    with chromium() as launched:
        yield launched


def _cli(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "rollout_telemetry", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout


def _shown(page: Page) -> dict[str, dict[str, str]]:
    """The overview table as the reader sees it: per agent row, each cell's visible text by its key."""
    found: dict[str, dict[str, str]] = {}
    for row in page.locator("table.agents tr[data-agent]").all():
        agent = row.get_attribute("data-agent") or ""
        found[agent] = {
            cell.get_attribute("data-k") or "": cell.inner_text() for cell in row.locator("td[data-k]").all()
        }
    return found


def _number(text: str) -> float | None:
    return None if text == "-" else float(text.replace(",", ""))


def _watched(page: Page) -> list[str]:
    """Every URL the page asks for from now on."""
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url))
    return asked


def test_the_report_shows_what_json_says(browser: Browser, tmp_path: Path) -> None:
    """report --format html of the fixture run, opened from disk: each agent's counts and means as the JSON
    report has them, the charts drawn, nothing fetched, and the filter narrowing the page."""
    run = FIXTURES / "run.jsonl"
    page_file = tmp_path / "run.html"
    page_file.write_text(_cli("report", str(run), "--format", "html"), encoding="utf-8")
    report = json.loads(_cli("report", str(run), "--format", "json"))
    page = browser.new_page()
    asked = _watched(page)
    page.goto(page_file.as_uri())
    shown = _shown(page)
    assert set(shown) == {row["agent"] for row in report["agents"]}
    for row in report["agents"]:
        cells, events = shown[row["agent"]], row["events"]
        for key in ("measured", "masked", "unscored", "failed", "omitted"):
            assert _number(cells[key]) == events[key]
        for key in ("mean_reward", "mean_reward_unmasked"):
            expected = events[key]
            assert _number(cells[key]) == (None if expected is None else round(expected, 3))
        assert _number(cells["expected"]) == row["rollouts"]["expected"]
    assert page.locator("svg.chart polyline").count() > 0
    assert asked == [page_file.as_uri()]
    page.fill("#filter", "math")
    visible = [
        row.get_attribute("data-agent") for row in page.locator("table.agents tr[data-agent]:visible").all()
    ]
    assert visible == ["math_agent"]
    assert page.locator("details.agent:visible").count() == 1
    page.close()


def test_markup_in_an_agent_name_stays_text(browser: Browser, tmp_path: Path) -> None:
    """An agent named with an img's onerror and a script element, a failure kind with a focus handler: none
    runs; the name and the kind read as typed."""
    run = tmp_path / "hostile.jsonl"
    rows = [
        {
            "reward": 1.0,
            "mask_sample": i % 2 == 0,
            "_ng_environment_server": HOSTILE,
            "failure_kind": HOSTILE_KIND,
        }
        for i in range(4)
    ]
    run.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    page_file = tmp_path / "hostile.html"
    page_file.write_text(_cli("report", str(run), "--format", "html"), encoding="utf-8")
    page = browser.new_page()
    page.goto(page_file.as_uri())
    assert page.evaluate("window.pwned") is None
    assert page.locator("table.agents tr[data-agent] td a").inner_text() == HOSTILE
    assert page.locator("img").count() == 0
    assert page.locator("[autofocus], [onfocus]").count() == 0
    assert HOSTILE_KIND in page.locator("details.agent").inner_text()
    page.close()


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TLSConfig:
    """A certificate for 127.0.0.1 from a test CA (the browser is told to accept it)."""
    ca = trustme.CA()
    folder = tmp_path_factory.mktemp("tls")
    server = ca.issue_cert("127.0.0.1")
    server.cert_chain_pems[0].write_to_path(str(folder / "server.pem"))
    server.private_key_pem.write_to_path(str(folder / "server.key"))
    return TLSConfig(str(folder / "server.pem"), str(folder / "server.key"))


def _record(telemetry: RolloutTelemetry, rounds: int) -> None:
    for i in range(rounds):
        telemetry.record("math", {"reward": float(i % 2), "mask_sample": i % 5 == 0, "failure_kind": "judge"})
        if i % 3 == 0:
            telemetry.record_failure("browser", "session_lost", reason="reset timed out")
        telemetry.record("code", {"reward": 1.0})


def _metrics(url: str, user: str, password: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """/metrics, read as a scraper does (the test CA's certificate unchecked, as the browser's)."""
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    request = urllib.request.Request(url, headers={"Authorization": f"Basic {token}"})
    unverified = ssl._create_unverified_context()
    with urllib.request.urlopen(request, timeout=30, context=unverified) as response:
        return samples(response.read().decode())


def test_the_live_page_behind_tls_and_basic_auth(browser: Browser, tls: TLSConfig) -> None:
    """GET / over HTTPS with basic auth: the page's numbers are /metrics', it updates itself as the run goes
    on, and it asks for nothing but its own origin."""
    telemetry = RolloutTelemetry(run="live", runtime_metrics=False)
    auth = BasicAuth("reader", hash_password("correct horse"))
    _record(telemetry, 30)
    server = telemetry.serve(port=0, tls=tls, auth=auth)
    origin = server.url.removesuffix("/metrics")
    context = browser.new_context(
        ignore_https_errors=True, http_credentials={"username": "reader", "password": "correct horse"}
    )
    try:
        page = context.new_page()
        asked = _watched(page)
        page.goto(origin + "/")
        _same_as_metrics(page, _metrics(server.url, "reader", "correct horse"))
        before = page.get_attribute("body", "data-updated") or ""
        _record(telemetry, 20)
        # A selector, not a function: the page's policy allows no script but its own (Playwright's eval).
        page.wait_for_selector(f'body[data-updated]:not([data-updated="{before}"])', timeout=20_000)
        _same_as_metrics(page, _metrics(server.url, "reader", "correct horse"))
        assert all(url.startswith(origin + "/") for url in asked)
        assert any("part=main" in url for url in asked)
    finally:
        context.close()
        server.stop()
        telemetry.close()


def _same_as_metrics(page: Page, metrics: dict[tuple[str, frozenset[tuple[str, str]]], float]) -> None:
    """The overview's masked and failed counts and mean reward per agent are /metrics' values."""

    def total(name: str, agent: str) -> float:
        return sum(v for (n, labels), v in metrics.items() if n == name and ("agent", agent) in labels)

    shown = _shown(page)
    assert set(shown) == {"math", "browser", "code"}
    for agent, cells in shown.items():
        assert _number(cells["masked"]) == total("rollout_masked_total", agent)
        assert _number(cells["failed"]) == total("rollout_failed_total", agent)
        reward = [
            v for (n, labels), v in metrics.items() if n == "rollout_reward" and ("agent", agent) in labels
        ]
        assert _number(cells["mean_reward"]) == (round(reward[0], 3) if reward else None)


def test_five_hundred_agents_stay_usable(browser: Browser) -> None:
    """500 agents on the live page: it loads within seconds, the worst first, and the filter finds one."""
    telemetry = RolloutTelemetry(runtime_metrics=False, max_agents=1000)
    for i in range(500):
        for j in range(10):
            if j < i % 10:
                telemetry.record_failure(f"agent-{i:03d}", "session_lost")
            else:
                telemetry.record(f"agent-{i:03d}", {"reward": 1.0})
    server = telemetry.serve(port=0)
    try:
        page = browser.new_page()
        page.goto(server.url.removesuffix("/metrics") + "/", timeout=30_000)
        first = page.locator("table.agents tr[data-agent]").first.get_attribute("data-agent") or ""
        assert first.endswith("9")  # lost 9 of 10: among the worst
        page.fill("#filter", "agent-123")
        assert [r.get_attribute("data-agent") for r in page.locator("tr[data-agent]:visible").all()] == [
            "agent-123"
        ]
        section = page.locator('details.agent[data-agent="agent-123"]')
        assert section.locator(".charts.pending").count() == 1  # not drawn until opened
        asked = _watched(page)
        section.locator("summary").click()
        section.locator("svg.chart").first.wait_for(timeout=20_000)  # drawn once opened, at once
        page.wait_for_timeout(2_000)
        assert len(asked) == 1  # one request for the opened section, none after it until the next update
        page.close()
    finally:
        server.stop()
        telemetry.close()


def test_an_empty_run_is_a_page_that_says_so(browser: Browser) -> None:
    """The live page before the first rollout: it loads, says so, and updates without an error."""
    telemetry = RolloutTelemetry(runtime_metrics=False)
    server = telemetry.serve(port=0)
    try:
        page = browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(server.url.removesuffix("/metrics") + "/")
        assert page.get_by_text("No rollout counted yet.").is_visible()
        page.wait_for_selector("body[data-updated]", timeout=20_000)  # one update done
        assert errors == []
        page.close()
    finally:
        server.stop()
        telemetry.close()


def test_the_sampler_takes_points_as_the_run_goes_on() -> None:
    """On the process's sampler thread, a served page gets a point per interval while its agent changes, and
    none once no endpoint holds it."""
    from tests.support import live_page, wait_until

    telemetry = RolloutTelemetry(runtime_metrics=False)
    page = live_page(telemetry, interval=0.2)
    shown = page.shown()  # as an endpoint holds it

    def points() -> int:
        telemetry.record("math", {"reward": 1.0})  # a change at every look: a point at every interval
        return len(page.story.points(telemetry.snapshot(), "math"))

    wait_until(lambda: points() >= 5, timeout=30, what="five points taken")
    del shown  # the endpoint stopped: no more points
    taken = len(page.story.points(telemetry.snapshot(), "math")) - 1  # the current one is not taken
    time.sleep(1.0)  # five intervals: a sampler still running would take points
    assert len(page.story.points(telemetry.snapshot(), "math")) - 1 == taken


_REFUSALS = """
window.refused = [];
document.addEventListener("securitypolicyviolation", function (event) {
  window.refused.push(event.effectiveDirective);
});
"""


def _refusals(page: Page) -> Callable[[], list[str]]:
    """What the page's policy refuses from now on: the directives of its violation events, then the browser's
    console messages about the policy."""
    console: list[str] = []
    page.on("console", lambda message: console.append(message.text))
    page.add_init_script(_REFUSALS)  # run by the browser itself, before the page's script: no policy stops it

    def refused() -> list[str]:
        said = [text for text in console if "Content Security Policy" in text]
        return [*page.evaluate("window.refused || []"), *said]

    return refused


def test_the_live_page_runs_its_own_script_under_its_policy(browser: Browser) -> None:
    """The live page's script runs under its policy: the filter narrows the page, the page updates itself
    from its origin, and the browser refuses nothing on it."""
    telemetry = RolloutTelemetry(runtime_metrics=False)
    _record(telemetry, 10)
    server = telemetry.serve(port=0)
    try:
        page = browser.new_page()
        refused = _refusals(page)
        page.goto(server.url.removesuffix("/metrics") + "/")
        page.fill("#filter", "math")
        assert [r.get_attribute("data-agent") for r in page.locator("tr[data-agent]:visible").all()] == [
            "math"
        ]
        page.wait_for_selector("body[data-updated]", timeout=20_000)  # fetched ?part=main and swapped it in
        assert page.locator("tr[data-agent]:visible").count() == 1  # the filter kept
        assert refused() == []
        page.close()
    finally:
        server.stop()
        telemetry.close()


INJECTED = (
    "<style>#filter{display:none}</style><script>window.pwned=1</script>"
    '<p id="styled" style="display:none">styled</p>'
)
"""An inline script, a style element and a style attribute that are not the page's own."""


def test_an_inline_script_not_the_pages_own_is_refused(browser: Browser) -> None:
    """The live page with an inline script, a style element and a style attribute added, under the page's own
    headers: none of them applies, the browser reports each, and the page's own script still runs."""
    telemetry = RolloutTelemetry(runtime_metrics=False)
    _record(telemetry, 10)
    server = telemetry.serve(port=0)
    root = server.url.removesuffix("/metrics") + "/"

    def injected(route: Route) -> None:
        response = route.fetch()
        headers = {k: v for k, v in response.headers.items() if k.lower() != "content-length"}
        assert "content-security-policy" in headers
        body = response.text().replace("</body>", INJECTED + "</body>")
        route.fulfill(status=response.status, headers=headers, body=body)

    try:
        page = browser.new_page()
        refused = _refusals(page)
        page.route(root, injected)
        page.goto(root)
        page.fill("#filter", "math")  # visible: the injected style did not hide it
        assert [r.get_attribute("data-agent") for r in page.locator("tr[data-agent]:visible").all()] == [
            "math"
        ]
        assert page.locator("#styled").is_visible()
        assert page.evaluate("window.pwned") is None
        directives = page.evaluate("window.refused")
        assert {"script-src-elem", "style-src-elem", "style-src-attr"} <= set(directives), refused()
        page.close()
    finally:
        server.stop()
        telemetry.close()


_SEND = """url => Promise.all([
  fetch(url, {mode: "no-cors"}).then(() => "answered", () => "refused"),
  new Promise(done => {
    const image = new Image();
    image.onload = image.onerror = () => done(image.complete && image.naturalWidth ? "answered" : "refused");
    image.src = url + "image.png";
  }),
])"""
"""Send the run's data to ``url``, as a script that got into the page would: a fetch and an image."""


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A socket listening on 127.0.0.1 that never answers: a connection to it shows in its accept queue."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock


def _connections(sock: socket.socket) -> int:
    """Connections waiting in ``sock``'s queue, each accepted (and closed) now."""
    sock.setblocking(False)
    count = 0
    while True:
        try:
            connection, _ = sock.accept()
        except BlockingIOError:
            return count
        connection.close()
        count += 1


def test_the_report_opened_from_disk_sends_nothing_anywhere(
    browser: Browser, tmp_path: Path, listener: socket.socket
) -> None:
    """The report file carries its policy: opened from disk, a fetch and an image to a listener on
    127.0.0.1 are refused and the listener sees no connection, and an inline script added to the file does
    not run; the same file without its policy reaches the listener (what the policy stops is real)."""
    html = _cli("report", str(FIXTURES / "run.jsonl"), "--format", "html")
    policy = html[html.index('<meta http-equiv="Content-Security-Policy"') :]
    policy = policy[: policy.index(">") + 1]
    assert "default-src 'none'" in policy
    assert "connect-src" not in policy
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/"
    guarded, bare = tmp_path / "run.html", tmp_path / "bare.html"
    guarded.write_text(html.replace("</body>", "<script>window.pwned=1</script></body>"), encoding="utf-8")
    bare.write_text(html.replace(policy, ""), encoding="utf-8")
    page = browser.new_page()
    refused = _refusals(page)
    page.goto(guarded.as_uri())
    assert page.locator("svg.chart polyline").count() > 0
    assert page.evaluate(_SEND, url) == ["refused", "refused"]
    assert page.evaluate("window.pwned") is None
    assert {"connect-src", "img-src", "script-src-elem"} <= set(page.evaluate("window.refused")), refused()
    assert _connections(listener) == 0
    page.goto(bare.as_uri())
    page.evaluate("url => { fetch(url, {mode: 'no-cors'}).catch(() => null); }", url)  # not awaited
    listener.settimeout(10)
    connection, _ = listener.accept()  # the page without its policy reached out
    connection.close()
    page.close()
