"""rollout-telemetry: live progress telemetry for RL rollout collection.

The public names are listed once, in ``__init__.pyi`` (explicit imports and ``__all__``), and loaded from
there on first use: ``import rollout_telemetry.failure_kinds`` (the vocabulary, for data tooling) does not
pull in prometheus_client, OpenTelemetry or pydantic.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
