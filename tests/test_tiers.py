"""The test tiers hold: a unit test neither sleeps to wait for something nor reads the wall clock, and every
test module lives in a tier's folder."""

from __future__ import annotations

import ast
import fcntl
import itertools
import os
from pathlib import Path

import pytest
from hypothesis import settings

from tests.conftest import ALONE_NICENESS, TESTS, TIERS, Shares, machine_share, tier_of
from tests.support import INTERPRETERS_PROFILE, examples

WALL_CLOCK = frozenset(
    {"sleep", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns", "time", "time_ns"}
)
"""What a unit test may not take from the time module: sleeping, and every clock that moves by itself."""
POLLING = frozenset({"wait_until"})
"""tests.support's helpers that poll with a sleep: for the real processes of the other tiers."""


def wall_clock_uses(source: str) -> list[str]:
    """Each place in ``source`` that sleeps or reads the wall clock, as ``line: what``."""
    found: list[str] = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "time":
            found += [f"{node.lineno}: from time import {a.name}" for a in node.names if a.name in WALL_CLOCK]
        elif isinstance(node, ast.ImportFrom) and node.module == "tests.support":
            found += [f"{node.lineno}: {a.name}" for a in node.names if a.name in POLLING]
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "time"
            and node.attr in WALL_CLOCK
        ):
            found.append(f"{node.lineno}: time.{node.attr}")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "asyncio"
            and node.func.attr == "sleep"
            and not (node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value == 0)
        ):
            found.append(f"{node.lineno}: asyncio.sleep({ast.unparse(node.args[0]) if node.args else ''})")
    return sorted(found, key=lambda place: int(place.split(":")[0]))


UNIT_MODULES = sorted(path for path in TESTS.rglob("test_*.py") if tier_of(path) == "unit")


@pytest.mark.parametrize("path", UNIT_MODULES, ids=lambda path: path.relative_to(TESTS).as_posix())
def test_a_unit_test_neither_sleeps_nor_reads_the_wall_clock(path: Path) -> None:
    """No unit test module sleeps (asyncio.sleep(0), a yield, aside), polls with a sleep or reads a clock that
    moves by itself: it waits on events and runs on the injected clock."""
    assert tier_of(path) == "unit"
    assert wall_clock_uses(path.read_text()) == []


def test_the_check_finds_each_way_of_reading_the_clock() -> None:
    """The check above sees sleeps, clocks by attribute and by import, non-zero asyncio sleeps and polling."""
    source = """
import asyncio, time
from time import monotonic as now, process_time
from tests.support import free_port, wait_until

async def f():
    time.sleep(0.1)
    started = time.perf_counter()
    await asyncio.sleep(0)
    await asyncio.sleep(0.01)
    clock = time.monotonic
    return now() - started < 1
"""
    assert wall_clock_uses(source) == [
        "3: from time import monotonic",
        "4: wait_until",
        "7: time.sleep",
        "8: time.perf_counter",
        "10: asyncio.sleep(0.01)",
        "11: time.monotonic",
    ]


def test_every_test_module_is_in_a_tiers_folder() -> None:
    """Test modules live directly in tests/ (unit, the public API), in a layer's folder (unit, its parts) or
    in a tier's folder; none hides in another folder."""
    folders = {path.relative_to(TESTS).parts[0] for path in TESTS.rglob("test_*.py") if path.parent != TESTS}
    assert folders <= set(TIERS), folders - set(TIERS)
    assert {tier_of(TESTS / folder / "test_x.py") for folder in TIERS} == set(TIERS.values())


