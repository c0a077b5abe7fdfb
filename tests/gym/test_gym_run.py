"""Beside a real NeMo Gym 0.7.0 run: its own collection, followed live, checked three ways.

Every scenario runs Gym's real collection (``gym eval run``) against its real servers and the fake policy
model, and checks what the exporter served, live and at the end, against (i) a computation from the files Gym
wrote (``harness.expected_from_files``, ``json`` alone), (ii) Gym's own progress step metrics and end-of-run
keys, captured in its process through its exporter registry, and (iii) its ``_aggregate_metrics.json``.
"""

from __future__ import annotations

import itertools
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest

from rollout_telemetry._sources.gym_process import GRACE
from tests.e2e.dashboard import followed_run_panels
from tests.e2e.prometheus import Prometheus
from tests.gym.harness import (
    EXAMPLE_AGENT,
    TEST_AGENT,
    TEST_TASKS,
    TROUBLED,
    FakeModel,
    GymServers,
    Watch,
    descendants,
)
from tests.gym.oracle import (
    GymRun,
    Samples,
    by_agent,
    check_exposition,
    check_report,
    expected_from_files,
    gym_progress_of_the_files,
)
from tests.support import alive, samples, stop_process, wait_until

# The first test starts Gym's servers (about a minute; two on a loaded machine; once more if Ray's raylet dies
# at its start, tests/gym/harness.py) and a run takes up to two.
pytestmark = pytest.mark.timeout(600)


def check_live(watch: Watch, run: GymRun) -> None:
    """While Gym ran the counts rose (an intermediate count was served), and no counter ever went back."""
    final = sum(e.completed + e.failed for e in expected_from_files(run).values())
    totals = []
    previous: Samples = {}
    for _, running, text in watch.scrapes:
        values: Samples = samples(text)
        events = sum(
            v
            for (name, _), v in values.items()
            if name in ("rollout_completed_total", "rollout_failed_total")
        )
        totals.append((running, events))
        for key, value in values.items():
            if key[0].endswith("_total") and key in previous:
                assert value >= previous[key], f"{key} went back from {previous[key]} to {value}"
        previous = values
    assert [events for _, events in totals] == sorted(events for _, events in totals)
    assert any(running and 0 < events < final for running, events in totals), (
        f"no intermediate count served while Gym ran: {totals}"
    )


def _watch(gym: GymServers, command: list[str], *, flags: tuple[str, ...] = ()) -> Watch:
    return Watch(command, gym.workdir, gym.environ(), flags=flags).start()


def test_a_healthy_run_of_gyms_example_environment(
    gym: GymServers, gym_model: FakeModel, workdir: Path
) -> None:
    """Gym's own example environment and tasks, every rollout rewarded: the counts rise live, the report
    equals Gym's keys, and a healthy run publishes no failure series."""
    gym_model.plan(delay=0.15)
    run = GymRun(workdir / "rollouts.jsonl", workdir / "gym-metrics.jsonl")
    tasks = gym.example_tasks
    command = gym.eval_command(
        EXAMPLE_AGENT, tasks, run.output, repeats=5, concurrency=2, capture=run.capture
    )
    watch = _watch(gym, command)
    assert watch.wait() == 0, watch.stderr.decode(errors="replace")[-3000:]
    check_live(watch, run)
    final = watch.scrapes[-1][2]
    check_exposition(final, run)
    report = watch.report()
    check_report(report, run)
    assert report["agents"][0]["agent"] == EXAMPLE_AGENT
    names = {name for name, _ in samples(final)}
    for family in (
        "rollout_masked_total",
        "rollout_failed_total",
        "rollout_omitted_total",
        "rollout_unscored_total",
    ):
        assert family not in names, family


