"""Basic auth: parsing any header without raising, scrypt hashes, the credential cache, the rate limit."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import pytest

from rollout_telemetry._serve.auth import Authenticator, BasicAuth, Verdict, credentials, hash_password
from rollout_telemetry.errors import ConfigError
from tests.support import FakeClock

PASSWORD = "correct horse battery staple"
AUTH = BasicAuth("prometheus", hash_password(PASSWORD))


def _header(user: str, password: str, scheme: str = "Basic") -> str:
    return f"{scheme} " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.mark.parametrize("scheme", ["Basic", "basic", "BASIC", "bAsIc"])
def test_the_scheme_name_is_case_insensitive(scheme: str) -> None:
    """RFC 7235: the auth scheme is matched without regard to case."""
    assert credentials(_header("prometheus", PASSWORD, scheme)) == (b"prometheus", PASSWORD.encode())
    assert AUTH.check(_header("prometheus", PASSWORD, scheme))


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
    assert not AUTH.check(header)
    assert Authenticator(AUTH).screen(header, "127.0.0.1") is Verdict.DENIED


def test_a_non_utf8_password_is_compared_as_bytes() -> None:
    """Credentials that are not UTF-8 are checked (and fail) like any other, without a decoding error."""
    header = "Basic " + base64.b64encode(b"prometheus:\xff\xfe").decode()
    assert credentials(header) == (b"prometheus", b"\xff\xfe")
    assert not AUTH.check(header)


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
    gate = Authenticator(AUTH)
    header = _header("prometheus", PASSWORD)
    assert gate.screen(header, "10.0.0.1") is None
    assert gate.verify(header, "10.0.0.1") is Verdict.ALLOWED
    assert gate.screen(header, "10.0.0.1") is Verdict.ALLOWED
    assert gate.screen(header, "10.0.0.2") is Verdict.ALLOWED
    assert gate.screen(_header("prometheus", PASSWORD + "x"), "10.0.0.1") is None  # a near miss is not a hit


def test_failures_are_limited_per_source(clock: FakeClock) -> None:
    """A source gets ``burst`` scrypt attempts, then one per ``1/refill`` s; other sources are unaffected."""
    gate = Authenticator(AUTH, clock=clock, burst=3, refill=0.5)
    wrong = _header("prometheus", "guess")
    for _ in range(3):
        assert gate.screen(wrong, "10.0.0.1") is None
        assert gate.verify(wrong, "10.0.0.1") is Verdict.DENIED
    assert gate.screen(wrong, "10.0.0.1") is Verdict.LIMITED
    assert gate.screen(wrong, "10.0.0.2") is None
    clock.advance(1.9)
    assert gate.screen(wrong, "10.0.0.1") is Verdict.LIMITED
    clock.advance(0.1)
    assert gate.screen(wrong, "10.0.0.1") is None
    assert gate.screen(wrong, "10.0.0.1") is Verdict.LIMITED


def test_the_remembered_credential_passes_a_limited_source(clock: FakeClock) -> None:
    """An authorised scraper sharing an address with a guesser is not locked out once it has been verified."""
    gate = Authenticator(AUTH, clock=clock, burst=1)
    right = _header("prometheus", PASSWORD)
    assert gate.screen(right, "10.0.0.1") is None
    assert gate.verify(right, "10.0.0.1") is Verdict.ALLOWED  # gives its attempt back
    assert gate.screen(_header("prometheus", "guess"), "10.0.0.1") is None
    assert gate.screen(_header("prometheus", "guess"), "10.0.0.1") is Verdict.LIMITED
    assert gate.screen(right, "10.0.0.1") is Verdict.ALLOWED


def test_the_source_table_is_bounded(clock: FakeClock) -> None:
    """The rate limiter remembers at most ``max_sources`` addresses, forgetting the least recently seen."""
    gate = Authenticator(AUTH, clock=clock, burst=1, max_sources=100)
    wrong = _header("prometheus", "guess")
    for i in range(1000):
        gate.screen(wrong, f"10.0.{i // 256}.{i % 256}")
    assert gate.sources == 100
    assert gate.screen(wrong, "10.0.0.0") is None  # forgotten, so it has its attempt again
    assert gate.screen(wrong, "10.0.3.231") is Verdict.LIMITED  # the most recent is still remembered


def test_a_wrong_user_costs_the_same_scrypt(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether the user exists does not change the work: a wrong user and a wrong password each run scrypt."""
    calls: list[bytes] = []
    real = hashlib.scrypt

    def counting(password: bytes, **kwargs: Any) -> bytes:
        calls.append(password)
        return real(password, **kwargs)

    monkeypatch.setattr(hashlib, "scrypt", counting)
    assert not AUTH.check(_header("someone", PASSWORD))
    assert not AUTH.check(_header("prometheus", "guess"))
    assert AUTH.check(_header("prometheus", PASSWORD))
    assert len(calls) == 3
