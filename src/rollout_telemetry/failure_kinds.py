"""The failure-kind vocabulary: what kind of thing went wrong with a rollout.

A failure kind is a low-cardinality *label* (``<domain>_<condition>``, e.g. ``session_lost``), never free
text about one occurrence: that is ``failure_reason``, which goes on a span or a log line.

Servers may namespace their own kinds as ``<server>:<kind>`` (both parts ``[a-z][a-z0-9_]*``); those are
accepted silently, as are NeMo Gym's failure classes (``GYM_FAILURE_CLASSES``), which a followed failures
file carries. Any other unregistered name is logged as a warning once per name and passed through unchanged:
a kind is never rejected.

This module imports only the standard library, so data tooling can use the vocabulary without pulling in
prometheus_client, OpenTelemetry or pydantic.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = [
    "ADMISSION",
    "AGENT",
    "AGENT_COMMAND_NOT_ALLOWED",
    "AGENT_REQUEST_FAILED",
    "AGENT_RUN_ERROR",
    "AGENT_TIMEOUT",
    "CANCELLED",
    "CLEANUP",
    "COHORT_INCOMPLETE",
    "ENVIRONMENT_SERVER_FAILED",
    "GYM_FAILURE_CLASSES",
    "JUDGE_FAILED",
    "JUDGE_UNPARSEABLE",
    "KILL_SHAPED",
    "KNOWN",
    "OTHER",
    "PERSISTENCE_FAILED",
    "PROTOCOL_VIOLATION",
    "PROVIDER_OOM_KILLED",
    "PROVIDER_QUOTA_EXHAUSTED",
    "PROVIDER_UNAVAILABLE",
    "REGISTERED",
    "SEED",
    "SESSION_EXPIRED",
    "SESSION_LOST",
    "SESSION_RELEASE_FAILED",
    "SHUTDOWN",
    "STAGES",
    "TRANSPORT_LOCAL_RESOURCE",
    "TRANSPORT_PEER_DROP",
    "TRANSPORT_TIMEOUT",
    "TRANSPORT_UNREACHABLE",
    "UNSPECIFIED",
    "VERIFICATION",
    "VERIFIER_ERROR",
    "is_namespaced",
]

TRANSPORT_UNREACHABLE: Final = "transport_unreachable"
TRANSPORT_PEER_DROP: Final = "transport_peer_drop"
TRANSPORT_TIMEOUT: Final = "transport_timeout"
TRANSPORT_LOCAL_RESOURCE: Final = "transport_local_resource"
AGENT_RUN_ERROR: Final = "agent_run_error"
AGENT_REQUEST_FAILED: Final = "agent_request_failed"
AGENT_TIMEOUT: Final = "agent_timeout"
AGENT_COMMAND_NOT_ALLOWED: Final = "agent_command_not_allowed"
ENVIRONMENT_SERVER_FAILED: Final = "environment_server_failed"
PROTOCOL_VIOLATION: Final = "protocol_violation"
JUDGE_FAILED: Final = "judge_failed"
JUDGE_UNPARSEABLE: Final = "judge_unparseable"
VERIFIER_ERROR: Final = "verifier_error"
PROVIDER_UNAVAILABLE: Final = "provider_unavailable"
PROVIDER_QUOTA_EXHAUSTED: Final = "provider_quota_exhausted"
PROVIDER_OOM_KILLED: Final = "provider_oom_killed"
SESSION_LOST: Final = "session_lost"
SESSION_EXPIRED: Final = "session_expired"
SESSION_RELEASE_FAILED: Final = "session_release_failed"
CANCELLED: Final = "cancelled"
KILL_SHAPED: Final = "kill_shaped"
SHUTDOWN: Final = "shutdown"
PERSISTENCE_FAILED: Final = "persistence_failed"
COHORT_INCOMPLETE: Final = "cohort_incomplete"

REGISTERED: Final[frozenset[str]] = frozenset(
    {
        TRANSPORT_UNREACHABLE,
        TRANSPORT_PEER_DROP,
        TRANSPORT_TIMEOUT,
        TRANSPORT_LOCAL_RESOURCE,
        AGENT_RUN_ERROR,
        AGENT_REQUEST_FAILED,
        AGENT_TIMEOUT,
        AGENT_COMMAND_NOT_ALLOWED,
        ENVIRONMENT_SERVER_FAILED,
        PROTOCOL_VIOLATION,
        JUDGE_FAILED,
        JUDGE_UNPARSEABLE,
        VERIFIER_ERROR,
        PROVIDER_UNAVAILABLE,
        PROVIDER_QUOTA_EXHAUSTED,
        PROVIDER_OOM_KILLED,
        SESSION_LOST,
        SESSION_EXPIRED,
        SESSION_RELEASE_FAILED,
        CANCELLED,
        KILL_SHAPED,
        SHUTDOWN,
        PERSISTENCE_FAILED,
        COHORT_INCOMPLETE,
    }
)
"""Every registered failure kind."""

GYM_FAILURE_CLASSES: Final[frozenset[str]] = frozenset(
    {
        "transient",
        "legitimate",
        "timeout_exceeded",
        "skipped",
        "incomplete",
        "judge_failed",
        "judge_invalid",
        "permanent",
        "remote_agent_error",
        "verify_failed",
        "reference_missing",
        "eval_missing",
        "transport_ineligible",
        "infrastructure_error",
        "harbor_failed",
        "tau2_malformed_tool_call",
        "tau2_agent_error",
        AGENT_REQUEST_FAILED,
        AGENT_RUN_ERROR,
        ENVIRONMENT_SERVER_FAILED,
        CANCELLED,
        KILL_SHAPED,
    }
)
"""NeMo Gym's failure classes (``_ng_failure_class`` in its failures file, current and older ones): known
names, passed through unchanged as the kind of a failure read from that file, never warned about."""

KNOWN: Final[frozenset[str]] = REGISTERED | GYM_FAILURE_CLASSES
"""Every name accepted without a warning (besides namespaced ``<server>:<kind>`` ones)."""

ADMISSION: Final = "admission"
SEED: Final = "seed"
AGENT: Final = "agent"
VERIFICATION: Final = "verification"
CLEANUP: Final = "cleanup"

STAGES: Final[frozenset[str]] = frozenset({ADMISSION, SEED, AGENT, VERIFICATION, CLEANUP})
"""Where a rollout in flight is: NeMo Gym's failure stages. A server may namespace its own as
``<server>:<stage>``; any other name is warned about once and passed through, like a failure kind."""

UNSPECIFIED: Final = "unspecified"
"""The label of a masked, failed or omitted rollout that named no failure kind."""

OTHER: Final = "_other"
"""The label that collects values beyond a cardinality cap."""

_NAMESPACED = re.compile(r"[a-z][a-z0-9_]*:[a-z][a-z0-9_]*")


def is_namespaced(kind: str) -> bool:
    """Return whether ``kind`` has the ``<server>:<kind>`` shape (both parts ``[a-z][a-z0-9_]*``): a server's
    own kind (or stage), accepted without a warning."""
    return _NAMESPACED.fullmatch(kind) is not None
