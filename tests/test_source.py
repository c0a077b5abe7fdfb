"""The source reads as written: no comment wrapped around the statement it explains, no name of a module that
is gone, and a private module's ``__all__`` lists only what other modules of the package import."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from collections.abc import Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
SRC = ROOT / "src"
FOLDERS = ("src", "tests", "benchmarks", "dashboards", "docs")
PRAGMA = re.compile(r"#\s*(fmt:|noqa|type:|pragma)")
CLOSER = re.compile(r"^\s*[)\]}]+:?\s*(#.*)$")
"""A line holding only closing brackets (and the colon of a compound statement) and a comment: where
``ruff format`` puts a trailing comment that made its line too long, wrapping a short statement around it."""


def wrapped_comments(source: str) -> list[int]:
    """The lines of ``source`` where a comment (not a tool's pragma) follows closing brackets alone."""
    return [
        number
        for number, line in enumerate(source.splitlines(), 1)
        if (match := CLOSER.match(line)) and not PRAGMA.match(match[1])
    ]


MODULES = sorted(path for folder in FOLDERS for path in (ROOT / folder).rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda path: path.relative_to(ROOT).as_posix())
def test_no_comment_is_wrapped_around_its_statement(path: Path) -> None:
    """A comment too long to trail its statement goes on the line above it, not after a closing bracket that
    the formatter broke the statement open for."""
    assert wrapped_comments(path.read_text(encoding="utf-8")) == []


def test_the_check_finds_a_wrapped_comment() -> None:
    """The formatter's wrapping is found; a pragma on a closing bracket, and a comment above, are not."""
    source = "\n".join(
        [
            "",
            "if (",
            "    ready",
            "):  # a reason that did not fit after the condition",
            "    pass",
            "values = (",
            "    1, 2,",
            ")  # fmt: skip",
            "# a reason above its statement",
            "lock = make()",
        ]
    )
    assert wrapped_comments(source) == [4]


DOTTED = re.compile(r"\brollout_telemetry(?:\.[A-Za-z_]\w*)+(?![\w/])")
"""A dotted name under the package, as the source's prose names a module or what a module holds (not a
schema's name, ``rollout_telemetry.rollout/1``)."""
LOGGER = re.compile(r"getLogger\(\"([\w.]+)\"\)")


def resolves(name: str) -> bool:
    """Whether the dotted ``name`` is a module, or something a module holds."""
    parts = name.split(".")
    found: object = importlib.import_module(parts[0])
    for depth, part in enumerate(parts[1:], 2):
        module = ".".join(parts[:depth])
        if hasattr(found, "__path__") and importlib.util.find_spec(module) is not None:
            found = importlib.import_module(module)
        elif (found := getattr(found, part, None)) is None:
            return False
    return True


def unresolved(text: str, loggers: frozenset[str] = frozenset()) -> list[str]:
    """The dotted names under the package in ``text`` that name neither a module nor something a module
    holds (a stale name: a module renamed, moved or gone), nor one of the ``loggers``."""
    return [name for name in sorted(set(DOTTED.findall(text)) - loggers) if not resolves(name)]


PACKAGE = sorted(SRC.rglob("*.py"))
LOGGERS = frozenset(name for path in PACKAGE for name in LOGGER.findall(path.read_text(encoding="utf-8")))
"""The package's loggers' names (``rollout_telemetry.rollouts``...), which name no module."""


@pytest.mark.parametrize("path", PACKAGE, ids=lambda path: path.relative_to(ROOT).as_posix())
def test_every_name_the_package_source_gives_exists(path: Path) -> None:
    """A module or a name the source's docstrings and comments give as ``rollout_telemetry.x.y`` exists, or
    is one of the package's loggers."""
    assert unresolved(path.read_text(encoding="utf-8"), LOGGERS) == []


def test_the_check_finds_a_stale_name() -> None:
    """A module that does not exist and a name a module does not hold are found; real ones are not."""
    text = (
        "rollout_telemetry.series, rollout_telemetry._views.series.CATALOGUE, "
        "rollout_telemetry._views.series.NOPE, rollout_telemetry.errors.ConfigError, "
        "rollout_telemetry.rollouts, rollout_telemetry.rollout/1"
    )
    assert unresolved(text, LOGGERS) == ["rollout_telemetry._views.series.NOPE", "rollout_telemetry.series"]
    assert "rollout_telemetry.rollouts" in unresolved(text)


def module_of(path: Path) -> str:
    """The dotted name of a module (or a stub) under ``src/``; a package's is its ``__init__``'s."""
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _declared(tree: ast.Module) -> list[str]:
    # The names a module lists in its __all__ (a literal list of strings), or none.
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign) and "__all__" in ast.unparse(node).split("=")[0]:
            assert isinstance(node.value, ast.List)
            return [str(item.value) for item in node.value.elts if isinstance(item, ast.Constant)]
    return []


