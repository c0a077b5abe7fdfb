"""What ``top`` reads: the exposition parser, ``/rollouts``, exporters over HTTP(S) and a run's files."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import trustme

from rollout_telemetry import BasicAuth, TLSConfig, failure_kinds, hash_password
from rollout_telemetry._cli.top_model import AgentTotals, Reading
from rollout_telemetry._cli.top_sources import (
    ClientSecurity,
    ExporterSource,
    FollowSource,
    Poller,
    SourceDown,
    parse_metrics,
    parse_rollouts,
)
from rollout_telemetry._facade.telemetry import RolloutTelemetry
from rollout_telemetry._sources.follow import RunFiles
from tests.support import FakeClock, exposition, free_port

FIXTURES = Path(__file__).parents[1] / "fixtures"


def _recorded() -> RolloutTelemetry:
    telemetry = RolloutTelemetry(run="r1")
    telemetry.record("math", {"reward": 1.0})
    telemetry.record("math", {"reward": -0.5})
    telemetry.record("math", {"reward": 0.0, "mask_sample": True, "failure_kind": failure_kinds.JUDGE_FAILED})
    telemetry.record_failure("math", failure_kinds.SESSION_LOST)
    telemetry.record_failure("math", failure_kinds.SESSION_LOST)
    telemetry.record_failure("math", failure_kinds.TRANSPORT_TIMEOUT)
    telemetry.record_omission("code", failure_kinds.CANCELLED)
    return telemetry


def test_parse_metrics_reads_an_exporters_figures() -> None:
    """Every figure of the table, from a real exposition, against the hand-counted outcomes."""
    by_agent = {a.agent: a for a in parse_metrics(exposition(_recorded().registry))}
    math = by_agent["math"]
    assert (math.completed, math.rewarded) == (3, 3)
    assert math.mean_reward == pytest.approx(0.5 / 3)  # (1 - 0.5 + 0) / 3, the masked one included
    assert math.unmasked_reward == pytest.approx(0.25)  # (1 - 0.5) / 2
    assert math.masked_ratio == pytest.approx(1 / 3)
    assert dict(math.failed) == {failure_kinds.SESSION_LOST: 2, failure_kinds.TRANSPORT_TIMEOUT: 1}
    assert dict(by_agent["code"].omitted) == {failure_kinds.CANCELLED: 1}
    assert math.in_flight is None  # no lifecycle API used: nothing published


def test_parse_metrics_sums_over_extra_labels() -> None:
    """Stages and runs are summed per agent; the oldest age is the largest; stalled counts are summed."""
    text = """# TYPE rollout_completed_total counter
