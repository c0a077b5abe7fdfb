"""The check of a failure kind against the vocabulary: known and namespaced names pass, others warn once."""

from __future__ import annotations

import logging

import pytest

from rollout_telemetry._contract.kinds import KindValidator


def test_registered_and_namespaced_pass_silently(caplog: pytest.LogCaptureFixture) -> None:
    """Registered and ``<server>:<kind>`` names are returned unchanged without a warning."""
    validator = KindValidator()
    with caplog.at_level(logging.WARNING):
        assert validator.validate("session_lost") == "session_lost"
        assert validator.validate("browser_env:tab_crashed") == "browser_env:tab_crashed"
    assert caplog.records == []


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