def test_masked_and_failed_rollouts_routed_to_the_sidecar(
    gym: GymServers, gym_model: FakeModel, workdir: Path
) -> None:
    """The test environment masks one task and the model fails another every other try: masked counts, the
    failures by Gym's class, Gym's masked_pct and reward_unmasked, all as Gym computes them; ``--html``
    writes the page of the same report."""
    gym_model.plan(TROUBLED, delay=0.15)
    run = GymRun(workdir / "rollouts.jsonl", workdir / "gym-metrics.jsonl")
    command = gym.eval_command(
        TEST_AGENT, TEST_TASKS, run.output, repeats=4, concurrency=2, capture=run.capture
    )
    page = workdir / "report.html"
    watch = _watch(gym, command, flags=("--html", str(page)))
    assert watch.wait() == 0, watch.stderr.decode(errors="replace")[-3000:]
    expected = expected_from_files(run)[TEST_AGENT]
    assert expected.masked == 4  # the [mask] task's 4 rollouts
    assert expected.failed_by_class == {"agent_run_error": 2}  # humidity: fail, call, fail, call
    check_live(watch, run)
    check_exposition(watch.scrapes[-1][2], run)
    report = watch.report()
    check_report(report, run)
    progress = report["gym_progress"]
    assert progress[f"progress/{TEST_AGENT}/masked_pct"] == round(100 * 4 / 22, 2)
    assert progress[f"progress/{TEST_AGENT}/failed"] == 2
    html = page.read_text(encoding="utf-8")
    opening = '<script type="application/json" id="report">'
    embedded = html[html.index(opening) + len(opening) : html.index("</script>", html.index(opening))]
    assert json.loads(embedded) == report


def _events(text: str) -> float:
    return sum(
        v
        for (name, _), v in samples(text).items()
        if name in ("rollout_completed_total", "rollout_failed_total")
    )


def _wait_for_outcomes(
    watch: Watch, count: int, *, timeout: float = 120, stop: Callable[[str], bool] | None = None
) -> None:
    """Until the watch has served ``count`` rollout outcomes (Gym is still running then); a timeout, or the
    watch ending first, or ``stop`` holding for what it wrote (its last 200 lines), says what the command and
    Gym last wrote."""
    assert watch.process is not None

    def served() -> bool:
        if bool(watch.scrapes) and _events(watch.scrapes[-1][2]) >= count:
            return True
        if watch.process is not None and watch.process.poll() is not None:  # no rollout can come any more
            msg = f"the watch ended ({watch.process.returncode}) before {count} rollouts"
            raise AssertionError(msg)
        if stop is not None and stop(watch.output_tail(200)):
            msg = f"given up before {count} rollouts on what the watch wrote"
            raise AssertionError(msg)
        return False

    try:
        wait_until(served, timeout=timeout, what=f"{count} rollouts")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the watch's stderr ends:\n{watch.output_tail()}") from None


def test_killed_then_resumed_then_retried(gym: GymServers, gym_model: FakeModel, workdir: Path) -> None:
    """Gym killed mid-run (SIGKILL): the watch ends with Gym's status, and unknown = expected - done, nothing
    invented. Resumed (--resume): the rows already written are read from the start, the rest follow. Resumed
    once more after the failures: Gym retries them (attempt 1); coverage shows them measured and retried, and
    rollout_attempts counts each identity once, the retried ones at two attempts."""
    gym_model.plan(TROUBLED, delay=0.4)
    run = GymRun(workdir / "rollouts.jsonl", workdir / "gym-metrics.jsonl")
    command = gym.eval_command(
        TEST_AGENT, TEST_TASKS, run.output, repeats=4, concurrency=2, capture=run.capture
    )
    watch = _watch(gym, command)
    _wait_for_outcomes(watch, 6)
    gym_pid = watch.gym_pid()
    assert gym_pid is not None
    os.killpg(gym_pid, signal.SIGKILL)
    assert watch.wait() == 128 + signal.SIGKILL
    assert "Gym was ended by SIGKILL" in watch.stderr.decode()
    killed = expected_from_files(run)[TEST_AGENT]
    assert 0 < killed.completed + killed.failed < killed.expected == 24
    assert killed.unknown == killed.expected - killed.completed - killed.failed
    report = watch.report()
    check_report(report, run, gym_progress=False, gym_finished=False)
    check_exposition(watch.scrapes[-1][2], run)

    # Resumed: Gym appends; the watch reads what is there, then what comes. Gym's own progress keys cover this
    # session's rollouts only; the exporter's cover the run's files, by Gym's formulas.
    run.capture.unlink(missing_ok=True)  # type: ignore[union-attr]
    resumed = _watch(gym, [*command, "--resume"])
    assert resumed.wait() == 0, resumed.stderr.decode(errors="replace")[-3000:]
    report = resumed.report()
    check_report(report, run, gym_progress=False)
    check_exposition(resumed.scrapes[-1][2], run)
    assert report["gym_progress"] == gym_progress_of_the_files(run, TEST_AGENT)
    after_resume = expected_from_files(run)[TEST_AGENT]
    assert after_resume.unknown == 0
    failed_before_retry = after_resume.failed
    assert failed_before_retry > 0  # the humidity task fails every other try
    assert report["agents"][0]["rollouts"]["retryable"] == failed_before_retry

    # Resumed again with a model that no longer fails: Gym retries the failed rollouts as attempt 1.
    gym_model.plan(delay=0.05)
    run.capture.unlink(missing_ok=True)  # type: ignore[union-attr]
    retried = _watch(gym, [*command, "--resume"])
    assert retried.wait() == 0, retried.stderr.decode(errors="replace")[-3000:]
    attempts = [row.get("_ng_attempt_index") for row in run.rows()]
    assert attempts.count(1) == failed_before_retry  # Gym stamped the retries
    report = retried.report()
    check_report(report, run, gym_progress=False)
    rollouts = report["agents"][0]["rollouts"]
    assert (rollouts["failed"], rollouts["retryable"], rollouts["retried"]) == (0, 0, failed_before_retry)
    assert rollouts["measured"] + rollouts["masked"] == 24
    assert report["agents"][0]["events"]["failed"] == failed_before_retry  # a failed attempt stays an event
    final = {name: count for (name, labels), count in samples(retried.scrapes[-1][2]).items()
             if name.startswith("rollout_attempts_") and dict(labels).get("agent") == TEST_AGENT}  # fmt: skip
    assert (final["rollout_attempts_count"], final["rollout_attempts_sum"]) == (24, 24 + failed_before_retry)


