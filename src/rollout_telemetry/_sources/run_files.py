"""The files of one NeMo Gym run: ``<stem>.jsonl``, its ``<stem>_failures.jsonl`` sidecar and its
``<stem>_materialized_inputs.jsonl``, found by name beside the main output unless given; and the
``<stem>_coverage.json`` and ``<stem>_manifest.json`` of NeMo Gym's next release, always beside it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["RunFiles"]


@dataclass(frozen=True, slots=True)
class RunFiles:
    """The files of one run: the main output, its failures sidecar, its materialized inputs."""

    main: Path
    failures: Path | None = None
    inputs: Path | None = None

    @property
    def name(self) -> str:
        """The name a run's files give its rows that name no agent: the main file's stem."""
        return _stem(self.main)

    @property
    def coverage(self) -> Path:
        """NeMo Gym's own count of the run (its next release): ``<stem>_coverage.json`` by the main file."""
        return self.main.with_name(f"{self.name}_coverage.json")

    @property
    def manifest(self) -> Path:
        """NeMo Gym's run manifest (its next release), ``<stem>_manifest.json`` beside the main file."""
        return self.main.with_name(f"{self.name}_manifest.json")

    @classmethod
    def from_main(
        cls, main: str | Path, *, failures: str | Path | None = None, inputs: str | Path | None = None
    ) -> RunFiles:
        """Find the sidecars by name next to ``<stem>.jsonl`` unless given explicitly."""
        path = Path(main)
        stem = _stem(path)
        return cls(
            main=path,
            failures=Path(failures) if failures else path.with_name(f"{stem}_failures.jsonl"),
            inputs=Path(inputs) if inputs else path.with_name(f"{stem}_materialized_inputs.jsonl"),
        )


def _stem(main: Path) -> str:
    return main.name.removesuffix(".jsonl")