def _free(path: Path, operation: int) -> bool:
    """Whether ``operation`` (a shared or exclusive lock) on ``path`` is granted now, from another holder."""
    with path.open("a") as probe:
        try:
            fcntl.flock(probe, operation | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(probe, fcntl.LOCK_UN)
        return True


def test_a_test_shares_the_machine_and_an_alone_test_has_it_to_itself(tmp_path: Path) -> None:
    """While a test runs, others may start (the gate is free, the room shared) and no alone test may; while
    an alone test runs, no test may start (it keeps the gate) and the room is its own; then all is free."""
    gate, room = tmp_path / "gate", tmp_path / "room"
    with machine_share(alone=False, folder=tmp_path):
        assert _free(gate, fcntl.LOCK_EX)
        assert _free(room, fcntl.LOCK_SH)
        assert not _free(room, fcntl.LOCK_EX)
    with machine_share(alone=True, folder=tmp_path):
        assert not _free(gate, fcntl.LOCK_EX)
        assert not _free(room, fcntl.LOCK_SH)
    assert _free(gate, fcntl.LOCK_EX)
    assert _free(room, fcntl.LOCK_EX)


def test_alone_tests_in_a_row_take_the_machine_once(tmp_path: Path) -> None:
    """An alone test followed by another keeps the machine between them (no other test can take the gate);
    the last of the row, or a shared test after it, gives it back."""
    gate, room = tmp_path / "gate", tmp_path / "room"
    shares = Shares(tmp_path)
    with shares.hold(alone=True, keep=True):
        assert not _free(gate, fcntl.LOCK_EX)
    assert shares.holds_alone
    assert not _free(gate, fcntl.LOCK_EX)
    assert not _free(room, fcntl.LOCK_SH)
    with shares.hold(alone=True, keep=False):
        assert not _free(room, fcntl.LOCK_SH)
    assert not shares.holds_alone
    assert _free(gate, fcntl.LOCK_EX)
    with shares.hold(alone=True, keep=True):
        pass
    with shares.hold(alone=False):
        assert not shares.holds_alone
        assert _free(gate, fcntl.LOCK_EX)
        assert not _free(room, fcntl.LOCK_EX)
    assert _free(room, fcntl.LOCK_EX)


def test_an_alone_test_runs_ahead_of_the_machines_other_processes(tmp_path: Path) -> None:
    """While the machine is held alone, the test's thread (and what it starts) runs at ``ALONE_NICENESS``
    where the machine allows it, and at its own priority again once the machine is given back."""
    before = os.getpriority(os.PRIO_PROCESS, 0)
    allowed = os.geteuid() == 0
    shares = Shares(tmp_path)
    with shares.hold(alone=True, keep=True):
        assert os.getpriority(os.PRIO_PROCESS, 0) == (ALONE_NICENESS if allowed else before)
    with shares.hold(alone=True):  # the row's last: still ahead while it runs
        assert os.getpriority(os.PRIO_PROCESS, 0) == (ALONE_NICENESS if allowed else before)
    assert os.getpriority(os.PRIO_PROCESS, 0) == before
    with shares.hold(alone=False):
        assert os.getpriority(os.PRIO_PROCESS, 0) == before


def fixed_example_counts(source: str) -> list[str]:
    """Each ``settings(max_examples=...)`` in ``source`` not given by ``tests.support.examples``, as
    ``line: count``."""
    return [
        f"{keyword.value.lineno}: {ast.unparse(keyword.value)}"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "settings"
        for keyword in node.keywords
        if keyword.arg == "max_examples"
        and not (
            isinstance(keyword.value, ast.Call)
            and isinstance(keyword.value.func, ast.Name)
            and keyword.value.func.id == "examples"
        )
    ]


def test_every_property_test_counts_its_examples_through_the_profile() -> None:
    """A property test's ``max_examples`` is ``examples(n)``: n under the default Hypothesis profile, a third
    under CI's ``interpreters`` profile, never a fixed count that a profile cannot scale."""
    fixed = {
        str(path.relative_to(TESTS)): found
        for path in sorted(TESTS.rglob("*.py"))
        if (found := fixed_example_counts(path.read_text()))
    }
    assert fixed == {}


def test_the_interpreters_profile_takes_a_third_of_the_examples() -> None:
    """``examples`` follows the active profile: the count given under the default, a third (at least one)
    under ``interpreters``; and the check above finds a fixed count."""
    assert fixed_example_counts("@settings(max_examples=300)\ndef f(): ...") == ["1: 300"]
    assert fixed_example_counts("@settings(max_examples=examples(300))\ndef f(): ...") == []
    before = settings.get_current_profile_name()
    try:
        settings.load_profile("default")
        assert (examples(300), examples(60)) == (300, 60)
        settings.load_profile(INTERPRETERS_PROFILE)
        assert (examples(300), examples(60), examples(1)) == (99, 20, 1)
    finally:
        settings.load_profile(before)


CLOCK_READS = frozenset({"monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns", "time", "time_ns"})
"""The time module's clocks that move by themselves: a value read from one depends on the machine's speed."""
BOUND_NOTE = "# bound:"
"""The comment an assertion on the wall clock carries (on its lines or in the comment right above): the
same-run control it is compared with, or why its bound holds on the slowest machine that runs the suite."""


def _reads_the_clock(node: ast.AST, timed: set[str]) -> bool:
    """Whether the value of ``node`` is a clock's reading (``time.monotonic()``...), a name assigned from
    one, or arithmetic on them (``now - started``, ``max(elapsed, 0)``); any other call is a value of its
    own."""
    if isinstance(node, ast.Name):
        return node.id in timed
    if isinstance(node, ast.BinOp):
        return _reads_the_clock(node.left, timed) or _reads_the_clock(node.right, timed)
    if isinstance(node, ast.UnaryOp):
        return _reads_the_clock(node.operand, timed)
    if isinstance(node, ast.IfExp):
        return _reads_the_clock(node.body, timed) or _reads_the_clock(node.orelse, timed)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _ARITHMETIC:
        return any(_reads_the_clock(arg, timed) for arg in node.args)
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "time"
        and node.func.attr in CLOCK_READS
    )


