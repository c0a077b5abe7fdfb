"""The failure kind and reason an exception escaping a rollout block (or a cleanup) records."""

from __future__ import annotations

from collections.abc import Mapping

from rollout_telemetry import failure_kinds

__all__ = ["kind_of_exception", "reason_of_exception"]

EXCEPTION_KINDS: Mapping[str, str] = {
    "asyncio.exceptions.CancelledError": failure_kinds.CANCELLED,
    "builtins.TimeoutError": failure_kinds.AGENT_TIMEOUT,
    "builtins.KeyboardInterrupt": failure_kinds.SHUTDOWN,
    "builtins.SystemExit": failure_kinds.SHUTDOWN,
    "builtins.ConnectionError": failure_kinds.TRANSPORT_PEER_DROP,
}
"""Exception types by module and name (matched along the MRO; by name, so that recording does not import
asyncio), and the failure kind an escaping one records."""


def kind_of_exception(exc: BaseException) -> str:
    """The failure kind an exception escaping a rollout block records."""
    for cls in type(exc).__mro__:
        kind = EXCEPTION_KINDS.get(f"{cls.__module__}.{cls.__qualname__}")
        if kind is not None:
            return kind
    return failure_kinds.AGENT_RUN_ERROR


def reason_of_exception(exc: BaseException) -> str:
    """The failure reason an exception escaping a rollout block records: its type and message (its type
    alone if its ``__str__`` raises: the caller's exception must never make the block raise another)."""
    try:
        return f"{type(exc).__name__}: {exc}"
    except Exception:
        return f"{type(exc).__name__} (its message could not be read)"
