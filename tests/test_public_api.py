"""The package's public surface is exactly the ``__all__`` of its public modules, each name in one of them."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

import rollout_telemetry
from docs.generate import API_MEMBERS, PUBLIC_MODULES, SNAPSHOT_TYPES
from rollout_telemetry import errors

PUBLIC = {
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
}

KINDS = {
    "AGENT_COMMAND_NOT_ALLOWED", "AGENT_REQUEST_FAILED", "AGENT_RUN_ERROR", "AGENT_TIMEOUT", "CANCELLED",
    "COHORT_INCOMPLETE", "ENVIRONMENT_SERVER_FAILED", "JUDGE_FAILED", "JUDGE_UNPARSEABLE", "KILL_SHAPED",
    "PERSISTENCE_FAILED", "PROTOCOL_VIOLATION", "PROVIDER_OOM_KILLED", "PROVIDER_QUOTA_EXHAUSTED",
    "PROVIDER_UNAVAILABLE", "SESSION_EXPIRED", "SESSION_LOST", "SESSION_RELEASE_FAILED", "SHUTDOWN",
    "TRANSPORT_LOCAL_RESOURCE", "TRANSPORT_PEER_DROP", "TRANSPORT_TIMEOUT", "TRANSPORT_UNREACHABLE",
    "VERIFIER_ERROR",
}  # fmt: skip

MODULES: dict[str, set[str]] = {
    "rollout_telemetry": PUBLIC,
    "rollout_telemetry.errors": {
        "ConfigError", "OutcomeError", "PushError", "RefusalReason", "Rejection", "RolloutTelemetryError",
        "RolloutUsageError", "ServeError", "TargetRefused",
    },
    "rollout_telemetry.exporters": set(),
    "rollout_telemetry.exporters.otel": {"OTLPExport", "SpanExportStats", "otlp_providers"},
    "rollout_telemetry.failure_kinds": KINDS | {
        "ADMISSION", "AGENT", "CLEANUP", "GYM_FAILURE_CLASSES", "KNOWN", "OTHER", "REGISTERED", "SEED",
        "STAGES", "UNSPECIFIED", "VERIFICATION", "is_namespaced",
    },
    "rollout_telemetry.ray": {
        "MAX_TARGETS", "REGISTRY_NAME", "RESERVED_LABELS", "RayTarget", "refusals", "registry_url",
        "serve_on_ray", "start_registry", "stop_registry", "target_groups",
    },
}  # fmt: skip
"""Every public module (no part of its path private) and the exact names it exports."""

SOURCE = Path(rollout_telemetry.__file__).parent


def _public_modules() -> set[str]:
    """Every module of the package whose dotted path has no private part, found in its source tree."""
    found = set()
    for path in SOURCE.rglob("*.py"):
        parts = path.relative_to(SOURCE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts[-1] != "__main__" and not any(part.startswith("_") for part in parts):
            found.add(".".join(parts))
    return found


def _defined_in(module: ModuleType) -> set[str]:
    """The public names ``module``'s own code binds at its top level: its classes, functions, constants and
    aliases (not what it imports)."""
    path = Path(module.__file__ or "")
    stub = path.with_suffix(".pyi")
    tree = ast.parse((stub if stub.exists() else path).read_text(encoding="utf-8"))
    bound: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bound |= {
                name.id for target in targets for name in ast.walk(target) if isinstance(name, ast.Name)
            }
    return {name for name in bound if not name.startswith("_")}


def test_all_is_exactly_the_public_api() -> None:
    """__all__ is sorted, complete, and every name resolves."""
    assert list(rollout_telemetry.__all__) == sorted(PUBLIC)
    for name in PUBLIC:
        assert getattr(rollout_telemetry, name) is not None
    assert set(dir(rollout_telemetry)) == PUBLIC


def test_every_public_module_is_pinned_and_documented() -> None:
    """The public modules are exactly those pinned here, and the API page lists each of them."""
    assert _public_modules() == set(MODULES)
    assert set(PUBLIC_MODULES) == set(MODULES)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_each_public_module_exports_exactly_its_pinned_names(name: str) -> None:
    """A public module's ``__all__`` is sorted and exactly its pinned names, each resolves, and nothing else
    the module defines has a public name: a helper is private (``_name``) or in a private module."""
    module = importlib.import_module(name)
    exported = list(getattr(module, "__all__", ()))
    assert exported == sorted(MODULES[name])
    for public in exported:
        assert hasattr(module, public), public
    assert _defined_in(module) - set(exported) == set()
    assert {
        attribute
        for attribute in dir(module)
        if not attribute.startswith("_") and getattr(getattr(module, attribute), "__module__", None) == name
    } <= set(exported)


def test_each_public_name_has_one_home() -> None:
    """No class or function is exported by two public modules: each has one documented place to import it
    from."""
    homes: dict[int, list[str]] = {}
    for name, names in MODULES.items():
        module = importlib.import_module(name)
        for public in names:
            value = getattr(module, public)
            if inspect.isclass(value) or inspect.isfunction(value):
                homes.setdefault(id(value), []).append(f"{name}.{public}")
    assert [where for where in homes.values() if len(where) > 1] == []


SNAPSHOT_ATTRIBUTES: dict[str, set[str]] = {
    "AccountSnapshot": {"agent", "agents", "overflow", "rejected", "taken_at"},
    "AgentSnapshot": {
        "agent", "measured", "masked", "unscored", "failed", "omitted", "completed", "count", "by_kind",
        "rewarded", "reward_sum", "mean_reward", "mean_reward_unmasked", "masked_ratio", "in_flight",
        "tokens", "truncated", "lifecycle", "cleanups", "recovery",
    },
    "LifecycleSnapshot": {
        "in_flight_by_stage", "oldest_start_by_stage", "stalled_by_stage", "stalls", "in_flight_by_state",
        "phases", "withdrawn", "durations", "admission_wait", "made", "oldest_start",
    },
    "CleanupSnapshot": {"unresolved", "failed", "durations"},
    "RecoverySnapshot": {"attempts", "retry_delay", "exhausted", "stages"},
    "Observed": {"bounds", "buckets", "total", "count"},
}  # fmt: skip
"""What ``snapshot()`` hands out: each type's public attributes, exactly (the rest is private)."""


