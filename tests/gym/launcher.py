"""Run NeMo Gym's command line with one more exporter: Gym's own metrics, each call a line of a JSONL file.

Runs under the Python of the Gym venv (never this project's): NeMo Gym has no per-rollout callback, but
its collection hands its progress step metrics (``progress/<agent>/reward``, ``masked_pct``, ...) and its
end-of-run keys (``coverage/expected``, ...) to every exporter of ``nemo_gym.exporters.EXPORTER_REGISTRY``.
The tests read them as the oracle for this project's keys.

    python launcher.py eval run ... +capture_metrics_path=/path/metrics.jsonl
"""

import json
import sys
from typing import Any

from nemo_gym import exporters
from nemo_gym.cli.main import main
from nemo_gym.config_types import ExporterConfig
from nemo_gym.exporters.base import BaseExporter


class CaptureConfig(ExporterConfig):
    capture_metrics_path: str | None = None

    @property
    def is_available(self) -> bool:
        return bool(self.capture_metrics_path)


class CaptureExporter(BaseExporter):
    name = "capture"

    def setup(self) -> None:
        self._path = self.global_config_dict["capture_metrics_path"]

    def teardown(self) -> None:
        pass

    def _log_config(self, config_dict: Any) -> None:
        pass

    def _log_metrics(self, metrics: dict[str, Any], step: int | None = None) -> None:
        with open(self._path, "a") as out:
            out.write(json.dumps({"step": step, "metrics": metrics}) + "\n")

    def _log_rollouts(self, rollouts: list[dict[str, Any]]) -> None:
        pass


if __name__ == "__main__":
    exporters.EXPORTER_REGISTRY["capture"] = (CaptureConfig, "__main__:CaptureExporter")
    sys.argv = ["gym", *sys.argv[1:]]
    sys.exit(main())