rollout_completed_total{run="a",agent="math"} 10
rollout_completed_total{run="b",agent="math"} 5
# TYPE rollout_rewarded_total counter
rollout_rewarded_total{run="a",agent="math"} 10
rollout_rewarded_total{run="b",agent="math"} 5
# TYPE rollout_reward_positive_total counter
rollout_reward_positive_total{run="a",agent="math"} 6
rollout_reward_positive_total{run="b",agent="math"} 3
# TYPE rollout_reward_negative_total counter
rollout_reward_negative_total{run="a",agent="math"} 0
rollout_reward_negative_total{run="b",agent="math"} 1.5
# TYPE rollout_reward gauge
rollout_reward{run="a",agent="math"} 0.6
rollout_reward{run="b",agent="math"} 0.3
# TYPE rollout_in_flight gauge
rollout_in_flight{agent="math",stage="generate"} 4
rollout_in_flight{agent="math",stage="verify"} 2
# TYPE rollout_oldest_in_flight_age_seconds gauge
rollout_oldest_in_flight_age_seconds{agent="math",stage="generate"} 12.5
rollout_oldest_in_flight_age_seconds{agent="math",stage="verify"} 90
# TYPE rollout_stalled gauge
rollout_stalled{agent="math",stage="generate"} 0
rollout_stalled{agent="math",stage="verify"} 1
"""
    (math,) = parse_metrics(text)
    assert math.completed == 15
    assert math.mean_reward == pytest.approx(7.5 / 15)  # from the counters, not the average of 0.6 and 0.3
    assert (math.in_flight, math.oldest_age, math.stalled) == (6, 90, 1)


def test_parse_rollouts_reads_the_documented_body() -> None:
    """The rollouts oldest first, nulls kept as None, the stall bound; a wrong shape is refused."""
    body = {
        "in_flight": 2,
        "stall_after_seconds": 60,
        "rollouts": [
            {"agent": "math", "task_index": None, "rollout_index": 1, "attempt": 0, "stage": "generate",
             "age_seconds": 3.5, "stalled": False, "trace_id": None, "span_id": None},
            {"agent": "code", "task_index": 7, "rollout_index": 0, "attempt": 2, "stage": "verify",
             "age_seconds": 75.0, "stalled": True, "trace_id": "ab" * 16, "span_id": "cd" * 8},
        ],
    }  # fmt: skip
    rollouts, stall_after = parse_rollouts(body)
    assert stall_after == 60.0
    assert rollouts is not None  # no "tracked" (an older exporter): a list
    seen = [(r.agent, r.task_index, r.stalled) for r in rollouts]
    assert seen == [("code", 7, True), ("math", None, False)]
    assert rollouts[0].trace_id == "ab" * 16
    with pytest.raises(ValueError, match="not a /rollouts body"):
        parse_rollouts({"in_flight": 0})
    assert parse_rollouts({**body, "tracked": False}) == (None, 60.0)


class _Exporter(BaseHTTPRequestHandler):
    metrics = b""
    rollouts: bytes | None = None

    def do_GET(self) -> None:
        if self.path == "/metrics":
            body, kind = self.metrics, "text/plain"
        elif self.path.startswith("/rollouts?limit=") and self.rollouts is not None:
            body, kind = self.rollouts, "application/json"
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def fake_exporter() -> Iterator[tuple[str, type[_Exporter]]]:
    """A plain HTTP exporter whose /metrics and /rollouts the test sets."""
    handler = type("Handler", (_Exporter,), {"metrics": exposition(_recorded().registry).encode()})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics", handler
    finally:
        server.shutdown()
        server.server_close()


def test_an_exporter_without_rollouts_has_no_list(fake_exporter: tuple[str, type[_Exporter]]) -> None:
    """A 404 on /rollouts is an older exporter: figures, no list, not down."""
    url, _ = fake_exporter
    reading = ExporterSource(url, timeout=30).read()
    assert {a.agent for a in reading.agents} == {"math", "code"}
    assert reading.in_flight is None


def test_an_exporter_with_rollouts(fake_exporter: tuple[str, type[_Exporter]]) -> None:
    """/rollouts is asked next to /metrics, whichever form the URL took."""
    url, handler = fake_exporter
    item = {"agent": "math", "stage": "verify", "age_seconds": 4.0, "stalled": False}
    handler.rollouts = json.dumps({"in_flight": 1, "stall_after_seconds": 30.0, "rollouts": [item]}).encode()
    source = ExporterSource(url.removeprefix("http://").removesuffix("/metrics"), timeout=30)
    assert source.label == url.removeprefix("http://").removesuffix("/metrics")
    reading = source.read()
    assert reading.in_flight is not None
    assert [r.stage for r in reading.in_flight] == ["verify"]
    assert reading.stall_after_seconds == 30.0


def test_an_unreachable_exporter_is_down_and_says_why() -> None:
    """Nothing listening: the source is down with the reason, and the poller's view says since when."""
    source = ExporterSource(f"http://127.0.0.1:{free_port()}", timeout=2)
    with pytest.raises(SourceDown, match="connection refused"):
        source.read()
    clock = FakeClock()
    poller = Poller(source, 1.0, clock=clock)
    view = poller.poll_once()
    assert (view.up, view.down_for, view.error) == (False, None, "connection refused")


def test_tls_client_certificate_and_basic_auth(tmp_path: Path) -> None:
    """The client side of serve's security: verify against the CA, present a certificate, send a password."""
    ca = trustme.CA()
    server_cert = ca.issue_cert("127.0.0.1")
    client_cert = ca.issue_cert("top@example.test")
    files = {name: tmp_path / f"{name}.pem" for name in ("cert", "key", "ca", "client")}
    server_cert.cert_chain_pems[0].write_to_path(str(files["cert"]))
    server_cert.private_key_pem.write_to_path(str(files["key"]))
    ca.cert_pem.write_to_path(str(files["ca"]))
    client_cert.private_key_and_cert_chain_pem.write_to_path(str(files["client"]))
    telemetry = _recorded()
    tls = TLSConfig(str(files["cert"]), str(files["key"]), str(files["ca"]))
    auth = BasicAuth("scraper", hash_password("s3cret"))
    with telemetry.serve(port=0, tls=tls, auth=auth) as server:
        # Not a test of time: half a minute for each answer (scrypt and the handshakes, on a CI machine that
        # gives this tier only the cores nothing else wants), so only a server that never answers fails it.
        security = ClientSecurity(str(files["ca"]), str(files["client"]), None, "scraper", "s3cret")
        reading = ExporterSource(server.url, security, timeout=30).read()
        assert {a.agent for a in reading.agents} == {"math", "code"}
        wrong = ClientSecurity(str(files["ca"]), str(files["client"]), None, "scraper", "nope")
        with pytest.raises(SourceDown, match="HTTP 401"):
            ExporterSource(server.url, wrong, timeout=30).read()
        with pytest.raises(SourceDown, match="TLS"):
            ExporterSource(server.url, timeout=30).read()  # the system's CAs do not know the test CA


