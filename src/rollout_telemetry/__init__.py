"""rollout-telemetry: live progress telemetry for RL rollout collection.

The public names are listed once, in ``__init__.pyi`` (explicit imports and ``__all__``, what type checkers
read), and each is imported from its module on first use: ``import rollout_telemetry.failure_kinds`` (the
vocabulary, for data tooling) does not pull in prometheus_client, OpenTelemetry or pydantic.
"""

import ast
import importlib
import os


def _stub() -> tuple[list[str], dict[str, str]]:
    """The stub's ``__all__``, and the module each name it imports comes from."""
    listed: list[str] = []
    homes: dict[str, str] = {}
    with open(os.path.splitext(__file__)[0] + ".pyi", encoding="utf-8") as stub:
        tree = ast.parse(stub.read())
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module is not None:
            homes.update({alias.name: f"{__name__}.{node.module}" for alias in node.names})
        elif isinstance(node, ast.Assign) and [ast.unparse(target) for target in node.targets] == ["__all__"]:
            listed = ast.literal_eval(node.value)
    return listed, homes


_LISTED, _HOMES = _stub()
__all__ = list(_LISTED)


def __getattr__(name: str) -> object:
    """A public name, imported from its module the first time it is asked for (then a plain attribute)."""
    home = _HOMES.get(name) if name in _LISTED else None
    if home is None:
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public names, as ``from rollout_telemetry import *`` gives them."""
    return list(__all__)
