"""The package's public surface is exactly its __all__."""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator

import pytest

import rollout_telemetry
from docs.generate import API_MEMBERS
from rollout_telemetry import errors

PUBLIC = {
    "AccountSnapshot",
    "AgentSnapshot",
    "BasicAuth",
    "Cleanup",
    "Disposition",
    "EvaluationEvent",
    "Generation",
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


def test_all_is_exactly_the_public_api() -> None:
    """__all__ is sorted, complete, and every name resolves."""
    assert list(rollout_telemetry.__all__) == sorted(PUBLIC)
    for name in PUBLIC:
        assert getattr(rollout_telemetry, name) is not None
    assert set(dir(rollout_telemetry)) == PUBLIC


def test_unknown_attribute_is_an_attribute_error() -> None:
    """A name outside the API raises AttributeError, as for any module."""
    with pytest.raises(AttributeError, match="nope"):
        _ = rollout_telemetry.nope  # type: ignore[attr-defined]


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