def test_follow_source_reads_a_runs_files() -> None:
    """A run's files give the same figures report counts: per agent, without an in-flight list."""
    telemetry = RolloutTelemetry()
    files = RunFiles.from_main(FIXTURES / "run.jsonl")
    follower = telemetry._run_follower(files)
    reading = FollowSource(follower, telemetry).read()
    snapshot = telemetry.snapshot()
    assert reading.in_flight is None
    assert reading.tracks_in_flight is False  # files show finished rollouts only
    assert {a.agent for a in reading.agents} == {"math_agent", "code_agent", "browser_agent"}
    assert [a.agent for a in reading.agents] == [a.agent for a in snapshot.agents]
    for totals, agent in zip(reading.agents, snapshot.agents, strict=True):
        assert totals.completed == agent.completed
        assert sum(totals.failed.values()) == agent.failed
        assert sum(totals.omitted.values()) == agent.omitted
        assert totals.mean_reward == agent.mean_reward


def test_an_exporter_tracking_no_rollout_block_says_so_and_gives_done_of_expected() -> None:
    """An exporter that tracked no rollout block (one following files) says so in /rollouts: no list, not an
    empty one; its expected work gives done of expected per agent. Once a block is tracked: an empty list."""
    telemetry = RolloutTelemetry(runtime_metrics=False)
    telemetry.expect("math", tasks=4)
    telemetry.record("math", {"reward": 1.0}, task_index=0, rollout_index=0)
    telemetry.record_failure("math", "session_lost", task_index=1, rollout_index=0)
    with telemetry.serve(port=0) as server:
        reading = ExporterSource(server.url, timeout=30).read()
    assert reading.in_flight is None
    assert reading.tracks_in_flight is False
    (math,) = reading.agents
    assert (math.expected, math.unknown) == (4, 2)
    with telemetry.rollout("math", task_index=2, rollout_index=0) as rollout:
        rollout.complete({"reward": 0.0})
    with telemetry.serve(port=0) as server:
        reading = ExporterSource(server.url, timeout=30).read()
    assert reading.in_flight == ()
    assert reading.tracks_in_flight is True
    assert reading.agents[0].unknown == 1


def test_a_run_with_no_agent_says_why(tmp_path: Path) -> None:
    """A run's files with no row yet, or whose every row was rejected: no agent, and the screen says why."""
    from rich.console import Console

    from rollout_telemetry._cli.top_model import TopView
    from rollout_telemetry._cli.top_screen import render

    main = tmp_path / "run.jsonl"
    main.write_text("")
    telemetry = RolloutTelemetry()
    source = FollowSource(telemetry._run_follower(RunFiles.from_main(main)), telemetry)
    assert source.read().note == f"no rollout row in {main} yet"
    main.write_text('{"reward": "high", "_ng_environment_server": "a"}\nnot json\n')
    reading = source.read()
    assert reading.agents == ()
    assert reading.note is not None
    assert reading.note.startswith("every row was rejected (invalid_reward 1, malformed_json 1)")
    poller = Poller(source, 1.0, clock=FakeClock())
    poller.poll_once()  # nothing new: the same reason
    console = Console(width=200, record=True)
    console.print(render(TopView((poller.view,), 1.0, 0.0), width=200))
    assert "0 agents: every row was rejected (invalid_reward 1, malformed_json 1)" in console.export_text()


class _Flaky:
    """A source that answers until told to fail."""

    label = "flaky:9464"

    def __init__(self) -> None:
        self.down = False
        self.completed = 0.0

    def read(self) -> Reading:
        if self.down:
            raise SourceDown("timed out")
        self.completed += 30
        return Reading((AgentTotals("math", completed=self.completed),))


def test_a_poller_says_how_long_a_source_has_been_down() -> None:
    """Up with a rate after two reads; then down with the reason and the time since the last good read."""
    clock = FakeClock()
    source = _Flaky()
    poller = Poller(source, 1.0, clock=clock)
    poller.poll_once()
    clock.advance(6)
    view = poller.poll_once()
    assert view.up
    assert view.agents[0].per_minute == pytest.approx(300.0)  # 30 in 6 s
    source.down = True
    clock.advance(4)
    view = poller.poll_once()
    assert (view.up, view.error, view.down_for) == (False, "timed out", 4.0)


