"""Dependencies point one way: no import cycle between the package's rooms or between its modules (type-only imports
included), the storage and model layers import nothing from the config layer, and benches never import tests
(imports read from the source, lazy ones included). What run.py loads before it checks a config is measured in a
fresh interpreter."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from tests.helpers import ROOT

PACKAGE = ROOT / "infinipotv"


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_statements(path: Path) -> list[tuple[str, list[str]]]:
    """Every import statement of ``path`` as (absolute module, names): ``import a`` is ("a", []), ``from a import
    b, c`` is ("a", ["b", "c"]), relative ones resolved."""
    module, found = _module(path), []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".")[: len(module.split(".")) - node.level + (path.name == "__init__.py")]
                base = ".".join([*package, *([node.module] if node.module else [])])
            found.append((base, [alias.name for alias in node.names]))
    return found


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports (absolute names; ``from a import b`` counts as ``a.b``)."""
    found = set()
    for base, names in _import_statements(path):
        found |= {f"{base}.{name}" for name in names} | {base}
    return found


def _room(name: str) -> str | None:
    """The room of a module of ours: ``infinipotv.kv.cache`` -> ``kv``, ``infinipotv.job`` -> ``job``."""
    parts = name.split(".")
    return parts[1] if parts[0] == "infinipotv" and len(parts) > 1 else None


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    rooms = {
        path.stem
        for path in PACKAGE.iterdir()
        if path.suffix == ".py" or (path.is_dir() and path.name != "__pycache__")
    }
    for path in PACKAGE.rglob("*.py"):
        room = _room(_module(path))
        if room is None:  # the package's own __init__
            continue
        graph[room] |= {target for target in map(_room, _imports(path)) if target in rooms and target != room}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (its nodes in order, the first repeated at the end), or None."""
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = "open"
        for target in sorted(graph.get(node, ())):
            if state.get(target) == "open":
                return [*path, node, target]
            if target not in state and (found := visit(target, [*path, node])):
                return found
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node, [])):
            return found
    return None


def test_no_import_cycle_between_rooms():
    cycle = _cycle(_graph())
    assert cycle is None, f"import cycle: {' -> '.join(cycle)}"


def _module_graph() -> dict[str, set[str]]:
    """Which of the package's modules each one imports, type-only imports (``if TYPE_CHECKING:``) included:
    ``from a import b`` is an edge to the module ``a.b`` where there is one, else to ``a``."""
    modules = {_module(path): path for path in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        targets = set()
        for base, names in _import_statements(path):
            targets |= {f"{base}.{n}" if f"{base}.{n}" in modules else base for n in names} if names else {base}
        graph[name] = {target for target in targets if target in modules and target != name}
    return graph


def test_no_import_cycle_between_modules():
    """Inside a room too, type-only imports included: a circle drawn only for the type checker is still one."""
    cycle = _cycle(_module_graph())
    assert cycle is None, f"import cycle: {' -> '.join(cycle)}"


def test_no_import_cycle_between_benches():
    """bench/report.py renders what the benches wrote; it never imports back into them (nor they into it)."""
    modules = {f"bench.{path.stem}": path for path in (ROOT / "bench").glob("*.py") if path.stem != "__init__"}
    graph = {name: {m for m in _imports(path) if m in modules and m != name} for name, path in modules.items()}
    cycle = _cycle(graph)
    assert cycle is None, f"import cycle: {' -> '.join(cycle)}"


def test_the_cycle_finder_finds_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_the_job_depends_on_no_results_code():
    """Tracking is handed to the job by run.py (``run_job(..., finished=track_run)``): the arrow points one way."""
    offenders = sorted(name for name in _imports(PACKAGE / "job.py") if _room(name) == "results")
    assert not offenders, f"job.py imports {offenders}"


def test_the_run_directory_sits_below_what_reads_it():
    """runs/ (the run directory's files, ownership, trace, provenance) is read by the job, the benchmarks' rescoring
    and the aggregator, and imports none of them: only threads (the cores a sitting records)."""
    offenders = sorted(
        f"{path.relative_to(ROOT)}: {name}"
        for path in (PACKAGE / "runs").rglob("*.py")
        for name in _imports(path)
        if _room(name) not in (None, "runs", "threads")
    )
    assert not offenders, f"runs/ imports from above it: {offenders}"


@pytest.mark.parametrize("room", ["kv", "models"])
def test_lower_layers_import_nothing_from_the_config_layer(room):
    offenders = [
        str(path.relative_to(ROOT))
        for path in (PACKAGE / room).rglob("*.py")
        if any(_room(name) == "config" for name in _imports(path))
    ]
    assert not offenders, f"{room}/ imports the config layer: {offenders}"


def test_benches_never_import_tests():
    offenders = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "bench").rglob("*.py")
        if any(name.split(".")[0] == "tests" for name in _imports(path))
    ]
    assert not offenders, f"bench/ imports tests/: {offenders}"


def test_checking_a_config_loads_no_model_code():
    """run.py refuses a bad config in seconds: before the checks pass it imports neither transformers' modeling code
    (adapters name their class, imported when a model loads) nor the results code (pandas, matplotlib)."""
    heavy = ["transformers.modeling_utils", "pandas", "matplotlib"]
    script = f"import sys, run; print([m for m in {heavy!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", f"run.py imports {out.stdout.strip()} before it checks the config"
