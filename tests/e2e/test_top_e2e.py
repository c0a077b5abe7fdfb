"""``rollout-telemetry top`` for real in an 80x24 terminal: tmux runs it, the test reads the pane as a person.

tmux (Debian's package) gives the program a real terminal, sends the keys a person would press, and shows
what they would see: ``capture-pane`` is the screen as text.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import trustme

from rollout_telemetry import BasicAuth, RolloutTelemetry, TLSConfig, hash_password
from tests.e2e.processes import Exporter
from tests.support import free_port, require_tool, samples, wait_until

FIXTURES = Path(__file__).parent.parent / "fixtures"
# A row of the agent table: agent, r/min, mean, unmasked, masked share, failed count (then its kind ...).
_ROW = re.compile(
    r"^(?P<agent>\S+)\s+(?P<rate>\S+)\s+(?P<mean>\S+)\s+(?P<unmasked>\S+)\s+\S+\s+(?P<failed>\d+)"
)


class Terminal:
    """One command in a detached 80x24 tmux session on a tmux server of its own."""

    def __init__(self, tmux: str, server: str) -> None:
        self._tmux = tmux
        self._server = server

    def _run(self, *args: str) -> str:
        result = subprocess.run(
            [self._tmux, "-L", self._server, *args], capture_output=True, text=True, timeout=10, check=True
        )
        return result.stdout

    def start(self, command: str) -> None:
        # The shell reports the exit status, then keeps the pane open for the test to read it.
        shell = f"{command}; echo EXIT=$?; sleep 600"
        self._run("new-session", "-d", "-s", "top", "-x", "80", "-y", "24", shell)

    def screen(self) -> str:
        """What the pane shows now, one line per row."""
        return self._run("capture-pane", "-p", "-t", "top")

    def keys(self, *keys: str) -> None:
        self._run("send-keys", "-t", "top", *keys)

    def wait_for(self, condition: str | re.Pattern[str], *, timeout: float = 30) -> str:
        """The screen once it contains ``condition``; fails with the last screen after ``timeout``."""
        last = ""

        def shown() -> bool:
            nonlocal last
            last = self.screen()
            return bool(condition.search(last)) if isinstance(condition, re.Pattern) else condition in last

        try:
            wait_until(shown, timeout=timeout, what=f"{condition!r} on screen")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the screen was:\n{last}") from None
        return last


@contextmanager
def terminal() -> Iterator[Terminal]:
    """A private tmux server, killed afterwards whatever happened."""
    tmux = require_tool("tmux")
    server = f"rollout-top-{os.getpid()}-{time.monotonic_ns()}"
    try:
        yield Terminal(tmux, server)
    finally:
        subprocess.run([tmux, "-L", server, "kill-server"], capture_output=True, timeout=10, check=False)


def _top(*args: str, env: str = "") -> str:
    command = shlex.join([sys.executable, "-m", "rollout_telemetry", "top", *args])
    return f"cd {shlex.quote(os.getcwd())} && env LANG=C.UTF-8 {env} {command}"


def _rows(screen: str) -> dict[str, re.Match[str]]:
    rows = {}
    for line in screen.splitlines():
        match = _ROW.match(line)
        if match and match["agent"] not in rows:  # the agent table comes before the in-flight list
            rows[match["agent"]] = match
    return rows


def _number(shown: str) -> float:
    """A figure as top shows it: ``12.5``, or compact past 9,999 (``39k``, ``2M``)."""
    scale = {"k": 1e3, "M": 1e6}.get(shown[-1:], 1.0)
    return float(shown[:-1] if scale != 1.0 else shown) * scale


def _expected(exposition: str) -> dict[str, tuple[int, str]]:
    """Per agent, the failed count and the mean reward as two decimals, from the exporter itself."""
    failed: dict[str, float] = {}
    means: dict[str, str] = {}
    for (name, labels), value in samples(exposition).items():
        agent = dict(labels).get("agent", "")
        if name == "rollout_failed_total":
            failed[agent] = failed.get(agent, 0.0) + value
        elif name == "rollout_reward":
            means[agent] = f"{value:+.2f}"
    return {agent: (int(failed.get(agent, 0)), mean) for agent, mean in means.items()}


def test_top_shows_a_live_exporter_and_a_down_one_and_q_quits(tmp_path: Path) -> None:
    """Three agents with their figures update while a dead exporter shows as DOWN; ``q`` exits with 0."""
    agents = ("math_agent", "code_agent", "browser_agent")
    demo = ["demo", "--seed", "3", "--rate", "60", "--max-rollout-seconds", "0.5", "--duration", "12"]
    demo += ["--linger", "300", "--failed", "0.2"]
    nothing = f"http://127.0.0.1:{free_port()}"
    with Exporter(demo, tmp_path / "demo.log") as exporter, terminal() as term:
        term.start(_top(exporter.url, nothing, "--interval", "0.5", env="NO_COLOR=1"))
        screen = term.wait_for(re.compile(r"up  3 agents"))
        screen = term.wait_for(f"{nothing.removeprefix('http://')}  DOWN  connection refused")

        def rates_shown() -> bool:
            # A rate needs two readings ("-" until then) and is of the last 0.5 s, in which a loaded demo may
            # finish none of an agent's rollouts (or catch up in a burst: 39k r/min was seen): the run going
            # on shows as a screen where every agent has a rate above 0.
            rows = _rows(term.screen())
            return set(rows) >= set(agents) and all(
                rows[a]["rate"] != "-" and _number(rows[a]["rate"]) > 0 for a in agents
            )

        wait_until(rates_shown, timeout=30, what="a rate above 0 for every agent on screen")
        screen = term.screen()
        assert all(len(line) <= 80 for line in screen.splitlines())

        def figures_match() -> bool:
            expected = _expected(exporter.scrape())
            shown = {a: (int(m["failed"]), m["mean"]) for a, m in _rows(term.screen()).items()}
            return all(shown.get(a) == expected.get(a) for a in agents)

        # Once the run is over its counts stand still: the screen must then show the exporter's own.
        wait_until(figures_match, timeout=30, what="the exporter's failed counts and means on screen")
        assert "DOWN" in term.screen()  # and the dead one is still shown as down
        term.keys("q")
        final = term.wait_for("EXIT=", timeout=15)
        assert "EXIT=0" in final


def test_top_follows_a_runs_files_and_ctrl_c_exits_0(tmp_path: Path) -> None:
    """``--follow`` shows the fixture run's agents, picks up an appended row, and Ctrl-C exits with 0."""
    for name in ("run.jsonl", "run_failures.jsonl", "run_materialized_inputs.jsonl"):
        shutil.copy(FIXTURES / name, tmp_path / name)
    main = tmp_path / "run.jsonl"
    with terminal() as term:
        term.start(_top("--follow", str(main), "--interval", "0.5"))
        screen = term.wait_for(re.compile(r"^browser_agent +", re.M))
        rows = _rows(screen)
        # Worked from the fixture: math has rewards 1.0 and a masked 0.0; code 1.0 masked-free and 0.0
        # (plus a session_lost failure); browser a timeout and a cancelled omission.
        assert (rows["math_agent"]["mean"], rows["math_agent"]["unmasked"]) == ("+0.50", "+1.00")
        assert rows["code_agent"]["failed"] == "1"
        assert "session" in screen
        assert rows["browser_agent"]["failed"] == "1"
        assert "oldest in flight" not in screen  # files have no in-flight list
        row = json.loads((FIXTURES / "run.jsonl").read_text().splitlines()[0])
        row.update(_ng_task_index=90, _ng_rollout_id="math-90-0")
        with main.open("a") as out:
            out.write(json.dumps(row) + "\n")
        term.wait_for(re.compile(r"^math_agent +\S+ +\+0\.67", re.M))  # (1 + 0 + 1) / 3
        term.keys("C-c")
        assert "EXIT=0" in term.wait_for("EXIT=", timeout=15)


