"""The real NeMo Gym, started once for the module that runs it: its venv, the fake policy model and its
servers. Module-scoped, not session-scoped: their teardown (Gym's servers and its Ray ending, up to a
minute on a busy machine) then counts against the last Gym test's time limit, not against whichever
unrelated test the worker ran last (a 60 s OTLP test timed out so in a CI run)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gym.harness import FakeModel, GymServers, GymUnavailable, gym_venv


@pytest.fixture(scope="module")
def gym_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeModel]:
    """The fake policy model, for the module."""
    with FakeModel(tmp_path_factory.mktemp("fake-model") / "model.log") as model:
        yield model


@pytest.fixture(scope="module")
def venv() -> Path:
    """NeMo Gym's venv. Without a Python >= 3.12 to make it the tests are skipped, except in CI (``CI=true``),
    where a missing Gym is a failure: they must run there."""
    try:
        return gym_venv()
    except GymUnavailable as exc:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"NeMo Gym is needed in CI: {exc}")
        pytest.skip(f"NeMo Gym cannot be set up here: {exc}")


@pytest.fixture(scope="module")
def gym(tmp_path_factory: pytest.TempPathFactory, venv: Path, gym_model: FakeModel) -> Iterator[GymServers]:
    """NeMo Gym's servers (both environments) against the fake model, for the module."""
    with GymServers(venv, tmp_path_factory.mktemp("gym"), gym_model) as servers:
        yield servers


@pytest.fixture
def workdir(gym: GymServers, request: pytest.FixtureRequest) -> Path:
    """An output folder of this test's own, inside Gym's work directory (where Gym runs); named without a
    parametrized test's brackets, which Gym's command line (Hydra overrides) would read as a list."""
    folder: Path = gym.workdir / "runs" / request.node.name.replace("[", "-").replace("]", "")
    folder.mkdir(parents=True, exist_ok=True)
    return folder