def test_a_fresh_run_over_an_old_one(
    gym: GymServers, gym_model: FakeModel, workdir: Path, tmp_path: Path
) -> None:
    """serve PATH over two fresh Gym runs with the same output: the second replaces the files, a new run
    begins (rollout_run_restarts_total), no counter ever goes back and each row is counted once; then a watch
    over those files counts only its own run's rows, not the ones left from before."""
    gym_model.plan(TROUBLED, delay=0.05)
    output = workdir / "rollouts.jsonl"
    port = _free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    scraped: list[Samples] = []
    totals: list[int] = []

    def caught_up(expected: int) -> bool:
        text = _get(url)
        return (
            text is not None
            and by_agent(samples(text), "rollout_run_expected", TEST_AGENT) == expected
            and _events(text) == sum(totals)
        )

    with (tmp_path / "serve.log").open("wb") as log:
        serve_command = ["serve", str(output), "--poll-interval", "0.05", "--port", str(port)]
        serve = subprocess.Popen(
            [sys.executable, "-m", "rollout_telemetry", *serve_command],
            cwd=gym.workdir,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        try:
            wait_until(lambda: _get(url) is not None, timeout=30, what="serve to start")
            for repeats in (3, 2):
                command = gym.eval_command(TEST_AGENT, TEST_TASKS, output, repeats=repeats, concurrency=4)
                gym_run = subprocess.Popen(command, cwd=gym.workdir, env=gym.environ(),
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
                while gym_run.poll() is None:
                    if (text := _get(url)) is not None:
                        scraped.append(samples(text))
                    time.sleep(0.02)
                assert gym_run.returncode == 0
                figures = expected_from_files(GymRun(output))[TEST_AGENT]
                totals.append(figures.completed + figures.failed)
                wait_until(partial(caught_up, 6 * repeats), timeout=30, what="serve to read the run")
                scraped.append(samples(_get(url) or ""))
        finally:
            stop_process(serve, timeout=30)
    final = scraped[-1]
    for before, after in itertools.pairwise(scraped):
        for key, value in before.items():
            if key[0].endswith("_total"):
                assert after.get(key, 0.0) >= value, f"{key} went back from {value} to {after.get(key)}"
    assert by_agent(final, "rollout_completed_total", TEST_AGENT) + by_agent(
        final, "rollout_failed_total", TEST_AGENT
    ) == sum(totals)
    assert final[("rollout_run_restarts_total", frozenset())] >= 1
    second = expected_from_files(GymRun(output))[TEST_AGENT]
    assert by_agent(final, "rollout_run_rollouts", TEST_AGENT, disposition="unknown") == 0
    assert by_agent(final, "rollout_run_expected", TEST_AGENT) == second.expected == 12

    # A watch of a fresh run over these files: the rows left by the last run are not this run's.
    run = GymRun(output, workdir / "gym-metrics.jsonl")
    command = gym.eval_command(TEST_AGENT, TEST_TASKS, output, repeats=1, concurrency=2, capture=run.capture)
    watch = _watch(gym, command)
    assert watch.wait() == 0
    check_report(watch.report(), run)
    check_exposition(watch.scrapes[-1][2], run)


def _watch_mid_run(gym: GymServers, gym_model: FakeModel, workdir: Path) -> tuple[Watch, GymRun]:
    """A watch of a troubled Gym run at the test's environment, once two outcomes are served (Gym is still
    running then: 24 rollouts, two at a time, each turn of the model 0.5 s)."""
    gym_model.plan(TROUBLED, delay=0.5)
    run = GymRun(workdir / "rollouts.jsonl", workdir / "gym-metrics.jsonl")
    command = gym.eval_command(
        TEST_AGENT, TEST_TASKS, run.output, repeats=4, concurrency=2, capture=run.capture
    )
    watch = _watch(gym, command)
    _wait_for_outcomes(watch, 2)
    return watch, run


def test_ctrl_c_stops_gym_and_reports(gym: GymServers, gym_model: FakeModel, workdir: Path) -> None:
    """Ctrl-C on the watch reaches Gym once (it runs in its own process group); Gym stops, the report of what
    it wrote is printed, and the exit status is Gym's (NeMo Gym 0.7.0 ends on Ctrl-C by SIGSEGV, which the
    line says is how it ends)."""
    watch, run = _watch_mid_run(gym, gym_model, workdir)
    assert watch.process is not None
    watch.process.send_signal(signal.SIGINT)
    status = watch.wait(timeout=120)
    stderr = watch.stderr.decode(errors="replace")
    line = next(line for line in stderr.splitlines() if line.startswith("rollout-telemetry gym: Gym "))
    assert f"status {status}" in line, (line, status)
    assert "after SIGINT was passed on to it" in line, line
    if status == 128 + signal.SIGSEGV:  # how Gym 0.7.0 ends: said to be so, not a crash to worry about
        assert line.endswith(
            "(expected: NeMo Gym 0.7.0 ends so on an interrupt; everything it wrote was read)"
        )
    assert status != 0
    assert "KeyboardInterrupt" in stderr  # Gym got the Ctrl-C (its output goes to the watch's stderr)
    figures = expected_from_files(run)[TEST_AGENT]
    assert figures.unknown > 0  # stopped before the end
    check_report(watch.report(), run, gym_progress=False, gym_finished=False)


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGHUP], ids=["SIGKILL", "SIGHUP"])
def test_no_gym_process_outlives_its_watch(
    gym: GymServers, gym_model: FakeModel, workdir: Path, signum: signal.Signals
) -> None:
    """The watch ended mid-run by SIGKILL (no handler of its own runs) or by the hang-up a closed terminal
    sends: the real Gym command and every process it started end too, none left running under PID 1; Gym's
    servers, which the watch did not start, keep running."""
    watch, _ = _watch_mid_run(gym, gym_model, workdir)
    assert watch.process is not None
    started = list(descendants(watch.process.pid))  # Gym, what it started, and the guard
    assert watch.gym_pid() in started, started
    assert len(started) >= 2, started  # the guard too
    assert gym.process is not None
    servers = list(descendants(gym.process.pid))
    watch.process.send_signal(signum)
    watch.wait(timeout=60)
    # After SIGKILL the guard gives Gym GRACE seconds to end on SIGTERM before it kills Gym's group.
    wait_until(lambda: not any(alive(pid) for pid in started), timeout=GRACE + 15, what="Gym to end")
    assert all(alive(pid) for pid in servers)


