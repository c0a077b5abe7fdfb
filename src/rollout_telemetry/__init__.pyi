"""rollout-telemetry: live progress telemetry for RL rollout collection.

The public API, written once: ``__init__.py`` imports each name from its module on first use, so
``import rollout_telemetry.failure_kinds`` (the vocabulary, for data tooling) pulls in nothing heavy.
"""

from ._contract.generation import Generation
from ._contract.outcome import Disposition, Outcome, outcome_of
from ._contract.verify_response import VerifyResponse
from ._facade.telemetry import RolloutTelemetry
from ._recording.cleanup import Cleanup
from ._recording.lifecycle import RolloutContext
from ._recording.output_write import OutputWrite
from ._recording.spans import EvaluationEvent, SpanMode
from ._serve.credentials import BasicAuth, hash_password
from ._serve.metrics_server import MetricsServer
from ._serve.tls import TLSConfig
from ._store.observed import Observed
from ._store.recovery import RecoverySnapshot
from ._store.snapshot import AccountSnapshot, AgentSnapshot, CleanupSnapshot, LifecycleSnapshot

__all__ = [
    "AccountSnapshot",
    "AgentSnapshot",
    "BasicAuth",
    "Cleanup",
    "CleanupSnapshot",
    "Disposition",
    "EvaluationEvent",
    "Generation",
    "LifecycleSnapshot",
    "MetricsServer",
    "Observed",
    "Outcome",
    "OutputWrite",
    "RecoverySnapshot",
    "RolloutContext",
    "RolloutTelemetry",
    "SpanMode",
    "TLSConfig",
    "VerifyResponse",
    "hash_password",
    "outcome_of",
]