@pytest.mark.parametrize("name", sorted(SNAPSHOT_ATTRIBUTES))
def test_a_snapshot_type_has_exactly_its_pinned_attributes(name: str) -> None:
    """Each value ``snapshot()`` hands out has the attributes pinned here (at most 20), all documented on the
    API page, and is a frozen slotted value."""
    cls = getattr(rollout_telemetry, name)
    assert {attribute for attribute in dir(cls) if not attribute.startswith("_")} == SNAPSHOT_ATTRIBUTES[name]
    assert len(SNAPSHOT_ATTRIBUTES[name]) <= 20
    assert name in SNAPSHOT_TYPES
    assert cls.__dataclass_params__.frozen
    assert "__slots__" in vars(cls)


# Names an annotation may use besides the package's public ones: builtins, the standard library's and
# typing's, and the libraries a user passes in (prometheus_client's registry, OpenTelemetry's providers).
OUTSIDE = {
    "Any", "BaseException", "Callable", "CollectorRegistry", "Exception", "False", "Iterable", "Iterator",
    "Literal", "LoggerProvider", "Mapping", "MeterProvider", "None", "Path", "SSLContext", "Self", "Sequence",
    "True", "TracebackType", "TracerProvider",
}  # fmt: skip
# Handles the telemetry makes for the user (``rollout()``, ``cleanup()``, ``output_write()``, ``serve()``):
# their constructors are the telemetry's, not the user's.
MADE_FOR_THE_USER = {"Cleanup", "MetricsServer", "OutputWrite", "RolloutContext"}


def _signatures() -> Iterator[tuple[str, str]]:
    """Every public signature of the package: each public function, and each public method (and property) a
    public class defines itself (what it inherits from ``str``, pydantic or ``Exception`` is theirs)."""
    for name in rollout_telemetry.__all__:
        public = getattr(rollout_telemetry, name)
        if not inspect.isclass(public):
            if callable(public) and not hasattr(public, "__origin__"):
                yield name, str(inspect.signature(public))
            continue
        for cls in public.__mro__:
            if not cls.__module__.startswith("rollout_telemetry"):
                continue
            for member_name, member in vars(cls).items():
                if member_name.startswith("_") and member_name != "__init__":
                    continue
                if member_name == "__init__" and name in MADE_FOR_THE_USER:
                    continue
                function = member.fget if isinstance(member, property) else member
                function = getattr(function, "__func__", function)  # classmethods, staticmethods
                if inspect.isfunction(function):
                    yield f"{name}.{member_name}", str(inspect.signature(function))


def test_no_public_signature_takes_or_returns_a_private_type() -> None:
    """Every type a public signature names is public (``rollout_telemetry.__all__``, ``errors.__all__``) or
    from outside the package: a user can import what a method takes and returns."""
    known = PUBLIC | set(errors.__all__) | OUTSIDE
    private = {
        where: sorted(names - known)
        for where, signature in _signatures()
        if (names := set(re.findall(r"\b[A-Z]\w*", signature))) - known
    }
    assert private == {}


def test_the_facade_has_at_most_15_public_members() -> None:
    """``RolloutTelemetry``: methods, properties and attributes a user can reach, at most 15, each one row of
    the API page's table."""
    telemetry = rollout_telemetry.RolloutTelemetry(runtime_metrics=False)
    members = {name for name in dir(telemetry) if not name.startswith("_")}
    assert len(members) <= 15, sorted(members)
    assert members == set(API_MEMBERS)


def test_the_serving_types_carry_what_a_user_configures_or_reads() -> None:
    """``TLSConfig`` and ``BasicAuth`` carry what a user configures (the files; a user name and a hash, read
    from a file or the environment), ``MetricsServer`` what a user does with a running server; what the server
    calls itself (an SSL context, a password check) is none of theirs."""

    def public(cls: type) -> set[str]:
        return {name for name in dir(cls) if not name.startswith("_")}

    assert public(rollout_telemetry.TLSConfig) == {"certfile", "keyfile", "client_cafile"}
    assert public(rollout_telemetry.BasicAuth) == {"username", "password_hash", "from_file", "from_env"}
    assert public(rollout_telemetry.MetricsServer) == {"url", "stop"}  # and its host and port, once made


def test_the_compatibility_page_names_every_public_module_and_no_other() -> None:
    """What 1.x promises (docs/compatibility.md) covers each public module that exports a name, and names no
    module that is not public."""
    page = (SOURCE.parents[1] / "docs" / "compatibility.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`(rollout_telemetry(?:\.\w+)*)`", page))
    assert named == {module for module, names in MODULES.items() if names}
