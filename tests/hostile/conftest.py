"""The hostile-input probes (``make probe``): each test here is one probe, and the run ends with one line per probe.

A probe feeds the harness what a careless or hostile user would (a hand-edited run file, a deleted lock, a full
disk, a nonsense knob) or re-checks an earlier guarantee (kill and resume, subsets, two writers), and passes when the
harness answers with one clear line or a correct result, losing nothing already written. The summary names each
probe ``OK`` or ``FAIL`` by its docstring's first line (or its name), then the counts, so one look says whether every
guarantee in docs/runs.md still holds.
"""

from __future__ import annotations

from pathlib import Path

import pytest

_HERE = Path(__file__).resolve().parent
#: The earlier guarantees ``make probe`` runs beside the probes (kill and resume, subsets, two writers).
_GUARANTEES = (_HERE.parent / "test_run_invariants.py",)
_OUTCOMES: dict[str, tuple[str, str]] = {}  # nodeid -> (OK | FAIL | SKIP, what the probe checks)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each probe's title rides in its reports' user_properties (they reach the xdist controller)."""
    for item in items:
        path = Path(str(item.path)).resolve()
        if path.is_relative_to(_HERE) or path in _GUARANTEES:
            doc = (getattr(item, "obj", None).__doc__ or "").strip()
            title = (
                doc.splitlines()[0].rstrip(".") if doc else item.originalname.removeprefix("test_").replace("_", " ")
            )
            param = f" [{item.callspec.id}]" if hasattr(item, "callspec") else ""
            item.user_properties.append(("probe", title + param))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    title = dict(report.user_properties).get("probe")
    if title is None:
        return
    if report.failed:
        _OUTCOMES[report.nodeid] = ("FAIL", title)
    elif report.when == "call" or (report.skipped and report.nodeid not in _OUTCOMES):
        _OUTCOMES.setdefault(report.nodeid, ("OK" if report.passed else "SKIP", title))


def pytest_terminal_summary(terminalreporter) -> None:
    if not _OUTCOMES:
        return
    write = terminalreporter.write_line
    terminalreporter.section("hostile-input probes")
    for _, (status, title) in sorted(_OUTCOMES.items()):
        write(f"{status:<4}  {title}")
    counts = {s: sum(o[0] == s for o in _OUTCOMES.values()) for s in ("OK", "FAIL", "SKIP")}
    write(
        f"probes: {counts['OK']} passed, {counts['FAIL']} failed"
        + (f", {counts['SKIP']} skipped" if counts["SKIP"] else "")
    )
