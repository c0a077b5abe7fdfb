"""HTTP basic authentication for the endpoint, built so that guessing costs the guesser more than us.

``BasicAuth`` is the configuration: one user name and a scrypt hash from ``hash_password`` (about 40 ms and
16 MiB per check, which is what makes a stolen hash expensive to crack). ``Authenticator`` is what one
running server holds in front of it:

- the credential it last verified is remembered as an HMAC under a key made at start, so an authorised
  scraper pays for scrypt once per server, not once per scrape; a hit is compared in constant time;
- each source address has a bucket of ``FAILURE_BURST`` attempts that refills at ``FAILURE_REFILL`` per
  second; an attempt that needs scrypt takes one (a success gives it back), and an address with none left
  is answered at once without scrypt. The table holds at most ``MAX_SOURCES`` addresses, the least recently
  seen forgotten first;
- a header that is not well-formed basic auth, of any kind, is refused before anything is computed.

Whether the user name exists does not change the work done: every attempt that reaches scrypt runs it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from rollout_telemetry.errors import ConfigError

__all__ = [
    "FAILURE_BURST",
    "FAILURE_REFILL",
    "MAX_SOURCES",
    "Authenticator",
    "BasicAuth",
    "Verdict",
    "credentials",
    "hash_password",
]

FAILURE_BURST = 10
"""Attempts needing scrypt that one source address may make at once."""
FAILURE_REFILL = 1.0
"""Attempts given back to each source address per second."""
MAX_SOURCES = 4096
"""Source addresses the rate limiter remembers; the least recently seen is forgotten first."""

_SCRYPT_N, _SCRYPT_R, _SCRYPT_P = 2**14, 8, 1


class Verdict(StrEnum):
    """What the authenticator decided about one request."""

    ALLOWED = "allowed"
    DENIED = "denied"
    LIMITED = "limited"  # the source has no attempts left: answered without scrypt


def hash_password(password: str, *, salt: bytes | None = None) -> str:
    """Return a scrypt hash of ``password`` in the form ``BasicAuth`` reads (``scrypt$n$r$p$salt$hash``)."""
    salt = salt if salt is not None else secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=_SCRYPT_N, r=_SCRYPT_R, p=_SCRYPT_P)
    encode = base64.b64encode
    return f"scrypt${_SCRYPT_N}${_SCRYPT_R}${_SCRYPT_P}${encode(salt).decode()}${encode(digest).decode()}"


def credentials(header: str | None) -> tuple[bytes, bytes] | None:
    """Return the user name and password of a basic ``Authorization`` header, or None if it is not one.

    The scheme name is case-insensitive (RFC 7235); the token must be strict base64 of ``user:password``.
    The two parts are returned as bytes: nothing here decodes text, so no input can make it raise.
    """
    if header is None:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(token.strip().encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error):
        return None
    username, colon, password = decoded.partition(b":")
    return (username, password) if colon else None


def _well_formed(password_hash: str) -> bool:
    parts = password_hash.split("$")
    if len(parts) != 6 or parts[0] != "scrypt" or not all(part.isdigit() for part in parts[1:4]):
        return False
    try:
        base64.b64decode(parts[4], validate=True)
        base64.b64decode(parts[5], validate=True)
    except binascii.Error:
        return False
    return True


@dataclass(frozen=True, slots=True)
class BasicAuth:
    """HTTP basic auth: one user name and a scrypt password hash from ``hash_password``."""

    username: str
    password_hash: str

    @classmethod
    def from_file(cls, username: str, path: str | Path) -> BasicAuth:
        """Read the password hash from a file (its first line)."""
        return cls(username, Path(path).read_text(encoding="utf-8").strip().splitlines()[0])

    @classmethod
    def from_env(cls, username: str, variable: str) -> BasicAuth:
        """Read the password hash from an environment variable.

        Raises:
            ConfigError: the variable is not set.
        """
        value = os.environ.get(variable)
        if not value:
            msg = f"environment variable {variable} with the password hash is not set"
            raise ConfigError(msg)
        return cls(username, value.strip())

    def __post_init__(self) -> None:
        if not _well_formed(self.password_hash):
            msg = "password hash must come from 'rollout-telemetry hash-password' (scrypt$n$r$p$salt$hash)"
            raise ConfigError(msg)

    def verify(self, username: bytes, password: bytes) -> bool:
        """Return whether this is the user and password (scrypt, then constant-time comparisons).

        Slow by design (about 40 ms): call it off an event loop.
        """
        _, n, r, p, salt, expected = self.password_hash.split("$")
        digest = hashlib.scrypt(password, salt=base64.b64decode(salt), n=int(n), r=int(r), p=int(p))
        user_ok = hmac.compare_digest(username, self.username.encode())
        password_ok = hmac.compare_digest(digest, base64.b64decode(expected))
        return user_ok and password_ok

    def check(self, header: str | None) -> bool:
        """Return whether an ``Authorization`` header carries this user and password (constant time)."""
        parsed = credentials(header)
        return parsed is not None and self.verify(*parsed)


class Authenticator:
    """One server's gate in front of a ``BasicAuth``: a cache of the verified credential, a limit on guesses.

    ``screen()`` decides whatever can be decided cheaply (on the event loop); what is left goes to
    ``verify()`` (scrypt, on a worker thread). Thread-safe.
    """

    def __init__(
        self,
        auth: BasicAuth,
        *,
        clock: Callable[[], float] = time.monotonic,
        burst: int = FAILURE_BURST,
        refill: float = FAILURE_REFILL,
        max_sources: int = MAX_SOURCES,
    ) -> None:
        self.auth = auth
        self._clock = clock
        self._burst = burst
        self._refill = refill
        self._max_sources = max_sources
        self._key = secrets.token_bytes(32)
        self._verified = self._mac(secrets.token_bytes(32))  # matches nothing until a success
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # source -> (attempts, when)
        self._lock = threading.Lock()

    def _mac(self, credential: bytes) -> bytes:
        return hmac.new(self._key, credential, hashlib.sha256).digest()

    def screen(self, header: str | None, source: str) -> Verdict | None:
        """Decide without scrypt if possible; None means the request needs ``verify()``.

        A malformed or missing header is DENIED, the remembered credential ALLOWED, and a source with no
        attempts left LIMITED; otherwise one of the source's attempts is taken.
        """
        parsed = credentials(header)
        if parsed is None:
            return Verdict.DENIED
        username, password = parsed
        if hmac.compare_digest(self._mac(username + b":" + password), self._verified):
            return Verdict.ALLOWED
        return None if self._take_attempt(source) else Verdict.LIMITED

    def verify(self, header: str | None, source: str) -> Verdict:
        """Check the header with scrypt after ``screen()`` returned None; remember a success."""
        parsed = credentials(header)
        if parsed is None:
            return Verdict.DENIED
        username, password = parsed
        if not self.auth.verify(username, password):
            return Verdict.DENIED
        self._verified = self._mac(username + b":" + password)
        self._give_back_attempt(source)
        return Verdict.ALLOWED

    def _attempts(self, source: str, now: float) -> float:
        attempts, when = self._buckets.get(source, (self._burst, now))
        return min(self._burst, attempts + (now - when) * self._refill)

    def _take_attempt(self, source: str) -> bool:
        with self._lock:
            now = self._clock()
            attempts = self._attempts(source, now)
            if attempts < 1:
                return False
            self._buckets[source] = (attempts - 1, now)
            self._buckets.move_to_end(source)
            while len(self._buckets) > self._max_sources:
                self._buckets.popitem(last=False)
            return True

    def _give_back_attempt(self, source: str) -> None:
        with self._lock:
            if source in self._buckets:
                now = self._clock()
                self._buckets[source] = (min(self._burst, self._attempts(source, now) + 1), now)

    @property
    def sources(self) -> int:
        """Source addresses the rate limiter currently remembers."""
        return len(self._buckets)
