"""The failure-kind vocabulary: naming convention, lookup and warn-once."""

from __future__ import annotations

import logging
import re
import subprocess
import sys

import pytest

from rollout_telemetry import failure_kinds
from rollout_telemetry.failure_kinds import REGISTERED, KindValidator

EXPECTED = {
    "transport_unreachable",
    "transport_peer_drop",
    "transport_timeout",
    "transport_local_resource",
    "agent_run_error",
    "agent_request_failed",
    "agent_timeout",
    "agent_command_not_allowed",
    "environment_server_failed",
    "protocol_violation",
    "judge_failed",
    "judge_unparseable",
    "verifier_error",
    "provider_unavailable",
    "provider_quota_exhausted",
    "provider_oom_killed",
    "session_lost",
    "session_expired",
    "session_release_failed",
    "cancelled",
    "kill_shaped",
    "shutdown",
    "persistence_failed",
    "cohort_incomplete",
}
HEAVY = "('prometheus_client', 'opentelemetry', 'pydantic')"


def test_registered_set_is_the_documented_vocabulary() -> None:
    """The registered names are exactly the documented ones, each a named constant."""
    assert set(REGISTERED) == EXPECTED
    for name in EXPECTED:
        assert getattr(failure_kinds, name.upper()) == name


def test_every_name_fits_the_convention() -> None:
    """Every registered name is [a-z][a-z0-9_]*."""
    for name in REGISTERED:
        assert re.fullmatch(r"[a-z][a-z0-9_]*", name), name
        assert failure_kinds.fits_convention(name)


def test_no_two_names_differ_only_by_case_or_separator() -> None:
    """Folding case and separators leaves every name distinct."""
    folded = {re.sub(r"[^a-z0-9]", "", name.lower()) for name in REGISTERED}
    assert len(folded) == len(REGISTERED)


def test_vocabulary_is_small_enough_for_a_label() -> None:
    """The vocabulary stays a low-cardinality label."""
    assert len(REGISTERED) <= 32


def test_registered_and_namespaced_pass_silently(caplog: pytest.LogCaptureFixture) -> None:
    """Registered and ``<server>:<kind>`` names are returned unchanged without a warning."""
    validator = KindValidator()
    with caplog.at_level(logging.WARNING):
        assert validator.validate("session_lost") == "session_lost"
        assert validator.validate("browser_env:tab_crashed") == "browser_env:tab_crashed"
    assert caplog.records == []
    assert failure_kinds.is_namespaced("a:b")
    assert not failure_kinds.is_namespaced("A:b")
    assert not failure_kinds.is_namespaced("a:b:c")
    assert failure_kinds.is_registered("judge_failed")
    assert not failure_kinds.is_registered("took_too_long")


def test_unknown_kind_warns_once_and_passes_through(caplog: pytest.LogCaptureFixture) -> None:
    """An unregistered name is returned unchanged and warned about once per name."""
    validator = KindValidator()
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            assert validator.validate("took_too_long") == "took_too_long"
        assert validator.validate("Weird Kind!") == "Weird Kind!"
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2
    assert "took_too_long" in messages[0]
    assert validator.warned == {"took_too_long", "Weird Kind!"}


@pytest.mark.parametrize(
    "failure_class",
    [
        "transient", "legitimate", "timeout_exceeded", "skipped", "incomplete", "judge_failed",
        "remote_agent_error", "verify_failed", "reference_missing", "eval_missing", "transport_ineligible",
        "judge_invalid",
    ],
)  # fmt: skip
def test_gym_failure_classes_pass_through_without_a_warning(
    failure_class: str, caplog: pytest.LogCaptureFixture
) -> None:
    """NeMo Gym's failure classes (current and older) are known names: unchanged, never warned about."""
    validator = KindValidator()
    with caplog.at_level(logging.WARNING):
        assert validator.validate(failure_class) == failure_class
    assert caplog.records == []
    assert validator.warned == frozenset()


def test_warned_set_is_bounded(caplog: pytest.LogCaptureFixture) -> None:
    """Past its limit the validator says once that it stops warning, and remembers no more names."""
    validator = KindValidator(max_warned=5)
    with caplog.at_level(logging.WARNING):
        for i in range(100):
            assert validator.validate(f"free text {i}") == f"free text {i}"
    assert len(validator.warned) == 5
    assert len(caplog.records) == 6
    assert "no further" in caplog.records[-1].getMessage()


def test_vocabulary_imports_only_the_standard_library() -> None:
    """Importing the vocabulary pulls in neither prometheus_client, opentelemetry nor pydantic."""
    code = (
        "import sys, importlib.util\n"
        "spec = importlib.util.spec_from_file_location('fk', sys.argv[1])\n"
        "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)\n"
        f"heavy = [m for m in sys.modules if m.split('.')[0] in {HEAVY}]\n"
        "print(heavy)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, failure_kinds.__file__],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    assert result.stdout.strip() == "[]"


def test_vocabulary_module_via_package_import_is_light() -> None:
    """``import rollout_telemetry.failure_kinds`` loads no heavy dependency through the package either."""
    code = (
        "import sys\n"
        "import rollout_telemetry.failure_kinds\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY})))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "[]"
