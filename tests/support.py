"""Helpers shared by the tests: a fake clock, exposition parsing, and finding real tools."""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from html.parser import HTMLParser
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import settings
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from rollout_telemetry import RolloutTelemetry
    from rollout_telemetry._facade.live import LivePage
    from rollout_telemetry._recording.recorder import Recorder
    from rollout_telemetry._store.coverage import CoverageSnapshot
    from rollout_telemetry._store.groups import GroupsSnapshot

Labels = frozenset[tuple[str, str]]

INTERPRETERS_PROFILE = "interpreters"
"""The Hypothesis profile of CI's unit tier on the other interpreters (``--hypothesis-profile``; registered by
tests/conftest.py): a third of the random examples (``examples``)."""
DEFAULT_EXAMPLES = settings.get_profile("default").max_examples
"""Hypothesis' own ``max_examples``, the default profile's."""


def examples(count: int) -> int:
    """``count`` random examples for a property test under the default profile, in proportion under another:
    a third (at least one) under ``INTERPRETERS_PROFILE``, where the unit tier proves that the interpreter
    runs the code; the README's test command proves each property at its full count."""
    return max(1, round(count * settings().max_examples / DEFAULT_EXAMPLES))  # the active profile's


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def exposition(registry: CollectorRegistry) -> str:
    """The text exposition of a registry, as a scrape would see it."""
    return generate_latest(registry).decode("utf-8")