def _get(url: str) -> str | None:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return str(response.read().decode())
    except (urllib.error.URLError, OSError):
        return None


def _free_port() -> int:
    from tests.support import free_port

    return free_port()


def test_every_dashboard_panel_during_a_real_gym_run(
    gym: GymServers, gym_model: FakeModel, workdir: Path, tmp_path: Path
) -> None:
    """A real Prometheus scrapes the watch while Gym runs: the coverage row shows the run part done mid-run,
    and at the end every panel has data (but the lifecycle ones, which only the hook API fills), with the
    coverage panels equal to the files."""
    gym_model.plan(TROUBLED, delay=0.3)
    run = GymRun(workdir / "rollouts.jsonl", workdir / "gym-metrics.jsonl")
    command = gym.eval_command(
        TEST_AGENT, TEST_TASKS, run.output, repeats=4, concurrency=2, capture=run.capture
    )
    watch = Watch(command, gym.workdir, gym.environ(), flags=("--run", "gym-e2e", "--linger", "30"))
    prometheus = Prometheus(tmp_path, [f"127.0.0.1:{watch.port}"], interval="200ms")
    done = 'sum(rollout_run_rollouts{run="gym-e2e",disposition!="unknown"})'
    with prometheus:
        prometheus.wait_for(lambda: bool(prometheus.query("up")), timeout=30, what="the first scrape")
        watch.start()
        try:
            mid_run: list[float] = []

            def part_done() -> bool:
                found = prometheus.query(done)
                value = float(found[0]["value"][1]) if found else 0.0
                if 0 < value < 24 and watch.gym_running():
                    mid_run.append(value)
                return bool(mid_run)

            prometheus.wait_for(part_done, timeout=120, what="a run part done, scraped while Gym runs")
            aggregate = run.output.with_name("rollouts_aggregate_metrics.json")
            wait_until(aggregate.exists, timeout=180, what="Gym to finish")
            figures = expected_from_files(run)[TEST_AGENT]

            def scraped_final() -> bool:
                found = prometheus.query(done)
                return bool(found) and float(found[0]["value"][1]) == figures.completed + figures.failed

            prometheus.wait_for(scraped_final, timeout=60, what="the final counts to be scraped")
            stamp = max(float(r["value"][1]) for r in prometheus.query("timestamp(rollout_run_expected)"))
            panels = followed_run_panels(prometheus, "gym-e2e", stamp)
        finally:
            assert watch.process is not None
            watch.process.send_signal(signal.SIGTERM)  # ends the linger
            watch.wait()
    expected_stat, done_stat = panels["Rollouts done of expected"]
    assert {float(r["value"][1]) for r in expected_stat} == {24.0}
    assert {float(r["value"][1]) for r in done_stat} == {float(figures.completed + figures.failed)}
    (bars,) = panels["Run progress by disposition"]
    shares = {r["metric"]["disposition"]: float(r["value"][1]) for r in bars}
    assert shares["masked"] == figures.masked / 24
    assert shares["failed"] == figures.failed / 24


