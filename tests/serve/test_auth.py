"""Basic auth: parsing any header without raising, scrypt hashes, the credential cache, the rate limit."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import hashlib
import queue
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from rollout_telemetry._serve.auth import Authenticator, PasswordChecks, Verdict
from rollout_telemetry._serve.credentials import BasicAuth, credentials, hash_password, matches
from rollout_telemetry._serve.limits import Limits
from rollout_telemetry.errors import ConfigError
from tests.support import FakeClock
from tests.virtual_loop import run_virtual

PASSWORD = "correct horse battery staple"
AUTH = BasicAuth("prometheus", hash_password(PASSWORD))
LIMITS = Limits()
"""The bounds a server's authenticator holds to unless a test gives its own: the defaults."""


def _checks(header: str | None) -> bool:
    """Whether an ``Authorization`` header carries AUTH's user and password."""
    parsed = credentials(header)
    return parsed is not None and matches(AUTH, *parsed)


def _gate(**options: Any) -> Authenticator:
    """An authenticator in front of AUTH."""
    return Authenticator(functools.partial(matches, AUTH), **options)


def _header(user: str, password: str, scheme: str = "Basic") -> str:
    return f"{scheme} " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.mark.parametrize("scheme", ["Basic", "basic", "BASIC", "bAsIc"])
def test_the_scheme_name_is_case_insensitive(scheme: str) -> None:
    """RFC 7235: the auth scheme is matched without regard to case."""
    assert credentials(_header("prometheus", PASSWORD, scheme)) == (b"prometheus", PASSWORD.encode())
    assert _checks(_header("prometheus", PASSWORD, scheme))


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "Basic",
        "Basic ",
        "Basic ====",
        "Basic !!!not-base64",
        "Basic " + base64.b64encode(b"no-colon").decode(),
        "Basic " + base64.b64encode(b"user:pass").decode() + "\u00e9",
        "Basic \u00e9\u00e8\u00ff",
        "Basic \udcff",
        "Bearer " + base64.b64encode(b"user:pass").decode(),
        "\x00\x01\x02",
        "Basic " + "A" * 100_000,
    ],
)
def test_a_malformed_header_is_refused_without_raising(header: str | None) -> None:
    """Any header that is not well-formed basic auth parses to None, and the authenticator denies it."""
    assert credentials(header) is None
    assert not _checks(header)
    assert _gate().screen(header) is Verdict.DENIED


def test_a_non_utf8_password_is_compared_as_bytes() -> None:
    """Credentials that are not UTF-8 are checked (and fail) like any other, without a decoding error."""
    header = "Basic " + base64.b64encode(b"prometheus:\xff\xfe").decode()
    assert credentials(header) == (b"prometheus", b"\xff\xfe")
    assert not _checks(header)


@pytest.mark.parametrize(
    "password_hash",
    ["plaintext", "scrypt$1$2$3$c2FsdA==", "scrypt$x$8$1$c2FsdA==$aGFzaA==", "scrypt$16384$8$1$!!$aGFzaA=="],
)
def test_a_malformed_password_hash_is_refused_at_start(password_hash: str) -> None:
    """A hash not made by hash-password is a ConfigError when the configuration is built, not at a request."""
    with pytest.raises(ConfigError, match="hash-password"):
        BasicAuth("prometheus", password_hash)


def test_a_verified_credential_is_remembered() -> None:
    """After one scrypt success, the same credential is allowed at screening, with no scrypt."""
    gate = _gate()
    header = _header("prometheus", PASSWORD)
    assert gate.screen(header) is None
    assert gate.verify(header, "10.0.0.1") is Verdict.ALLOWED
    assert gate.screen(header) is Verdict.ALLOWED
    assert gate.screen(_header("prometheus", PASSWORD + "x")) is None  # a near miss is not a hit
    assert gate.screen(_header("prometheus:" + PASSWORD[:3], PASSWORD[3:])) is None  # nor another split


def test_a_refused_credential_is_remembered() -> None:
    """A wrong credential checked once is refused at screening after, with no scrypt."""
    gate = _gate()
    wrong = _header("prometheus", "guess")
    assert gate.screen(wrong) is None
    assert gate.verify(wrong, "10.0.0.1") is Verdict.DENIED
    assert gate.screen(wrong) is Verdict.DENIED
    assert gate.screen(_header("prometheus", "guess2")) is None


def test_the_verified_credentials_remembered_are_bounded() -> None:
    """At most max_verified verified credentials are remembered, the least recently used forgotten first."""
    gate = Authenticator(lambda username, password: password == PASSWORD.encode())  # any user
    headers = [_header(f"user{i}", PASSWORD) for i in range(LIMITS.max_verified + 1)]
    for header in headers:
        assert gate.verify(header, "10.0.0.1") is Verdict.ALLOWED
    assert gate.screen(headers[0]) is None  # the first, least recently used, was forgotten
    assert all(gate.screen(header) is Verdict.ALLOWED for header in headers[2:])


def test_attempts_are_limited_per_source(clock: FakeClock) -> None:
    """A source gets ``burst`` attempts, then one per ``1/refill`` s; other sources are unaffected."""
    gate = _gate(clock=clock, limits=Limits(failure_burst=3, failure_refill=0.5))
    assert [gate.take_attempt("10.0.0.1") for _ in range(4)] == [True, True, True, False]
    assert gate.take_attempt("10.0.0.2")
    clock.advance(1.9)
    assert not gate.take_attempt("10.0.0.1")
    clock.advance(0.1)
    assert gate.take_attempt("10.0.0.1")
    assert not gate.take_attempt("10.0.0.1")