_ARITHMETIC = frozenset({"abs", "float", "int", "max", "min", "round", "sum"})
_ORDER = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)


def _timed_names(scope: ast.AST) -> set[str]:
    """The names assigned in ``scope`` from a clock read, or from names so assigned (``now - started``)."""
    assignments = [node for node in ast.walk(scope) if isinstance(node, ast.Assign | ast.AugAssign)]
    timed: set[str] = set()
    changed = True
    while changed:
        changed = False
        for node in assignments:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = {n.id for target in targets for n in ast.walk(target) if isinstance(n, ast.Name)}
            if not names <= timed and _reads_the_clock(node.value, timed):
                timed |= names
                changed = True
    return timed


def _bound_noted(lines: list[str], node: ast.stmt) -> bool:
    """Whether ``BOUND_NOTE`` is on the lines of ``node`` or in the comment lines right above it."""
    first = node.lineno - 1
    while first > 0 and lines[first - 1].lstrip().startswith("#"):
        first -= 1
    return any(BOUND_NOTE in line for line in lines[first : node.end_lineno])


def unbounded_clock_assertions(source: str) -> list[int]:
    """The lines of each ``assert`` in ``source`` that compares a value read from the wall clock (directly, or
    through names its function assigned from it) with one that is not (a constant, a setting), without a
    ``BOUND_NOTE`` comment on its lines or the line above. Two clock readings compared (an order of events)
    depend on no machine's speed."""
    tree = ast.parse(source)
    lines = source.splitlines()
    found = set()
    functions = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    top = ast.Module(body=[node for node in tree.body if not isinstance(node, functions)], type_ignores=[])
    scopes = [node for node in ast.walk(tree) if isinstance(node, functions[:2])]
    for scope in [top, *scopes]:
        timed = _timed_names(scope)
        for node in ast.walk(scope):
            if not isinstance(node, ast.Assert):
                continue
            for compare in (n for n in ast.walk(node.test) if isinstance(n, ast.Compare)):
                sides = [compare.left, *compare.comparators]
                read = [_reads_the_clock(side, timed) for side in sides]
                pairs = zip(compare.ops, itertools.pairwise(read), strict=True)
                unequal = any(isinstance(op, _ORDER) and a != b for op, (a, b) in pairs)
                if unequal and not _bound_noted(lines, node):
                    found.add(node.lineno)
    return sorted(found)


TIMED_MODULES = sorted(path for path in TESTS.rglob("test_*.py") if tier_of(path) in ("e2e", "gym", "slow"))


@pytest.mark.parametrize("path", TIMED_MODULES, ids=lambda path: path.relative_to(TESTS).as_posix())
def test_a_wall_clock_assertion_names_its_control_or_its_wide_bound(path: Path) -> None:
    """In the tiers that run on the wall clock, an assertion on a duration says what makes its verdict the
    code's and not the machine's: a control measured in the same run, or a bound so wide that the slowest
    machine that runs the suite meets it (``# bound: ...``)."""
    assert unbounded_clock_assertions(path.read_text()) == []


def test_the_check_finds_a_duration_compared_with_a_constant() -> None:
    """An elapsed time, a clock read inline or a name derived from one, asserted against a constant, is
    found; the same with its bound explained, or a wait that is not an assertion, is not."""
    source = """
import time
started = time.monotonic()
elapsed = time.monotonic() - started
took = elapsed * 1000
assert elapsed < 2.0
assert time.perf_counter() - started < 1
assert took < 50, took
# bound: Prometheus' default scrape timeout,
# wide enough for any machine
assert elapsed < 10
assert elapsed < 10  # bound: ten times the server's own deadline
while time.monotonic() < started + 5:
    pass
assert 3 == 3
assert time.monotonic() >= started
stamp = scraped_after(started)
assert stamp is not None and stamp < 5
"""
    assert unbounded_clock_assertions(source) == [6, 7, 8]