QUICKSTART = Path(__file__).parent.parent.parent / "docs" / "quickstart-gym.md"


def _quickstart_line(*start: str) -> list[str]:
    """The quickstart's command line that starts with the words ``start``, its continuations joined."""
    block = QUICKSTART.read_text().split("```bash\n")[1]
    joined = block.split("```")[0].replace("\\\n", " ")
    lines = (shlex.split(line, comments=True) for line in joined.splitlines())
    (line,) = (words for words in lines if tuple(words[: len(start)]) == start)
    return line


def test_the_quickstarts_commands_run_on_the_real_gym(
    gym: GymServers, gym_model: FakeModel, workdir: Path
) -> None:
    """The NeMo Gym quickstart's two commands as written, their placeholders this module's environment: the
    servers' command uses the flags this module's servers were started with, and the watched collection runs
    to its end against them and is counted whole, its failures routed."""
    start = _quickstart_line("gym", "env", "start")
    flags = {word.split("=")[0] for word in start if word.startswith(("-", "+"))}
    assert flags <= {word.split("=")[0] for word in gym.start_command if word.startswith(("-", "+"))}, flags
    watched = _quickstart_line("rollout-telemetry", "gym")
    gym_words = watched[watched.index("--") + 1 :]
    assert "--no-serve" in gym_words
    assert "+route_failures_to_sidecar=true" in gym_words
    given = {
        "gym": str(gym.venv / "bin" / "gym"),
        "my_env_simple_agent": TEST_AGENT,
        "data.jsonl": TEST_TASKS,
        "out/rollouts.jsonl": str(workdir / "rollouts.jsonl"),
    }
    command = [given.get(word, word) for word in gym_words] + [f"++head_server.port={gym.head_port}"]
    gym_model.plan({}, delay=0.1)
    watch = _watch(gym, command)
    assert watch.wait() == 0, watch.stderr.decode(errors="replace")[-3000:]
    (agent,) = watch.report()["agents"]
    assert agent["agent"] == TEST_AGENT
    assert agent["rollouts"]["unknown"] == 0
    assert agent["rollouts"]["expected"] == len((gym.workdir / TEST_TASKS).read_text().splitlines())
