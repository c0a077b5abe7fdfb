"""The real NeMo Gym beside the exporter: its venv, its servers, a fake policy model, and Gym's own accounts.

Used by ``tests/gym`` and ``benchmarks/gym_lag.py``. NeMo Gym runs from its own venv (``scripts/setup-gym``),
never imported here: it is started as processes, as a user starts it, and what it writes is read back.

- ``FakeModel``: ``tests/gym/fake_model.py`` on loopback, answering Gym's model server.
- ``GymServers``: ``gym env start`` with NeMo Gym's example environment ``example_single_tool_call`` and this
  project's test environment ``rt_weather`` (``tests/gym/servers``: masking on demand), in a work directory
  whose ``<type>/<name>/.venv`` links point at the Gym venv, so no server builds a venv of its own.
- ``GymRun``: the files of one collection, read with ``json`` only (independently of the code under test),
  and Gym's own metrics captured by ``tests/gym/launcher.py`` through its exporter registry.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from tests.support import RAY_CHECK_FAILED, own_ray_folder, ray_environment, ray_log_tails, raylet_died

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
GYM_VERSION = "0.7.0"
EXAMPLE_AGENT = "example_single_tool_call_simple_agent"
"""NeMo Gym's own example environment's agent; its tasks are in the wheel's ``data/example.jsonl``."""
TEST_AGENT = "rt_weather_simple_agent"
"""This project's test environment's agent (``tests/gym/servers``): masks the prompts with ``[mask]``."""
TEST_TASKS = "resources_servers/rt_weather/data/tasks.jsonl"
TROUBLED = {"humidity": ["fail", "call"], "tonight": ["answer", "call"]}
"""The test environment's plan: task 2 fails every other first try (routed to the sidecar), task 3 alternates
reward 0 and 1; task 1 is masked by the environment itself ([mask])."""
_SERVER_DIRS = (
    "resources_servers/example_single_tool_call",
    "resources_servers/rt_weather",
    "responses_api_agents/simple_agent",
    "responses_api_models/openai_model",
    "environment_servers/legacy_agent",
)
_READY = "servers ready!"
"""What ``gym env start`` prints once every server answers (``All 7 / 7 servers ready!``)."""
_RAY_STARTUP_TIMEOUT = "The current node timed out during startup"
"""What Gym's ``ray.init()`` raises when its node did not start."""


RAY_STARTS = 3
"""How many times a test starts a Gym whose Ray did not start (Ray waits 30 s for its node, a constant of
its own): each start has a new Ray, and beside a second CI job two starts in a row timed out."""


def ray_did_not_start(output: str) -> bool:
    """Whether Gym's output (and its Ray's logs) say that its Ray did not start: its node timed out, or a Ray
    daemon ended on a failed check (a raylet waiting for its metrics agent's port file, on a loaded machine).
    A second start has a new Ray, and does start."""
    return _RAY_STARTUP_TIMEOUT in output or RAY_CHECK_FAILED in output


class GymUnavailable(RuntimeError):
    """The Gym venv could not be made here."""


