"""What the package's HTTP endpoints share on top of ``http``: binding their port, their URL and the gate.

``/metrics`` (``metrics_server``) and service discovery's ``/targets`` (``_ray.discovery``) are answered by
different handlers on the same stack; how a port is taken, what is answered before a request reaches the
content (an unknown path, another method, ``/healthz``, missing credentials) and how credentials are judged is
one rule for both, written here.
"""

from __future__ import annotations

import errno
import functools
import socket
from collections.abc import Sequence

from rollout_telemetry._serve.auth import Authenticator, PasswordChecks, Verdict
from rollout_telemetry._serve.connections import source_of
from rollout_telemetry._serve.credentials import BasicAuth, matches
from rollout_telemetry._serve.limits import Limits
from rollout_telemetry._serve.messages import Request, Response
from rollout_telemetry.errors import ServeError

__all__ = ["Gate", "bind", "endpoint_url", "screen"]

_ADDRESS_IN_USE = {errno.EADDRINUSE, 48, 10048}  # Linux, macOS, Windows
_CHALLENGE = ("WWW-Authenticate", 'Basic realm="rollout-telemetry", charset="UTF-8"')


def bind(host: str, port: int, port_range: int, *, what: str, backlog: int) -> socket.socket:
    """A listening socket on the first free port of ``port .. port+port_range-1``, queueing ``backlog``.

    Raises:
        ServeError: no port of the range can be bound; the message says it cannot serve ``what`` there.
    """
    if port_range < 1:
        msg = f"port_range must be at least 1, got {port_range}"
        raise ServeError(msg)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    candidates = [port] if port == 0 else list(range(port, port + port_range))
    for candidate in candidates:
        listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((host, candidate))
            listener.listen(backlog)
        except OSError as exc:
            listener.close()
            if exc.errno in _ADDRESS_IN_USE and candidate != candidates[-1]:
                continue
            msg = f"cannot serve {what} on {host}:{candidate}: {exc.strerror or exc}"
            if exc.errno in _ADDRESS_IN_USE:
                taken = f"port {port} is" if len(candidates) == 1 else f"ports {port}-{candidates[-1]} are"
                msg = f"cannot serve {what} on {host}:{candidate}: {taken} already in use"
            raise ServeError(msg) from exc
        return listener
    raise AssertionError("unreachable: the last candidate returns or raises")


def endpoint_url(host: str, port: int, path: str, *, tls: bool) -> str:
    """The URL of ``path`` on an endpoint bound to ``host:port``: https with TLS, an IPv6 host in brackets."""
    scheme = "https" if tls else "http"
    bracketed = f"[{host}]" if ":" in host else host
    return f"{scheme}://{bracketed}:{port}{path}"


class Gate:
    """The credentials an endpoint asks for: the cheap checks on the event loop, scrypt (for a credential not
    seen before) on ``PasswordChecks``' own threads, never the threads that render. ``close()`` stops them."""

    def __init__(self, auth: BasicAuth, limits: Limits) -> None:
        self._authenticator = Authenticator(functools.partial(matches, auth), limits=limits)
        self._checks = PasswordChecks(self._authenticator, limits)

    async def refusal(self, request: Request) -> Response | None:
        """None if the request's credentials are the configured ones; else the 401 or 429 to answer."""
        header = request.headers.get("authorization")
        verdict = self._authenticator.screen(header)
        if verdict is None:
            verdict = await self._checks.check(header, source_of(request.source), request.evictable)
        if verdict is Verdict.LIMITED:
            return Response.text(429, "too many attempts: try again\n", ("Retry-After", "1"), _CHALLENGE)
        if verdict is Verdict.DENIED:
            return Response.text(401, "unauthorized\n", _CHALLENGE)
        return None

    def close(self) -> None:
        """Stop the password-check threads."""
        self._checks.close()


async def screen(request: Request, *, paths: Sequence[str], gate: Gate | None) -> Response | None:
    """The answer to a request that the endpoint's content need not see, or None to let it through.

    A path that is neither one of ``paths`` nor ``/healthz`` is 404 (naming the first path to try), a method
    other than GET or HEAD 405; ``/healthz`` is ``ok`` without credentials (it says nothing else: left open
    for liveness probes); behind a ``gate``, a request without the credentials is 401 or 429.
    """
    if request.path not in paths and request.path != "/healthz":
        return Response.text(404, f"not found: try {paths[0]}\n")
    if request.method not in ("GET", "HEAD"):
        return Response.text(405, "GET or HEAD only\n", ("Allow", "GET, HEAD"))
    if request.path == "/healthz":
        return Response.text(200, "ok\n")
    return await gate.refusal(request) if gate is not None else None