def test_top_reaches_a_secured_exporter_with_serves_client_flags(tmp_path: Path) -> None:
    """HTTPS verified against a CA, a client certificate and a basic-auth password from the environment."""
    ca = trustme.CA()
    server_cert, client_cert = ca.issue_cert("127.0.0.1"), ca.issue_cert("top@example.test")
    server_cert.cert_chain_pems[0].write_to_path(str(tmp_path / "server.pem"))
    server_cert.private_key_pem.write_to_path(str(tmp_path / "server.key"))
    client_cert.cert_chain_pems[0].write_to_path(str(tmp_path / "client.pem"))
    client_cert.private_key_pem.write_to_path(str(tmp_path / "client.key"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    telemetry = RolloutTelemetry(run="secure")
    telemetry.record("secure_agent", {"reward": 0.75})
    tls = TLSConfig(str(tmp_path / "server.pem"), str(tmp_path / "server.key"), str(tmp_path / "ca.pem"))
    auth = BasicAuth("top", hash_password("s3cret"))
    with telemetry.serve(port=0, tls=tls, auth=auth) as server, terminal() as term:
        flags = ["--tls-ca", str(tmp_path / "ca.pem"), "--tls-cert", str(tmp_path / "client.pem")]
        flags += ["--tls-key", str(tmp_path / "client.key"), "--basic-auth-user", "top"]
        flags += ["--basic-auth-password-env", "TOP_TEST_PASSWORD", "--interval", "0.5"]
        term.start(_top(server.url, *flags, env="TOP_TEST_PASSWORD=s3cret"))
        screen = term.wait_for(re.compile(r"^secure_agent +\S+ +\+0\.75", re.M))
        assert "up  1 agent" in screen
        term.keys("q")
        assert "EXIT=0" in term.wait_for("EXIT=", timeout=15)
