"""TLS for an endpoint: the certificate, key and optional client CA a user configures (``TLSConfig``), and the
server-side SSL context the endpoint is served with (``server_context``)."""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from rollout_telemetry.errors import ConfigError

__all__ = ["TLSConfig", "server_context"]


@dataclass(frozen=True, slots=True)
class TLSConfig:
    """Serve HTTPS with this certificate and key; with ``client_cafile``, require client certificates."""

    certfile: str
    keyfile: str
    client_cafile: str | None = None


def server_context(tls: TLSConfig) -> ssl.SSLContext:
    """The server-side SSL context of ``tls``, its files loaded.

    Raises:
        ConfigError: a file is missing, unreadable, not PEM, or the key does not match the certificate; the
            message names the file.
    """
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.options |= ssl.OP_NO_RENEGOTIATION  # a client could make the server redo handshakes
    try:
        context.load_cert_chain(tls.certfile, tls.keyfile)
    except OSError as exc:  # ssl.SSLError is an OSError too
        msg = f"TLS certificate {tls.certfile} with key {tls.keyfile}: {_tls_problem(exc)}"
        raise ConfigError(msg) from exc
    if tls.client_cafile:
        try:
            context.load_verify_locations(tls.client_cafile)
        except OSError as exc:
            msg = f"TLS client CA {tls.client_cafile}: {_tls_problem(exc, ca=True)}"
            raise ConfigError(msg) from exc
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def _tls_problem(exc: OSError, *, ca: bool = False) -> str:
    """What is wrong with a TLS file, in words (OpenSSL's own say 'PEM lib')."""
    if isinstance(exc, ssl.SSLError):
        if "KEY_VALUES_MISMATCH" in str(exc):
            return "the key does not belong to the certificate"
        what = "a PEM CA certificate" if ca else "a PEM certificate and its PEM private key"
        return f"not {what} (were the certificate and the key swapped?)" if not ca else f"not {what}"
    return exc.strerror or str(exc)
