"""NeMo Gym's own account of a run, compared with ours at its end: ``<stem>_coverage.json`` and
``<stem>_manifest.json``, which Gym's next release writes (PR #3302, ``nemo_gym/rollout_records.py`` and
``rollout_recovery.py``); NeMo Gym 0.7.0 writes neither, and then nothing is said.

Each file is read when present, as the project reads any file it did not write for itself: a regular file
only (a symbolic link, a pipe or a device is refused, ``_files.read_prefix``), at most ``MAX_BYTES`` of it,
and only the fields read are decoded (a manifest's per-rollout ``next_attempt`` is skipped unparsed). A file
that is malformed, too large, of another ``schema_version`` than ``SCHEMA_VERSION``, or not regular is
ignored with one line saying why; a field this module does not know, or whose value is not of the type Gym
writes, is ignored.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from rollout_telemetry._files import read_prefix
from rollout_telemetry._store.coverage import CoverageSnapshot
from rollout_telemetry.errors import ConfigError

__all__ = ["differences"]

SCHEMA_VERSION = 2
"""The ``schema_version`` of Gym's coverage and manifest files this version reads."""
MAX_BYTES = 64 << 20
"""The largest coverage or manifest file read (64 MiB, as a row): a larger one is ignored."""


class _Coverage(msgspec.Struct, forbid_unknown_fields=False, gc=False):
    """The fields read from ``<stem>_coverage.json`` (``RolloutRecords.coverage()``); the rest skipped."""

    schema_version: Any = None
    run_id: Any = None
    expected: Any = None
    successful: Any = None
    measured: Any = None
    masked: Any = None
    unscored: Any = None
    failed: Any = None
    intentionally_omitted: Any = None
    unknown: Any = None
    max_rollout_attempts: Any = None


class _Manifest(msgspec.Struct, forbid_unknown_fields=False, gc=False):
    """The fields read from ``<stem>_manifest.json`` (``RunManifest``); the rest skipped unparsed."""

    schema_version: Any = None
    run_id: Any = None


_Fields = TypeVar("_Fields", bound=msgspec.Struct)


def _read(path: Path, struct: type[_Fields]) -> _Fields | str | None:
    """The file's fields, ``None`` when nothing is there, or the one line saying why it is ignored."""
    try:
        # One already too large is not read at all; one that grows meanwhile, up to the bound only.
        too_large = _size(path) > MAX_BYTES
        data = None if too_large else read_prefix(path, MAX_BYTES + 1)
    except ConfigError:  # a link, a pipe, a device, a folder: never followed nor opened
        return f"{path} is not a regular file (a symbolic link, a pipe, a device or a folder): not read"
    except OSError as exc:
        return f"{path} cannot be read ({exc.strerror or exc}): ignored"
    if too_large or (data is not None and len(data) > MAX_BYTES):
        return f"{path} is larger than {MAX_BYTES >> 20} MiB: ignored"
    if data is None:
        return None
    try:
        fields = msgspec.json.decode(data, type=struct)
    except Exception as exc:  # not JSON, not an object, too deep: whatever the decoder says
        return f"{path} is not a JSON object ({type(exc).__name__}: {exc!s:.120}): ignored"
    version = getattr(fields, "schema_version", None)
    known = type(version) is int and version == SCHEMA_VERSION
    return fields if known else f"{path} has schema_version {version!r:.40}, not {SCHEMA_VERSION}: ignored"


def _size(path: Path) -> int:
    """The size ``lstat`` gives the name (a link's own), 0 when nothing is there."""
    try:
        return os.lstat(path).st_size
    except OSError:
        return 0


def _count(value: object) -> int | None:
    """A count Gym wrote (an integer, never a bool), else ``None``: a field of another type is ignored."""
    return value if type(value) is int else None


def _ours(coverage: CoverageSnapshot, max_attempts: int) -> dict[str, int | None]:
    """Our counts under the names of Gym's coverage file; ``None`` where we cannot tell (no inputs read)."""
    totals: dict[str, int] = {}
    for agent in coverage.agents:
        for disposition, count in agent.rollouts.items():
            totals[disposition.value] = totals.get(disposition.value, 0) + count
    measured, masked, unscored = (totals.get(name, 0) for name in ("measured", "masked", "unscored"))
    known = coverage.expected_known
    return {
        "expected": sum(a.expected or 0 for a in coverage.agents) if known else None,
        "successful": measured + masked + unscored,
        "measured": measured,
        "masked": masked,
        "unscored": unscored,
        "failed": totals.get("failed", 0),
        "intentionally_omitted": totals.get("omitted", 0),
        "unknown": sum(a.unknown or 0 for a in coverage.agents) if known else None,
        "max_rollout_attempts": max_attempts,
    }


def differences(
    files: tuple[Path, Path, tuple[Path, ...]],
    coverage: CoverageSnapshot,
    max_attempts: int,
    run_id: str | None,
    modified: Callable[[Path], int | None],
) -> list[str]:
    """Lines, one per field, where Gym's coverage file differs from ``coverage`` (and the rows' ``run_id``
    from the manifest's or the coverage file's), or the one line each saying why a file is ignored; none
    for a run without them (NeMo Gym 0.7.0).

    Args:
        files: (the coverage file, the manifest, the run's row files): a coverage file older than a row
            file (``modified``, in ns) is Gym's count at the store's opening, not at the run's end, and is
            not compared.
        coverage: our coverage account at the end of the run.
        max_attempts: the attempts budget our account was kept with.
        run_id: the run id the rows carried (``None``: they carried none).
        modified: a file's modification time in ns, ``None`` if it is not there.
    """
    coverage_file, manifest_file, row_files = files
    lines: list[str] = []
    manifest = _read(manifest_file, _Manifest)
    if isinstance(manifest, str):
        lines.append(manifest)
    elif manifest is not None:
        lines += _other_run(manifest_file, manifest.run_id, run_id)
    gym = _read(coverage_file, _Coverage)
    if gym is None:
        return lines
    if isinstance(gym, str):
        return [*lines, gym]
    written = modified(coverage_file)
    last_row = max((time for path in row_files if (time := modified(path)) is not None), default=None)
    if written is not None and last_row is not None and written < last_row:
        return [*lines, f"{coverage_file} is older than the run's last row (the run goes on): not compared"]
    lines += _other_run(coverage_file, gym.run_id, run_id)
    for field, ours in _ours(coverage, max_attempts).items():
        theirs = _count(getattr(gym, field))
        if theirs is not None and ours is not None and theirs != ours:
            lines.append(f"{field}: {coverage_file} says {theirs}, rollout-telemetry counted {ours}")
    return lines


def _other_run(path: Path, theirs: object, ours: str | None) -> list[str]:
    """The line saying that ``path`` names another run than the rows, if it does."""
    if type(theirs) is not str or ours is None or theirs == ours:
        return []
    return [f"run_id: {path} names run {theirs[:80]!r}, the rows run {ours[:80]!r}"]
