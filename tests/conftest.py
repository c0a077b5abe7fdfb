"""The test tiers, and fixtures: a fake clock and a telemetry instance on it.

A test's tier is the folder it lives in, given to it as a marker, one tier a test:

- ``unit``: in-process, on the injected clock; no sleeping to wait for something, no wall-clock assertion
  (tests/test_tiers.py checks both). ``tests/`` itself holds the tests through the public API; each layer of
  the package has a folder for the tests of its internal parts (``tests/store/``, ``tests/serve/``...:
  ``LAYERS``).
- ``e2e`` (``tests/e2e/``): real processes: the exporter, Prometheus, promtool, Pushgateway, Ray.
- ``gym`` (``tests/gym/``): the real NeMo Gym 0.7.0 beside the exporter.
- ``slow`` (``tests/slow/``): soak, attacks and latencies that only a real server under load shows, and
  simulations that take seconds of CPU (the intervals' coverage).
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import hashlib
import os
import sys
import tempfile
import tracemalloc
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings
from opentelemetry import trace

from rollout_telemetry import RolloutTelemetry
from tests.support import DEFAULT_EXAMPLES, INTERPRETERS_PROFILE, FakeClock

TESTS = Path(__file__).parent
MACHINE = (
    Path(tempfile.gettempdir()) / f"rollout-telemetry-tests-{hashlib.sha256(bytes(TESTS)).hexdigest()[:12]}"
)
"""Where the tests of every run of this checkout (parallel workers, other interpreters) share the machine."""
LAYERS = ("contract", "store", "views", "recording", "exporters", "serve", "sources", "ray", "cli")
"""The folders of unit tests of each layer's internal parts, as the package's layers (docs/development.md)."""
TIERS = {"e2e": "e2e", "gym": "gym", "slow": "slow"} | dict.fromkeys(LAYERS, "unit")
"""The tier of the tests in each folder under tests/ (tests/ itself: ``unit``)."""
ALL_TIERS = ("unit", *TIERS.values())

# The Python processes the tests start (pytest's workers, the exporter, Ray's workers, NeMo Gym's servers and
# commands) keep the modules they compile, so the next one loads them: where the environment forbids it
# (PYTHONDONTWRITEBYTECODE), each compiled every module it imported from source, every time (12 of the 20 s a
# NeMo Gym command took, docs/development.md).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False


# Loaded by ``--hypothesis-profile interpreters`` (.ci/run's unit tier on 3.12 and 3.13): support.examples.
settings.register_profile(INTERPRETERS_PROFILE, max_examples=DEFAULT_EXAMPLES // 3)


def tier_of(path: Path) -> str:
    """The tier of the test module at ``path``: its folder's, ``unit`` directly under tests/."""
    relative = path.resolve().relative_to(TESTS.resolve())
    return TIERS.get(relative.parts[0], "unit") if len(relative.parts) > 1 else "unit"


LONGEST = ("gym/test_gym_run.py", "e2e/test_ray_e2e.py")
"""The modules that take longest on their worker (5-6 minutes measured for each beside the others): first."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its folder's tier (a tier marker written by hand is an error), and order them for
    the parallel workers (which take modules in this order: ``--no-loadscope-reorder``): the longest modules
    first, then the longest tiers, so the tests that mostly wait start before the many short ones, and the
    ``alone`` tests last, in a row, when the others are done (taking the machine mid-run, they wait for the
    longest test in progress, every other worker idle)."""
    tiers: dict[pytest.Item, str] = {}
    for item in items:
        tier = tiers[item] = tier_of(item.path)
        written = [mark.name for mark in item.iter_markers() if mark.name in ALL_TIERS]
        if written:
            msg = f"{item.nodeid}: the tier is the folder ({tier}); remove @pytest.mark.{written[0]}"
            raise pytest.UsageError(msg)
        item.add_marker(tier)
    order = {"gym": 0, "slow": 1, "e2e": 2, "unit": 3}

    def rank(item: pytest.Item) -> tuple[bool, int, int]:
        module = item.path.resolve().relative_to(TESTS.resolve()).as_posix()
        first = LONGEST.index(module) if module in LONGEST else len(LONGEST)
        return _alone(item), first, order[tiers[item]]

    items.sort(key=rank)