def test_a_missing_run_file_is_down_until_it_appears(tmp_path: Path) -> None:
    """--follow on a file not written yet says so, then reads it once it is there."""
    telemetry = RolloutTelemetry()
    main = tmp_path / "run.jsonl"
    source = FollowSource(telemetry._run_follower(RunFiles.from_main(main)), telemetry)
    with pytest.raises(SourceDown, match="no such file"):
        source.read()
    main.write_bytes((FIXTURES / "run.jsonl").read_bytes())
    assert {a.agent for a in source.read().agents} >= {"math_agent", "code_agent"}


def test_rows_naming_no_agent_are_the_files_and_the_screen_says_so(tmp_path: Path) -> None:
    """top --follow on rows naming no agent shows them under the file's name, with how to name them."""
    main = tmp_path / "evals.jsonl"
    main.write_text('{"reward": 1.0}\n{"reward": 0.0}\n')
    telemetry = RolloutTelemetry()
    follower = telemetry._run_follower(RunFiles.from_main(main), default_agent=RunFiles.from_main(main).name)
    reading = FollowSource(follower, telemetry).read()
    assert [agent.agent for agent in reading.agents] == ["evals"]
    assert reading.note == (
        f"2 rows of {main} name no agent (no agent_ref.name, _ng_environment_server or materialized inputs "
        "row): shown as 'evals'; --agent NAME names them"
    )


def test_top_reads_each_rollouts_state_and_heartbeat_age_from_a_telemetry() -> None:
    """/rollouts of a real telemetry, parsed as top does: every state and heartbeat age; terminal ones are
    listed but not counted in flight, in the listing nor in the agent's figures."""
    clock = FakeClock()
    telemetry = RolloutTelemetry(clock=clock, stall_after=100.0, slow_after=10.0)
    slow = telemetry.rollout("math", task_index=0, rollout_index=0).__enter__()
    clock.advance(5.0)
    slow.heartbeat()
    clock.advance(15.0)
    retrying = telemetry.rollout("math", task_index=1, rollout_index=0, attempt=1).__enter__()
    cancelled = telemetry.rollout("math", task_index=2, rollout_index=0).__enter__()
    cancelled.cancel()
    terminal = telemetry.rollout("math", task_index=3, rollout_index=0).__enter__()
    terminal.complete({"reward": 1.0})
    body = json.loads(json.dumps(telemetry.rollouts_in_flight()))
    assert body["in_flight"] == 3
    rollouts, _ = parse_rollouts(body)
    assert rollouts is not None
    assert [(r.task_index, r.state, r.heartbeat_age_seconds) for r in rollouts] == [
        (0, "slow", 15.0),
        (1, "retrying", 0.0),
        (2, "cancelled", 0.0),
        (3, "terminal", 0.0),
    ]
    (math,) = parse_metrics(exposition(telemetry.registry))
    assert math.in_flight == 3
    for context in (slow, retrying, cancelled, terminal):
        context.__exit__(None, None, None)


def test_a_finished_runs_files_are_ended_once_they_stop_growing(tmp_path: Path) -> None:
    """top --follow on a run's files: up while rows arrive or expected rollouts lack an outcome; ended once
    the files did not grow since the last read and every expected rollout has an outcome."""
    inputs = [
        {"agent_ref": {"name": "math"}, "_ng_task_index": task, "_ng_rollout_index": 0} for task in range(2)
    ]
    (tmp_path / "run_materialized_inputs.jsonl").write_text("".join(json.dumps(row) + "\n" for row in inputs))
    main = tmp_path / "run.jsonl"
    row = {"reward": 1.0, "agent_ref": {"name": "math"}, "_ng_rollout_index": 0}
    main.write_text(json.dumps({**row, "_ng_task_index": 0}) + "\n")
    telemetry = RolloutTelemetry()
    source = FollowSource(telemetry._run_follower(RunFiles.from_main(main)), telemetry)
    assert source.read().ended is False  # rows arrived
    assert source.read().ended is False  # no new row, but a rollout has no outcome yet: Gym may be at it
    with main.open("a") as file:
        file.write(json.dumps({**row, "_ng_task_index": 1}) + "\n")
    assert source.read().ended is False  # the last row arrived now
    poller = Poller(source, 1.0, clock=FakeClock())
    view = poller.poll_once()
    assert (view.up, view.ended) == (True, True)