def _imported(
    name: str, tree: ast.Module, modules: set[str], is_package: bool
) -> Iterable[tuple[str, str | None]]:
    # (module, name) for each name the module ``name`` imports from another module of the package;
    # (module, None) when a module object it imports is used other than by ``module.attribute``.
    bound: dict[str, str] = {}  # a local name -> the module object it holds
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name.split(".")[: None if is_package else -1]
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                if f"{base}.{alias.name}" in modules:
                    bound[alias.asname or alias.name] = f"{base}.{alias.name}"
                else:
                    yield base, alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name in modules:
                    bound[alias.asname] = alias.name
    attributes = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound:
            yield bound[node.value.id], node.attr
        elif isinstance(node, ast.Name) and node.id in bound and id(node) not in attributes:
            yield bound[node.id], None


def unimported_exports(sources: dict[Path, str]) -> list[str]:
    """``module: name`` for each name a private module of ``sources`` (by path under ``src/``) lists in its
    ``__all__`` that no other module of them imports (a module object passed on whole uses every name)."""
    trees = {path: ast.parse(source) for path, source in sources.items()}
    modules = {module_of(path) for path in sources}
    used: set[tuple[str, str | None]] = set()
    for path, tree in trees.items():
        name = module_of(path)
        used |= {pair for pair in _imported(name, tree, modules, path.stem == "__init__") if pair[0] != name}
    found = []
    for path, tree in trees.items():
        name = module_of(path)
        if path.suffix == ".py" and any(part.startswith("_") for part in name.split(".")[1:]):
            found += [
                f"{name}: {export}"
                for export in _declared(tree)
                if {(name, export), (name, None)}.isdisjoint(used)
            ]
    return found


def test_a_private_modules_all_lists_only_what_other_modules_import() -> None:
    """A name in a private module's ``__all__`` is imported by another module under ``src/``: tests,
    benchmarks and docs importing a name do not make it part of what the module offers the package."""
    paths = [*SRC.rglob("*.py"), *SRC.rglob("*.pyi")]
    assert unimported_exports({path: path.read_text(encoding="utf-8") for path in paths}) == []


def test_the_export_check_finds_a_name_nothing_imports() -> None:
    """A name only the module itself uses is found; one imported by name, by ``module.name``, or through a
    module object passed on whole is not, and a public module's ``__all__`` is not checked."""
    package = SRC / "pkg"
    sources = {
        package / "_core.py": '__all__ = ["by_name", "by_attribute", "unused"]\n',
        package / "_commands.py": '__all__ = ["run"]\n',
        package / "public.py": '__all__ = ["unused_but_public"]\n',
        package / "user.py": "\n".join(
            [
                "from pkg._core import by_name",
                "from pkg import _core, _commands",
                "value = _core.by_attribute",
                "every = [_commands]",
            ]
        ),
    }
    assert unimported_exports(sources) == ["pkg._core: unused"]
