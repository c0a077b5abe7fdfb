"""HTTP basic auth credentials: the configured user name and scrypt password hash (``BasicAuth``, made by
``hash_password``), the user name and password an ``Authorization`` header carries (``credentials``), and
whether they are the configured ones (``matches``).

A check costs scrypt (slow, and 16 MiB) by design, which is what makes a stolen hash expensive to crack;
what a running server does so that guessing costs the guesser more than us is ``auth``'s.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from rollout_telemetry.errors import ConfigError

__all__ = ["BasicAuth", "credentials", "hash_password", "matches"]

_SCRYPT_N, _SCRYPT_R, _SCRYPT_P = 2**14, 8, 1


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


def matches(auth: BasicAuth, username: bytes, password: bytes) -> bool:
    """Return whether ``username`` and ``password`` are ``auth``'s (scrypt, then constant-time comparisons).

    Slow by design (scrypt): call it off an event loop.
    """
    _, n, r, p, salt, expected = auth.password_hash.split("$")
    digest = hashlib.scrypt(password, salt=base64.b64decode(salt), n=int(n), r=int(r), p=int(p))
    user_ok = hmac.compare_digest(username, auth.username.encode())
    password_ok = hmac.compare_digest(digest, base64.b64decode(expected))
    return user_ok and password_ok