def samples(text: str) -> dict[tuple[str, Labels], float]:
    """Every sample of an exposition, keyed by sample name and label set."""
    parsed: dict[tuple[str, Labels], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            parsed[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return parsed


def runtime_series() -> frozenset[str]:
    """Every series name of the collecting process's runtime (``runtime_metrics=True``): the runtime
    histograms and prometheus_client's process, platform and garbage-collector families."""
    from rollout_telemetry._views.run_series import PROCESS_FAMILIES, RUNTIME_FAMILIES

    names = {family.name for family in PROCESS_FAMILIES}
    for family in RUNTIME_FAMILIES:
        names |= {f"{family.name}_{suffix}" for suffix in ("bucket", "sum", "count")}
    return frozenset(names)


def sample_names(text: str) -> set[str]:
    """The distinct sample names of an exposition."""
    return {name for name, _ in samples(text)}


def value(text: str, name: str, **labels: str) -> float:
    """The value of the one sample with this name whose labels include ``labels``."""
    matches = [v for (n, ls), v in samples(text).items() if n == name and set(labels.items()) <= ls]
    assert len(matches) == 1, f"{len(matches)} samples of {name} {labels}"
    return matches[0]


def require_tool(name: str) -> str:
    """The path of a real tool; in CI a missing one fails the test, elsewhere it skips."""
    path = shutil.which(name)
    if path is not None:
        return path
    message = f"{name} is not installed (Debian: apt-get install prometheus prometheus-pushgateway)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def promtool_check_metrics(text: str) -> subprocess.CompletedProcess[str]:
    """Run ``promtool check metrics`` on an exposition."""
    return subprocess.run(
        [require_tool("promtool"), "check", "metrics"],
        input=text,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def alive(pid: int) -> bool:
    """Whether ``pid`` is a process that has not ended (a zombie has ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def wait_until(condition: Callable[[], bool], *, timeout: float, what: str) -> None:
    """Poll ``condition`` every 0.1 s until it holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def stop_process(process: subprocess.Popen[Any], *, timeout: float) -> None:
    """SIGTERM a process still running and wait ``timeout`` seconds for it; SIGKILL it if it does not go."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def free_port_range(count: int) -> int:
    """The first of ``count`` consecutive free ports on 127.0.0.1."""
    for _ in range(50):
        base = free_port()
        if base + count > 65535:
            continue
        sockets = []
        try:
            for port in range(base, base + count):
                sock = socket.socket()
                sockets.append(sock)
                sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
    raise AssertionError("no free port range")


def raw_request(port: int, request: bytes, *, source: str = "127.0.0.1") -> tuple[int, dict[str, str], bytes]:
    """Send ``request`` as bytes from ``source`` (a loopback address) and read the reply to the close.

    Returns the status, the headers (lower-case names) and the body.
    """
    with socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0)) as sock:
        sock.sendall(request)
        return read_reply(sock)


def read_reply(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """The status, the headers (lower-case names) and the body of the reply on ``sock``, read to its close."""
    reply = b""
    while chunk := sock.recv(65536):
        reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
    return int(status_line.split(" ")[1]), headers, body


def traced(clock: FakeClock, **options: Any) -> tuple[RolloutTelemetry, InMemorySpanExporter]:
    """A telemetry on ``clock`` whose rollout spans go to an in-memory exporter (SDK imported here)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
        InMemorySpanExporter,
    )

    from rollout_telemetry import RolloutTelemetry

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return RolloutTelemetry(clock=clock, tracer_provider=provider, **options), exporter


def held(connection: socket.socket) -> bool:
    """Whether the server still holds ``connection`` now: nothing to read and not closed (no waiting)."""
    timeout = connection.gettimeout()
    connection.setblocking(False)
    try:
        connection.recv(1)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        connection.settimeout(timeout)
    return False


def rss() -> int:
    """Resident memory of this process, in bytes."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@contextlib.contextmanager
def own_ray_folder() -> Iterator[str]:
    """A Ray folder of its own, to give as ``RAY_TMPDIR``: its sessions, sockets and the file naming the
    newest cluster (which a bare ``ray.init()`` joins), so two Rays started by tests running at once (a Ray
    test's cluster, NeMo Gym's, a docs example's) never join each other. Short, under /tmp: Ray's socket
    paths must fit in 107 bytes."""
    with tempfile.TemporaryDirectory(prefix="ray-", dir="/tmp", ignore_cleanup_errors=True) as folder:
        yield folder


RAY_CHECK_FAILED = "Check failed"
"""What a Ray process's log says when it ends on a failed internal check."""
_RAY_ERROR = re.compile(rf"^\[[^\]]* [CEF] \d+ \d+\]|{RAY_CHECK_FAILED}")
"""A Ray log line of severity error, critical or fatal."""


def _ray_logs(folder: str) -> Path:
    return Path(folder) / "ray" / "session_latest" / "logs"


def raylet_died(folder: str) -> bool:
    """Whether the raylet of the newest Ray session in ``folder`` (``own_ray_folder``) failed a check, and so
    ended."""
    try:
        return RAY_CHECK_FAILED in (_ray_logs(folder) / "raylet.out").read_text(errors="replace")
    except OSError:
        return False


def ray_log_tails(folder: str, names: Sequence[str] = ("gcs_server.out", "raylet.out", "raylet.err")) -> str:
    """The ends of the logs of the newest Ray session in ``folder`` (``own_ray_folder``): what a test that saw
    Ray fail to start says, since the folder goes with the test."""
    logs = _ray_logs(folder)
    parts = []
    for name in names:
        path = logs / name
        if path.is_file():
            text = path.read_text(errors="replace")
            # a crash's cause precedes its stack trace, which alone fills the tail
            fatal = [line for line in text.splitlines() if _RAY_ERROR.search(line)]
            parts.append(f"--- {path.name}:\n" + "".join(f"{line}\n" for line in fatal[:10]) + text[-2000:])
    return "\n".join(parts) or f"(no Ray logs under {logs})"


def ray_environment(folder: str) -> dict[str, str]:
    """The environment a Ray started by a test runs with: ``folder`` (``own_ray_folder``) as its own; 120 s
    for a node to start where Ray allows 30 s (on a 2-core machine with one core kept busy, NeMo Gym's Ray and
    a docs example's took longer and failed to start); and its workers at the test's priority. Ray starts
    them at nice 15, below CI's niced steps (nice 10): beside six busy loops four actors were not ready after
    5 minutes, and at nice 0 in 24 s (CI failed so, actors not ready within 120 s)."""
    return {
        "RAY_TMPDIR": folder,
        "RAY_raylet_start_wait_time_s": "120",
        "RAY_worker_niceness": "0",
    }


def recording_part(telemetry: RolloutTelemetry) -> Recorder:
    """The telemetry's recording part (groups, coverage, rows checked by a reader), for the tests of that
    part: what a user sees of it is on ``/metrics`` and in ``progress_metrics()``."""
    return telemetry._recorder


def groups_of(telemetry: RolloutTelemetry) -> GroupsSnapshot:
    """The run's groups at one moment (the recording part's)."""
    return telemetry._recorder.groups_snapshot()


def coverage_of(telemetry: RolloutTelemetry) -> CoverageSnapshot:
    """The run's coverage at one moment (the recording part's)."""
    return telemetry._recorder.coverage_snapshot()


def live_page(telemetry: RolloutTelemetry, interval: float = 5.0) -> LivePage:
    """The live page of ``telemetry``'s run, as ``serve()`` makes it, sampled every ``interval`` seconds once
    started; the charts' time from 0."""
    from rollout_telemetry._facade.live import LivePage

    return LivePage(
        "test",
        telemetry.snapshot,
        lambda: coverage_of(telemetry),
        lambda: groups_of(telemetry),
        origin=0.0,
        interval=interval,
    )


def markdown_renderers() -> list[tuple[str, Callable[[str], str]]]:
    """Markdown renderers with raw HTML on, by name: markdown-it-py (CommonMark with tables; rich brings it)
    and, where the docs extra put it in the environment, Python-Markdown with tables and attribute lists
    (MkDocs' renderer; not in the other interpreters' venvs)."""
    from markdown_it import MarkdownIt

    renderers: list[tuple[str, Callable[[str], str]]] = [
        ("markdown-it", MarkdownIt("commonmark", {"html": True}).enable("table").render)
    ]
    try:
        markdown = importlib.import_module("markdown")  # untyped
    except ImportError:
        return renderers
    renderers.append(
        ("Python-Markdown", lambda text: markdown.markdown(text, extensions=["tables", "attr_list"]))
    )
    return renderers


class RenderedMarkdown(HTMLParser):
    """What a Markdown renderer's HTML holds: every tag opened, each table body row's cells' text and each
    heading's text (character references decoded)."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.rows: list[list[str]] = []
        self.headings: list[str] = []
        self._open: list[str] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self._open.append(tag)
        if tag == "tr" and "tbody" in self._open:
            self.rows.append([])
        elif tag == "td" and "tbody" in self._open:
            self.rows[-1].append("")
        elif tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
            self.headings.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag in self._open:  # closes it and whatever was left open inside it
            del self._open[len(self._open) - 1 - self._open[::-1].index(tag) :]

    def handle_data(self, data: str) -> None:
        for tag in reversed(self._open):
            if tag == "td" and "tbody" in self._open:
                self.rows[-1][-1] += data
                return
            if tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
                self.headings[-1] += data
                return
