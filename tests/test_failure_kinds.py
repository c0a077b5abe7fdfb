"""The failure-kind vocabulary: its names, their convention, and a module data tooling can import."""

from __future__ import annotations

import re
import subprocess
import sys

from rollout_telemetry import failure_kinds
from rollout_telemetry.failure_kinds import REGISTERED

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


def test_no_two_names_differ_only_by_case_or_separator() -> None:
    """Folding case and separators leaves every name distinct."""
    folded = {re.sub(r"[^a-z0-9]", "", name.lower()) for name in REGISTERED}
    assert len(folded) == len(REGISTERED)


def test_vocabulary_is_small_enough_for_a_label() -> None:
    """The vocabulary stays a low-cardinality label."""
    assert len(REGISTERED) <= 32


def test_namespaced_names_have_two_parts_of_the_convention() -> None:
    """``is_namespaced`` holds for ``<server>:<kind>`` with both parts ``[a-z][a-z0-9_]*``, and only then."""
    assert failure_kinds.is_namespaced("browser_env:tab_crashed")
    assert failure_kinds.is_namespaced("a:b")
    assert not failure_kinds.is_namespaced("A:b")
    assert not failure_kinds.is_namespaced("a:b:c")
    assert not failure_kinds.is_namespaced("judge_failed")


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