def gym_venv() -> Path:
    """The Gym venv, made by ``scripts/setup-gym`` on first use (cached outside the clone).

    Raises:
        GymUnavailable: the script failed; its last line says why.
    """
    result = subprocess.run(
        ["bash", str(REPO / "scripts" / "setup-gym")],
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    if result.returncode != 0:
        lines = (result.stderr or result.stdout).strip().splitlines()
        raise GymUnavailable(lines[-1] if lines else f"scripts/setup-gym exited {result.returncode}")
    return Path(result.stdout.strip().splitlines()[-1])


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _stop_group(process: subprocess.Popen[Any], first: int, timeout: float) -> None:
    """Send ``first`` to a process group, wait; SIGKILL the group if it does not end in time."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, first)
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
        except ProcessLookupError:
            process.wait(timeout=30)


class FakeModel:
    """The fake policy model (``fake_model.py``) on a free loopback port."""

    def __init__(self, log: Path) -> None:
        self.port = _free_port()
        self.log_path = log
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The OpenAI-compatible base URL, as Gym's ``--model-url`` takes it."""
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> FakeModel:
        self.log = self.log_path.open("wb")
        command = [sys.executable, str(HERE / "fake_model.py"), "--port", str(self.port)]
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                self.stats()
                return self
            except OSError:
                time.sleep(0.05)
        raise AssertionError(f"the fake model did not start: {self.log_path.read_text(errors='replace')}")

    def _call(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data)
        with urllib.request.urlopen(request, timeout=10) as response:
            result: dict[str, Any] = json.load(response)
            return result

    def plan(self, prompts: dict[str, list[str]] | None = None, *, delay: float = 0.0) -> None:
        """Answer the k-th first turn of a prompt containing a key with action k of its cycle (see the
        module of the fake model); other prompts get ``call``. Resets the counts."""
        self._call("/control/plan", {"prompts": prompts or {}, "delay": delay})

    def stats(self) -> dict[str, int]:
        """First turns answered so far, by action."""
        return {key: int(value) for key, value in self._call("/control/stats").items()}

    def __exit__(self, *exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
        self.log.close()


def prepare_workdir(workdir: Path, venv: Path) -> None:
    """Make ``workdir`` a place Gym's servers start from: this project's test environment copied in, and each
    server's venv a link to the Gym venv."""
    # Gym looks for a server's venv at <uv_venv_dir, default the cwd>/<type>/<name>/.venv, and for a server's
    # folder under the cwd before its own install.
    shutil.copytree(HERE / "servers" / "resources_servers", workdir / "resources_servers", dirs_exist_ok=True)
    for folder in _SERVER_DIRS:
        (workdir / folder).mkdir(parents=True, exist_ok=True)
        link = workdir / folder / ".venv"
        if not link.exists():
            link.symlink_to(venv)


def gym_environ(venv: Path, ray_folder: str) -> dict[str, str]:
    """The environment Gym runs in: its venv first on PATH, a Ray folder of its own (``own_ray_folder``)."""
    path = f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    return {**os.environ, "PATH": path, **ray_environment(ray_folder)}


def processes_in(ray_folder: str) -> list[int]:
    """The processes whose environment names ``ray_folder`` as their Ray folder: whatever was started in a
    ``gym_environ`` with it, the Ray daemons and workers that end reparented to PID 1 among them (Linux
    ``/proc``; a process that ends meanwhile is passed over)."""
    marker = f"RAY_TMPDIR={ray_folder}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


class GymServers:
    """``gym env start`` with both environments against the fake model, in a work directory of its own."""

    def __init__(self, venv: Path, workdir: Path, model: FakeModel) -> None:
        self.venv = venv
        self.workdir = workdir
        self.model = model
        self.head_port = _free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / "gym-env.log"
        self._folders = contextlib.ExitStack()
        self.ray_folder = ""

    @property
    def site_packages(self) -> Path:
        """The Gym venv's site-packages, where NeMo Gym's own example environments are."""
        return next((self.venv / "lib").glob("python3.*/site-packages"))

    @property
    def example_tasks(self) -> Path:
        """NeMo Gym's example environment's tasks, as shipped in its wheel."""
        return (
            self.site_packages / "resources_servers" / "example_single_tool_call" / "data" / "example.jsonl"
        )

    def environ(self) -> dict[str, str]:
        """The environment Gym runs in (``gym_environ``): Gym's servers and its client join Gym's Ray, never
        another test's."""
        return gym_environ(self.venv, self.ray_folder)

    def __enter__(self) -> GymServers:
        """Start Gym's servers; again, up to ``RAY_STARTS`` in all, while Gym's Ray did not start (its raylet
        died waiting for its metrics agent's port file in three of this machine's CI runs: a new start has a
        new Ray)."""
        prepare_workdir(self.workdir, self.venv)
        failure = self._start()
        for _ in range(RAY_STARTS - 1):
            if failure is None or not ray_did_not_start(failure):
                break
            print(f"gym env start: Ray did not start, starting again:\n{failure}", file=sys.stderr)
            failure = self._start()
        if failure is not None:
            raise AssertionError(f"gym env start did not get ready:\n{failure}")
        return self

    def _start(self) -> str | None:
        """Start ``gym env start`` in a Ray folder of its own; ``None`` once ready, else what it printed and
        Ray's logs (everything it started stopped)."""
        self.ray_folder = self._folders.enter_context(own_ray_folder())
        command = [
            str(self.venv / "bin" / "gym"), "env", "start",
            "--resources-server", "example_single_tool_call", "--resources-server", "rt_weather",
            "--model-type", "openai_model", "--model", "fake", "--model-url", self.model.url,
            "--model-api-key", "dummy", "+skip_venv_if_present=true", "+route_failures_to_sidecar=true",
            f"++head_server.port={self.head_port}",
        ]  # fmt: skip
        self.start_command = command
        self.log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            command,
            cwd=self.workdir,
            env=self.environ(),
            stdout=self.log,
            stderr=subprocess.STDOUT,
            process_group=0,
        )
        try:  # a test's time limit may end the wait: nothing it started outlives it
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                if _READY in self.log_path.read_text(errors="replace"):
                    return None
                if self.process.poll() is not None or raylet_died(self.ray_folder):
                    break  # a dead raylet: Gym's ray.init() would wait out its 120 s for nothing
                time.sleep(0.5)
        except BaseException:
            self.__exit__()
            self.process = None
            raise
        tail = self.log_path.read_text(errors="replace")[-3000:]
        ray_logs = ray_log_tails(self.ray_folder)
        self.__exit__()
        self.process = None
        return f"{tail}\n{ray_logs}"

    def __exit__(self, *exc: object) -> None:
        if self.process is not None:
            # Killed, not asked to stop: nothing after the tests reads what a graceful stop would write, and
            # Gym's own stop (SIGINT: its servers, then its Ray) took 8 s on an idle machine and up to 49 s
            # beside the other tests. Ray's workers, each in a process group of its own, are killed too.
            started = list(descendants(self.process.pid))
            _stop_group(self.process, signal.SIGKILL, timeout=10)
            for pid in started:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        self.log.close()
        self._folders.close()

    def eval_command(
        self,
        agent: str,
        tasks: Path | str,
        output: Path,
        *,
        repeats: int,
        concurrency: int,
        capture: Path | None = None,
        extra: Sequence[str] = (),
    ) -> list[str]:
        """``gym eval run --no-serve`` against these servers, through the capturing launcher; ``capture`` is
        the JSONL file Gym's own metrics go to."""
        command = [
            str(self.venv / "bin" / "python"), str(HERE / "launcher.py"), "eval", "run", "--no-serve",
            "--agent", agent, "--input", str(tasks), "--output", str(output),
            "--num-repeats", str(repeats), "--concurrency", str(concurrency),
            "+route_failures_to_sidecar=true", f"++head_server.port={self.head_port}", *extra,
        ]  # fmt: skip
        if capture is not None:
            command.append(f"+capture_metrics_path={capture}")
        return command


def children(pid: int) -> Iterator[int]:
    """The process ids of a process's children (Linux ``/proc``)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        yield from (int(child) for child in text)


def descendants(pid: int) -> Iterator[int]:
    """The process ids of a process's descendants, children first (Linux ``/proc``); a process that ends
    meanwhile is passed over with its own."""
    try:
        found = list(children(pid))
    except OSError:
        return
    for child in found:
        yield child
        yield from descendants(child)


class Watch:
    """``rollout-telemetry gym -- <command>`` as a real process, scraped in the background while it runs.

    Each scrape is kept as (time, Gym still running, the exposition's text), so a test can check what was
    served during the run; ``report()`` is the JSON report the command prints at the end.
    """

    def __init__(
        self,
        command: Sequence[str],
        workdir: Path,
        environ: dict[str, str],
        *,
        flags: Sequence[str] = (),
        scrape_every: float = 0.05,
        poll_interval: float = 0.1,
    ) -> None:
        self.port = _free_port()
        self.argv = [
            sys.executable, "-m", "rollout_telemetry", "gym", "--port", str(self.port), "--format", "json",
            "--poll-interval", str(poll_interval), "--linger", "0", *flags, "--", *command,
        ]  # fmt: skip
        self.workdir = workdir
        self.environ = environ
        self.scrape_every = scrape_every
        self.scrapes: list[tuple[float, bool, str]] = []
        self.process: subprocess.Popen[bytes] | None = None
        self.stdout = b""
        self.stderr = b""
        self._stderr_lines: list[bytes] = []

    def output_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines the command (and Gym, through it) wrote to stderr so far."""
        return b"".join(self._stderr_lines[-lines:]).decode(errors="replace")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"

    def start(self) -> Watch:
        self.process = subprocess.Popen(
            self.argv, cwd=self.workdir, env=self.environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        import threading

        self._out = threading.Thread(target=self._read_output, daemon=True)
        self._out.start()
        self._scraper = threading.Thread(target=self._scrape, daemon=True)
        self._scraper.start()
        return self

    def _read_output(self) -> None:
        assert self.process is not None
        assert self.process.stdout is not None
        import threading

        # Each pipe is closed by its reader at its end (the command ended, or was killed): a test that fails
        # before wait() leaves no pipe open behind it.
        def drain_stderr() -> None:
            assert self.process is not None
            assert self.process.stderr is not None
            with self.process.stderr as stderr:
                for line in stderr:  # kept as it comes: a test that gives up says what Gym said so far
                    self._stderr_lines.append(line)
            self.stderr = b"".join(self._stderr_lines)

        thread = threading.Thread(target=drain_stderr, daemon=True)
        thread.start()
        with self.process.stdout as stdout:
            self.stdout = stdout.read()
        thread.join()

    def gym_pid(self) -> int | None:
        """The Gym child's process id (its process group), once started."""
        assert self.process is not None
        try:
            found = list(children(self.process.pid))
        except OSError:
            return None
        return found[0] if found else None

    def gym_running(self) -> bool:
        pid = self.gym_pid()
        return pid is not None and Path(f"/proc/{pid}").exists()

    def _scrape(self) -> None:
        assert self.process is not None
        while self.process.poll() is None:
            running = self.gym_running()
            try:
                with urllib.request.urlopen(self.url, timeout=5) as response:
                    text = response.read().decode()
                self.scrapes.append((time.monotonic(), running, text))
            except OSError:
                pass
            time.sleep(self.scrape_every)

    def scrape(self) -> str:
        """One scrape now."""
        with urllib.request.urlopen(self.url, timeout=5) as response:
            return str(response.read().decode())

    def wait(self, timeout: float = 300) -> int:
        """Wait for the command to end; its exit status."""
        assert self.process is not None
        try:
            status = self.process.wait(timeout=timeout)
        finally:
            if self.process.poll() is None:
                _stop_group(self.process, signal.SIGKILL, timeout=10)
        self._out.join(timeout=30)
        self._scraper.join(timeout=30)
        for pipe in (self.process.stdout, self.process.stderr):
            if pipe is not None:
                pipe.close()
        return status

    def report(self) -> dict[str, Any]:
        """The JSON report printed at the end: standard output holds it alone (Gym's own output goes to
        stderr)."""
        try:
            report: dict[str, Any] = json.loads(self.stdout)
        except ValueError as exc:
            stdout, stderr = (out.decode(errors="replace")[-2000:] for out in (self.stdout, self.stderr))
            raise AssertionError(f"stdout is not the JSON report ({exc}):\n{stdout}\n{stderr}") from exc
        return report