def test_a_success_gives_its_attempt_back(clock: FakeClock) -> None:
    """A verified credential returns the attempt its check took."""
    gate = _gate(clock=clock, limits=Limits(failure_burst=1))
    assert gate.take_attempt("10.0.0.1")
    assert gate.verify(_header("prometheus", PASSWORD), "10.0.0.1") is Verdict.ALLOWED
    assert gate.take_attempt("10.0.0.1")


def test_the_source_table_is_bounded(clock: FakeClock) -> None:
    """The attempt limiter remembers at most ``max_sources`` sources, forgetting the least recently seen."""
    gate = _gate(clock=clock, limits=Limits(failure_burst=1, max_sources=100))
    for i in range(1000):
        gate.take_attempt(f"10.0.{i // 256}.{i % 256}")
    assert gate.sources == 100
    assert gate.take_attempt("10.0.0.0")  # forgotten, so it has its attempt again
    assert not gate.take_attempt("10.0.3.231")  # the most recent is still remembered


class _Held(Authenticator):
    """An authenticator whose checks wait for the test, recording the order of the sources checked (and
    putting each on ``checking`` as its check starts)."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(
            functools.partial(matches, AUTH),
            clock=clock,
            limits=Limits(failure_burst=1, failure_refill=0.001),
        )
        self.release = threading.Semaphore(0)
        self.order: list[str] = []
        self.checking: queue.Queue[str] = queue.Queue()

    def verify(self, header: str | None, source: str) -> Verdict:
        self.order.append(source)
        self.checking.put(source)
        assert self.release.acquire(timeout=10)
        return Verdict.DENIED


def test_password_checks_take_sources_in_turn(clock: FakeClock) -> None:
    """One thread, busy: waiting attempts are then checked a source at a time, oldest first within one,
    sources with attempts left before those without."""
    held = _Held(clock)
    assert held.take_attempt("spent")  # its one attempt is used up
    checks = PasswordChecks(held, Limits(auth_threads=1, auth_wait=30))

    async def run() -> list[Verdict]:
        first = asyncio.ensure_future(checks.check("h", "a"))
        await asyncio.sleep(0)  # its first step hands "a" to the thread
        assert held.checking.get(timeout=10) == "a"  # "a" holds the thread (waited for off the loop)
        sources = ["spent", "a", "a", "b", "c", "b"]
        waiting = []
        for source in sources:
            waiting.append(asyncio.ensure_future(checks.check("h", source)))
            await asyncio.sleep(0)
        for _ in range(len(sources) + 1):
            held.release.release()
        return await asyncio.gather(first, *waiting)

    try:
        verdicts = asyncio.run(run())
    finally:
        checks.close()
    assert verdicts == [Verdict.DENIED] * 7
    # "a" used its one attempt first, so after "b" and "c" (attempts left) the rest go in turn.
    assert held.order == ["a", "b", "c", "spent", "a", "b", "a"]


def test_an_attempt_waits_for_its_turn_inside_its_connections_evictable(clock: FakeClock) -> None:
    """An attempt that waits for a busy thread is inside the ``evictable`` it is given (its connection holds
    nothing meanwhile) and leaves it when its turn comes; one that finds a thread free never enters it."""
    held = _Held(clock)
    checks = PasswordChecks(held, Limits(auth_threads=1, auth_wait=30))
    entered: list[str] = []

    def evictable(source: str) -> contextlib.AbstractContextManager[None]:
        @contextlib.contextmanager
        def waiting() -> Iterator[None]:
            entered.append(f"{source} waits")
            yield
            entered.append(f"{source} has its turn")

        return waiting()

    async def run() -> list[str]:
        first = asyncio.ensure_future(checks.check("h", "a", functools.partial(evictable, "a")))
        await asyncio.sleep(0)  # its first step hands "a" to the thread
        assert held.checking.get(timeout=10) == "a"  # "a" holds the thread
        second = asyncio.ensure_future(checks.check("h", "b", functools.partial(evictable, "b")))
        await asyncio.sleep(0)
        seen_while_held = list(entered)
        held.release.release()
        await first  # the thread is free: "b" has its turn
        assert await asyncio.to_thread(held.checking.get, timeout=10) == "b"
        held.release.release()
        await second
        return seen_while_held

    try:
        assert asyncio.run(run()) == ["b waits"]
    finally:
        checks.close()
    assert entered == ["b waits", "b has its turn"]


def test_an_attempt_without_a_turn_in_time_is_limited(clock: FakeClock) -> None:
    """An attempt that waits its wait (0.25 s of the loop's time) for a free thread is LIMITED then, without a
    check."""
    held = _Held(clock)
    checks = PasswordChecks(held, Limits(auth_threads=1, auth_wait=0.25))

    async def run() -> tuple[Verdict, Verdict, float]:
        first = asyncio.ensure_future(checks.check("h", "a"))
        await asyncio.sleep(0)  # its first step hands "a" to the thread
        assert held.checking.get(timeout=10) == "a"  # "a" holds the thread
        asked = clock()
        second = await checks.check("h", "b")  # on the loop's fake clock, its wait passes at once
        waited = clock() - asked
        held.release.release()
        return await first, second, waited

    try:
        assert run_virtual(run(), clock) == (Verdict.DENIED, Verdict.LIMITED, 0.25)
    finally:
        checks.close()
    assert held.order == ["a"]


def test_a_wrong_user_costs_the_same_scrypt(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether the user exists does not change the work: a wrong user and a wrong password each run scrypt."""
    calls: list[bytes] = []
    real = hashlib.scrypt

    def counting(password: bytes, **kwargs: Any) -> bytes:
        calls.append(password)
        return real(password, **kwargs)

    monkeypatch.setattr(hashlib, "scrypt", counting)
    assert not _checks(_header("someone", PASSWORD))
    assert not _checks(_header("prometheus", "guess"))
    assert _checks(_header("prometheus", PASSWORD))
    assert len(calls) == 3