@contextlib.contextmanager
def machine_share(alone: bool, folder: Path = MACHINE) -> Iterator[None]:
    """Hold a share of the machine while a test runs, or all of it for an ``alone`` test.

    A readers-writer lock of two files, across every process running this checkout's tests: a test takes the
    gate, then a shared hold of the room, and lets the gate go; an ``alone`` test keeps the gate (no test
    starts meanwhile) and waits for the room to empty. So it runs with no other test, and is never starved.
    """
    folder.mkdir(exist_ok=True)
    with (folder / "gate").open("a") as gate, (folder / "room").open("a") as room:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(room, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            if not alone:
                fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(room, fcntl.LOCK_UN)
            if alone:
                fcntl.flock(gate, fcntl.LOCK_UN)


@contextlib.contextmanager
def held_alone(resource: str, folder: Path = MACHINE) -> Iterator[None]:
    """Hold ``resource`` (a fixed port, say) so that no other test of any run of this checkout holds it."""
    folder.mkdir(exist_ok=True)
    with (folder / f"resource-{resource}").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


ALONE_NICENESS = -10
"""An ``alone`` test's priority, where the machine allows it (root)."""


@contextlib.contextmanager
def ahead_of_the_rest() -> Iterator[None]:
    """This thread, and the threads and processes it starts, ahead of the machine's other processes where
    allowed (``ALONE_NICENESS``, as root): an ``alone`` test's bound is the server's with the machine to
    itself, which a process outside the tests (CI's other steps, a busy loop beside the run) would take a
    core of."""
    before = os.getpriority(os.PRIO_PROCESS, 0)
    try:
        os.setpriority(os.PRIO_PROCESS, 0, ALONE_NICENESS)
    except PermissionError:
        yield
        return
    try:
        yield
    finally:
        os.setpriority(os.PRIO_PROCESS, 0, before)


class Shares:
    """The machine shares one process's tests hold, in turn: an ``alone`` test's hold is kept for the next
    test when it is ``alone`` too, so a module of them takes the machine once. Given up between them, the gate
    went to the other workers' tests, and each attack waited again for the longest of them to end."""

    def __init__(self, folder: Path = MACHINE) -> None:
        self.folder = folder
        self._alone: contextlib.ExitStack | None = None

    @contextlib.contextmanager
    def hold(self, alone: bool, *, keep: bool = False) -> Iterator[None]:
        """Hold a share for a test, the machine if ``alone``; ``keep`` it held after (the next is alone)."""
        if not alone:
            self.release()
            with machine_share(False, self.folder):
                yield
            return
        if self._alone is None:
            stack = contextlib.ExitStack()
            stack.enter_context(machine_share(True, self.folder))
            stack.enter_context(ahead_of_the_rest())
            self._alone = stack
        try:
            yield
        finally:
            if not keep:
                self.release()

    @property
    def holds_alone(self) -> bool:
        """Whether the machine is held, alone, for this process's tests."""
        return self._alone is not None

    def release(self) -> None:
        """Give the machine back if it is held alone."""
        stack, self._alone = self._alone, None
        if stack is not None:
            stack.close()


_SHARES = Shares()


def _alone(item: pytest.Item | None) -> bool:
    return item is not None and item.get_closest_marker("alone") is not None


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Each test runs holding its share of the machine (its time limit starts once it has it)."""
    with _SHARES.hold(_alone(item), keep=_alone(nextitem)):
        yield


@pytest.fixture(autouse=True)
def _plain_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sees the environment of a plain run: xdist's workers set COLUMNS and LINES (80x24), which
    a piped command reads as the terminal's size."""
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)


@pytest.fixture(autouse=True)
def _no_span_left_current() -> Iterator[None]:
    """A test leaves no OpenTelemetry span current behind it: one left so (rollouts entered and left in
    another order than nested blocks leave) made the spans of the worker's next test its children."""
    yield
    left = trace.get_current_span()
    assert left is trace.INVALID_SPAN, f"the test left a span current: {left}"


@pytest.fixture(scope="module", autouse=True)
def _nothing_leaks_past_its_module() -> Iterator[None]:
    """A module's tests leave no unclosed socket or file behind: collected at the module's end, one held in a
    reference cycle (an exception's traceback, say) fails that module, naming it, instead of whichever test
    was running when the garbage collector happened to find it. With ``-X tracemalloc=25`` the failure says
    where the object was made."""
    yield
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        gc.collect()
    leaks = [warning for warning in caught if issubclass(warning.category, ResourceWarning)]
    if leaks:
        where = [tracemalloc.get_object_traceback(leak.source) for leak in leaks if leak.source is not None]
        made = "".join("\n".join(trace.format()) for trace in where if trace is not None)
        pytest.fail(f"left behind: {'; '.join(str(leak.message) for leak in leaks)}{made and chr(10) + made}")


@pytest.fixture
def clock() -> FakeClock:
    """A clock that moves only when the test says so."""
    return FakeClock()


@pytest.fixture
def telemetry(clock: FakeClock) -> RolloutTelemetry:
    """A telemetry instance with its own registry, on the fake clock."""
    return RolloutTelemetry(run="test-run", clock=clock)
