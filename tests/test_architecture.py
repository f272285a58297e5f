"""Dependencies point one way: no import cycle between the package's rooms, the storage and model layers import
nothing from the config layer, and benches never import tests (imports read from the source, lazy ones included)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

from tests.helpers import ROOT

PACKAGE = ROOT / "infinipotv"


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports (absolute names; ``from a import b`` counts as ``a.b``)."""
    module, found = _module(path), set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".")[: len(module.split(".")) - node.level + (path.name == "__init__.py")]
                base = ".".join([*package, *([node.module] if node.module else [])])
            found |= {f"{base}.{alias.name}" for alias in node.names} | {base}
    return found


def _room(name: str) -> str | None:
    """The room of a module of ours: ``infinipotv.kv.cache`` -> ``kv``, ``infinipotv.job`` -> ``job``."""
    parts = name.split(".")
    return parts[1] if parts[0] == "infinipotv" and len(parts) > 1 else None


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    rooms = {path.stem for path in PACKAGE.iterdir() if path.suffix == ".py" or (path.is_dir() and path.name != "__pycache__")}
    for path in PACKAGE.rglob("*.py"):
        room = _room(_module(path))
        if room is None:  # the package's own __init__
            continue
        graph[room] |= {target for target in map(_room, _imports(path)) if target in rooms and target != room}
    return graph


def test_no_import_cycle_between_rooms():
    graph, state = _graph(), {}

    def visit(room: str, path: list[str]) -> None:
        state[room] = "open"
        for target in sorted(graph.get(room, ())):
            if state.get(target) == "open":
                pytest.fail(f"import cycle: {' -> '.join([*path, room, target])}")
            if target not in state:
                visit(target, [*path, room])
        state[room] = "done"

    for room in sorted(graph):
        if room not in state:
            visit(room, [])


@pytest.mark.parametrize("room", ["kv"])
def test_lower_layers_import_nothing_from_the_config_layer(room):
    offenders = [str(path.relative_to(ROOT)) for path in (PACKAGE / room).rglob("*.py")
                 if any(_room(name) == "config" for name in _imports(path))]
    assert not offenders, f"{room}/ imports the config layer: {offenders}"


def test_benches_never_import_tests():
    offenders = [str(path.relative_to(ROOT)) for path in (ROOT / "bench").rglob("*.py")
                 if any(name.split(".")[0] == "tests" for name in _imports(path))]
    assert not offenders, f"bench/ imports tests/: {offenders}"
